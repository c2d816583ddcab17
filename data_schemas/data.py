"""Contract of a staged data store (zarr v3 group) and the validation of incoming rows.

Arrays: ``x`` (sample, x_feature) float64 and ``y`` (sample, y_feature) float64, both chunked
along ``sample`` only, with the same number of rows. Group attributes: ``schema`` = "jdl.data",
``schema_version``, ``x_features`` and ``y_features`` (column names), ``n_samples``, ``source``, and
(schema 2) ``categorical``: {x column name: [its levels]}, the x columns that hold category codes
0, 1, ... indexing those levels (in order of first appearance). Schema 3 adds the coordinate arrays
``x_feature`` and ``y_feature``: the column names (strings), so xarray selects a column by name.
Stores of schema 2 (no coordinates) still load.
Rules for incoming rows: numeric (categorical x columns: any value but a missing one), finite, at
least 2 rows, no constant column (no categorical column with a single level). A row whose y is
missing is refused (one error counting them), or left out when staging is asked to drop them; the
attribute ``dropped_missing_y`` then counts them (optional).
"""
from __future__ import annotations

from typing import Any

import numpy as np

SCHEMA_NAME = "jdl.data"
SCHEMA_VERSION = 3  # 2: categorical x columns; 3: the feature names as coordinates
# what scoring does with a categorical level the model was not fitted on: refuse the batch, or read it
# as "other", a code that matches no level
UNSEEN_RULES = ("refuse", "other")
OTHER_CODE = -1.0


class ColumnStats:
    """Running per-column minimum and maximum, to refuse constant columns after streaming."""

    def __init__(self, names: list[str]):
        self.names = names
        self.low = np.full(len(names), np.inf)
        self.high = np.full(len(names), -np.inf)

    def update(self, block: np.ndarray) -> None:
        if block.shape[0]:
            np.minimum(self.low, block.min(axis=0), out=self.low)
            np.maximum(self.high, block.max(axis=0), out=self.high)

    def check_not_constant(self, role: str) -> None:
        constant = [name for name, lo, hi in zip(self.names, self.low, self.high) if lo == hi]
        if constant:
            raise ValueError(f"{role} column {constant[0]!r}: is constant ({float(self.low[self.names.index(constant[0])])!r}); "
                             "a constant feature carries no information")


def level_name(value: Any) -> str | None:
    """The level a categorical cell holds, as text (None: missing). Strings are stripped; numbers are
    written canonically, so 3, 3.0 and "3" are one level (3)."""
    if value is None:
        return None
    if isinstance(value, (bytes, np.bytes_)):
        value = value.decode()
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return None
        try:
            value = float(text)
        except ValueError:
            return text
        if not np.isfinite(value):
            return text
    number = float(value)
    if np.isnan(number):
        return None
    return str(int(number)) if number.is_integer() else repr(number)


class LevelEncoder:
    """Codes of one categorical column, streamed block by block: each new level gets the next code
    (0, 1, ...: order of first appearance). A missing value is refused, naming column and row."""

    def __init__(self, name: str, role: str = "x"):
        self.name, self.role = name, role
        self.codes: dict[str, int] = {}

    @property
    def levels(self) -> list[str]:
        return list(self.codes)

    def encode(self, values: Any, first_row: int | np.ndarray) -> np.ndarray:
        """float64 codes of a block of raw values (rows,)."""
        import pandas as pd

        raw_codes, uniques = pd.factorize(np.asarray(values, dtype=object), use_na_sentinel=True)
        table = np.empty(len(uniques), dtype=np.float64)
        for k, value in enumerate(uniques):
            level = level_name(value)
            if level is None:
                raw_codes[raw_codes == k] = -1
                continue
            table[k] = self.codes.setdefault(level, len(self.codes))
        missing = np.flatnonzero(raw_codes < 0)
        if missing.size:
            row = row_number(first_row, missing[0])
            raise ValueError(f"{self.role} column {self.name!r}: missing value at row {row} "
                             "(a categorical column needs a level in every row)")
        return table[raw_codes]

    def check_levels(self) -> None:
        if len(self.codes) < 2:
            raise ValueError(f"{self.role} column {self.name!r}: is categorical with a single level "
                             f"({', '.join(map(repr, self.codes)) or 'none'}); a constant feature carries no information")


def is_categorical(values: Any) -> bool:
    """Whether a column of a first block looks categorical: it has values and none is a number (text)."""
    present = [v for v in np.asarray(values, dtype=object) if level_name(v) is not None]
    return bool(present) and not any(_is_number(v) for v in present)


def row_number(first_row: int | np.ndarray, i: int) -> int:
    """The source row of row ``i`` of a block: ``first_row + i``, or ``first_row[i]`` where the block's rows
    are not consecutive in the source (an array of their source rows: some were dropped)."""
    return int(first_row[i]) if isinstance(first_row, np.ndarray) else int(first_row) + int(i)


def validate_block(values, names: list[str], role: str, first_row: int | np.ndarray) -> np.ndarray:
    """Return a float64 (rows, columns) block or raise ``ValueError`` naming column, row and rule."""
    array = np.asarray(values)
    if array.ndim == 1:
        array = array[:, None]
    if array.dtype.kind not in "biuf":
        for column, name in enumerate(names):
            try:
                np.asarray(array[:, column], dtype=np.float64)
            except (TypeError, ValueError):
                bad = next(i for i, v in enumerate(array[:, column]) if not _is_number(v))
                raise ValueError(f"{role} column {name!r}: non-numeric value {array[bad, column]!r} at row "
                                 f"{row_number(first_row, bad)}") from None
        array = array.astype(np.float64)
    array = np.asarray(array, dtype=np.float64)
    finite = np.isfinite(array)
    if not finite.all():
        row, column = np.argwhere(~finite)[0]
        raise ValueError(f"{role} column {names[column]!r}: {array[row, column]} at row {row_number(first_row, row)} "
                         "(values must be finite)")
    return array


def _is_number(value) -> bool:
    try:
        float(value)
        return True
    except (TypeError, ValueError):
        return False
