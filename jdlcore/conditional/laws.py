"""Conditional laws on weighted support atoms, and the queries read from them.

A JDL model's signed conditional law at x puts weight pi_k (1 + h(x, z_k)) / Z(x) on the support
atoms z_k (see ``jdlcore.conditional.support``); off the training data 1 + h can be negative. A *rule* turns the
values R = 1 + h(x, z_k) into the law that queries read:

* "signed": the normalised signed weights, as fitted (not a probability vector where 1 + h < 0);
* "clip": max(1 + h, 0) renormalised: positive, but the negative mass is discarded, which shifts
  the conditional mean and spread;
* "project": the probability vector closest to the signed law that keeps its mass, mean and (for a
  scalar Y) second moment. With u = R / Z and c(z) = [1, z, z^2] ([1, z] for a vector Y) in
  standardised units it minimises
  sum_k (p_k - pi_k u_k)^2 / pi_k subject to p >= 0 and sum_k p_k c(z_k) = sum_k pi_k u_k c(z_k);
  the solution is p_k = pi_k max(0, u_k + theta . c(z_k)) with the multipliers theta found by a
  semi-smooth Newton method on the (convex, piecewise quadratic) dual, with backtracking. Where the
  signed moments cannot belong to a probability law on the atoms (a second moment below the squared
  mean, a mean outside the atoms' range), the second moment and then the mean are let go, in that
  order; ``level`` records what each row kept (2: mass, mean and second moment, 1: mass and mean,
  0: mass, -1: the signed law had no positive mass). Rows without negative values are unchanged
  (level 2 for a scalar Y, 1 for a vector Y).

Every query is a functional of the law: expectations (P @ f(z)), CDFs, quantiles (one merge per
row over the sorted atoms, all levels at once) and the CRPS of an observation. A query costs
O(M m_Y) per row for R plus O(M) per row for the rule and the functional, whatever n is.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..pool import pool_map, pool_threads
from .support import Support

__all__ = ["RULES", "LEVELS", "FAILED", "BUDGETS", "project", "MomentBasis", "apply_rule", "quantiles", "crps", "energy_score",
           "randomised_pit", "map_rows",
           "ROW_ELEMENTS"]

RULES = ("signed", "clip", "project")
LEVELS = {2: "mass, mean and second moment", 1: "mass and mean", 0: "mass", -1: "none (no positive signed mass)",
          -2: "failed (no solver certified the moments that could be kept)"}
FAILED = -2
ROW_ELEMENTS = 1 << 20  # (rows x atoms) entries per block of a query
_TOLERANCE = 1e-13  # on the dual gradient (the moment residual), in the row's own coordinates
BUDGETS = {"scalar": (40, 60), "vector": (30, 60)}  # per row and level: fast Newton iterations, exact passes


def _kernels() -> Any:
    """The compiled kernels, imported on first use (importing Numba costs about a second)."""
    from . import _law_kernels

    return _law_kernels


class MomentBasis:
    """The moment functions a projection keeps, in standardised units: c(z) = [1, z, z^2] for a
    scalar Y (mass, mean and second moment), [1, z_1, ..., z_d] for a vector Y (mass and mean).

    z is centred and scaled by the support's mean and standard deviation per component, so the
    Newton tolerance means the same for every data scale. ``columns_by_row`` (K, M) the functions at
    the atoms (``columns`` (M, K) the same, transposed); ``monomials`` (D, M) the distinct products of
    two of them, ``products`` (K, K) the row of each product.
    """

    def __init__(self, support: Support):
        atoms, weights = support.atoms, support.weights
        centre = weights @ atoms
        spread = np.sqrt(np.maximum(weights @ (atoms - centre) ** 2, 0.0))
        spread = np.where(spread > 0, spread, 1.0)
        z = (atoms - centre) / spread
        d = atoms.shape[1]
        exponents = [np.zeros(d, dtype=int)] + [np.eye(d, dtype=int)[i] for i in range(d)]
        if d == 1:
            exponents.append(np.array([2]))
        self.z = np.ascontiguousarray(z[:, 0]) if d == 1 else None
        self.columns_by_row = np.ascontiguousarray(np.stack([np.prod(z**e, axis=1) for e in exponents]))  # (K, M)
        # every product of two columns is a monomial of degree <= 4: the Newton Jacobian's entries
        products = [tuple(a + b) for a in exponents for b in exponents]
        distinct = sorted(set(products))
        self.products = np.array([distinct.index(p) for p in products], dtype=np.int64).reshape(len(exponents), -1)
        self.monomials = np.ascontiguousarray(np.stack([np.prod(z**np.array(e), axis=1) for e in distinct]))

    @property
    def columns(self) -> np.ndarray:
        """The moment functions at the atoms, (M, K)."""
        return self.columns_by_row.T


def apply_rule(R: np.ndarray, weights: np.ndarray, rule: str, moments: MomentBasis | None = None
               ) -> tuple[np.ndarray, np.ndarray | None]:
    """The law (q, M) from R (q, M) = 1 + h(x, z_k) under ``rule``; R is overwritten.

    Returns (P, level): level (q,) int8 for "project" (see the module docstring), else None.
    Rows of P sum to 1 (up to rounding); for "signed" they may hold negative entries.
    """
    if rule == "signed":
        R *= weights
        R /= R.sum(axis=1, keepdims=True)
        return R, None
    if rule == "clip":
        np.maximum(R, 0.0, out=R)
        R *= weights
        total = R.sum(axis=1, keepdims=True)
        R /= np.where(total > 0, total, 1.0)
        R[total[:, 0] <= 0] = weights  # nothing left to clip to: the marginal
        return R, None
    if moments is None:
        raise ValueError("moments: the projection needs the support's MomentBasis")
    P, level, _ = project(R, weights, moments)
    return P, level


def project(R: np.ndarray, weights: np.ndarray, moments: MomentBasis, budgets: tuple[int, int] | None = None
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The "project" rule with its record: (P (q, M), level (q,) int8, exact_passes (q,) int32), the
    passes over the atoms each row took on the exact path (0 where the fast Newton path converged; see
    ``jdlcore.conditional._law_kernels``). R (q, M) = 1 + h(x, z_k) is read, not changed. ``budgets``
    (fast iterations, exact passes) per row and level default to ``BUDGETS`` for the kind of y."""
    P = np.empty_like(R)
    level = np.empty(R.shape[0], dtype=np.int8)
    exact = np.empty(R.shape[0], dtype=np.int32)
    kernels = _kernels()
    iterations, passes = budgets or BUDGETS["scalar" if moments.z is not None else "vector"]
    if moments.z is not None:
        kernels.project_scalar(R, weights, moments.z, _TOLERANCE, iterations, passes, P, level, exact)
    else:
        kernels.project_vector(R, weights, moments.columns_by_row, moments.monomials, moments.products,
                               _TOLERANCE, iterations, passes, P, level, exact)
    return P, level, exact


