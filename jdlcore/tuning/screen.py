"""The screen of a tuning: where even the grid's longest x lengthscale needs a factorisation at the
rank cap, the grid and the per-feature search are scored on a seeded subsample of ``search_rows``
(default ``SEARCH_ROWS``) of each fold's training rows, and their result on all of them. (A search that
starts below the cap moves to the same subsample once its moves reach it: ``search_lengthscales``.)"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..kernels import Kernel
from ..lowrank.cholesky import Factorisation, PivotedCholesky, pivoted_cholesky
from ..models.jdl import JDL
from .constants import SEARCH_ROWS
from .folds import Fold
from .grid import _CANDIDATE_ERRORS, _rank_cap

__all__ = ["Screen", "screen_rows", "screened"]


def _subsample(n: int, max_rows: int, seed: int | None) -> np.ndarray:
    """Sorted indices of a seeded random subset of ``max_rows`` of n rows (the screen of the search
    and of ``screen_rows``: the same rows for the same seed)."""
    return np.sort(np.random.default_rng(seed).choice(n, max_rows, replace=False))


def _fold_subsamples(folds: Sequence[Fold], max_rows: int, seed: int | None) -> tuple[np.ndarray, ...]:
    """``_subsample`` of ``max_rows`` of each fold's training rows (the screen's and the search's)."""
    return tuple(_subsample(len(fold[0]), max_rows, seed) for fold in folds)


@dataclass
class Screen:
    """Where a tuning grid is scored (``screen_rows``): ``rows``, indices into each fold's training rows
    (None: all of them), and the factorisation on the first fold's of the grid's longest x lengthscale
    that decided it (None without a screen), the grid's own for that lengthscale there."""

    rows: tuple[np.ndarray, ...] | None
    factor_x: PivotedCholesky | None = None

    @property
    def size(self) -> int | None:
        """The training rows of each fold on the screen (None: all of them)."""
        return None if self.rows is None else int(self.rows[0].size)


def screen_rows(folds: Sequence[Fold], base: JDL, kernel_x: Kernel, max_rows: int | None = None) -> Screen:
    """The training rows the grid and the search are scored on: all of them, or a seeded subsample of
    ``max_rows`` (None: ``SEARCH_ROWS``, read when called) of each fold's where the x factorisation of
    ``kernel_x`` (the grid's longest lengthscale, the lowest rank of the grid) on the first fold's
    subsample reaches its rank cap there (the default budget of ``max_rows`` rows, or ``base``'s
    max_rank). The rank a factorisation needs for its tolerance hardly falls as rows are added (once they
    outnumber it, the residual trace per row at a given rank follows the kernel's spectrum, not the row
    count), so every candidate on all the n rows would cost a factorisation of at least about that rank,
    O(n cap^2), and its fit would be limited by the cap rather than by the data; on the subsample each
    candidate is cheaper. ``refine`` scores the result on all the rows."""
    max_rows = SEARCH_ROWS if max_rows is None else max_rows
    if min(len(fold[0]) for fold in folds) <= max_rows:
        return Screen(None)
    factorisation = Factorisation.of(base)
    rows = _fold_subsamples(folds, max_rows, base.seed)
    cap = _rank_cap(max_rows, factorisation)
    try:
        factor = pivoted_cholesky(kernel_x, folds[0][0][rows[0]], **factorisation.cholesky_arguments(max_rank=cap))
    except _CANDIDATE_ERRORS:
        return Screen(None)
    return Screen(rows, factor) if factor.rank >= cap else Screen(None)


def screened(folds: Sequence[Fold], rows: Sequence[np.ndarray] | None) -> list[Fold]:
    """The folds (X_train, Y_train, X_val, Y_val) with each one's training rows cut to its screen
    ``rows`` (None: all)."""
    if rows is None:
        return list(folds)
    return [(X_train[kept], Y_train[kept], X_val, Y_val) for (X_train, Y_train, X_val, Y_val), kept in zip(folds, rows)]
