"""Low-rank kernel logistic regression (Appendix B of Filipovic, Multerer & Schneider).

Parametrisation. A pivoted Cholesky factor K_X ~ L L^T (n x m) with bi-orthogonal B (K B = L,
B^T L = I) is rotated into the double-orthogonal basis Psi(x) = Phi_X(x) B V = k(x, pivots) @
coefficients (``jdlcore.lowrank.basis``). The functions Psi_j are orthonormal in the RKHS and take the values
A = L V (n x m) at the training points. The classifier is

    cl(x) = sigma(Psi(x) c~ + b),     sigma(z) = 1 / (1 + exp(-z)),

i.e. the paper's kernel classifier Phi_X(x) c with c = B V c~, plus an optional unpenalised
intercept b (``fit_intercept=False`` gives the paper's formulation exactly).

Objective. With labels y_i in {0, 1} and reg = lambda > 0,

    F(c~, b) = sum_i [log(1 + exp(z_i)) - y_i z_i] + reg ||c~||_2^2,   z = A c~ + b.

By orthonormality ||c~||_2 = ||Phi_X c||_H, so the penalty is reg c^T K c. For C > 2 classes the
loss is the multinomial one with class 0 as reference: Z = A W + b (n x (C-1)), W (m x (C-1)),
b (C-1,), and sample i costs log(1 + sum_k exp(Z_ik)) - Z_{i, y_i} (Z_{i, 0} := 0), penalty
reg ||W||_F^2. For C = 2 this is the binary loss above.

The solver is damped Newton on the exact Hessian (``_newton``).
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np
from scipy.linalg import LinAlgError, cho_factor, cho_solve

from ..lowrank.basis import SpectralBasis, spectral_basis
from ..lowrank.cholesky import DEFAULT_TOL, FACTORISATION_PARAMS, Factorisation, pivoted_cholesky
from ..scaling import DEFAULT_SCALING
from .estimator import SCALING_PARAMS, Estimator, paired_samples
from ..kernels import Kernel, kernel_from_dict
from ..params import Flag, Integer, Number, Param
from ..validation import as_samples

__all__ = ["KLR", "MAX_CLASSES"]

MAX_CLASSES = 50  # beyond this Y is almost surely continuous (pass a threshold) and the Hessian gets large
_SLAB = 1 << 14  # samples (or queries) per slab
_ARMIJO = 1e-4  # sufficient-decrease constant of the line search
_MIN_STEP = 2.0**-40  # the line search gives up below this step length


# -- objective -------------------------------------------------------------------------------------
def _log_partition(Z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """log(1 + sum_k exp(Z_ik)) (n,) and the probabilities P_ik of classes 1..K (n, K), overflow-free."""
    shift = np.maximum(Z.max(axis=1), 0.0)
    shifted = np.exp(Z - shift[:, None])
    log_z = shift + np.log(np.exp(-shift) + shifted.sum(axis=1))
    return log_z, np.exp(Z - log_z[:, None])


def _data_loss(Z: np.ndarray, targets: np.ndarray) -> float:
    """sum_i log(1 + sum_k exp(Z_ik)) - <T_i, Z_i> for logits Z and one-hot targets T, both (n, K)."""
    return float(np.sum(_log_partition(Z)[0]) - np.einsum("ik,ik->", targets, Z))


def _unpack(theta: np.ndarray, m: int, K: int, fit_intercept: bool) -> tuple[np.ndarray, np.ndarray]:
    """theta = [W.ravel() (m K, row-major), b (K,) if fit_intercept] -> W (m, K), b (K,)."""
    W = theta[: m * K].reshape(m, K)
    b = theta[m * K:] if fit_intercept else np.zeros(K)
    return W, b


def _penalised_loss(Z: np.ndarray, W: np.ndarray, targets: np.ndarray, reg: float) -> float:
    """The objective F from the logits Z (n, K) and the coefficients W (m, K)."""
    return _data_loss(Z, targets) + reg * float(np.sum(W * W))


def _objective(
    theta: np.ndarray, features: np.ndarray, targets: np.ndarray, reg: float, fit_intercept: bool = True,
    derivatives: bool = True,
) -> tuple[float, np.ndarray | None, np.ndarray | None]:
    """The penalised multinomial logistic objective, its gradient and its Hessian.

    theta: (m K,) or (m K + K,) = [W.ravel() (row-major), b]; features: (n, m) basis values A;
    targets: (n, K) one-hot indicators of classes 1..K (class 0 is the reference).
    Returns (F, gradient (p,), Hessian (p, p)) with p = theta.size; the derivatives are None when
    ``derivatives`` is False.
    """
    W, b = _unpack(theta, features.shape[1], targets.shape[1], fit_intercept)
    Z = features @ W + b
    value = _penalised_loss(Z, W, targets, reg)
    if not derivatives:
        return value, None, None
    gradient, hessian = _derivatives(features, Z, targets, W, reg, fit_intercept)
    return value, gradient, hessian


def _derivatives(
    features: np.ndarray, Z: np.ndarray, targets: np.ndarray, W: np.ndarray, reg: float, fit_intercept: bool,
    hessian: bool = True,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Gradient (p,) and Hessian (p, p) (None unless ``hessian``) of the objective at logits
    Z = features @ W + b, accumulated over slabs of rows."""
    m, K = W.shape
    grad_W = 2.0 * reg * W
    grad_b = np.zeros(K)
    H_WW = np.zeros((m, K, m, K))
    H_Wb = np.zeros((m, K, K))
    H_bb = np.zeros((K, K))
    for start in range(0, features.shape[0], _SLAB):
        rows = slice(start, min(start + _SLAB, features.shape[0]))
        A = features[rows]
        P = _log_partition(Z[rows])[1]
        residual = P - targets[rows]
        grad_W += A.T @ residual
        grad_b += residual.sum(axis=0)
        if not hessian:
            continue
        for k in range(K):
            for l in range(k, K):
                weight = P[:, k] * ((k == l) - P[:, l])  # d P_k / d Z_l
                if k == l:  # weight = P_k (1 - P_k) >= 0: a symmetric rank-s update (syrk)
                    scaled = A.T * np.sqrt(weight)
                    H_WW[:, k, :, k] += scaled @ scaled.T
                else:
                    H_WW[:, k, :, l] += (A.T * weight) @ A
                H_Wb[:, k, l] += A.T @ weight
                H_bb[k, l] += weight.sum()
    gradient = np.concatenate([grad_W.ravel(), grad_b]) if fit_intercept else grad_W.ravel()
    if not hessian:
        return gradient, None
    for k in range(K):  # mirror the upper (k < l) blocks
        for l in range(k + 1, K):
            H_WW[:, l, :, k] = H_WW[:, k, :, l].T
            H_Wb[:, l, k] = H_Wb[:, k, l]
            H_bb[l, k] = H_bb[k, l]
    H_WW = H_WW.reshape(m * K, m * K)
    H_WW[np.diag_indices(m * K)] += 2.0 * reg
    if not fit_intercept:
        return gradient, H_WW
    H_Wb = H_Wb.reshape(m * K, K)
    return gradient, np.block([[H_WW, H_Wb], [H_Wb.T, H_bb]])


