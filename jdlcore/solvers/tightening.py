"""The paper's single-inequality positivity tightening (31)-(33), solved exactly by a 2-D dual search.

Constraint (33): phi(H) = 1 + <C_low, H+> - <C_up, H-> >= 0, equivalently
1 + sum_ij min(C_low_ij H_ij, C_up_ij H_ij) >= 0 (C_low <= C_up), a concave piecewise-linear function.
With the diagonal curvature D of the objective, for multipliers mu (normalization) and nu >= 0
(tightening) the Lagrangian separates entrywise:
    a = g - mu S;  H = (a + nu C_low)/D where positive, (a + nu C_up)/D where negative, else 0.
<S, H> is non-increasing in mu and phi(H(mu*(nu), nu)) non-decreasing in nu (derivatives of the
concave dual), so mu* and nu* are found by bracketing root searches.
"""
from __future__ import annotations

import numpy as np
from scipy.optimize import brentq

from ..lowrank.basis import JDLReductions

__all__ = ["product_bounds", "tightening_bounds", "pointwise_bounds", "solve_tightened", "tightening_value"]


def product_bounds(
    low_y: np.ndarray, high_y: np.ndarray, low_x: np.ndarray, high_x: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Entrywise min and max (m_Y, m_X) of u_i v_j over u_i in [low_y_i, high_y_i], v_j in [low_x_j, high_x_j]."""
    products = np.stack([np.outer(low_y, low_x), np.outer(low_y, high_x), np.outer(high_y, low_x),
                         np.outer(high_y, high_x)])
    return products.min(axis=0), products.max(axis=0)


def tightening_bounds(red: JDLReductions) -> tuple[np.ndarray, np.ndarray]:
    """(C_low, C_up) of (31)-(32): min and max of A_Y[s, i] A_X[t, j] over all sample pairs (s, t)."""
    return product_bounds(red.min_y, red.max_y, red.min_x, red.max_x)


def pointwise_bounds(basis_x, basis_y) -> tuple[np.ndarray, np.ndarray]:
    """[a_ij, b_ij] of Lemma 4.2: bounds of Psi_Y,i(y) Psi_X,j(x) over the whole domain (bounded kernels).

    Each basis function Psi_j(z) = sum_k k(z, p_k) C_kj with k in [k_lo, k_hi] lies in
    [sum_k min(k_lo C_kj, k_hi C_kj), sum_k max(k_lo C_kj, k_hi C_kj)] (``SpectralBasis.ranges``);
    the products of those intervals bound the tensor basis. With these bounds (33) becomes (29), and
    1 + h >= 0 holds at every (x, y), not only on the training grid.
    """
    low_x, high_x = basis_x.ranges()
    low_y, high_y = basis_y.ranges()
    return product_bounds(low_y, high_y, low_x, high_x)


def tightening_value(H: np.ndarray, low: np.ndarray, up: np.ndarray) -> float:
    """phi(H) = 1 + <C_low, H+> - <C_up, H->, the left side of (33)."""
    return float(1.0 + np.sum(np.minimum(low * H, up * H)))


def _entrywise(a: np.ndarray, D: np.ndarray, low: np.ndarray, up: np.ndarray, nu: float) -> np.ndarray:
    positive = a + nu * low
    negative = a + nu * up
    return np.where(positive > 0, positive, np.where(negative < 0, negative, 0.0)) / D


def _bracket_root(func, start: float, step: float, increasing: bool) -> tuple[float, float]:
    """Find [lo, hi] containing a sign change of a monotone ``func``, expanding geometrically."""
    lo, hi = start - step, start + step
    for _ in range(200):
        f_lo, f_hi = func(lo), func(hi)
        if (f_lo <= 0 <= f_hi) if increasing else (f_lo >= 0 >= f_hi):
            return lo, hi
        step *= 4.0
        lo, hi = start - step, start + step
    raise RuntimeError("tightening: no bracket for the dual root (degenerate reductions)")


def solve_tightened(red: JDLReductions, reg: float, normalize: bool = True,
                    bounds: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, dict]:
    """Minimiser of (22) subject to (23) (if ``normalize``) and the single inequality (33).

    ``bounds``: (C_low, C_up), each (m_Y, m_X); default the sample bounds (31)-(32) of (33); the
    whole-domain bounds of ``pointwise_bounds`` give Lemma 4.2's (29) instead.
    Returns H (m_Y, m_X) and a dict with the multipliers ``mu``, ``nu`` and the slack of the inequality.
    """
    D = red.curvature(reg)
    g = red.linear_term() + np.outer(red.sum_y, red.sum_x)  # n G; the S term enters through mu
    S = np.outer(red.sum_y, red.sum_x)
    low, up = tightening_bounds(red) if bounds is None else bounds
    scale = max(np.max(np.abs(g)), 1.0) / max(np.max(np.abs(S)), 1e-300)

    def solve_mu(nu: float) -> float:
        if not normalize:
            return 1.0
        def defect(mu: float) -> float:
            return float(np.sum(S * _entrywise(g - mu * S, D, low, up, nu)))
        if np.max(np.abs(S)) == 0:
            return 0.0
        lo, hi = _bracket_root(defect, 1.0, scale, increasing=False)
        return brentq(defect, lo, hi, xtol=1e-15 * max(1.0, abs(lo), abs(hi)), rtol=4 * np.finfo(float).eps, maxiter=500)

    def slack(nu: float) -> float:
        mu = solve_mu(nu)
        return tightening_value(_entrywise(g - mu * S, D, low, up, nu), low, up)

    nu = 0.0
    if slack(0.0) < 0:
        hi = 1.0
        for _ in range(400):
            if slack(hi) >= 0:
                break
            hi *= 4.0
        else:  # pragma: no cover - H = 0 is always feasible, so a root exists
            raise RuntimeError("tightening: no feasible multiplier found")
        nu = brentq(slack, 0.0, hi, xtol=1e-15 * hi, rtol=4 * np.finfo(float).eps, maxiter=500)
        # brentq may return the root's infeasible neighbour; step to the feasible side.
        for _ in range(100):
            if slack(nu) >= 0:
                break
            nu = nu * (1 + 1e-13) + 1e-300
    mu = solve_mu(nu)
    H = _entrywise(g - mu * S, D, low, up, nu)
    return H, {"mu": float(mu), "nu": float(nu), "slack": tightening_value(H, low, up)}
