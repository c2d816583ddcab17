"""Projected Newton method for the dual of a diagonal QP with linear constraints.

Primal: minimise 1/2 h^T D h - g^T h subject to e_0^T h = 0 (optional) and c_k^T h >= -beta_k,
with D > 0 diagonal (vectorised, shape (M,)). With z = (nu, mu), nu >= 0, the primal solution is
h(z) = (g + C^T nu + mu e_0) / D and the dual is
    minimise psi(z) = 1/2 w^T D^{-1} w + beta^T nu,   w = g + C^T nu + mu e_0,
a bound-constrained convex QP in K + 1 variables with gradient (C h + beta, e_0^T h) and Hessian
E D^{-1} E^T (E = [C; e_0^T]). Solved by Bertsekas' projected Newton method with an Armijo search
along the projection arc; the binding set is identified in finitely many steps and the method then
takes exact Newton steps.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.linalg import LinAlgError, cho_factor, cho_solve, lstsq

__all__ = ["DualQPResult", "solve_dual_qp"]


@dataclass
class DualQPResult:
    h: np.ndarray  # (M,) primal solution
    nu: np.ndarray  # (K,) inequality multipliers
    mu: float  # equality multiplier
    iterations: int
    kkt_residual: float


def solve_dual_qp(
    D: np.ndarray,
    g: np.ndarray,
    C: np.ndarray,
    beta: np.ndarray,
    equality: np.ndarray | None = None,
    nu0: np.ndarray | None = None,
    mu0: float = 0.0,
    tol: float = 1e-13,
    max_iter: int = 500,
) -> DualQPResult:
    """Solve the QP described in the module docstring. C has shape (K, M)."""
    K = C.shape[0]
    E = C if equality is None else np.vstack([C, equality[None, :]])
    free_tail = 0 if equality is None else 1
    scaled = E / D  # (K + e, M)
    hessian = scaled @ E.T
    linear = E @ (g / D)
    offset = np.concatenate([beta, np.zeros(free_tail)])
    z = np.zeros(K + free_tail)
    if nu0 is not None:
        z[: nu0.size] = np.maximum(nu0, 0.0)
    if free_tail:
        z[-1] = mu0
    bounded = np.zeros(K + free_tail, dtype=bool)
    bounded[:K] = True

    def value(z: np.ndarray) -> float:
        return float(0.5 * z @ hessian @ z + z @ (linear + offset))

    def gradient(z: np.ndarray) -> np.ndarray:
        return hessian @ z + linear + offset

    scale = max(1.0, float(np.max(np.abs(beta))) if K else 1.0)
    iterations = 0
    residual = np.inf
    for iterations in range(1, max_iter + 1):
        grad = gradient(z)
        projected = np.where(bounded, np.minimum(z, grad), grad)
        projected[bounded & (z <= 0) & (grad > 0)] = 0.0
        residual = float(np.max(np.abs(projected))) if projected.size else 0.0
        if residual <= tol * scale:
            break
        epsilon = min(1e-8, residual)
        binding = bounded & (z <= epsilon) & (grad > 0)
        free = ~binding
        step = np.zeros_like(z)
        sub = hessian[np.ix_(free, free)]
        ridge = 1e-14 * max(1.0, float(np.trace(sub)) / max(1, sub.shape[0]))
        try:
            factor = cho_factor(sub + ridge * np.eye(sub.shape[0]), lower=True)
            step[free] = -cho_solve(factor, grad[free])
        except LinAlgError:
            step[free] = -lstsq(sub, grad[free])[0]
        if grad @ step >= 0:  # numerical trouble: fall back to steepest descent
            step = -grad
            step[binding] = 0.0
        current = value(z)
        alpha = 1.0
        for _ in range(60):
            trial = z + alpha * step
            trial[bounded] = np.maximum(trial[bounded], 0.0)
            decrease = grad @ (z - trial)
            if value(trial) <= current - 1e-4 * decrease or decrease <= 1e-300:
                break
            alpha *= 0.5
        z = trial
    w = g + E.T @ z
    return DualQPResult(
        h=w / D,
        nu=z[:K].copy(),
        mu=float(z[-1]) if free_tail else 0.0,
        iterations=iterations,
        kkt_residual=residual,
    )
