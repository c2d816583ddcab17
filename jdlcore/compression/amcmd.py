"""The AMCMD of Broadbent et al. (eq. 6, the closed form of Lemma 4.3) and the JMMD.

A kernel conditional mean embedding (KCME) here is *linear*: mu(x) = sum_k c_k(x) l(a_k, .) with
coefficients c(x) = T^T k(Z, x) for centres Z (p, d_x), a matrix T (p, A) and atoms a (A, d_y).

- The KCME of a sample set (eq. 1): Z = X, a = Y, T = W = (K_XX + reg I)^{-1} (no factor n).
- The project's low-rank CME (``jdlcore.CME``): Z = the x pivots, a = the y pivots,
  T = ``query_map_``; with ``reg / n`` it is the same estimator at full rank.

The squared AMCMD between two KCMEs over evaluation points x*_1..x*_q is

    AMCMD^2 = (1/q) sum_r ||mu_1(x*_r) - mu_2(x*_r)||^2
            = (1/q) sum_r [c1_r^T L_11 c1_r - 2 c1_r^T L_12 c2_r + c2_r^T L_22 c2_r],

with L_ij = l(a_i, a_j): Lemma 4.3 in coefficient form (misprint corrected: W_XX is built from
K_XX). Only per-point coefficients are formed, one chunk of evaluation points at a time, so the
sum over q points is a chunked reduction (``SampleSource.reduce``). It can round to a tiny negative
number; ``amcmd`` clips at 0 before the square root.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..kernels import Kernel
from ..validation import as_samples, check_paired, check_positive
from .objectives import kcme_inverse
from .sources import ArraySource, SampleSource, chunk_rows_for

__all__ = ["LinearEmbedding", "kcme_embedding", "data_cme", "cme_embedding", "amcmd", "amcmd_between", "jmmd"]


@dataclass
class LinearEmbedding:
    """mu(x) = sum_k c_k(x) l(atoms_k, .) with c(x) = matrix^T k(centres, x).

    kernel_x, centres (p, d_x), matrix (p, A), kernel_y, atoms (A, d_y).
    """

    kernel_x: Kernel
    centres: np.ndarray
    matrix: np.ndarray
    kernel_y: Kernel
    atoms: np.ndarray

    def coefficients(self, Xq: np.ndarray) -> np.ndarray:
        """c(x) for the points Xq (q, d_x), shape (q, A)."""
        return self.kernel_x.block(Xq, self.centres) @ self.matrix


def kcme_embedding(X: Any, Y: Any, kernel_x: Kernel, kernel_y: Kernel, reg: float, name: str = "X") -> LinearEmbedding:
    """The KCME (eq. 1) of samples X (n, d_x), Y (n, d_y): W = (K_XX + reg I)^{-1} by Cholesky, O(n^3)."""
    X, Y = as_samples(X, name), as_samples(Y, name.replace("X", "Y"))
    check_paired(X, Y, name, name.replace("X", "Y"))
    check_positive(reg, "reg")
    return LinearEmbedding(kernel_x, X, kcme_inverse(kernel_x.block(X, X), float(reg), f"K of {name}"), kernel_y, Y)


def data_cme(kernel_x: Kernel, kernel_y: Kernel, reg: float, n: int, tol: float, seed: int | None = 0):
    """The project's low-rank CME that stands for the KCME (K + reg I)^{-1} of n samples (the paper's
    lambda): ``jdlcore.CME`` takes (K + n reg' I), so reg' = reg / n; unfitted, to fit in memory or on
    a chunked problem."""
    from ..models.cme import CME

    return CME(kernel_x, kernel_y, reg=float(reg) / n, tol=float(tol), seed=seed, scaling="none")  # the kernels as given


def cme_embedding(cme: Any) -> LinearEmbedding:
    """The fitted low-rank ``jdlcore.CME`` as a linear KCME (weights on its y pivots)."""
    return LinearEmbedding(cme.basis_x_.kernel, cme.basis_x_.pivot_points, cme.query_map_,
                           cme.basis_y_.kernel, cme.y_atoms_)


def _amcmd_chunk(Xq: np.ndarray, _Y: np.ndarray, first: LinearEmbedding, second: LinearEmbedding,
                 grams: tuple[np.ndarray, np.ndarray, np.ndarray]) -> dict[str, float]:
    L11, L12, L22 = grams
    c1, c2 = first.coefficients(Xq), second.coefficients(Xq)
    return {"11": float(np.einsum("ij,ij->", c1 @ L11, c1)), "12": float(np.einsum("ij,ij->", c1 @ L12, c2)),
            "22": float(np.einsum("ij,ij->", c2 @ L22, c2)), "q": float(Xq.shape[0])}


def amcmd_between(first: LinearEmbedding, second: LinearEmbedding, points: SampleSource) -> float:
    """The squared AMCMD (unclipped) between two linear KCMEs, averaged over the x of ``points``."""
    ly = first.kernel_y
    grams = (ly.block(first.atoms, first.atoms), ly.block(first.atoms, second.atoms),
             ly.block(second.atoms, second.atoms))
    hint = first.centres.shape[0] + second.centres.shape[0] + first.atoms.shape[0] + second.atoms.shape[0]
    parts = points.reduce(_amcmd_chunk, first, second, grams, rows_hint=hint)
    return (parts["11"] - 2.0 * parts["12"] + parts["22"]) / parts["q"]


def amcmd(X: Any, Y: Any, Xc: Any, Yc: Any, *, kernel_x: Kernel, kernel_y: Kernel, reg: float,
          reg_c: float | None = None, X_eval: Any = None, squared: bool = False,
          rank_tol: float | None = None) -> float:
    """AMCMD between the KCMEs of (X, Y) (n samples) and (Xc, Yc) (m samples), eq. 6 / Lemma 4.3.

    reg, reg_c: the lambdas of the two KCMEs, W = (K + reg I)^{-1} with no factor n (reg_c defaults
    to reg). X_eval (q, d_x): the points x* averaged over (default X). squared: return the estimator
    AMCMD^2 itself (unclipped) instead of its clipped square root.
    rank_tol: None for the exact first KCME (O(n^3) time, O(n^2) memory: up to n ~ 1e4); a tolerance
    replaces it by the project's low-rank CME (pivoted Cholesky to that relative trace error, reg / n),
    O(n r^2) time and memory, for large n.
    """
    X, Y = as_samples(X, "X"), as_samples(Y, "Y")
    check_paired(X, Y)
    Xc, Yc = as_samples(Xc, "Xc"), as_samples(Yc, "Yc")
    for name, data, compressed in (("Xc", X, Xc), ("Yc", Y, Yc)):
        if compressed.shape[1] != data.shape[1]:
            raise ValueError(f"{name}: has {compressed.shape[1]} features, the data has {data.shape[1]}")
    X_eval = X if X_eval is None else as_samples(X_eval, "X_eval")
    if X_eval.shape[1] != X.shape[1]:
        raise ValueError(f"X_eval: has {X_eval.shape[1]} features, X has {X.shape[1]}")
    check_positive(reg, "reg")
    second = kcme_embedding(Xc, Yc, kernel_x, kernel_y, reg if reg_c is None else reg_c, "Xc")
    if rank_tol is None:
        first = kcme_embedding(X, Y, kernel_x, kernel_y, reg)
    else:
        check_positive(rank_tol, "rank_tol")
        first = cme_embedding(data_cme(kernel_x, kernel_y, reg, X.shape[0], rank_tol).fit(X, Y))
    value = amcmd_between(first, second, ArraySource(X_eval, np.zeros((X_eval.shape[0], 1))))
    return value if squared else float(np.sqrt(max(value, 0.0)))


def jmmd(X: Any, Y: Any, Xc: Any, Yc: Any, *, kernel_x: Kernel, kernel_y: Kernel, squared: bool = False) -> float:
    """JMMD between the empirical joint laws of (X, Y) and (Xc, Yc) with the product kernel k l:
    (1/n^2) sum k l - (2/(nm)) sum k l + (1/m^2) sum k l over the three pairings. Exact, O(n^2) time
    in row blocks (never n x n in memory)."""
    X, Y, Xc, Yc = (as_samples(v, name) for v, name in ((X, "X"), (Y, "Y"), (Xc, "Xc"), (Yc, "Yc")))
    check_paired(X, Y)
    check_paired(Xc, Yc, "Xc", "Yc")

    def mean_product(A: np.ndarray, B: np.ndarray, C: np.ndarray, D: np.ndarray) -> float:
        step, total = chunk_rows_for(C.shape[0], A.shape[0]), 0.0
        for start in range(0, A.shape[0], step):
            rows = slice(start, start + step)
            total += float(np.einsum("ij,ij->", kernel_x.block(A[rows], C), kernel_y.block(B[rows], D)))
        return total / (A.shape[0] * C.shape[0])

    value = mean_product(X, Y, X, Y) - 2.0 * mean_product(X, Y, Xc, Yc) + mean_product(Xc, Yc, Xc, Yc)
    return value if squared else float(np.sqrt(max(value, 0.0)))
