"""The training atoms y_j of a fitted JDL model and their basis values, streamed block by block.

A JDL model's conditional laws live on the n training atoms: Q(Y = y_j | x) is proportional to
1 + A_Y[j] H Psi_X(x)^T, with A_Y[j] = Psi_Y(y_j) (m_Y values per atom). At n = 1e7 and m_Y = 500,
A_Y alone is 40 GB, so it is never stored: it is recomputed from the atoms, block by block, as
k(y_j, pivots_Y) @ coefficients_Y. The atoms themselves may be an in-memory array or any lazily
read array with NumPy slicing (a zarr array of a model store); only one block is in memory at a time.

Test functions f map a block of atoms (b, d_y) to (b, ...) row by row (f(y)[i] depends on y[i] only).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator

import numpy as np

from ..lowrank.basis import SpectralBasis

__all__ = ["Atoms", "FunctionSums", "block_sums", "evaluate_function", "identity", "outer_square", "STANDARD_FUNCTIONS"]

_BLOCK_ROWS = 1 << 16
_CACHE_ENTRIES = 1 << 24  # A_Y is kept in memory after its first use when n * m_Y is at most this


@dataclass
class FunctionSums:
    """Sums of a test function over the training atoms, all a registered expectation needs.

    moments: (m_Y, p) A_Y^T F with F = f(atoms) flattened to (n, p); totals: (p,) F^T 1;
    shape: the shape of one value f(y) (p = prod(shape)).
    """

    moments: np.ndarray
    totals: np.ndarray
    shape: tuple

    def __add__(self, other: "FunctionSums") -> "FunctionSums":
        return FunctionSums(self.moments + other.moments, self.totals + other.totals, self.shape)

    def rotated(self, rotation: np.ndarray) -> "FunctionSums":
        """Sums in factor coordinates (L^T F) turned into basis coordinates (A^T F = V^T L^T F)."""
        return FunctionSums(rotation.T @ self.moments, self.totals, self.shape)


def block_sums(f: Callable[[np.ndarray], Any] | None, y: np.ndarray, basis_values: np.ndarray) -> FunctionSums:
    """Sums of f over one block of atoms y (b, d_y) with their basis (or factor) values (b, m)."""
    values, shape = evaluate_function(f, y)
    return FunctionSums(basis_values.T @ values, values.sum(axis=0), shape)


def identity(y: np.ndarray) -> np.ndarray:
    """f(y) = y: the conditional mean, values of shape (d_y,)."""
    return y


def outer_square(y: np.ndarray) -> np.ndarray:
    """f(y) = y y^T: the conditional second-moment matrix, values of shape (d_y, d_y)."""
    return y[:, :, None] * y[:, None, :]


STANDARD_FUNCTIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {"mean": identity, "second_moment": outer_square}


def evaluate_function(f: Callable[[np.ndarray], Any] | None, y: np.ndarray) -> tuple[np.ndarray, tuple]:
    """f(y) for a block of atoms y (b, d_y), flattened to (b, p), and the shape of one value."""
    values = y if f is None else np.asarray(f(y), dtype=np.float64)
    if values.ndim == 0 or values.shape[0] != y.shape[0]:
        raise ValueError(f"f: must map atoms (b, d_y) row by row to an array with b = {y.shape[0]} rows, "
                         f"got shape {values.shape}")
    return values.reshape(y.shape[0], -1), values.shape[1:]


class Atoms:
    """The n training atoms (n, d_y) of a model and their basis values A_Y, block by block.

    values: (n, d_y) float array, a NumPy array or a lazily read array (``.shape``, row slicing).
    basis_y: the model's Y basis; A_Y[j] = basis_y.features(y_j).
    block_rows: atoms per block (default: the array's chunk length, else 65536).
    cache_entries: A_Y is computed once and kept when n * m_Y is at most this; otherwise every
        pass recomputes it block by block.
    """

    def __init__(self, values: Any, basis_y: SpectralBasis, block_rows: int | None = None,
                 cache_entries: int = _CACHE_ENTRIES):
        if len(values.shape) != 2:
            raise ValueError(f"y_atoms: need a 2-D array (n, d_y), got shape {values.shape}")
        self.values = values
        self.basis_y = basis_y
        self.n, self.d = int(values.shape[0]), int(values.shape[1])
        chunks = getattr(values, "chunks", None)
        default = chunks[0] if isinstance(chunks, tuple) and chunks and isinstance(chunks[0], int) else _BLOCK_ROWS
        self.block_rows = int(block_rows or default)
        self.cache_entries = int(cache_entries)
        self._cache: tuple[np.ndarray, np.ndarray] | None = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_cache": None}  # shipped to workers without the cache

    @property
    def in_memory(self) -> bool:
        return isinstance(self.values, np.ndarray)

    def _read(self, start: int, stop: int) -> np.ndarray:
        return np.asarray(self.values[start:stop], dtype=np.float64)

    def blocks(self) -> Iterator[tuple[slice, np.ndarray, np.ndarray]]:
        """(rows, atoms (b, d_y), A_Y rows (b, m_Y)) for consecutive blocks covering all n atoms."""
        if self._cache is None and self.n * self.basis_y.size <= self.cache_entries:
            y = self._read(0, self.n)
            self._cache = (y, self.basis_y.features(y))
        for start in range(0, self.n, self.block_rows):  # bounded blocks: f(y) temporaries are (b, p)
            stop = min(start + self.block_rows, self.n)
            if self._cache is not None:
                yield slice(start, stop), self._cache[0][start:stop], self._cache[1][start:stop]
            else:
                y = self._read(start, stop)
                yield slice(start, stop), y, self.basis_y.features(y)

    def value_blocks(self) -> Iterator[np.ndarray]:
        """The atoms (b, d_y) block by block, without their basis values."""
        for start in range(0, self.n, self.block_rows):
            yield self._read(start, min(start + self.block_rows, self.n))

    def take(self, rows: np.ndarray) -> np.ndarray:
        """The atoms at ascending row indices (k, d_y), read block by block when they are lazy."""
        if self.in_memory:
            return np.asarray(self.values[rows], dtype=np.float64)
        parts = []
        for start in range(0, self.n, self.block_rows):
            stop = min(start + self.block_rows, self.n)
            inside = rows[(rows >= start) & (rows < stop)]
            if inside.size:
                parts.append(self._read(start, stop)[inside - start])
        return np.vstack(parts) if parts else np.empty((0, self.d))

    def column(self, component: int) -> np.ndarray:
        """One component of every atom, shape (n,)."""
        if self._cache is not None or self.in_memory:
            return np.asarray(self.values[:, component], dtype=np.float64)
        return np.concatenate([self._read(a, min(a + self.block_rows, self.n))[:, component]
                               for a in range(0, self.n, self.block_rows)])

    def function_sums(self, f: Callable[[np.ndarray], Any] | None) -> FunctionSums:
        """A_Y^T f(atoms) and f(atoms)^T 1, accumulated block by block (f None: the identity)."""
        total: FunctionSums | None = None
        for _, y, A in self.blocks():
            part = block_sums(f, y, A)
            if total is not None and part.shape != total.shape:
                raise ValueError(f"f: value shape changed between blocks ({total.shape} vs {part.shape})")
            total = part if total is None else total + part
        assert total is not None  # n >= 1
        return total
