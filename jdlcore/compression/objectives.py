"""The compression objectives of Broadbent et al., their analytic gradients and the exact label
search for a discrete response, all linear in n through chunked reductions.

Notation: the data (x_i, y_i), i = 1..n; the compressed set C = (Xc, Yc) of m points;
P = k(Xc, X) and Q = l(Yc, Y) are (m, n) kernel blocks (formed one chunk of columns at a time),
Kc = k(Xc, Xc), Lc = l(Yc, Yc) are (m, m).

ACKIP (eq. 11, Lemma B.12), with W = (Kc + reg I)^{-1} (no factor m, as in the paper):

    J(C) = (1/n) Tr(P^T W Lc W P) - (2/n) Tr(Q^T W P) = (1/n) Tr(W Lc W M) - (2/n) Tr(W N),

with the two (m, m) reductions M = P P^T and N = P Q^T (the tower-property trick of Lemma 4.7:
no n x n matrix, O(m^2 n + m^3) per evaluation). J plus (1/n) sum_i l(y_i, y_i) is the mean squared
RKHS error (1/n) sum_i ||l(y_i, .) - mu_C(x_i)||^2 of the compressed set's KCME, so J >= -1 for a
Gaussian l.

JKIP (eq. 4): L(C) = (1/m^2) sum_jk Kc_jk Lc_jk - (2/(mn)) sum_ji P_ji Q_ji, the squared JMMD between
the data and C up to the constant (1/n^2) sum_ii' k l.

The gradients are reverse-mode derivatives written out by hand: one pass over the data gives the
value and the whole gradient (``ACKIPObjective``). A discrete y's labels are searched exactly
(``search_labels``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.linalg import cho_factor, cho_solve

from ..kernels import Kernel
from .sources import SampleSource

__all__ = ["kcme_inverse", "Evaluation", "SetObjective", "ACKIPObjective", "JKIPObjective", "search_labels", "label_objective", "make_objective"]


def kcme_inverse(K: np.ndarray, reg: float, name: str = "K") -> np.ndarray:
    """The KCME's W = (K + reg I)^{-1} (m, m) by a Cholesky factorisation, symmetrised; ``ValueError``
    naming ``name`` when K + reg I is not positive definite (duplicate points make K singular)."""
    try:
        factor = cho_factor(K + reg * np.eye(K.shape[0]), lower=True)
    except np.linalg.LinAlgError:
        raise ValueError(f"reg: {name} + reg I is not positive definite; increase reg (duplicate points make "
                         f"{name} singular)") from None
    W = cho_solve(factor, np.eye(K.shape[0]))
    return 0.5 * (W + W.T)


@dataclass
class Evaluation:
    """One evaluation of a set objective at (Xc, Yc).

    value: the objective (float). grad_x (m, d_x), grad_y (m, d_y) or None (discrete y, or not asked).
    labels: the pieces (a, V, U, b) of the exact label objective for a discrete y, else None.
    """

    value: float
    grad_x: np.ndarray | None = None
    grad_y: np.ndarray | None = None
    labels: tuple[float, np.ndarray, np.ndarray, float] | None = None


def _one_hot(Y: np.ndarray, classes: np.ndarray) -> np.ndarray:
    return (Y[:, :1] == classes[None, :]).astype(np.float64)


def _blocks(kernel: Kernel, A: np.ndarray, B: np.ndarray, slope: bool) -> tuple[np.ndarray, np.ndarray | None]:
    return kernel.value_and_slope(A, B) if slope else (kernel.block(A, B), None)


def _ackip_chunk(X: np.ndarray, Y: np.ndarray, Xc: np.ndarray, Yc: np.ndarray, kernel_x: Kernel, kernel_y: Kernel,
                 sens_m: np.ndarray | None, sens_n: np.ndarray | None, classes: np.ndarray | None) -> dict[str, Any]:
    """Partial sums of one chunk for ACKIP: M, N (and R); with sensitivities, the data part of the gradient."""
    gradient = sens_m is not None
    continuous_y = classes is None
    P, dP = _blocks(kernel_x, Xc, X, gradient)
    Q, dQ = _blocks(kernel_y, Yc, Y, gradient and continuous_y)
    out: dict[str, Any] = {"M": P @ P.T, "N": P @ Q.T}
    if gradient:
        out["gx"] = kernel_x.distance_gradient(Xc, X, (sens_m @ P + sens_n @ Q) * dP)
        if continuous_y:
            out["gy"] = kernel_y.distance_gradient(Yc, Y, (sens_n.T @ P) * dQ)
    if classes is not None:
        out["R"] = P @ _one_hot(Y, classes)
    return out


def _jkip_chunk(X: np.ndarray, Y: np.ndarray, Xc: np.ndarray, Yc: np.ndarray, kernel_x: Kernel, kernel_y: Kernel,
                scale: float | None, classes: np.ndarray | None) -> dict[str, Any]:
    """Partial sums of one chunk for JKIP: s = sum P * Q (and R); with ``scale`` = 2/(mn), the gradient."""
    gradient = scale is not None
    continuous_y = classes is None
    P, dP = _blocks(kernel_x, Xc, X, gradient)
    Q, dQ = _blocks(kernel_y, Yc, Y, gradient and continuous_y)
    out: dict[str, Any] = {"s": float(np.einsum("ij,ij->", P, Q))}
    if gradient:
        out["gx"] = kernel_x.distance_gradient(Xc, X, -scale * Q * dP)
        if continuous_y:
            out["gy"] = kernel_y.distance_gradient(Yc, Y, -scale * P * dQ)
    if classes is not None:
        out["R"] = P @ _one_hot(Y, classes)
    return out


class SetObjective:
    """A compression objective over the whole set C = (Xc, Yc); subclasses give ``evaluate``.

    kernel_x, kernel_y: the kernels k and l (differentiable ones for the gradients: gaussian,
    matern32, matern52; a ``DeltaKernel`` l for a discrete y). reg: the KCME's lambda (ACKIP).
    classes: the sorted class values (c,) of a discrete y, else None.
    """

    name = "objective"

    def __init__(self, kernel_x: Kernel, kernel_y: Kernel, reg: float = 1e-3, classes: np.ndarray | None = None):
        self.kernel_x, self.kernel_y, self.reg = kernel_x, kernel_y, float(reg)
        self.classes = None if classes is None else np.asarray(classes, dtype=np.float64)

    def evaluate(self, Xc: np.ndarray, Yc: np.ndarray, source: SampleSource, gradient: bool = True) -> Evaluation:
        raise NotImplementedError  # pragma: no cover - abstract

    def _gram(self, kernel: Kernel, Z: np.ndarray, slope: bool) -> tuple[np.ndarray, np.ndarray | None]:
        return _blocks(kernel, Z, Z, slope)


class ACKIPObjective(SetObjective):
    """J(C) of ACKIP (eq. 11): the compressed KCME's mean squared RKHS error, less a constant.

    Gradients by reverse mode written out once: J depends on M and N linearly with coefficients that
    do not depend on the data (dJ/dM = (1/n) W Lc W, dJ/dN = -(2/n) W), so the sensitivities
    dJ/dP = (2/n) W Lc W P - (2/n) W Q and dJ/dQ = -(2/n) W P are known chunk by chunk and one pass
    over the data yields the value and the whole gradient. The (m, m) remainder goes through
    dJ/dW = (1/n)(M W Lc + Lc W M) - (2/n) N^T, dJ/dKc = -W (dJ/dW) W and dJ/dLc = (1/n) W M W.
    The paper's B.10 misprint (D := C B for C A) does not arise here.
    """

    name = "ackip"

    def evaluate(self, Xc: np.ndarray, Yc: np.ndarray, source: SampleSource, gradient: bool = True) -> Evaluation:
        n, discrete = source.n, self.classes is not None
        Kc, dK = self._gram(self.kernel_x, Xc, gradient)
        Lc, dL = self._gram(self.kernel_y, Yc, gradient and not discrete)
        W = kcme_inverse(Kc, self.reg, "Kc")
        WLW = W @ Lc @ W
        sens = (2.0 / n * WLW, -2.0 / n * W) if gradient else (None, None)
        parts = source.reduce(_ackip_chunk, Xc, Yc, self.kernel_x, self.kernel_y, *sens, self.classes,
                              rows_hint=Xc.shape[0])
        M, N = parts["M"], parts["N"]
        value = (np.einsum("ij,ji->", WLW, M) - 2.0 * np.einsum("ij,ji->", W, N)) / n
        labels = (1.0 / n, W @ M @ W, W @ parts["R"], 2.0 / n) if discrete else None
        if not gradient:
            return Evaluation(float(value), labels=labels)
        G_W = (M @ W @ Lc + Lc @ W @ M) / n - 2.0 / n * N.T
        G_K = -W @ G_W @ W
        grad_x = parts["gx"] + self.kernel_x.distance_gradient(Xc, Xc, (G_K + G_K.T) * dK)
        grad_y = None
        if not discrete:
            G_L = W @ M @ W / n
            grad_y = parts["gy"] + self.kernel_y.distance_gradient(Yc, Yc, 2.0 * G_L * dL)
        return Evaluation(float(value), grad_x, grad_y, labels)


class JKIPObjective(SetObjective):
    """L(C) of JKIP (eq. 4): the squared JMMD between data and C, less the data's self term."""

    name = "jkip"

    def evaluate(self, Xc: np.ndarray, Yc: np.ndarray, source: SampleSource, gradient: bool = True) -> Evaluation:
        n, m, discrete = source.n, Xc.shape[0], self.classes is not None
        Kc, dK = self._gram(self.kernel_x, Xc, gradient)
        Lc, dL = self._gram(self.kernel_y, Yc, gradient and not discrete)
        scale = 2.0 / (m * n)
        parts = source.reduce(_jkip_chunk, Xc, Yc, self.kernel_x, self.kernel_y, scale if gradient else None,
                              self.classes, rows_hint=m)
        value = float(np.einsum("ij,ij->", Kc, Lc) / m**2 - scale * parts["s"])
        labels = (1.0 / m**2, Kc, parts["R"], scale) if discrete else None
        if not gradient:
            return Evaluation(value, labels=labels)
        grad_x = parts["gx"] + self.kernel_x.distance_gradient(Xc, Xc, 2.0 / m**2 * Lc * dK)
        grad_y = None
        if not discrete:
            grad_y = parts["gy"] + self.kernel_y.distance_gradient(Yc, Yc, 2.0 / m**2 * Kc * dL)
        return Evaluation(value, grad_x, grad_y, labels)