def _newton(
    features: np.ndarray, targets: np.ndarray, reg: float, fit_intercept: bool, max_iter: int, gtol: float,
) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """Minimise the objective by damped Newton; returns W (m, K), b (K,) and solver diagnostics.

    Solver. F is smooth and strictly convex in W, and convex in (W, b), with m (C-1) + (C-1)
    unknowns, so Newton's method on the exact Hessian is cheap: with P_ik the softmax probabilities
    of classes 1..C-1 and T the one-hot targets,

        grad_W = A^T (P - T) + 2 reg W,        grad_b = 1^T (P - T),
        Hess[(j, k), (j', k')] = sum_i A_ij A_ij' (delta_kk' P_ik - P_ik P_ik') + 2 reg delta_jj' delta_kk'.

    Sums over samples run in slabs of rows (O(slab x m) temporaries). Steps are damped by a
    backtracking (Armijo) line search, and the iteration stops once ||grad||_inf <= gtol max(1, |F|).
    The log-partition is computed with a shifted log-sum-exp, so no exp overflows.

    Starts at W = 0 and, with an intercept, b = log(n_k / n_0) (the optimum for W = 0).
    Raises ``RuntimeError`` when the gradient criterion is not met within ``max_iter`` steps.
    """
    m, K = features.shape[1], targets.shape[1]
    theta = np.zeros(m * K + (K if fit_intercept else 0))
    if fit_intercept:
        counts = targets.sum(axis=0)
        theta[m * K:] = np.log(counts / (targets.shape[0] - counts.sum()))

    def logits(point: np.ndarray) -> np.ndarray:
        W, b = _unpack(point, m, K, fit_intercept)
        return features @ W + b

    def value(point: np.ndarray, Z: np.ndarray) -> float:
        return _penalised_loss(Z, _unpack(point, m, K, fit_intercept)[0], targets, reg)

    Z = logits(theta)
    loss = value(theta, Z)
    for iteration in range(max_iter + 1):
        W = _unpack(theta, m, K, fit_intercept)[0]
        gradient = _derivatives(features, Z, targets, W, reg, fit_intercept, hessian=False)[0]
        gradient_norm = float(np.max(np.abs(gradient)))
        if gradient_norm <= gtol * max(1.0, abs(loss)):
            return *_unpack(theta, m, K, fit_intercept), {
                "iterations": iteration, "loss": loss, "gradient_norm": gradient_norm,
            }
        if iteration == max_iter:
            break
        hessian = _derivatives(features, Z, targets, W, reg, fit_intercept)[1]
        step = _newton_step(hessian, gradient)
        slope = float(gradient @ step)
        direction = logits(step)  # the logits are linear in theta: Z(theta + t step) = Z + t direction
        # Rounding slack: near the optimum the predicted decrease falls below the rounding of F.
        slack = 64 * np.finfo(float).eps * max(1.0, abs(loss))
        t = 1.0
        while True:
            candidate = value(theta + t * step, Z + t * direction)
            if candidate <= loss + _ARMIJO * t * slope + slack:
                break
            t *= 0.5
            if t < _MIN_STEP:
                raise RuntimeError(
                    f"KLR: line search failed at Newton iteration {iteration} "
                    f"(gradient inf-norm {gradient_norm:.3e}, loss {loss:.6e}); try a larger reg"
                )
        theta = theta + t * step
        Z = logits(theta)
        loss = value(theta, Z)
    raise RuntimeError(
        f"KLR: Newton's method did not converge in max_iter={max_iter} iterations "
        f"(gradient inf-norm {gradient_norm:.3e} > gtol * max(1, |loss|) = {gtol * max(1.0, abs(loss)):.3e}); "
        "raise max_iter or gtol, or increase reg"
    )


