"""Exact Bayesian filtering with Gaussian PSD models (Rudi & Ciliberto 2021, Prop. 10 and Alg. 1).

A hidden Markov model with a state x_t of d_x coordinates and observations y_t of d_y:

  transition   tau(x', x)   a Gaussian PSD model over (x', x), the next state's coordinates first;
  observation  omega(y, x)  a Gaussian PSD model over (y, x), the observation's coordinates first;
  prior        p(x_0)       a Gaussian PSD model over x.

The filter's recursion (20),

  p(x_t | y_1..t)  propto  omega(y_t, x_t) int tau(x_t, x_{t-1}) p(x_{t-1} | y_1..t-1) dx_{t-1},

keeps every belief a Gaussian PSD model, in closed form. The transition has centres (X'_i, X_i),
precisions (eta', eta) and matrix B (n x n), the observation centres (Y_a, Z_a), precisions
(eta_y, eta_z) and matrix C (m x m). Each step predicts (``predict``: the transition integrated
against the belief), observes (``update``: omega at y_t times the prediction; **the centres are the
same at every step**, so the belief's size stays n m) and normalises by the one-step predictive
density of y_t, whose logarithms sum to the log-likelihood.

``compress_to`` projects each belief onto k fixed centres (Nystrom compression, eq. 9) as the
observation's product is formed (``_compressed_product``: O(k n m) memory, never the n m x n m
matrix). Filtered means, covariances, quantiles and the one-step predictive law of y are in closed
form (``FilterResult``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
from scipy.optimize import brentq

from .model import GaussianPSDModel, _sqdist, gaussian_block, gaussian_mass, nystrom_map

__all__ = ["PSDFilter", "FilterResult", "psd_quantiles"]

_PAIR_BLOCK = 1 << 21  # (ij, ab) kernel entries per block of the prediction
_QUANTILE_XTOL = 1e-12  # relative bracket width at which a quantile's root search stops


@dataclass(frozen=True)
class FilterResult:
    """The filtered series of ``PSDFilter.run`` over T observations.

    Attributes
    ----------
    means, variances:
        (T, d_x): the mean and the variance of each state coordinate under p(x_t | y_1..t).
    levels, quantiles:
        The levels (L,) and the quantiles (T, d_x, L) of each coordinate's filtered marginal law.
    predicted_means, predicted_variances:
        (T, d_y): the mean and variance of the one-step predictive law of y_t given y_1..t-1.
    predicted_mass:
        (T,): the mass of that predictive law (``PSDFilter.predictive_mass``; 1 for an omega normalised
        in y, near 1 for a fitted one).
    log_evidence:
        (T,): log p(y_t | y_1..t-1), the predictive density at the observation (its sum: the
        log-likelihood of the series); less log ``predicted_mass``, that of the normalised law.
    beliefs:
        The T filtered laws, Gaussian PSD models over x (normalised).
    """

    means: np.ndarray
    variances: np.ndarray
    levels: np.ndarray
    quantiles: np.ndarray
    predicted_means: np.ndarray
    predicted_variances: np.ndarray
    predicted_mass: np.ndarray
    log_evidence: np.ndarray
    beliefs: tuple[GaussianPSDModel, ...]


class PSDFilter:
    """The filter of a hidden Markov model given by Gaussian PSD models (see the module).

    Parameters
    ----------
    transition:
        tau over (x', x), 2 d_x coordinates, the next state's first.
    observation:
        omega over (y, x), d_y + d_x coordinates, the observation's first.
    prior:
        p(x_0) over d_x coordinates.
    compress_to:
        Optional fixed centres (k, d_x): each belief is compressed onto them (eq. 9) at the belief's
        precision. None (the default) keeps the exact belief on its n m centres.
    """

    def __init__(self, transition: GaussianPSDModel, observation: GaussianPSDModel, prior: GaussianPSDModel, *,
                 compress_to: Any = None):
        for name, model in (("transition", transition), ("observation", observation), ("prior", prior)):
            if not isinstance(model, GaussianPSDModel):
                raise ValueError(f"{name}: must be a GaussianPSDModel, got {type(model).__name__}")
        d = prior.d
        if transition.d != 2 * d:
            raise ValueError(f"transition: must have 2 d_x = {2 * d} coordinates (x', x), got {transition.d}")
        if observation.d <= d:
            raise ValueError(f"observation: must have d_y + d_x coordinates (y, x) with d_x = {d}, got {observation.d}")
        self.transition, self.observation, self.prior = transition, observation, prior
        self.state_dim, self.obs_dim = d, observation.d - d
        self.compress_to = None if compress_to is None else np.asarray(compress_to, dtype=np.float64).reshape(-1, d)

    # -- one step ----------------------------------------------------------------------------------
    def predict(self, belief: GaussianPSDModel) -> GaussianPSDModel:
        """p(x_t | y_1..t-1) from the belief p(x_{t-1} | y_1..t-1): a normalised model over x on the
        transition's next-state centres X' with precision eta' and matrix (Prop. 1 and 2 with the
        reduction (7), the n^2 N x n^2 N product never formed; the belief on centres Xb, precision eb,
        matrix A)

          D_ij = B_ij K_{eta/2}(X_i, X_j) c_{2 eta + 2 eb} sum_ab A_ab K_{eb/2}(Xb_a, Xb_b) k_{e*}(m_ij, mb_ab),

        m_ij = (X_i + X_j) / 2, mb_ab = (Xb_a + Xb_b) / 2, e* = 2 eta eb / (eta + eb): the Gaussian
        integral of four kernels, per coordinate. D is the Gram matrix of the functions k_eta(X_i, .) in
        L2(belief) times B, entrywise: PSD by the Schur product theorem. Cost O(n^2 N^2 d_x), in blocks."""
        d = self.state_dim
        if belief.d != d:
            raise ValueError(f"belief: must have d_x = {d} coordinates, got {belief.d}")
        C, eta = self.transition.centers, self.transition.eta
        now, later = C[:, d:], C[:, :d]
        eta_now, eta_later = eta[d:], eta[:d]
        D = self.transition.A * _gram_in(now, eta_now, belief)
        return GaussianPSDModel._from_parts(D, later, eta_later).normalized()

    def update(self, predicted: GaussianPSDModel, y: Any) -> tuple[GaussianPSDModel, float]:
        """(p(x_t | y_1..t), log p(y_t | y_1..t-1)) from the prediction and the observation y_t (d_y,):
        omega at y_t (partial evaluation, eq. 3) times the prediction (the product rule, Prop. 2), a
        model on the centres (eta' X'_i + eta_z Z_a) / (eta' + eta_z), n m of them, precision
        eta' + eta_z, normalised by int omega(y_t, x) p(x | y_1..t-1) dx. ``ValueError`` where the
        observation has density 0 under the prediction."""
        y = np.asarray(y, dtype=np.float64).reshape(-1)
        if y.size != self.obs_dim or not np.all(np.isfinite(y)):
            raise ValueError(f"y: must be {self.obs_dim} finite value(s), got {y!r}")
        likelihood = self.observation.partial_evaluate((list(range(self.obs_dim)), y))  # a model over x
        evidence = float(np.sum(predicted.A * _gram_in(predicted.centers, predicted.eta, likelihood)))
        if not evidence > 0:
            raise ValueError(f"y: {y.tolist()} has density 0 under the predicted law (to rounding)")
        if self.compress_to is None:
            belief = predicted.product(likelihood)
        else:
            belief = _compressed_product(predicted, likelihood, self.compress_to)
        return belief.normalized(), float(np.log(evidence))

    def predictive_y(self, predicted: GaussianPSDModel) -> GaussianPSDModel:
        """The one-step predictive law of y_t, int omega(y, x) p(x | y_1..t-1) dx (not normalised: its
        integral is that of omega's y-marginal under the prediction), a model over y."""
        d_y = self.obs_dim
        shared = [(d_y + t, t) for t in range(self.state_dim)]
        return self.observation.product(predicted, shared=shared).marginalize(list(range(d_y)))

    def _predictive_weights(self, predicted: GaussianPSDModel) -> np.ndarray:
        """omega's signed mixture weights over its y centres' midpoints (m, m), each weighed by the Gram of
        its x kernels in L2(prediction): their sum is the predictive law's mass."""
        d_y = self.obs_dim
        C, eta = self.observation.centers, self.observation.eta
        ey = eta[:d_y]
        return (self.observation.A * gaussian_mass(2.0 * ey) * gaussian_block(C[:, :d_y], C[:, :d_y], 0.5 * ey)
                * _gram_in(C[:, d_y:], eta[d_y:], predicted))

    def predictive_mass(self, predicted: GaussianPSDModel) -> float:
        """The integral of ``predictive_y``, int int omega(y, x) p(x | y_1..t-1) dx dy (1 for an omega
        normalised in y), without forming its centres; ``update``'s evidence over it is the normalised
        predictive density of y_t."""
        return float(np.sum(self._predictive_weights(predicted)))

    def predictive_moments(self, predicted: GaussianPSDModel) -> tuple[np.ndarray, np.ndarray]:
        """(mean, variance), each (d_y,), of the normalised ``predictive_y`` without forming its n N centres
        (``_predictive_weights``)."""
        return self._predictive_law(predicted)[1:]

    def _predictive_law(self, predicted: GaussianPSDModel) -> tuple[float, np.ndarray, np.ndarray]:
        """(mass, mean, variance) of ``predictive_y``: ``predictive_mass`` and ``predictive_moments`` from
        one evaluation of the weights."""
        d_y = self.obs_dim
        Y, ey = self.observation.centers[:, :d_y], self.observation.eta[:d_y]
        weights = self._predictive_weights(predicted)
        total = float(np.sum(weights))
        if not total > 0:
            raise ValueError("predicted: the predictive law of y has no mass (to rounding)")
        mids = 0.5 * (Y[:, None, :] + Y[None, :, :])  # (m, m, d_y)
        mean = np.einsum("ab,abt->t", weights, mids) / total
        second = np.einsum("ab,abt->t", weights, mids**2) / total + 1.0 / (4.0 * ey)
        return total, mean, second - mean**2

    def step(self, belief: GaussianPSDModel, y: Any) -> tuple[GaussianPSDModel, float]:
        """One step of the recursion: (the new belief, log p(y_t | y_1..t-1))."""
        return self.update(self.predict(belief), y)

    # -- a series ------------------------------------------------------------------------------------
    def run(self, observations: Any, levels: Sequence[float] = (0.05, 0.5, 0.95)) -> FilterResult:
        """Filter the series ``observations`` (T, d_y) (a 1-D array: T scalar observations) from the prior
        (the state at t = 0, before y_1)."""
        Y = np.asarray(observations, dtype=np.float64)
        Y = Y.reshape(-1, 1) if Y.ndim == 1 and self.obs_dim == 1 else Y
        if Y.ndim != 2 or Y.shape[1] != self.obs_dim:
            raise ValueError(f"observations: must have shape (T, {self.obs_dim}), got {np.shape(observations)}")
        levels = np.asarray(levels, dtype=np.float64).reshape(-1)
        if np.any((levels <= 0) | (levels >= 1)):
            raise ValueError(f"levels: must lie in (0, 1), got {levels.tolist()}")
        T, d = Y.shape[0], self.state_dim
        out = {name: np.empty((T, d)) for name in ("means", "variances")}
        out.update(quantiles=np.empty((T, d, levels.size)), predicted_means=np.empty((T, self.obs_dim)),
                   predicted_variances=np.empty((T, self.obs_dim)), predicted_mass=np.empty(T),
                   log_evidence=np.empty(T))
        beliefs, belief = [], self.prior.normalized()
        for t in range(T):
            predicted = self.predict(belief)
            out["predicted_mass"][t], out["predicted_means"][t], out["predicted_variances"][t] = (
                self._predictive_law(predicted))
            belief, out["log_evidence"][t] = self.update(predicted, Y[t])
            out["means"][t], out["variances"][t] = belief.mean(), np.diag(belief.covariance())
            for k in range(d):
                out["quantiles"][t, k] = psd_quantiles(belief if d == 1 else belief.marginalize([k]), levels)
            beliefs.append(belief)
        return FilterResult(levels=levels, beliefs=tuple(beliefs), **out)


def psd_quantiles(model: GaussianPSDModel, levels: Any) -> np.ndarray:
    """Quantiles (L,) of a one-coordinate Gaussian PSD model's normalised law at ``levels`` (L,) in (0, 1):
    the roots of its CDF (``box_integral`` from -inf, in closed form) less each level, to a relative
    bracket of 1e-12."""
    if model.d != 1:
        raise ValueError(f"model: quantiles need a one-coordinate model, got {model.d}")
    total = model.integral()
    mean, sd = float(model.mean()[0]), float(np.sqrt(model.covariance()[0, 0]))

    def below(x: float, level: float) -> float:
        return model.box_integral(-np.inf, x) / total - level

    out = np.empty(np.size(levels))
    for k, level in enumerate(np.asarray(levels, dtype=np.float64).reshape(-1)):
        low, high, width = mean - sd, mean + sd, sd
        while below(low, level) > 0:
            width *= 2.0
            low = mean - width
        while below(high, level) < 0:
            width *= 2.0
            high = mean + width
        out[k] = brentq(below, low, high, args=(level,), xtol=_QUANTILE_XTOL * max(1.0, abs(mean), sd),
                        rtol=4 * np.finfo(float).eps)
    return out


def _gram_in(centres: np.ndarray, eta: np.ndarray, law: GaussianPSDModel) -> np.ndarray:
    """G_ij = int k_eta(c_i, x) k_eta(c_j, x) law(x) dx, shape (n, n), for ``centres`` (n, d): the Gram
    matrix of the kernel functions in L2(law), PSD for a non-negative law. The Gaussian integral of four
    kernels: c_{2 eta + 2 el} K_{eta/2, ij} sum_ab A_ab K_{el/2, ab} k_{e*}(m_ij, ml_ab), e* = 2 eta el / (eta + el)."""
    el = law.eta
    weights = law.A * gaussian_block(law.centers, law.centers, 0.5 * el)
    smoothed = _smoothed_pairs(centres, law.centers, weights, 2.0 * eta * el / (eta + el))
    return gaussian_mass(2.0 * eta + 2.0 * el) * gaussian_block(centres, centres, 0.5 * eta) * smoothed


def _compressed_product(first: GaussianPSDModel, second: GaussianPSDModel, centres: np.ndarray) -> GaussianPSDModel:
    """The product of two models over the same coordinates (Prop. 2: n m centres, matrix
    (A1 kron A2) o (v v^T)) compressed onto ``centres`` (k, d) (eq. 9: B E B^T, B = ``nystrom_map``) without
    forming the n m x n m matrix: with W_p = B_p o v as an n x m matrix, (B E B^T)_pq = <W_p, A1 W_q A2>.
    Memory O(k n m), time O(k n m (n + m + k))."""
    n, m, k = first.n, second.n, centres.shape[0]
    e1, e2 = first.eta, second.eta
    weighted = (e1 * first.centers[:, None, :] + e2 * second.centers[None, :, :]) / (e1 + e2)
    product_centres = weighted.reshape(n * m, -1)
    v = gaussian_block(first.centers, second.centers, e1 * e2 / (e1 + e2)).ravel()  # (i, a) at row i m + a
    W = (nystrom_map(centres, product_centres, e1 + e2) * v).reshape(k, n, m)
    spread = np.matmul(np.matmul(first.A, W), second.A)  # A1 W_q A2, (k, n, m)
    A = W.reshape(k, n * m) @ spread.reshape(k, n * m).T
    return GaussianPSDModel._from_parts(A, centres, e1 + e2)


def _smoothed_pairs(centers: np.ndarray, belief_centers: np.ndarray, weights: np.ndarray,
                    precision: np.ndarray) -> np.ndarray:
    """S_ij = sum_ab weights_ab k_precision(m_ij, mb_ab), shape (n, n), with m_ij the midpoints of
    ``centers`` (n, d) and mb_ab those of ``belief_centers`` (N, d): the sum over the pairs (a <= b, the
    off-diagonal ones counted twice) in blocks of ``_PAIR_BLOCK`` kernel entries."""
    n, N = centers.shape[0], belief_centers.shape[0]
    iu, ju = np.triu_indices(n)
    au, bu = np.triu_indices(N)
    w = weights[au, bu] * np.where(au == bu, 1.0, 2.0)
    keep = w != 0.0
    w, mids = w[keep], 0.5 * (belief_centers[au[keep]] + belief_centers[bu[keep]])
    ours = 0.5 * (centers[iu] + centers[ju])
    total = np.zeros(iu.size)
    step = max(1, _PAIR_BLOCK // max(iu.size, 1))
    for start in range(0, w.size, step):
        block = _sqdist(ours, mids[start:start + step], precision)
        total += np.exp(-block, out=block) @ w[start:start + step]
    S = np.empty((n, n))
    S[iu, ju] = total
    S[ju, iu] = total
    return S