_OBJECTIVES: dict[str, type[SetObjective]] = {"ackip": ACKIPObjective, "ackh": ACKIPObjective,
                                               "jkip": JKIPObjective, "jkh": JKIPObjective}


def make_objective(method: str, kernel_x: Kernel, kernel_y: Kernel, reg: float,
                   classes: np.ndarray | None = None) -> SetObjective:
    """The set objective a method minimises: ACKIP's for ackip/ackh, JKIP's for jkip/jkh (the herding
    variants minimise it over the newest point only, the paper's eqs. 9 and 12 up to constants)."""
    return _OBJECTIVES[method](kernel_x, kernel_y, reg, classes)


def label_objective(labels: np.ndarray, pieces: tuple[float, np.ndarray, np.ndarray, float]) -> float:
    """a Tr(E^T V E) - b sum_t U[t, labels_t] for class indices ``labels`` (m,)."""
    a, V, U, b = pieces
    same = labels[:, None] == labels[None, :]
    return float(a * np.sum(V * same) - b * U[np.arange(labels.size), labels].sum())


def search_labels(labels: np.ndarray, pieces: tuple[float, np.ndarray, np.ndarray, float],
                  order: np.ndarray | None = None) -> np.ndarray:
    """One sweep of exact coordinate descent over the class indices ``labels`` (m,) of the compressed
    set: each label in turn (``order``, default 0..m-1) moves to the class minimising the label
    objective with the others held; returns the new indices. O(m C) per label.

    Discrete y (indicator kernel l, classes c_1..c_C): with the one-hot matrix E (m, C) of the
    compressed labels, Lc = E E^T and N = R E^T, where R = P onehot(Y) (m, C) is one more reduction.
    Both objectives then read a Tr(E^T V E) - b sum_t U[t, label_t] (ACKIP: a = 1/n, V = W M W,
    U = W R, b = 2/n; JKIP: a = 1/m^2, V = Kc, U = R, b = 2/(mn)), and ``search_labels`` changes one
    label at a time to the exact best class given the others (the paper's eq. 31/32 search, with the
    diagonal term handled exactly), never increasing the objective.
    """
    a, V, U, b = pieces
    labels = np.array(labels, dtype=np.int64)
    one_hot = np.zeros((labels.size, U.shape[1]))
    one_hot[np.arange(labels.size), labels] = 1.0
    V_E = V @ one_hot  # V_E[s, c] = sum over compressed points u of class c of V[s, u]
    for t in (range(labels.size) if order is None else order):
        diagonal = V[t, t]
        others = V_E[t] - diagonal * one_hot[t]
        costs = a * (2.0 * others + diagonal) - b * U[t]
        best = int(np.argmin(costs))
        if best != labels[t] and costs[best] < costs[labels[t]]:
            V_E[:, labels[t]] -= V[:, t]
            V_E[:, best] += V[:, t]
            one_hot[t, labels[t]], one_hot[t, best] = 0.0, 1.0
            labels[t] = best
    return labels
