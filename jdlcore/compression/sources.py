"""Where the n labelled samples live while a compression runs: the objective only ever asks for
sums over the samples (chunked reductions), a few rows by index, and the class labels.

``ArraySource`` holds NumPy arrays in memory and reduces chunk by chunk, so nothing of size
m x n is formed at once; ``pipeline.compression.DaskSource`` answers the same three questions
from chunks that live on Dask workers, so n can exceed the client's memory.
"""
from __future__ import annotations

from typing import Any, Callable, Protocol

import numpy as np

from ..validation import as_samples, check_paired

__all__ = ["SampleSource", "ArraySource", "chunk_rows_for", "add_partials", "reduce_rows"]

Partial = dict[str, Any]
ChunkFunction = Callable[..., Partial]

_CHUNK_ELEMENTS = 1 << 21  # entries of one m x chunk kernel block: about 16 MB of float64


def chunk_rows_for(m: int, n: int) -> int:
    """Rows per chunk so that an (m, rows) kernel block stays near 16 MB."""
    return int(max(1, min(n, _CHUNK_ELEMENTS // max(m, 1))))


def add_partials(total: Partial | None, part: Partial) -> Partial:
    """Entry-wise sum of two partial results (dicts of arrays or floats with the same keys)."""
    if total is None:
        return dict(part)
    return {key: total[key] + value for key, value in part.items()}


def reduce_rows(function: ChunkFunction, X: np.ndarray, Y: np.ndarray, args: tuple, step: int) -> Partial:
    """Sum of ``function(X_slab, Y_slab, *args)`` over row slabs of ``step`` rows of X (n, d_x), Y (n, d_y)."""
    total = None
    for start in range(0, X.shape[0], step):
        total = add_partials(total, function(X[start:start + step], Y[start:start + step], *args))
    return total


class SampleSource(Protocol):
    """The samples (x_i, y_i), i = 1..n, as the compression objectives see them."""

    n: int
    x_width: int
    y_width: int

    def reduce(self, function: ChunkFunction, *args: Any, rows_hint: int = 1) -> Partial:
        """Sum over all chunks of ``function(X_chunk, Y_chunk, *args)`` (a dict of arrays)."""

    def rows(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The samples at ``indices`` (k,), as (X (k, d_x), Y (k, d_y)), in that order."""

    def column_scale(self) -> tuple[np.ndarray, np.ndarray]:
        """Standard deviation of every x and y column, shapes (d_x,) and (d_y,)."""

    def classes(self) -> np.ndarray:
        """The distinct y values (c,) of a one-column y, sorted."""


class ArraySource:
    """In-memory samples X (n, d_x) and Y (n, d_y), reduced in chunks of ``chunk_rows`` rows
    (default: an (m, rows) block of about 16 MB, from the ``rows_hint`` m the caller gives)."""

    def __init__(self, X: Any, Y: Any, chunk_rows: int | None = None):
        self.X = as_samples(X, "X", min_rows=2)
        self.Y = as_samples(Y, "Y", min_rows=2)
        check_paired(self.X, self.Y)
        if chunk_rows is not None and chunk_rows < 1:
            raise ValueError(f"chunk_rows: must be >= 1, got {chunk_rows}")
        self.chunk_rows = chunk_rows
        self.n, self.x_width, self.y_width = self.X.shape[0], self.X.shape[1], self.Y.shape[1]

    def reduce(self, function: ChunkFunction, *args: Any, rows_hint: int = 1) -> Partial:
        return reduce_rows(function, self.X, self.Y, args, self.chunk_rows or chunk_rows_for(rows_hint, self.n))

    def rows(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        indices = np.asarray(indices, dtype=np.int64)
        return self.X[indices], self.Y[indices]

    def column_scale(self) -> tuple[np.ndarray, np.ndarray]:
        return self.X.std(axis=0), self.Y.std(axis=0)

    def classes(self) -> np.ndarray:
        if self.y_width != 1:
            raise ValueError(f"Y: a class label must be one column, got {self.y_width}")
        return np.unique(self.Y[:, 0])
