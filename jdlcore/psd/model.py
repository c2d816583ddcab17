"""Gaussian PSD models (Rudi & Ciliberto 2021, "PSD Representations for Effective Probability Models").

A Gaussian PSD model is the non-negative function

    f(x) = sum_ij A_ij k(x, c_i) k(x, c_j) = k_C(x)^T A k_C(x),    A symmetric PSD (n, n), centres C (n, d),

with jdlcore's Gaussian kernel k(x, x') = exp(-sum_t (x_t - x'_t)^2 / (2 l_t^2)) (scalar or per-feature
lengthscale l). Internally everything is written with the paper's precision vector
eta_t = 1 / (2 l_t^2), i.e. k_eta(x, x') = exp(-sum_t eta_t (x_t - x'_t)^2); the conversion happens only at
the public boundary (``lengthscale`` in, ``lengthscale`` out).

Closed forms used (products of Gaussian kernels are Gaussians):

* k_eta(x, c_i) k_eta(x, c_j) = k_{eta/2}(c_i, c_j) k_{2 eta}(x, m_ij), m_ij = (c_i + c_j) / 2, so f is a
  signed Gaussian mixture with weights w_ij = c_{2 eta} A_ij K_{eta/2, ij}, means m_ij and covariance
  diag(1 / (4 eta)), where c_eta = pi^{d/2} prod_t eta_t^{-1/2} = int k_eta(0, x) dx.
* integral = c_{2 eta} Tr(A K_{eta/2}); marginal (Prop. 1) B = c_{2 eta_out} A o K_{eta_out/2};
  partial evaluation (eq. 3) B = A o (k k^T); product (Prop. 2) C = (A kron B) o (v v^T) with the
  Kronecker index (i, a) at row i * m + a and v = K_{C1, C2, eta~}.ravel() (C order).
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from scipy import linalg
from scipy.special import erf, erfc

from ..validation import as_samples, check_positive

__all__ = ["GaussianPSDModel", "gaussian_block", "gaussian_mass", "eta_from_lengthscale", "nystrom_map"]

_SYM_TOL = 1e-10  # relative asymmetry tolerated in A (then symmetrised)
_PSD_TOL = 1e-10  # min eigenvalue >= -_PSD_TOL * max |eigenvalue|
_EVAL_ELEMENTS = 1 << 20  # kernel entries per evaluation chunk


# -- helpers (all in eta) ------------------------------------------------------------------------
def nystrom_map(new: np.ndarray, old: np.ndarray, eta: np.ndarray, jitter: float = 1e-10) -> np.ndarray:
    """B = K_{new,new}^{-1} K_{new,old} (k, n), the map of the compression (9): a model's A on ``old``
    centres becomes B A B^T on ``new`` ones. Solved by Cholesky of K_new,new + jitter I plus one step of
    iterated Tikhonov (the jitter's bias drops from O(jitter) to O(jitter^2); in near-null directions of
    K the step at most doubles a component). ``ValueError`` for a bad jitter or duplicate new centres."""
    jitter = float(jitter)
    if not np.isfinite(jitter) or jitter < 0:
        raise ValueError(f"jitter: must be finite and >= 0, got {jitter!r}")
    K = gaussian_block(new, new, eta)
    K[np.diag_indices_from(K)] += jitter
    try:
        factor = linalg.cho_factor(K, lower=True, check_finite=False)
    except linalg.LinAlgError:
        raise ValueError(
            f"new_centers: K_new,new + {jitter:g} I is not positive definite (duplicate centres?); increase jitter"
        ) from None
    B = linalg.cho_solve(factor, gaussian_block(new, old, eta), check_finite=False)
    if jitter > 0:
        B += jitter * linalg.cho_solve(factor, B, check_finite=False)
    return B


def _sqdist(A: np.ndarray, B: np.ndarray, eta: np.ndarray) -> np.ndarray:
    """sum_t eta_t (a_t - b_t)^2 for all pairs, shape (p, q); per-coordinate differences (no
    cancellation from the |a|^2 + |b|^2 - 2ab expansion)."""
    out = np.zeros((A.shape[0], B.shape[0]))
    for t in range(A.shape[1]):
        diff = A[:, t, None] - B[None, :, t]
        diff *= diff
        diff *= eta[t]
        out += diff
    return out


def gaussian_block(A: np.ndarray, B: np.ndarray, eta: np.ndarray) -> np.ndarray:
    """K_{A, B, eta} with entries exp(-sum_t eta_t (a_t - b_t)^2), shape (p, q)."""
    sq = _sqdist(A, B, eta)
    return np.exp(-sq, out=sq)


def gaussian_mass(eta: np.ndarray) -> float:
    """c_eta = int exp(-sum_t eta_t x_t^2) dx = pi^{d/2} prod_t eta_t^{-1/2}."""
    return float(np.exp(0.5 * eta.size * np.log(np.pi) - 0.5 * np.sum(np.log(eta))))


def eta_from_lengthscale(lengthscale: Any, d: int) -> np.ndarray:
    """The paper's precisions eta = 1 / (2 l^2), shape (d,), for a positive scalar or (d,) lengthscale
    in jdlcore's convention k(x, x') = exp(-|x - x'|^2 / (2 l^2)); ``ValueError`` otherwise."""
    ls = check_positive(lengthscale, "lengthscale")
    if ls.ndim > 1 or (ls.ndim == 1 and ls.size != d):
        raise ValueError(f"lengthscale: must be a scalar or have one entry per coordinate ({d}), got shape {ls.shape}")
    return 1.0 / (2.0 * np.broadcast_to(ls, (d,)) ** 2)


def _erf_diff(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """erf(hi) - erf(lo) without cancellation in the tails (uses erfc where both are on one side)."""
    lo, hi = np.broadcast_arrays(np.asarray(lo, float), np.asarray(hi, float))
    out = erf(hi) - erf(lo)
    right = lo > 0
    out[right] = erfc(lo[right]) - erfc(hi[right])
    left = hi < 0
    out[left] = erfc(-hi[left]) - erfc(-lo[left])
    return out


def _check_indices(indices: Any, name: str, d: int) -> list[int]:
    """A list of distinct integer coordinates in [0, d)."""
    try:
        items = [indices] if np.ndim(indices) == 0 else list(np.asarray(indices).ravel())
    except Exception:  # pragma: no cover - defensive
        raise ValueError(f"{name}: must be a list of coordinate indices, got {indices!r}") from None
    out: list[int] = []
    for item in items:
        if isinstance(item, (bool, np.bool_)) or not float(item).is_integer():
            raise ValueError(f"{name}: indices must be integers, got {indices!r}")
        index = int(item)
        if not 0 <= index < d:
            raise ValueError(f"{name}: index {index} is out of range for a model over {d} coordinates")
        out.append(index)
    if len(set(out)) != len(out):
        raise ValueError(f"{name}: indices must be distinct, got {out}")
    return out


class GaussianPSDModel:
    """f(x) = sum_ij A_ij k(x, c_i) k(x, c_j) with k the Gaussian kernel of jdlcore.

    Parameters
    ----------
    A:
        Symmetric positive semi-definite coefficient matrix, shape (n, n). An asymmetry up to 1e-10
        (relative to max |A_ij|) is symmetrised away; negative eigenvalues down to -1e-10 * max |eig|
        are tolerated (rounding), anything else raises ``ValueError``.
    centers:
        Base points c_i, shape (n, d) (a 1-D array of length n means d = 1); finite.
    lengthscale:
        Positive scalar or one positive value per coordinate (shape (d,)), the lengthscale l of
        k(x, x') = exp(-sum_t (x_t - x'_t)^2 / (2 l_t^2)).
    """

    def __init__(self, A: Any, centers: Any, lengthscale: float | np.ndarray):
        C = as_samples(centers, "centers")
        n, d = C.shape
        try:
            M = np.asarray(A, dtype=np.float64)
        except (TypeError, ValueError):
            raise ValueError(f"A: must be a real square matrix, got {A!r}") from None
        if M.ndim != 2 or M.shape[0] != M.shape[1]:
            raise ValueError(f"A: must be a square matrix (n, n), got shape {M.shape}")
        if M.shape[0] != n:
            raise ValueError(f"A: has shape {M.shape} but centers has {n} rows")
        if not np.all(np.isfinite(M)):
            raise ValueError(f"A: contains NaN or inf ({int((~np.isfinite(M)).sum())} entries)")
        scale = float(np.max(np.abs(M))) if M.size else 0.0
        asym = float(np.max(np.abs(M - M.T))) if M.size else 0.0
        if asym > _SYM_TOL * scale:
            raise ValueError(
                f"A: must be symmetric (max |A - A^T| = {asym:.3g} > {_SYM_TOL:g} * max |A| = {_SYM_TOL * scale:.3g})"
            )
        M = 0.5 * (M + M.T)
        eig = np.linalg.eigvalsh(M)
        top = float(np.max(np.abs(eig)))
        if eig[0] < -_PSD_TOL * top:
            raise ValueError(
                f"A: is not positive semi-definite (min eigenvalue {eig[0]:.6g} < -{_PSD_TOL:g} * max |eigenvalue| "
                f"= {-_PSD_TOL * top:.3g})"
            )
        self._set(M, C, eta_from_lengthscale(lengthscale, d))

    # -- construction without validation (internal results are PSD by construction) ----------------
    def _set(self, A: np.ndarray, C: np.ndarray, eta: np.ndarray) -> None:
        self._A = np.ascontiguousarray(A, dtype=np.float64)
        self._C = np.ascontiguousarray(C, dtype=np.float64)
        self._eta = np.array(eta, dtype=np.float64).reshape(-1)

    @classmethod
    def _from_parts(cls, A: np.ndarray, C: np.ndarray, eta: np.ndarray) -> "GaussianPSDModel":
        model = cls.__new__(cls)
        model._set(0.5 * (A + A.T), C, eta)
        return model

    @classmethod
    def from_eta(cls, A: Any, centers: Any, eta: Any) -> "GaussianPSDModel":
        """Build from the paper's precision vector eta (k_eta(x, x') = exp(-sum_t eta_t (x_t - x'_t)^2))."""
        eta = check_positive(eta, "eta")
        return cls(A, centers, 1.0 / np.sqrt(2.0 * eta))

    # -- properties --------------------------------------------------------------------------------
    @property
    def A(self) -> np.ndarray:
        """Coefficient matrix, shape (n, n) (a copy)."""
        return self._A.copy()

    @property
    def centers(self) -> np.ndarray:
        """Base points, shape (n, d) (a copy)."""
        return self._C.copy()

    @property
    def eta(self) -> np.ndarray:
        """Precision vector eta_t = 1 / (2 l_t^2), shape (d,) (a copy)."""
        return self._eta.copy()

    @property
    def lengthscale(self) -> np.ndarray:
        """Per-coordinate lengthscale l_t = 1 / sqrt(2 eta_t), shape (d,)."""
        return 1.0 / np.sqrt(2.0 * self._eta)

    @property
    def d(self) -> int:
        """Number of coordinates."""
        return self._C.shape[1]

    @property
    def n(self) -> int:
        """Number of base points."""
        return self._C.shape[0]

    def __repr__(self) -> str:
        return f"GaussianPSDModel(n={self.n}, d={self.d}, lengthscale={self.lengthscale.tolist()!r})"

    # -- evaluation --------------------------------------------------------------------------------
    def _points(self, Xq: Any, name: str) -> np.ndarray:
        X = Xq if isinstance(Xq, np.ndarray) else np.asarray(Xq)
        if np.ndim(X) == 1 and self.d > 1 and np.size(X) == self.d:
            X = np.reshape(X, (1, self.d))  # one point given as a flat (d,) vector
        X = as_samples(X, name)
        if X.shape[1] != self.d:
            raise ValueError(f"{name}: has {X.shape[1]} features, the model has {self.d} coordinates")
        return X

    def __call__(self, Xq: Any) -> np.ndarray:
        """f at the rows of Xq (shape (q, d), or (q,) when d = 1), shape (q,); computed as
        colsum(K o (A K)) with K = K_{C, Xq} and clipped at 0 against rounding."""
        X = self._points(Xq, "Xq")
        out = np.empty(X.shape[0])
        step = max(1, _EVAL_ELEMENTS // max(self.n, 1))
        for start in range(0, X.shape[0], step):
            K = gaussian_block(self._C, X[start : start + step], self._eta)
            out[start : start + step] = np.einsum("iq,iq->q", K, self._A @ K)
        return np.maximum(out, 0.0)

    # -- integrals ---------------------------------------------------------------------------------
    def _weights(self) -> np.ndarray:
        """w_ij = c_{2 eta} A_ij K_{eta/2, ij}: the signed mixture weights (sum = integral), (n, n)."""
        return gaussian_mass(2.0 * self._eta) * self._A * gaussian_block(self._C, self._C, 0.5 * self._eta)

    def integral(self) -> float:
        """int_{R^d} f = c_{2 eta} Tr(A K_{C, C, eta/2})."""
        return float(np.sum(self._weights()))

    def normalized(self) -> "GaussianPSDModel":
        """The density f / int f (raises ``ValueError`` if the integral is 0)."""
        Z = self.integral()
        if not Z > 0:
            raise ValueError(f"model: cannot normalise, its integral is {Z!r}")
        return self._from_parts(self._A / Z, self._C, self._eta)

    def box_integral(self, low: Any, high: Any) -> float:
        """int over the box prod_t [low_t, high_t] (infinite bounds allowed), via the erf formula
        sum_ij A_ij K_{eta/2, ij} prod_t (1/2) sqrt(pi / (2 eta_t)) [erf(sqrt(2 eta_t)(b_t - m_ij,t)) -
        erf(sqrt(2 eta_t)(a_t - m_ij,t))]."""
        a, b = self._bounds(low, high)
        factor = self._A * gaussian_block(self._C, self._C, 0.5 * self._eta)
        for t in range(self.d):
            m = 0.5 * (self._C[:, t, None] + self._C[None, :, t])
            s = np.sqrt(2.0 * self._eta[t])
            factor = factor * (0.5 * np.sqrt(np.pi) / s) * _erf_diff(s * (a[t] - m), s * (b[t] - m))
        return float(np.sum(factor))

    def _bounds(self, low: Any, high: Any) -> tuple[np.ndarray, np.ndarray]:
        out = []
        for name, value in (("low", low), ("high", high)):
            arr = np.asarray(value, dtype=float)
            if arr.ndim > 1 or (arr.ndim == 1 and arr.size != self.d):
                raise ValueError(f"{name}: must be a scalar or have {self.d} entries, got shape {arr.shape}")
            if np.any(np.isnan(arr)):
                raise ValueError(f"{name}: contains NaN ({value!r})")
            out.append(np.broadcast_to(arr, (self.d,)).astype(float))
        if np.any(out[0] > out[1]):
            raise ValueError(f"low: must be <= high in every coordinate, got low={out[0]} high={out[1]}")
        return out[0], out[1]

    # -- sum rule, partial evaluation, conditioning -------------------------------------------------
    def marginalize(self, keep: Sequence[int]) -> "GaussianPSDModel":
        """Integrate out every coordinate not in ``keep`` (Prop. 1): the model over x_keep (in the
        order given) with B = c_{2 eta_out} A o K_{C_out, C_out, eta_out/2} and centres C[:, keep]."""
        kept = _check_indices(keep, "keep", self.d)
        if not kept:
            raise ValueError("keep: must name at least one coordinate (use integral() to integrate out all)")
        out = [t for t in range(self.d) if t not in kept]
        B = self._A
        if out:
            eta_out = self._eta[out]
            B = gaussian_mass(2.0 * eta_out) * self._A * gaussian_block(self._C[:, out], self._C[:, out], 0.5 * eta_out)
        return self._from_parts(B, self._C[:, kept], self._eta[kept])

    def _fixed(self, values: Any, name: str) -> tuple[list[int], np.ndarray]:
        if isinstance(values, dict):
            indices, vals = list(values.keys()), list(values.values())
        else:
            try:
                indices, vals = values
            except (TypeError, ValueError):
                raise ValueError(
                    f"{name}: must be a dict {{index: value}} or a pair (indices, values), got {values!r}"
                ) from None
        idx = _check_indices(indices, name, self.d)
        v = np.asarray(vals, dtype=float).reshape(-1)
        if v.size != len(idx):
            raise ValueError(f"{name}: {len(idx)} indices but {v.size} values")
        if not np.all(np.isfinite(v)):
            raise ValueError(f"{name}: values must be finite, got {v}")
        if not idx:
            raise ValueError(f"{name}: must fix at least one coordinate")
        if len(idx) == self.d:
            raise ValueError(f"{name}: fixes all {self.d} coordinates; at least one must remain (use __call__)")
        return idx, v

    def _log_k(self, idx: list[int], v: np.ndarray) -> np.ndarray:
        """log k_{eta_idx}(c_i[idx], v) for every centre, shape (n,)."""
        return -_sqdist(self._C[:, idx], v[None, :], self._eta[idx])[:, 0]

    def partial_evaluate(self, values: Any) -> "GaussianPSDModel":
        """Fix some coordinates (eq. 3): ``values`` is {index: value} or (indices, values). Returns the
        (unnormalised) model over the remaining coordinates, in increasing order, with B = A o (k k^T),
        k = K_{C_fixed, value}."""
        idx, v = self._fixed(values, "values")
        rest = [t for t in range(self.d) if t not in idx]
        k = np.exp(self._log_k(idx, v))
        return self._from_parts(self._A * np.outer(k, k), self._C[:, rest], self._eta[rest])

    def condition(self, given: Sequence[int], values: Any) -> "GaussianPSDModel":
        """The normalised conditional density p(x_rest | x_given = values) (eq. 19), over the remaining
        coordinates in increasing order. Computed in log scale (k rescaled by its dominant term), so
        given points far from every centre do not underflow; raises ``ValueError`` when the marginal
        density at the given point is 0 (to rounding)."""
        given_list = _check_indices(given, "given", self.d)
        vals = np.asarray(values, dtype=float).reshape(-1)
        if vals.size != len(given_list):
            raise ValueError(f"values: {len(given_list)} given coordinates but {vals.size} values")
        idx, v = self._fixed((given_list, vals), "given")
        rest = [t for t in range(self.d) if t not in idx]
        logk = self._log_k(idx, v)
        diag = np.diag(self._A)
        positive = diag > 0
        if not np.any(positive):
            raise ValueError("values: the marginal density at the given point is 0 (A has a zero diagonal)")
        # |A_ij| k_i k_j <= sqrt(A_ii k_i^2 A_jj k_j^2): scaling by the largest A_ii k_i^2 keeps |B| <= 1.
        shift = np.max(np.log(diag[positive]) + 2.0 * logk[positive])
        k = np.exp(logk - 0.5 * shift)
        B = self._A * np.outer(k, k)
        eta_r = self._eta[rest]
        terms = gaussian_mass(2.0 * eta_r) * B * gaussian_block(self._C[:, rest], self._C[:, rest], 0.5 * eta_r)
        Z = float(np.sum(terms))
        if not (np.isfinite(Z) and Z > 64 * np.finfo(float).eps * float(np.sum(np.abs(terms)))):
            raise ValueError(
                f"values: the marginal density at the given point is 0 (to rounding) at "
                f"x_given = {dict(zip(idx, v.tolist()))}; cannot condition on it"
            )
        return self._from_parts(B / Z, self._C[:, rest], eta_r)

    # -- product rule --------------------------------------------------------------------------------
    def product(self, other: "GaussianPSDModel", shared: Sequence[tuple[int, int]] | None = None) -> "GaussianPSDModel":
        """Pointwise product (Prop. 2).

        ``shared`` pairs coordinates (t of self, s of other) that are the same variable; ``None`` means
        both models are over the same d coordinates in the same order. The result lives on self's
        coordinates (in order; shared ones take the combined precision) followed by other's unshared
        coordinates (in order), e.g. f1(x, y) * f2(y, z) with shared=[(1, 0)] is a model over (x, y, z).
        Base point (i, a) sits at row i * m + a; on a shared coordinate it is the weighted mean
        (eta1 c_i + eta2 c'_a) / (eta1 + eta2), precision eta1 + eta2; C = (A kron B) o (v v^T) with
        v = prod over shared coordinates of K_{eta1 eta2 / (eta1 + eta2)}(c_i, c'_a), raveled in C order.
        The result has n * m base points and per-feature lengthscales.
        """
        if not isinstance(other, GaussianPSDModel):
            raise ValueError(f"other: must be a GaussianPSDModel, got {type(other).__name__}")
        if shared is None:
            if other.d != self.d:
                raise ValueError(
                    f"other: has {other.d} coordinates, self has {self.d}; pass shared=[(t, s), ...] to pair them"
                )
            pairs = [(t, t) for t in range(self.d)]
        else:
            try:
                pairs = [(int(t), int(s)) for t, s in shared]
            except (TypeError, ValueError):
                raise ValueError(f"shared: must be a list of (self index, other index) pairs, got {shared!r}") from None
            _check_indices([t for t, _ in pairs], "shared", self.d)
            _check_indices([s for _, s in pairs], "shared", other.d)
        n, m = self.n, other.n
        C1, C2, e1, e2 = self._C, other._C, self._eta, other._eta
        pair_of = dict(pairs)
        cols, etas = [], []
        logv = np.zeros((n, m))
        for t in range(self.d):
            if t in pair_of:
                s = pair_of[t]
                a, b = e1[t], e2[s]
                cols.append(((a * C1[:, t, None] + b * C2[None, :, s]) / (a + b)).ravel())
                etas.append(a + b)
                logv -= (a * b / (a + b)) * (C1[:, t, None] - C2[None, :, s]) ** 2
            else:
                cols.append(np.repeat(C1[:, t], m))
                etas.append(e1[t])
        other_shared = set(pair_of.values())
        for s in range(other.d):
            if s not in other_shared:
                cols.append(np.tile(C2[:, s], n))
                etas.append(e2[s])
        v = np.exp(logv).ravel()  # row i * m + a  <->  (i, a), matching np.kron(A, B)
        Cnew = np.kron(self._A, other._A) * np.outer(v, v)
        return self._from_parts(Cnew, np.column_stack(cols), np.asarray(etas))

    # -- compression ---------------------------------------------------------------------------------
    def compress(self, new_centers: Any, jitter: float = 1e-10) -> "GaussianPSDModel":
        """Nystrom compression (eq. 9) onto ``new_centers`` (m, d): A~ = B A B^T with
        B = K_{new,new}^{-1} K_{new,old}, solved by Cholesky of K_{new,new} + jitter I plus one step of
        iterative refinement (bias O(jitter^2) for well-conditioned K). Exact when the new centres
        contain the old ones (to rounding / conditioning); A~ = B A B^T is PSD."""
        N = self._points(new_centers, "new_centers")
        B = nystrom_map(N, self._C, self._eta, jitter)
        return self._from_parts(B @ self._A @ B.T, N, self._eta)

    # -- moments ---------------------------------------------------------------------------------------
    def _normalized_weights(self) -> np.ndarray:
        W = self._weights()
        Z = float(np.sum(W))
        if not Z > 0:
            raise ValueError(f"model: its integral is {Z!r}; moments need a positive integral")
        return W / Z

    def mean(self) -> np.ndarray:
        """Mean of the normalised density f / int f, shape (d,): sum_ij W_ij m_ij = C^T (W 1)."""
        W = self._normalized_weights()
        return self._C.T @ W.sum(axis=1)

    def covariance(self) -> np.ndarray:
        """Covariance of the normalised density, shape (d, d):
        sum_ij W_ij m_ij m_ij^T + diag(1 / (4 eta)) - mean mean^T (computed on centred centres)."""
        W = self._normalized_weights()
        b = W.sum(axis=1)
        mu = self._C.T @ b
        X = self._C - mu
        second = 0.5 * (X.T @ (b[:, None] * X) + X.T @ W @ X)
        cov = second + np.diag(1.0 / (4.0 * self._eta))
        return 0.5 * (cov + cov.T)

    # -- sampling ----------------------------------------------------------------------------------------
    def sample(self, k: int, seed: Any = None) -> np.ndarray:
        """k exact samples from the normalised density, shape (k, d).

        Rejection sampling from the signed mixture f = sum_ij w_ij N(m_ij, diag(1/(4 eta))): propose from
        the positive-weight components g = sum_{w_ij > 0} w_ij N_ij >= f and accept with f(x) / g(x).
        Expected acceptance rate int f / int g. ``seed`` goes to ``np.random.default_rng``.
        """
        if isinstance(k, (bool, np.bool_)) or not float(k).is_integer() or int(k) < 0:
            raise ValueError(f"k: must be a non-negative integer, got {k!r}")
        k = int(k)
        rng = np.random.default_rng(seed)
        W = self._weights()
        Z = float(np.sum(W))
        if not Z > 0:
            raise ValueError(f"model: its integral is {Z!r}; cannot sample")
        iu, ju = np.triu_indices(self.n)
        w = W[iu, ju] * np.where(iu == ju, 1.0, 2.0)  # (i, j) and (j, i) share the same component
        pos = w > 0
        w, iu, ju = w[pos], iu[pos], ju[pos]
        Wplus = float(np.sum(w))
        means = 0.5 * (self._C[iu] + self._C[ju])
        # g(x) = sum_p w_p N(x; m_p, S) = sum_p (w_p / c_{2 eta}) k_{2 eta}(x, m_p)
        amp = w / gaussian_mass(2.0 * self._eta)
        std = 1.0 / (2.0 * np.sqrt(self._eta))
        probs = w / Wplus
        rate = Z / Wplus
        out = np.empty((k, self.d))
        got = 0
        while got < k:
            batch = int(min(1 << 16, np.ceil(1.2 * (k - got) / rate) + 16))
            comp = rng.choice(w.size, size=batch, p=probs)
            x = means[comp] + rng.standard_normal((batch, self.d)) * std
            f = self(x)
            g = np.empty(batch)
            step = max(1, _EVAL_ELEMENTS // max(w.size, 1))
            for s in range(0, batch, step):
                g[s : s + step] = gaussian_block(x[s : s + step], means, 2.0 * self._eta) @ amp
            accept = rng.random(batch) * g < f
            take = x[accept][: k - got]
            out[got : got + take.shape[0]] = take
            got += take.shape[0]
        return out

    # -- serialisation -------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable description; ``from_dict`` inverts it."""
        return {
            "name": "gaussian_psd",
            "A": self._A.tolist(),
            "centers": self._C.tolist(),
            "lengthscale": self.lengthscale.tolist(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "GaussianPSDModel":
        """Inverse of ``to_dict`` (validates like the constructor)."""
        missing = [key for key in ("A", "centers", "lengthscale") if key not in data]
        if missing:
            raise ValueError(f"data: missing key(s) {missing}")
        return cls(data["A"], data["centers"], data["lengthscale"])
