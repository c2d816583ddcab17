"""Closed forms of the low-rank JDL problem without positivity.

With D = Lambda_Y Lambda_X^T + n^2 reg and S = s_Y s_X^T, (n^2/2) times objective (22) is
1/2 sum D H^2 - <n G - S, H>. Unconstrained: H = (n G - S) / D. With the normalization (23)
<S, H> = 0, one multiplier mu: H = (n G - mu S) / D with mu = n <S, G/D> / <S, S/D>.
"""
from __future__ import annotations

import numpy as np

from ..lowrank.basis import JDLReductions

__all__ = ["solve_unconstrained", "solve_normalized"]


def solve_unconstrained(red: JDLReductions, reg: float) -> np.ndarray:
    """Minimiser of (22) without constraints, shape (m_Y, m_X)."""
    return red.linear_term() / red.curvature(reg)


def solve_normalized(red: JDLReductions, reg: float) -> np.ndarray:
    """Minimiser of (22) subject to the normalization (23), shape (m_Y, m_X)."""
    D = red.curvature(reg)
    S = np.outer(red.sum_y, red.sum_x)
    weight = np.sum(S * S / D)
    mu = red.n * np.sum(S * red.cross / D) / weight if weight > 0 else 0.0
    return (red.n * red.cross - mu * S) / D
