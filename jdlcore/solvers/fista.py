"""Accelerated projected gradient (FISTA) with gradient-based adaptive restart.

Used by the PSD density fit and PSDJDL, whose feasible sets ({A PSD} or {A PSD, <N, A> = c}) have
exact Euclidean projections. Restart: O'Donoghue & Candes, "Adaptive restart for accelerated
gradient schemes" (2015).
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

__all__ = ["fista", "affine_psd_gap", "ConvergenceWarning"]

CHECK_EVERY = 25  # iterations between two evaluations of a certificate (an eigenproblem each)


class ConvergenceWarning(UserWarning):
    """A solver stopped at its iteration cap before its stopping rule held."""


def fista(gradient: Callable[[np.ndarray], np.ndarray], project: Callable[[np.ndarray], np.ndarray],
          start: np.ndarray, lipschitz: float, *, tol: float, max_iter: int,
          certificate: Callable[[np.ndarray, np.ndarray], float] | None = None) -> tuple[np.ndarray, dict]:
    """Minimise a smooth convex function over a convex set from a feasible ``start``.

    gradient: X -> its gradient (same shape as X); project: Euclidean projection onto the set;
    lipschitz: a Lipschitz constant of the gradient (step 1 / lipschitz).
    Without ``certificate`` it stops when |X_k+1 - X_k|_F <= tol * max(1, |X_k+1|_F), a small step
    and no proof of optimality. With ``certificate`` ((X, gradient at X) -> an upper bound on the
    optimality gap of X, relative: ``affine_psd_gap``) it stops only where that bound is <= tol,
    checked every ``CHECK_EVERY`` iterations and at the last. Either way at most ``max_iter`` iterations.
    Returns X and {"iterations", "converged", "restarts"}, with "gap" (the last bound) under a certificate.
    """
    X = start.copy()
    Z = X.copy()
    t, restarts, converged, it, gap = 1.0, 0, False, 0, math.inf
    for it in range(1, max_iter + 1):
        X_new = project(Z - gradient(Z) / lipschitz)
        step = X_new - X
        if np.sum((Z - X_new) * step) > 0:  # the momentum points uphill: restart it
            t = 1.0
            restarts += 1
        t_new = 0.5 * (1.0 + math.sqrt(1.0 + 4.0 * t * t))
        Z = X_new + ((t - 1.0) / t_new) * step
        t, X = t_new, X_new
        if certificate is None:
            if np.linalg.norm(step) <= tol * max(1.0, float(np.linalg.norm(X))):
                converged = True
                break
        elif it % CHECK_EVERY == 0 or it == max_iter:
            gap = certificate(X, gradient(X))
            if gap <= tol:
                converged = True
                break
    info = {"iterations": it, "converged": converged, "restarts": restarts}
    return X, info if certificate is None else {**info, "gap": float(gap)}


def affine_psd_gap(X: np.ndarray, gradient: np.ndarray, N: np.ndarray, objective: float) -> float:
    """The Frank-Wolfe duality gap of X on {X PSD, <N, X> = <N, X>} (N positive definite, so the set is
    bounded), relative: (<g, X> - <N, X> lambda_min(g, N)) / max(1, |objective|), with g the gradient
    at X and lambda_min the least generalised eigenvalue of g v = lambda N v (the linear function's
    minimum over the set, at a rank-one point). For a convex objective it bounds f(X) - f* from above."""
    from scipy.linalg import eigh

    g = 0.5 * (gradient + gradient.T)
    lowest = float(eigh(g, 0.5 * (N + N.T), eigvals_only=True, subset_by_index=[0, 0])[0])
    gap = float(np.sum(g * X)) - float(np.sum(N * X)) * lowest
    return max(gap, 0.0) / max(1.0, abs(objective))
