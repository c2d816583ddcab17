"""Contract of a staged data store (zarr v3 group) and the validation of incoming rows.

Arrays: ``x`` (sample, x_feature) float64 and ``y`` (sample, y_feature) float64, both chunked
along ``sample`` only, with the same number of rows. Group attributes: ``schema`` = "jdl.data",
``schema_version``, ``x_features`` and ``y_features`` (column names), ``n_samples``, ``source``, and
(schema 2) ``categorical``: {x column name: [its levels]}, the x columns that hold category codes
0, 1, ... indexing those levels (in order of first appearance). Schema 3 adds the coordinate arrays
``x_feature`` and ``y_feature``: the column names (strings), so xarray selects a column by name.
Stores of schema 2 (no coordinates) still load. Schema 4 lets x miss values: a continuous x cell may be
NaN (missing), and the attribute ``missing_x`` = {x column name: rows missing it} names the continuous
columns that have any (optional); a categorical x column holds its missing values as the level
``MISSING_LEVEL``, like any other level.
Rules for incoming rows: numeric (categorical x columns: any value), finite where present, at least 2
rows, no constant column (no categorical column with a single level), no x column without a present
value. A batch of rows to score has no y columns (``y_features`` empty, ``y`` of shape (n, 0)): at
least 1 row, and a column may be constant. A row whose y is missing is refused (one error counting
them), or left out when staging is asked to drop them; the attribute ``dropped_missing_y`` then counts
them (optional).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from jdlcore.features.levels import MISSING_LEVEL, OTHER_CODE, is_number, level_name

SCHEMA_NAME = "jdl.data"
SCHEMA_VERSION = 4  # 2: categorical x columns; 3: the feature names as coordinates; 4: missing x values
# what scoring does with a categorical level the model was not fitted on: refuse the batch, or read it
# as "other", a code that matches no level
UNSEEN_RULES = ("refuse", "other")


class ColumnStats:
    """Running per-column minimum and maximum of the present values, and counts of the missing ones (NaN),
    to refuse constant and empty columns after streaming."""

    def __init__(self, names: list[str]):
        self.names = names
        self.low = np.full(len(names), np.inf)
        self.high = np.full(len(names), -np.inf)
        self.missing = np.zeros(len(names), dtype=np.int64)

    def update(self, block: np.ndarray) -> None:
        if block.shape[0]:
            absent = np.isnan(block)  # an all-missing column of the block leaves its range as it is
            self.missing += absent.sum(axis=0)
            np.minimum(self.low, np.where(absent, np.inf, block).min(axis=0), out=self.low)
            np.maximum(self.high, np.where(absent, -np.inf, block).max(axis=0), out=self.high)

    def missing_counts(self) -> dict[str, int]:
        """{column name: rows missing it}, for the columns that miss any."""
        return {name: int(count) for name, count in zip(self.names, self.missing) if count}

    def check_not_constant(self, role: str) -> None:
        empty = [name for name, lo in zip(self.names, self.low) if lo == np.inf]
        if empty:
            raise ValueError(f"{role} column {empty[0]!r}: every value is missing; a column needs present values")
        constant = [name for name, lo, hi in zip(self.names, self.low, self.high) if lo == hi]
        if constant:
            raise ValueError(f"{role} column {constant[0]!r}: is constant ({float(self.low[self.names.index(constant[0])])!r}); "
                             "a constant feature carries no information")


class LevelEncoder:
    """Codes of one categorical column, streamed block by block: each new level gets the next code
    (0, 1, ...: order of first appearance). A missing value is the level ``MISSING_LEVEL``."""

    def __init__(self, name: str, role: str = "x"):
        self.name, self.role = name, role
        self.codes: dict[str, int] = {}

    @property
    def levels(self) -> list[str]:
        return list(self.codes)

    def encode(self, values: Any, first_row: int | np.ndarray) -> np.ndarray:
        """float64 codes of a block of raw values (rows,)."""
        import pandas as pd

        raw_codes, uniques = pd.factorize(np.asarray(values, dtype=object), use_na_sentinel=False)
        table = np.empty(len(uniques), dtype=np.float64)
        for k, value in enumerate(uniques):
            level = level_name(value)
            table[k] = self.codes.setdefault(MISSING_LEVEL if level is None else level, len(self.codes))
        return table[raw_codes]

    def check_levels(self) -> None:
        if len(self.codes) < 2:
            raise ValueError(f"{self.role} column {self.name!r}: is categorical with a single level "
                             f"({', '.join(map(repr, self.codes)) or 'none'}); a constant feature carries no information")


def row_number(first_row: int | np.ndarray, i: int) -> int:
    """The source row of row ``i`` of a block: ``first_row + i``, or ``first_row[i]`` where the block's rows
    are not consecutive in the source (an array of their source rows: some were dropped)."""
    return int(first_row[i]) if isinstance(first_row, np.ndarray) else int(first_row) + int(i)


def validate_block(values, names: list[str], role: str, first_row: int | np.ndarray) -> np.ndarray:
    """Return a float64 (rows, columns) block or raise ``ValueError`` naming column, row and rule. An x
    cell may be missing (NaN, None or empty text: NaN in the block); a y cell may not."""
    array = np.asarray(values)
    if array.ndim == 1:
        array = array[:, None]
    if array.dtype.kind not in "biuf":
        numbers = np.empty(array.shape, dtype=np.float64)
        for column, name in enumerate(names):
            numbers[:, column] = _numeric_column(array[:, column], name, role, first_row)
        array = numbers
    array = np.asarray(array, dtype=np.float64)
    finite = np.isfinite(array) | (np.isnan(array) if role == "x" else False)
    if not finite.all():
        row, column = np.argwhere(~finite)[0]
        raise ValueError(f"{role} column {names[column]!r}: {array[row, column]} at row {row_number(first_row, row)} "
                         "(values must be finite)")
    return array


def _numeric_column(values: np.ndarray, name: str, role: str, first_row: int | np.ndarray) -> np.ndarray:
    """A column of objects (rows,) as float64; in x, None and empty text read as NaN (missing)."""
    try:
        return np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        pass
    if role == "x":  # the slow path, only for a column that holds something other than numbers
        values = np.array([np.nan if level_name(v) is None else v for v in values], dtype=object)
    bad = [i for i, v in enumerate(values) if not is_number(v)]
    if bad:
        hint = (f"; name it in --categorical {name} (categorical=[{name!r}]) to read the column as categories, or "
                "leave the cell empty to read it as missing") if role == "x" else ""
        raise ValueError(f"{role} column {name!r}: non-numeric value {values[bad[0]]!r} at row "
                         f"{row_number(first_row, bad[0])}{hint}")
    return np.asarray(values, dtype=np.float64)

