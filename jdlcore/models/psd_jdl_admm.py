"""PSDJDL's convex problem by ADMM, the Hessian inverted exactly through its Kronecker structure.

The problem (``jdlcore.models.psd_jdl``): minimise over {M PSD (p x p), <N, M> = 1}

    f(M) = 1/2 <M, Hess M> - <C, M> + reg,     Hess M = 2 T(M) / n^2 + 2 reg M,  C = 2 D / n + 2 reg E0

(which is R(M)). In the pair indexing Mr (``_to_pairs``) T acts as Mr -> F_x Mr F_y^T, so with the
eigendecompositions F_x = U_x diag(a) U_x^T and F_y = U_y diag(b) U_y^T (once, O(q_X^6 + q_Y^6))

    (Hess + rho I)^-1 B = U_x [(U_x^T Br U_y) / (2 a b^T / n^2 + 2 reg + rho)] U_y^T     (entrywise division),

four products of q^2-sized matrices, whatever the conditioning of Hess (which stalls a gradient method).

ADMM in scaled form (Boyd et al., "Distributed optimization and statistical learning via the
alternating direction method of multipliers", 2011, section 3) on M = Z:

    M <- argmin_{<N, M> = 1} f(M) + rho/2 |M - Z + U|_F^2     (the solve above, and a multiple of the solve of N)
    Z <- the PSD part of M + U                                 (one symmetric eigendecomposition, positive part only)
    U <- U + M - Z

rho starts at the geometric mean of Hess's extreme eigenvalues and is balanced between the primal and
dual residuals (halved or doubled where one exceeds the other tenfold; section 3.4.1).

ADMM stops on a certified relative duality gap (``_gap``), checked every ``CHECK_EVERY`` iterations.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy.linalg import eigh

from ..solvers.fista import CHECK_EVERY, affine_psd_gap

__all__ = ["solve_psd_jdl", "apply_T"]

BALANCE = 10.0  # residual ratio beyond which rho is doubled or halved
_EPS = np.finfo(float).eps * 16


def _to_pairs(M: np.ndarray, qx: int, qy: int) -> np.ndarray:
    """M (p, p) -> Mr (q_X^2, q_Y^2), Mr[(j j'), (k k')] = M[(j k), (j' k')]."""
    return M.reshape(qx, qy, qx, qy).transpose(0, 2, 1, 3).reshape(qx * qx, qy * qy)


def _from_pairs(Mr: np.ndarray, qx: int, qy: int) -> np.ndarray:
    """Inverse of ``_to_pairs``."""
    return Mr.reshape(qx, qx, qy, qy).transpose(0, 2, 1, 3).reshape(qx * qy, qx * qy)


def apply_T(M: np.ndarray, F_x: np.ndarray, F_y: np.ndarray) -> np.ndarray:
    """T(M) (p, p) with <M, T(M)> = sum_{s,t} g(x_s, y_t)^2 (and gradient 2 T(M) of that sum)."""
    qx = math.isqrt(F_x.shape[0])
    qy = math.isqrt(F_y.shape[0])
    return _from_pairs(F_x @ _to_pairs(M, qx, qy) @ F_y.T, qx, qy)


class _KroneckerQuadratic:
    """f(M) = 1/2 <M, Hess M> - <C, M> + reg and solves with Hess + rho I, from F_x, F_y (q^2 x q^2)."""

    def __init__(self, F_x: np.ndarray, F_y: np.ndarray, D: np.ndarray, n: int, reg: float):
        self.qx, self.qy = math.isqrt(F_x.shape[0]), math.isqrt(F_y.shape[0])
        a, self.U_x = np.linalg.eigh(F_x)
        b, self.U_y = np.linalg.eigh(F_y)
        # F_x, F_y are Gram matrices (PSD): eigenvalues at rounding level (below eps x the largest) are 0
        a = np.where(a > _EPS * a[-1], a, 0.0)
        b = np.where(b > _EPS * b[-1], b, 0.0)
        self.curvature = 2.0 * np.outer(a, b) / n**2 + 2.0 * reg
        self.F_x, self.F_y, self.n, self.reg = F_x, F_y, n, reg
        self.C = (2.0 / n) * D
        self.C[0, 0] += 2.0 * reg

    def hess(self, M: np.ndarray) -> np.ndarray:
        return apply_T(M, self.F_x, self.F_y) * (2.0 / self.n**2) + 2.0 * self.reg * M

    def value(self, M: np.ndarray) -> float:
        return float(0.5 * np.sum(M * self.hess(M)) - np.sum(self.C * M)) + self.reg

    def gradient(self, M: np.ndarray) -> np.ndarray:
        G = self.hess(M) - self.C
        return (G + G.T) / 2.0

    def solve(self, B: np.ndarray, rho: float) -> np.ndarray:
        """(Hess + rho I)^-1 B for symmetric B (p, p); rho + 2 reg > 0."""
        Z = self.U_x.T @ _to_pairs(B, self.qx, self.qy) @ self.U_y
        X = _from_pairs(self.U_x @ (Z / (self.curvature + rho)) @ self.U_y.T, self.qx, self.qy)
        return (X + X.T) / 2.0


def _constrained(quadratic: _KroneckerQuadratic, B: np.ndarray, rho: float, N: np.ndarray,
                 solved_N: np.ndarray) -> np.ndarray:
    """argmin 1/2 <M, (Hess + rho) M> - <B, M> over <N, M> = 1, given solved_N = (Hess + rho)^-1 N."""
    solved = quadratic.solve(B, rho)
    return solved - ((float(np.sum(N * solved)) - 1.0) / float(np.sum(N * solved_N))) * solved_N


def _psd_part(A: np.ndarray) -> np.ndarray:
    """The projection of symmetric A onto the PSD cone, from its positive eigenpairs only."""
    lam, V = eigh((A + A.T) / 2.0, subset_by_value=(0.0, np.inf))
    return (V * lam) @ V.T


def solve_psd_jdl(F_x: np.ndarray, F_y: np.ndarray, D: np.ndarray, N: np.ndarray, n: int, reg: float, *,
                  tol: float, max_iter: int) -> tuple[np.ndarray, dict[str, Any]]:
    """Minimise R(M) over {M PSD, <N, M> = 1} from F_x, F_y (fourth moments), D (p, p) and N (p, p,
    positive definite). Returns M (p, p: PSD, <N, M> = 1 to rounding) and {"iterations", "converged"
    (the gap reached ``tol``), "gap" (the certified relative duality gap of M), "rho" (of the last
    iteration), "gap_kind"
    ("dual" or "frank-wolfe")}."""
    quadratic = _KroneckerQuadratic(F_x, F_y, D, n, reg)
    p = D.shape[0]
    E0 = np.zeros((p, p))
    E0[0, 0] = 1.0
    rho = float(np.sqrt(quadratic.curvature.min() * quadratic.curvature.max()))
    if not rho > 0:
        rho = float(quadratic.curvature.max()) or 1.0  # reg = 0 and a flat direction: the largest curvature
    Z, U = E0 / float(N[0, 0]), np.zeros((p, p))
    solved_N = quadratic.solve(N, rho)
    solved_N0 = quadratic.solve(N, 0.0) if reg > 0 else None  # for the dual bound
    gap, converged, it, used = math.inf, False, 0, rho
    for it in range(1, max_iter + 1):
        used = rho
        M = _constrained(quadratic, quadratic.C + rho * (Z - U), rho, N, solved_N)
        previous = Z
        Z = _psd_part(M + U)
        U += M - Z
        if it % CHECK_EVERY and it != max_iter:
            continue
        gap = _gap(quadratic, Z, _psd_part(-rho * U), N, solved_N0)
        if gap <= tol:
            converged = True
            break
        primal, dual = float(np.linalg.norm(M - Z)), rho * float(np.linalg.norm(Z - previous))
        if primal > BALANCE * dual or dual > BALANCE * primal:
            factor = 2.0 if primal > dual else 0.5
            rho *= factor
            U /= factor  # the scaled multiplier: rho U stays the multiplier
            solved_N = quadratic.solve(N, rho)
    mass = float(np.sum(N * Z))
    if not mass > 0:
        raise RuntimeError("PSDJDL: the ADMM iterate has no positive part left (to rounding); raise reg")
    return Z / mass, {"iterations": it, "converged": converged, "gap": float(gap), "rho": used,
               "gap_kind": "dual" if reg > 0 else "frank-wolfe"}


def _gap(quadratic: _KroneckerQuadratic, Z: np.ndarray, W: np.ndarray, N: np.ndarray,
         solved_N0: np.ndarray | None) -> float:
    """The relative duality gap of the feasible Z / <N, Z> against the dual point W (PSD); solved_N0 =
    Hess^-1 N where reg > 0 (else the Frank-Wolfe gap).

    U = (M + U_old) - PSD part of (M + U_old) is negative semidefinite, so W = -rho U is
    PSD (its PSD part is taken, against rounding), the multiplier of "M PSD". Weak duality: for any PSD
    W, g(W) = min_{<N, M> = 1} f(M) - <W, M> (closed form: the solve at rho = 0, defined for reg > 0) is
    at most the optimum, and Z / <N, Z> is feasible. The relative gap (f(Z / <N, Z>) - g(W)) / max(1, |f|)
    therefore bounds how far the returned M is from optimal; it is computed every ``CHECK_EVERY``
    iterations, and the solver stops where it is at most ``tol``. For reg = 0 (Hess may be singular) the
    bound is the Frank-Wolfe gap (``jdlcore.solvers.fista.affine_psd_gap``), valid for every convex f but
    much looser.
    """
    scale = float(np.sum(N * Z))
    if not scale > 0:
        return math.inf
    feasible = Z / scale
    value = quadratic.value(feasible)
    if quadratic.reg > 0:
        bound_at = _constrained(quadratic, quadratic.C + W, 0.0, N, solved_N0)
        lower = quadratic.value(bound_at) - float(np.sum(W * bound_at))
        return max(value - lower, 0.0) / max(1.0, abs(value))
    gradient = quadratic.gradient(feasible)
    return affine_psd_gap(feasible, gradient, N, value)
