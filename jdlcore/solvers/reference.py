"""Reference solutions of the low-rank JDL problem with a generic conic solver (cvxpy + Clarabel).

Slow and dense (the grid version builds all n^2 constraints): for tests and small cross-checks
only. Requires the ``test`` extra (cvxpy, clarabel).
"""
from __future__ import annotations

import numpy as np

from ..lowrank.basis import JDLReductions
from .tightening import tightening_bounds

__all__ = ["reference_solve"]


def reference_solve(
    red: JDLReductions,
    reg: float,
    *,
    normalize: bool,
    positivity: str | None = None,
    A_x: np.ndarray | None = None,
    A_y: np.ndarray | None = None,
    bounds: tuple[np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:
    """Solve (22) s.t. (23) if ``normalize`` and positivity None | "tightening" | "grid".

    ``bounds``: (C_low, C_up) of the single inequality, default the sample bounds of (33)."""
    import cvxpy as cp

    D = red.curvature(reg)
    g = red.linear_term()
    S = np.outer(red.sum_y, red.sum_x)
    H = cp.Variable(red.cross.shape)
    scale = float(np.max(D))
    objective = cp.Minimize((0.5 * cp.sum(cp.multiply(D / scale, cp.square(H))) - cp.sum(cp.multiply(g / scale, H))))
    constraints = []
    if normalize:
        constraints.append(cp.sum(cp.multiply(S / np.max(np.abs(S)), H)) == 0)
    if positivity == "tightening":
        low, up = tightening_bounds(red) if bounds is None else bounds
        constraints.append(1 + cp.sum(cp.minimum(cp.multiply(low, H), cp.multiply(up, H))) >= 0)
    elif positivity == "grid":
        constraints.append(1 + A_y @ H @ A_x.T >= 0)
    elif positivity is not None:
        raise ValueError(f"positivity: unknown value {positivity!r}")
    problem = cp.Problem(objective, constraints)
    problem.solve(solver=cp.CLARABEL, tol_gap_abs=1e-10, tol_gap_rel=1e-10, tol_feas=1e-10, max_iter=500)
    if problem.status not in ("optimal",):
        raise RuntimeError(f"reference solve: {problem.status}")
    return np.asarray(H.value)