def _newton_step(hessian: np.ndarray, gradient: np.ndarray) -> np.ndarray:
    """Solve hessian @ step = -gradient (Cholesky; least squares if the Hessian is numerically singular)."""
    try:
        return -cho_solve(cho_factor(hessian), gradient)
    except LinAlgError:
        return -np.linalg.lstsq(hessian, gradient, rcond=None)[0]


def _rotate_rows(L: np.ndarray, rotation: np.ndarray) -> np.ndarray:
    """A = L @ rotation (n, m), computed in slabs of rows into L's own memory (L is overwritten)."""
    for start in range(0, L.shape[0], _SLAB):
        rows = slice(start, min(start + _SLAB, L.shape[0]))
        L[rows] = L[rows] @ rotation
    return L


POSITIVE = Number(low=0, low_open=True)


# -- estimator -------------------------------------------------------------------------------------
class KLR(Estimator):
    """Low-rank kernel logistic regression (binary or multinomial) in the double-orthogonal basis.

    Parameters
    ----------
    kernel_x: kernel on X (default Gaussian with lengthscale 1).
    reg: lambda > 0, the weight of ||c~||_2^2 = c^T K c.
    tol: relative tolerance of the pivoted Cholesky decomposition of K_X, in [0, 1) (0: full rank
        up to the pivot floor).
    threshold: None: Y holds class labels (any distinct numbers, 2..MAX_CLASSES of them). A finite
        q: Y is continuous and the model learns the event Y <= q, classes_ = [0, 1] with 1 = event.
    fit_intercept: add an unpenalised intercept b (False: the paper's formulation exactly).
    pivoting, max_rank, seed, block_size: passed to ``pivoted_cholesky``.
    scaling: how the kernel's inputs are standardised, as for ``JDL`` (default "robust").
    max_iter, gtol: Newton stops once ||grad||_inf <= gtol * max(1, |objective|); RuntimeError
        after max_iter iterations.

    Fitted attributes: classes_ (C,) float64; coef_ (m, C-1) c~ per non-reference class; intercept_
    (C-1,) (zeros without intercept); basis_x_ (SpectralBasis); n_samples_; diagnostics_ with
    rank_x, trace_error_x (m + 1,), relative_error_x, stop_reason_x, iterations, loss (the penalised
    objective at the solution), gradient_norm, fit_seconds, solve_seconds.
    """

    method = "klr"
    estimator_kind = "classifier"  # scikit-learn's type: predict gives the most probable class
    summary = "kernel logistic regression (y holds class labels, or --threshold)"
    bases = ("spectral", None)
    state_dims = {"coef": ("basis_x", "logit"), "intercept": ("logit",), "classes": ("class",)}
    KERNELS = ("kernel_x",)
    parameters = {
        "reg": Param(POSITIVE, "regularisation lambda, the weight of the RKHS norm"),
        **FACTORISATION_PARAMS,
        **SCALING_PARAMS,
        "threshold": Param(Number(optional=True), "fit the event y <= THRESHOLD (y continuous; unset: y holds "
                           "class labels)", option=True),
        "fit_intercept": Param(Flag(), "add an unpenalised intercept"),
        "max_iter": Param(Integer(), "Newton iterations at most"),
        "gtol": Param(POSITIVE, "Newton stops once the gradient's max norm is <= gtol x max(1, |objective|)"),
    }

    def __init__(
        self,
        kernel_x: Kernel | None = None,
        *,
        reg: float = 1e-3,
        tol: float = DEFAULT_TOL,
        threshold: float | None = None,
        fit_intercept: bool = True,
        pivoting: str = "random",
        max_rank: int | None = None,
        seed: int | None = 0,
        block_size: int | None = None,
        max_iter: int = 100,
        gtol: float = 1e-10,
        scaling: str = DEFAULT_SCALING,
    ):
        self._keep_params(locals())

    # -- fitting ----------------------------------------------------------------------------------
    def fit(self, X: Any, Y: Any) -> "KLR":
        """Fit on samples X (n, d_X) or (n,) and labels (or continuous values, with a threshold) Y (n,) or (n, 1)."""
        self.check_params()
        started = time.perf_counter()
        self._note_inputs(X, Y)
        X, Y = paired_samples(X, Y)
        if Y.shape[1] != 1:
            raise ValueError(f"Y: must be one column, shape (n,) or (n, 1), got shape {Y.shape}")
        classes, labels = self._labels(Y[:, 0])
        kernel = self._scaled_kernel("kernel_x", X)
        factor = pivoted_cholesky(kernel, X, **Factorisation.of(self).cholesky_arguments())
        basis = spectral_basis(factor, kernel)
        features = _rotate_rows(factor.L, basis.rotation)  # A = L V = Psi(X); the factor is not used again
        targets = (labels[:, None] == np.arange(1, classes.size)).astype(np.float64)
        solve_started = time.perf_counter()
        W, b, info = _newton(features, targets, float(self.reg), bool(self.fit_intercept), int(self.max_iter),
                             float(self.gtol))
        self._classes = classes
        self.n_iter_ = int(info["iterations"])
        self.coef_ = W.copy()
        self.intercept_ = b.copy()
        self.basis_x_ = basis
        self.n_samples_ = X.shape[0]
        finished = time.perf_counter()
        self.diagnostics_ = {
            "rank_x": factor.rank, "trace_error_x": factor.trace_error, "relative_error_x": factor.relative_error,
            "stop_reason_x": factor.stop_reason, **info,
            "fit_seconds": finished - started, "solve_seconds": finished - solve_started,
        }
        return self

    def _labels(self, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """classes_ (C,) and the class index of each sample (n,)."""
        if self.threshold is None:
            classes, labels = np.unique(y, return_inverse=True)
            if classes.size < 2:
                raise ValueError(f"Y: needs at least 2 classes, got the single value {classes[0]!r}")
            if classes.size > MAX_CLASSES:
                raise ValueError(
                    f"Y: has {classes.size} distinct values, KLR takes at most {MAX_CLASSES} classes "
                    "(for a continuous Y pass threshold=q to model the event Y <= q)"
                )
            return classes.astype(np.float64), labels.ravel()
        events = y <= float(self.threshold)
        count = int(events.sum())
        if count in (0, y.size):
            raise ValueError(
                f"Y: threshold={self.threshold!r} makes {'no' if count == 0 else 'every'} sample an event "
                "(Y <= threshold); need both events and non-events"
            )
        return np.array([0.0, 1.0]), events.astype(np.int64)

    # -- queries ----------------------------------------------------------------------------------
    def decision_function(self, Xq: Any) -> np.ndarray:
        """scikit-learn's decision function: for two classes the logit of the second against the first,
        shape (q,) (> 0 where it is predicted); for C > 2 one score per class, shape (q, C) (class 0's is
        0), whose argmax is ``predict``."""
        logits = self.logits(Xq)
        return logits[:, 0] if logits.shape[1] == 1 else np.column_stack([np.zeros(len(logits)), logits])

    def logits(self, Xq: Any) -> np.ndarray:
        """Logits Psi(x) coef_ + intercept_ of classes 1..C-1 against class 0, shape (q, C-1)."""
        Xq = self._queries(Xq)
        out = np.empty((Xq.shape[0], self.coef_.shape[1]))
        for start in range(0, Xq.shape[0], _SLAB):
            rows = slice(start, min(start + _SLAB, Xq.shape[0]))
            out[rows] = self.basis_x_.features(Xq[rows]) @ self.coef_ + self.intercept_
        return out

    def predict_proba(self, Xq: Any) -> np.ndarray:
        """Class probabilities, shape (q, C), columns in the order of ``classes_``; rows sum to 1."""
        log_z, P = _log_partition(self.logits(Xq))
        return np.column_stack([np.exp(-log_z), P])

    @property
    def classes_(self) -> np.ndarray:
        """The sorted class labels (C,) float64 (with a threshold: [0, 1], 1 = the event)."""
        self._fitted()
        return self._classes

    def predict(self, Xq: Any) -> np.ndarray:
        """The most probable class (a value of ``classes_``) per query, shape (q,)."""
        return self.classes_[np.argmax(self.predict_proba(Xq), axis=1)]

    def crps(self, Xq: Any, y: Any) -> np.ndarray:
        """The CRPS of the class law at each (x_q, y_q), shape (q,) (``Estimator.crps``); fitted with a
        threshold, of the event's law at the event indicator 1{y_q <= threshold}."""
        if self.threshold is not None:
            y = (as_samples(y, "y") <= float(self.threshold)).astype(np.float64)
        return super().crps(Xq, y)

    @property
    def y_width_(self) -> int:
        """1: y is one column of labels (or of values, with a threshold)."""
        return 1

    def conditional_cdf(self, Xq: Any, thresholds: Any) -> np.ndarray:
        """Q(Y <= t | X = x_q), shape (q, T) for thresholds (T,): with class labels, the summed
        probabilities of the classes <= t (exact for the discrete law); fitted with a threshold q, the
        event's probability, at t = q only (``UnsupportedQuery`` elsewhere)."""
        self._fitted()
        t = np.atleast_1d(np.asarray(thresholds, dtype=np.float64))
        if t.ndim != 1 or not np.all(np.isfinite(t)):
            raise ValueError(f"thresholds: need finite values of shape (T,), got {np.shape(thresholds)}")
        if self.threshold is not None and not np.all(t == float(self.threshold)):
            raise self._unsupported(f"conditional_cdf at {t.tolist()}",
                                    f"fitted on the event Y <= {self.threshold:g}, it knows the CDF there only")
        return self._cdf_of(self.predict_proba(Xq), t)

    def _cdf_of(self, P: np.ndarray, t: np.ndarray) -> np.ndarray:
        """The CDF at thresholds t (T,) from class probabilities P (q, C) (``conditional_cdf``)."""
        if self.threshold is not None:
            return np.repeat(P[:, 1:2], t.size, axis=1)
        return P @ (self.classes_[:, None] <= t[None, :]).astype(np.float64)

    def prepare_requests(self, requests: dict[str, tuple[str, np.ndarray | None]]
                         ) -> dict[str, tuple[str, np.ndarray | None]]:
        """Class probabilities ("proba", with the classes as parameters) and the CDF ("cdf"; at the
        threshold only, for a model fitted with one); any other request raises ``ValueError``."""
        event = f"proba or cdf:{self.threshold:g}" if self.threshold is not None else "proba or cdf"
        resolved = {}
        for name, (kind, values) in requests.items():
            if kind == "proba":
                resolved[name] = (kind, self.classes_)
            elif kind == "cdf" and (self.threshold is None or np.array_equal(values, [float(self.threshold)])):
                resolved[name] = (kind, values)
            else:
                raise ValueError(f"function {name!r}: a klr model answers {event} only")
        return resolved

    def answer_requests(self, requests: dict[str, tuple[str, np.ndarray | None]], Xq: Any) -> dict[str, np.ndarray]:
        """The prepared requests at the queries: one set of class probabilities serves them all."""
        P = self.predict_proba(Xq)
        return {name: P if kind == "proba" else self._cdf_of(P, np.asarray(values, dtype=np.float64))
                for name, (kind, values) in requests.items()}

    def event_probability(self, Xq: Any) -> np.ndarray:
        """P(Y <= threshold | X = x_q), shape (q,); only for models fitted with a threshold."""
        self._fitted()
        if self.threshold is None:
            raise ValueError("event_probability: the model was fitted without a threshold; use predict_proba")
        return self.predict_proba(Xq)[:, 1]

    # -- state (for stores) -----------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """Everything a fitted model needs, as float64 arrays and JSON-able values (no pickles).

        Arrays: x_pivot_points (m, d_X), x_coefficients (m, m), x_eigenvalues (m,), x_rotation (m, m),
        x_trace_error (m + 1,), coef (m, C-1), intercept (C-1,), classes (C,).
        ``from_state(state())`` rebuilds a model whose queries are bit-identical.
        """
        self._fitted()
        basis = self.basis_x_
        arrays = {
            "x_pivot_points": basis.pivot_points, "x_coefficients": basis.coefficients,
            "x_eigenvalues": basis.eigenvalues, "x_rotation": basis.rotation,
            "x_trace_error": self.diagnostics_["trace_error_x"],
            "coef": self.coef_, "intercept": self.intercept_, "classes": self.classes_,
        }
        return {
            "arrays": {name: np.asarray(array, dtype=np.float64) for name, array in arrays.items()},
            "kernel_x": basis.spec(),
            "params": {name: getattr(self, name) for name in self.parameters},
            "n_samples": int(self.n_samples_),
            "diagnostics": self._json_diagnostics(),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> "KLR":
        """Rebuild a fitted model from ``state()``; raises ``ValueError`` on missing or inconsistent parts."""
        names = ("x_pivot_points", "x_coefficients", "x_eigenvalues", "x_rotation", "x_trace_error",
                 "coef", "intercept", "classes")
        try:
            arrays = {name: np.asarray(state["arrays"][name], dtype=np.float64) for name in names}
            kernel = kernel_from_dict(state["kernel_x"])
            model = cls(kernel_x=kernel, **state["params"])
            n = int(state["n_samples"])
        except KeyError as missing:
            raise ValueError(f"state: missing part {missing}") from None
        m, classes = arrays["x_coefficients"].shape[0], arrays["classes"].size
        expected = {  # None: any size
            "x_pivot_points": (m, None), "x_coefficients": (m, m), "x_eigenvalues": (m,), "x_rotation": (m, m),
            "x_trace_error": (None,), "coef": (m, classes - 1), "intercept": (classes - 1,), "classes": (classes,),
        }
        for name, shape in expected.items():
            actual = arrays[name].shape
            if len(actual) != len(shape) or any(e is not None and a != e for a, e in zip(actual, shape)):
                raise ValueError(f"state: {name} has shape {actual}, expected {shape}")
        if classes < 2:
            raise ValueError(f"state: classes has {classes} entries, expected at least 2")
        model.check_params()
        model.basis_x_ = SpectralBasis(kernel, arrays["x_pivot_points"], arrays["x_coefficients"],
                                       arrays["x_eigenvalues"], arrays["x_rotation"])
        model.coef_, model.intercept_, model._classes = arrays["coef"], arrays["intercept"], arrays["classes"]
        model.n_samples_ = n
        model.diagnostics_ = {**state.get("diagnostics", {}), "trace_error_x": arrays["x_trace_error"]}
        return model
