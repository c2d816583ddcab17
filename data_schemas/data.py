"""Contract of a staged data store (zarr v3 group) and the validation of incoming rows.

Arrays: ``x`` (sample, x_feature) float64 and ``y`` (sample, y_feature) float64, both chunked
along ``sample`` only, with the same number of rows. Group attributes: ``schema`` = "jdl.data",
``schema_version``, ``x_features`` and ``y_features`` (column names), ``n_samples``, ``source``.
Rules for incoming rows: numeric, finite, at least 2 rows, no constant column.
"""
from __future__ import annotations

import numpy as np

SCHEMA_NAME = "jdl.data"
SCHEMA_VERSION = 1


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
            raise ValueError(f"{role} column {constant[0]!r}: is constant ({self.low[self.names.index(constant[0])]!r}); "
                             "a constant feature carries no information")


def validate_block(values, names: list[str], role: str, first_row: int) -> np.ndarray:
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
                raise ValueError(f"{role} column {name!r}: non-numeric value {array[bad, column]!r} at row {first_row + bad}") from None
        array = array.astype(np.float64)
    array = np.asarray(array, dtype=np.float64)
    finite = np.isfinite(array)
    if not finite.all():
        row, column = np.argwhere(~finite)[0]
        raise ValueError(f"{role} column {names[column]!r}: {array[row, column]} at row {first_row + row} (values must be finite)")
    return array


def _is_number(value) -> bool:
    try:
        float(value)
        return True
    except (TypeError, ValueError):
        return False
