"""Exact positivity on the training grid, E + A_Y H A_X^T >= 0 (24), by cutting planes.

The n^2 constraints are never materialised. Each round sweeps the grid in row blocks of
(A_Y[block] H) A_X^T, adds the most violated pair of every violating row and column to a working
set, and re-solves the QP (normalization + pooled constraints) with the Goldfarb–Idnani active-set method
(``active_set``), which keeps its state between rounds. A sweep costs O(n^2 m_X) flops and
O(block * n) memory; the loop ends when the whole grid satisfies 1 + h >= margin - feasibility_tol.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ..lowrank.basis import JDLReductions
from .active_set import ProjectionQP

__all__ = ["GridSolution", "GridSweep", "grid_minimum", "grid_sweep", "solve_grid_positivity"]

_ROW_BLOCK_ELEMENTS = 1 << 22


@dataclass
class GridSweep:
    """Minima of 1 + h over the grid: overall, and per row (y atom) and per column (x sample)."""

    minimum: float
    row_min: np.ndarray
    row_arg: np.ndarray
    col_min: np.ndarray
    col_arg: np.ndarray


def grid_sweep(H: np.ndarray, A_x: np.ndarray, A_y: np.ndarray) -> GridSweep:
    """Sweep 1 + A_Y H A_X^T in row blocks; rows index y atoms, columns x samples."""
    n_y, n_x = A_y.shape[0], A_x.shape[0]
    right = A_x @ H.T  # (n_x, m_Y): h(x_t, y_s) = A_y[s] . right[t]
    rows = max(1, _ROW_BLOCK_ELEMENTS // max(n_x, 1))
    row_min = np.empty(n_y)
    row_arg = np.empty(n_y, dtype=np.int64)
    col_min = np.full(n_x, np.inf)
    col_arg = np.zeros(n_x, dtype=np.int64)
    for start in range(0, n_y, rows):
        stop = min(start + rows, n_y)
        values = A_y[start:stop] @ right.T
        values += 1.0
        arg = np.argmin(values, axis=1)
        row_arg[start:stop] = arg
        row_min[start:stop] = values[np.arange(stop - start), arg]
        block_arg = np.argmin(values, axis=0)
        block_min = values[block_arg, np.arange(n_x)]
        better = block_min < col_min
        col_min[better] = block_min[better]
        col_arg[better] = block_arg[better] + start
    return GridSweep(float(row_min.min()), row_min, row_arg, col_min, col_arg)


def grid_minimum(H: np.ndarray, A_x: np.ndarray, A_y: np.ndarray) -> float:
    """min over all (x_t, y_s) of 1 + h(x_t, y_s)."""
    return grid_sweep(H, A_x, A_y).minimum


@dataclass
class GridSolution:
    H: np.ndarray
    grid_min: float
    rounds: int
    constraints: int
    active: int
    iterations: int
    seconds: float
    converged: bool = True
    history: list = field(default_factory=list)


def solve_grid_positivity(
    red: JDLReductions,
    reg: float,
    A_x: np.ndarray,
    A_y: np.ndarray,
    *,
    normalize: bool = True,
    margin: float = 1e-10,
    feasibility_tol: float = 1e-11,
    max_new: int = 256,
    max_rounds: int = 200,
    max_seconds: float = float("inf"),
) -> GridSolution:
    """Minimiser of (22) subject to (23) and 1 + h >= margin on the grid A_y x A_x.

    ``margin`` keeps the returned weights strictly non-negative despite the solver's rounding.
    Identical rows of A_x or A_y (repeated x or y values: class labels, discrete y) give identical
    constraints, so the grid is swept over distinct rows only: n_y' x n_x' pairs instead of n^2.
    The loop stops at ``max_rounds`` rounds or once ``max_seconds`` have passed at the end of a
    round; the solution then reports ``converged=False`` with the last iterate (feasible for the
    constraints pooled so far, not for the whole grid).
    """
    started = time.perf_counter()
    A_x, A_y = np.unique(A_x, axis=0), np.unique(A_y, axis=0)
    D = red.curvature(reg).ravel()
    S = np.outer(red.sum_y, red.sum_x).ravel()
    # With normalization the S term of the linear part is carried by the equality's multiplier.
    g = red.n * red.cross.ravel() if normalize else red.linear_term().ravel()
    qp = ProjectionQP(D, g, equality=S if normalize else None, tol=feasibility_tol * 1e-2)
    H = qp.h.reshape(red.cross.shape)
    pairs: list[tuple[int, int]] = []
    history = []
    limit = margin - feasibility_tol
    converged = False
    for rounds in range(1, max_rounds + 1):
        sweep = grid_sweep(H, A_x, A_y)
        history.append(sweep.minimum)
        if sweep.minimum >= limit:
            converged = True
            break
        if time.perf_counter() - started > max_seconds:
            break
        new = _most_violated(sweep, limit, max_new)
        if not new:
            break
        pairs.extend(new)
        s_idx = np.fromiter((p[0] for p in new), dtype=np.int64)
        t_idx = np.fromiter((p[1] for p in new), dtype=np.int64)
        normals = (A_y[s_idx][:, :, None] * A_x[t_idx][:, None, :]).reshape(len(new), -1)
        qp.prune()
        qp.add(normals, np.full(len(new), 1.0 - margin))
        qp.solve()
        H = qp.h.reshape(red.cross.shape)
    multipliers = qp.multipliers()
    return GridSolution(
        H=H,
        grid_min=history[-1],
        rounds=rounds,
        constraints=len(pairs),
        active=int(np.sum(multipliers > 0)),
        iterations=qp.iterations,
        seconds=time.perf_counter() - started,
        converged=converged,
        history=history,
    )


def _most_violated(sweep: GridSweep, limit: float, max_new: int) -> list[tuple[int, int]]:
    """The worst violating pair of each violating row and column, most violated first."""
    candidates: dict[tuple[int, int], float] = {}
    for s in np.flatnonzero(sweep.row_min < limit):
        candidates[(int(s), int(sweep.row_arg[s]))] = float(sweep.row_min[s])
    for t in np.flatnonzero(sweep.col_min < limit):
        pair = (int(sweep.col_arg[t]), int(t))
        candidates[pair] = min(candidates.get(pair, np.inf), float(sweep.col_min[t]))
    ranked = sorted((value, pair) for pair, value in candidates.items())
    return [pair for _, pair in ranked[:max_new]]