def quantiles(P: np.ndarray, values: np.ndarray, levels: np.ndarray, order: np.ndarray | None = None) -> np.ndarray:
    """Quantiles (q, L) of laws P (q, M) on atoms with scalar ``values`` (M,) at ``levels`` (L,) in (0, 1].

    The generalised inverse of the (running maximum of the) CDF: the smallest atom value where it
    reaches the level; NaN where it never does (a signed law). ``order`` sorts the atoms by value
    (default: argsort of ``values``). All levels in one merge per row.
    """
    order = np.argsort(values, kind="stable") if order is None else order
    out = np.empty((P.shape[0], levels.size))
    ascending = bool(np.all(levels[1:] >= levels[:-1]))
    rank = slice(None) if ascending else np.argsort(levels, kind="stable")
    merged = out if ascending else np.empty_like(out)
    _kernels().running_quantiles(np.ascontiguousarray(P), order.astype(np.int64, copy=False), values[order],
                                 levels[rank], merged)
    if not ascending:
        out[:, rank] = merged
    return out


def crps(P: np.ndarray, values: np.ndarray, observed: np.ndarray) -> np.ndarray:
    """Continuous ranked probability score of laws P (q, M) on scalar atoms ``values`` (M,) at the
    observations (q,): E|X - y| - E|X - X'| / 2 for X, X' independent draws of the law, exact for
    weighted atoms: sum_k p_k |z_k - y| - sum_k p_k z_k (2 F_{k-1} + p_k - 1) over atoms in ascending order,
    with z and y taken relative to the middle atom (the second sum cancels to the spread of the law,
    so an offset in y would cost its digits).
    """
    order = np.argsort(values, kind="stable")
    ascending = values[order]
    centre = ascending[ascending.size // 2]  # the CRPS is translation invariant: an offset in y costs no digits
    out = np.empty(P.shape[0])
    _kernels().crps_rows(P, order, ascending - centre, np.asarray(observed, dtype=np.float64) - centre, out)
    return out


def energy_score(P: np.ndarray, atoms: np.ndarray, observed: np.ndarray) -> np.ndarray:
    """Energy score of laws P (q, M) on vector atoms (M, d) at the observations (q, d): E||X - y|| -
    E||X - X'|| / 2 (Euclidean norm) for X, X' independent draws of the law, exact for weighted atoms;
    the CRPS for d = 1. Distances are summed from the differences (no cancellation between equal atoms)."""
    spread = np.sqrt(_squared_differences(atoms, atoms))
    distance = np.sqrt(_squared_differences(np.asarray(observed, dtype=np.float64), atoms))
    return np.einsum("ij,ij->i", P, distance) - 0.5 * np.einsum("ij,ij->i", P @ spread, P)


def randomised_pit(P: np.ndarray, values: np.ndarray, observed: np.ndarray, uniform: np.ndarray) -> np.ndarray:
    """The randomised probability integral transform of laws P (q, M) on scalar atoms ``values`` (M,) at
    the observations (q,): F(y-) + V (F(y) - F(y-)) with V = ``uniform`` (q,) draws on [0, 1], clipped to
    [0, 1]. Uniform on [0, 1] when the observations follow the laws, atoms or no atoms."""
    y = np.asarray(observed, dtype=np.float64)[:, None]
    below = (P * (values[None, :] < y)).sum(axis=1)
    at = (P * (values[None, :] == y)).sum(axis=1)
    return np.clip(below + uniform * at, 0.0, 1.0)


def _squared_differences(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """|a_i - b_j|^2 for rows a_i of A (p, d) and b_j of B (q, d), shape (p, q), summed from the differences
    one column at a time (no cancellation, unlike the expansion |a|^2 + |b|^2 - 2 a.b)."""
    out = np.zeros((A.shape[0], B.shape[0]))
    for k in range(A.shape[1]):
        out += np.square(A[:, k, None] - B[None, :, k])
    return out


def map_rows(q: int, width: int, work: Callable[[slice], Any]) -> list:
    """``work(rows)`` over row blocks of about ``ROW_ELEMENTS`` / width rows, and at most q / (the pool's
    threads) rows, on the kernel thread pool with BLAS at one thread; results in row order. Each block
    does all of its work in its thread, the BLAS products that make its R included: the pool's threads
    then keep every core busy, with no serial step between blocks (a query of fewer rows than one
    block is split evenly over the threads, not left to one of them)."""
    step = max(1, min(ROW_ELEMENTS // max(width, 1), -(-q // pool_threads())))
    return pool_map(work, [slice(first, min(first + step, q)) for first in range(0, q, step)], one_blas_thread=True)
