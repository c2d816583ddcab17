"""Accelerated projected gradient (FISTA) with gradient-based adaptive restart.

Used by the PSD density fit and PSDJDL, whose feasible sets ({A PSD} or {A PSD, <N, A> = c}) have
exact Euclidean projections. Restart: O'Donoghue & Candes, "Adaptive restart for accelerated
gradient schemes" (2015).
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

__all__ = ["fista"]


def fista(gradient: Callable[[np.ndarray], np.ndarray], project: Callable[[np.ndarray], np.ndarray],
          start: np.ndarray, lipschitz: float, *, tol: float, max_iter: int) -> tuple[np.ndarray, dict]:
    """Minimise a smooth convex function over a convex set from a feasible ``start``.

    gradient: X -> its gradient (same shape as X); project: Euclidean projection onto the set;
    lipschitz: a Lipschitz constant of the gradient (step 1 / lipschitz). Stops when
    |X_k+1 - X_k|_F <= tol * max(1, |X_k+1|_F) or after ``max_iter`` iterations.
    Returns X and {"iterations", "converged", "restarts"}.
    """
    X = start.copy()
    Z = X.copy()
    t, restarts, converged, it = 1.0, 0, False, 0
    for it in range(1, max_iter + 1):
        X_new = project(Z - gradient(Z) / lipschitz)
        step = X_new - X
        if np.sum((Z - X_new) * step) > 0:  # the momentum points uphill: restart it
            t = 1.0
            restarts += 1
        t_new = 0.5 * (1.0 + math.sqrt(1.0 + 4.0 * t * t))
        Z = X_new + ((t - 1.0) / t_new) * step
        t, X = t_new, X_new
        if np.linalg.norm(step) <= tol * max(1.0, float(np.linalg.norm(X))):
            converged = True
            break
    return X, {"iterations": it, "converged": converged, "restarts": restarts}
