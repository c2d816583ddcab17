"""Synthetic tasks of conditional distribution compression (Broadbent et al.), with exact quantities.

Two 1-D data-generating processes with Gaussian conditionals Y | X=x ~ N(f(x), s2(x)):

* ``GaussianLinearModel`` (paper Sec. 5.1): X ~ N(mu, sigma2), f(x) = a0 + a1 x, s2(x) = noise2;
  with Gaussian kernels k (on x) and l (on y) the *population* AMCMD of a compressed set is exact.
* ``HeteroscedasticModel`` (the paper's heteroscedastic task): X ~ N(0, 2^2), f a sum of four
  Gaussian bumps, s2(x) = noise_base + |noise_amp sin x|.

The KCME of C = {(xt_j, yt_j)}: mu_C(x) = sum_i beta_i(x) l(yt_i, .), beta(x) = W k(Xt, x),
W = (K_tt + lam I)^{-1} (lam without a factor m). With P_{X*} = P_X the squared AMCMD is

    AMCMD^2 = E_x ||mu_{Y|X=x} - mu_C(x)||^2 = E_x ||mu_{Y|X=x}||^2 - 2 Tr(W Q) + Tr(W L_tt W M),
    M[q, j] = E_x[k(x, xt_q) k(x, xt_j)]                 (``marginal_moments``)
    Q[j, i] = E_{(x,y)}[k(x, xt_j) l(y, yt_i)]           (``joint_moments``)
    E_x ||mu_{Y|X=x}||^2 = E[l(Y, Y') | same x]          (``embedding_norm``)

All closed forms rest on one Gaussian identity, for x ~ N(mu, s2) and v > 0, written with every
exponent <= 0 (no large terms cancelling inside ``exp``):
    E exp(-(x - c)^2 / (2 v)) = sqrt(v / (v + s2)) exp(-(c - mu)^2 / (2 (v + s2)))        (G)

``TEST_FUNCTIONS`` score compressed sets by E[h(Y) | X=x], exact for Y ~ N(f, s2) by
``gaussian_expectations``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
from scipy.special import ndtr

from ..kernels import GaussianKernel
from ..validation import as_samples, check_paired, check_positive
from .objectives import kcme_inverse

__all__ = [
    "TEST_FUNCTIONS",
    "gaussian_expectations",
    "GaussianLinearModel",
    "HeteroscedasticModel",
]

TEST_FUNCTIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "y": lambda y: np.asarray(y, dtype=float),
    "y2": lambda y: np.asarray(y, dtype=float) ** 2,
    "y3": lambda y: np.asarray(y, dtype=float) ** 3,
    "sin": np.sin,
    "cos": np.cos,
    "gauss": lambda y: np.exp(-np.asarray(y, dtype=float) ** 2),
    "abs": np.abs,
    "positive": lambda y: (np.asarray(y) > 0).astype(float),
}
"""Elementwise test functions h(y), keyed by name (same keys as ``gaussian_expectations``)."""


def gaussian_expectations(f: Any, s2: Any) -> dict[str, np.ndarray]:
    """Exact E[h(Y)] for Y ~ N(f, s2) and every h in ``TEST_FUNCTIONS``.

    ``f`` and ``s2`` (> 0) broadcast against each other; each returned array has their broadcast shape.
    E[Y] = f, E[Y^2] = f^2 + s2, E[Y^3] = f^3 + 3 f s2, E[sin Y] = sin f e^{-s2/2},
    E[cos Y] = cos f e^{-s2/2}, E[e^{-Y^2}] = (1 + 2 s2)^{-1/2} exp(-f^2 / (1 + 2 s2)),
    E|Y| = s sqrt(2/pi) e^{-f^2/(2 s2)} + f (1 - 2 Phi(-f/s)), P(Y > 0) = Phi(f/s).
    """
    f = np.asarray(f, dtype=np.float64)
    s2 = np.asarray(s2, dtype=np.float64)
    if s2.size == 0 or not np.all(np.isfinite(s2)) or not np.all(s2 > 0):
        raise ValueError(f"s2: must be finite and > 0, got {s2!r}")
    if not np.all(np.isfinite(f)):
        raise ValueError("f: must be finite")
    f, s2 = np.broadcast_arrays(f, s2)
    s = np.sqrt(s2)
    damp = np.exp(-0.5 * s2)
    return {
        "y": f.copy(),
        "y2": f * f + s2,
        "y3": f**3 + 3.0 * f * s2,
        "sin": np.sin(f) * damp,
        "cos": np.cos(f) * damp,
        "gauss": np.exp(-f * f / (1.0 + 2.0 * s2)) / np.sqrt(1.0 + 2.0 * s2),
        "abs": s * np.sqrt(2.0 / np.pi) * np.exp(-0.5 * f * f / s2) + f * (1.0 - 2.0 * ndtr(-f / s)),
        "positive": ndtr(f / s),
    }


# -- validation helpers -----------------------------------------------------------------------------
def _points(x: Any, name: str) -> np.ndarray:
    """1-D query points: accepts a scalar, (q,) or (q, 1); returns (q,)."""
    array = as_samples(np.atleast_1d(x), name)
    if array.shape[1] != 1:
        raise ValueError(f"{name}: must be 1-D (q,) or (q, 1), got {array.shape[1]} columns")
    return array[:, 0]


def _lengthscale(kernel: Any, name: str) -> float:
    """Scalar lengthscale of a ``GaussianKernel`` (the closed forms need exactly that)."""
    if not isinstance(kernel, GaussianKernel):
        raise ValueError(f"{name}: the closed-form moments need a GaussianKernel, got {type(kernel).__name__}")
    scale = np.asarray(kernel.data_lengthscale, dtype=np.float64)
    if scale.size != 1:
        raise ValueError(f"{name}: needs a scalar lengthscale for 1-D data, got shape {scale.shape}")
    return float(scale.reshape(()))


def _positive(value: Any, name: str) -> float:
    array = check_positive(value, name)
    if array.ndim != 0:
        raise ValueError(f"{name}: must be a scalar, got shape {array.shape}")
    return float(array)


def _compressed(Xt: Any, Yt: Any) -> tuple[np.ndarray, np.ndarray]:
    """Compressed set as two (m,) arrays of equal length."""
    Xt, Yt = _points(Xt, "Xt"), _points(Yt, "Yt")
    check_paired(Xt, Yt, "Xt", "Yt")
    return Xt, Yt


def _sample_size(n: Any) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n: must be a positive integer, got {n!r}")
    return int(n)


def _conditional_norm(l2: float, s2: np.ndarray) -> np.ndarray:
    """||mu_{Y|X=x}||^2 = E[l(Y, Y') | x] = sqrt(ell^2 / (ell^2 + 2 s2)) for Y | x ~ N(f, s2)."""
    return np.sqrt(l2 / (l2 + 2.0 * s2))


def _conditional_cross(f: np.ndarray, s2: np.ndarray, yt: np.ndarray, l2: float) -> np.ndarray:
    """(q, m): <mu_{Y|X=x_p}, l(yt_i, .)> = sqrt(ell^2 / V) exp(-(yt_i - f_p)^2 / (2 V)), V = ell^2 + s2_p."""
    V = l2 + np.broadcast_to(s2, f.shape)[:, None]
    return np.sqrt(l2 / V) * np.exp(-((yt[None, :] - f[:, None]) ** 2) / (2.0 * V))


class _GaussianConditional:
    """Shared API of models with Y | X=x ~ N(mean(x), variance(x))."""

    def mean(self, x: Any) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def variance(self, x: Any) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def _sample_x(self, n: int, rng: np.random.Generator) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def sample(self, n: int, seed: int | np.random.Generator | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Draw n i.i.d. pairs; returns X (n, 1) and Y (n, 1). Same seed, same draw."""
        n = _sample_size(n)
        rng = np.random.default_rng(seed)
        x = self._sample_x(n, rng)
        y = self.mean(x) + np.sqrt(self.variance(x)) * rng.standard_normal(n)
        return x[:, None], y[:, None]

    def conditional_expectations(self, x: Any) -> dict[str, np.ndarray]:
        """Exact E[h(Y) | X=x] for each h in ``TEST_FUNCTIONS``; x (q,) or (q, 1) -> arrays (q,)."""
        x = _points(x, "x")
        return gaussian_expectations(self.mean(x), self.variance(x))

    def conditional_amcmd_squared(self, Xt: Any, Yt: Any, kernel_x: GaussianKernel, kernel_y: GaussianKernel,
                                  reg: float, x: Any) -> float:
        """(1/q) sum_p ||mu_{Y|X=x_p} - mu_C(x_p)||^2 over given points x (q,): the squared AMCMD between
        the true conditional and the compressed set's KCME, with P_X* the empirical law of x (a Monte
        Carlo estimate of the population AMCMD^2 when x ~ P_X). Per point, with V = ell^2 + s2(x):

            ||mu_x||^2 = sqrt(ell^2 / (ell^2 + 2 s2(x))),  <mu_x, l(yt_i, .)> = sqrt(ell^2 / V) exp(-(yt_i - f(x))^2 / (2 V)),

        and mu_C(x) = sum_i beta_i(x) l(yt_i, .), beta(x) = W k(Xt, x), W = (K_tt + reg I)^{-1}.
        """
        xt, yt = _compressed(Xt, Yt)
        x = _points(x, "x")
        reg = _positive(reg, "reg")
        _lengthscale(kernel_x, "kernel_x")
        l2 = _lengthscale(kernel_y, "kernel_y") ** 2
        f, s2 = self.mean(x), self.variance(x)
        beta = kernel_x(x[:, None], xt[:, None]) @ kcme_inverse(kernel_x(xt[:, None]), reg)  # (q, m)
        cross = _conditional_cross(f, s2, yt, l2)
        fit = np.sum((beta @ kernel_y(yt[:, None])) * beta, axis=1)
        return float(np.mean(_conditional_norm(l2, s2) - 2.0 * np.sum(beta * cross, axis=1) + fit))


@dataclass(frozen=True)
class GaussianLinearModel(_GaussianConditional):
    """Paper Sec. 5.1: X ~ N(mu, sigma2), Y | X=x ~ N(a0 + a1 x, noise2); 1-D x and y.

    The moment methods take a compressed set Xt, Yt (each (m,) or (m, 1)) and Gaussian kernels with
    scalar lengthscales: ``kernel_x`` (alpha) on x and ``kernel_y`` (ell) on y.
    """

    mu: float = 1.0
    sigma2: float = 1.0
    a0: float = -0.5
    a1: float = 0.5
    noise2: float = 0.5

    def __post_init__(self) -> None:
        for name in ("mu", "a0", "a1"):
            if not np.isfinite(float(getattr(self, name))):
                raise ValueError(f"{name}: must be finite, got {getattr(self, name)!r}")
        _positive(self.sigma2, "sigma2")
        _positive(self.noise2, "noise2")

    def _sample_x(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return self.mu + np.sqrt(self.sigma2) * rng.standard_normal(n)

    def mean(self, x: Any) -> np.ndarray:
        """f(x) = a0 + a1 x; x (q,) or (q, 1) -> (q,)."""
        return self.a0 + self.a1 * _points(x, "x")

    def variance(self, x: Any) -> np.ndarray:
        """noise2 at every x; x (q,) or (q, 1) -> (q,)."""
        return np.full(_points(x, "x").shape, float(self.noise2))

    # -- kernel moments -------------------------------------------------------------------------
    def marginal_moments(self, Xt: Any, kernel_x: GaussianKernel) -> np.ndarray:
        """M (m, m), M[q, j] = E_x[k(x, xt_q) k(x, xt_j)].

        k(x, a) k(x, b) = exp(-(a - b)^2 / (4 alpha^2)) exp(-(x - (a + b)/2)^2 / alpha^2); by (G) with
        v = alpha^2 / 2:  M = sqrt(alpha^2 / (alpha^2 + 2 sigma2))
                              exp(-(a - b)^2 / (4 alpha^2) - ((a + b)/2 - mu)^2 / (alpha^2 + 2 sigma2)).
        (Equal to (A sigma2)^{-1/2} exp(B^2/(2A) - mu^2/(2 sigma2) - (a^2 + b^2)/(2 alpha^2)) with
        A = 1/sigma2 + 2/alpha^2, B = mu/sigma2 + (a + b)/alpha^2.)
        """
        xt = _points(Xt, "Xt")
        a2 = _lengthscale(kernel_x, "kernel_x") ** 2
        diff = xt[:, None] - xt[None, :]
        centre = 0.5 * (xt[:, None] + xt[None, :]) - self.mu
        total = a2 + 2.0 * self.sigma2
        return np.sqrt(a2 / total) * np.exp(-diff**2 / (4.0 * a2) - centre**2 / total)

    def joint_moments(self, Xt: Any, Yt: Any, kernel_x: GaussianKernel, kernel_y: GaussianKernel) -> np.ndarray:
        """Q (m, m), Q[j, i] = E_{(x,y)}[k(x, xt_j) l(y, yt_i)] over all m^2 pairs (j indexes Xt, i Yt).

        Inner integral, by (G) in y with V = ell^2 + noise2:
            E[l(Y, b) | x] = sqrt(ell^2 / V) exp(-(b - f(x))^2 / (2 V)).
        Outer integral: z = (x - a, f(x) - b) is Gaussian with mean (mu - a, f(mu) - b) and covariance
        sigma2 [[1, a1], [a1, a1^2]], and E exp(-z^T D^{-1} z / 2), D = diag(alpha^2, V), gives
            Q = alpha ell / sqrt(Delta) exp(-N / (2 Delta)),
            Delta = alpha^2 V + sigma2 V + alpha^2 a1^2 sigma2,
            N = V (mu - a)^2 + alpha^2 (f(mu) - b)^2 + sigma2 (f(a) - b)^2        (a = xt_j, b = yt_i).
        """
        xt, yt = _compressed(Xt, Yt)
        a2 = _lengthscale(kernel_x, "kernel_x") ** 2
        l2 = _lengthscale(kernel_y, "kernel_y") ** 2
        V = l2 + self.noise2
        delta = a2 * V + self.sigma2 * V + a2 * self.a1**2 * self.sigma2
        f_mu = self.a0 + self.a1 * self.mu
        N = (
            V * (self.mu - xt[:, None]) ** 2
            + a2 * (f_mu - yt[None, :]) ** 2
            + self.sigma2 * (self.a0 + self.a1 * xt[:, None] - yt[None, :]) ** 2
        )
        return np.sqrt(a2 * l2 / delta) * np.exp(-N / (2.0 * delta))

    def embedding_norm(self, kernel_y: GaussianKernel) -> float:
        """E_x ||mu_{Y|X=x}||^2 = E[l(Y, Y') | same x] = sqrt(ell^2 / (ell^2 + 2 noise2)) (x-independent)."""
        return float(_conditional_norm(_lengthscale(kernel_y, "kernel_y") ** 2, self.noise2))

    def cross_embedding(self, x: Any, Yt: Any, kernel_y: GaussianKernel) -> np.ndarray:
        """(q, m): <mu_{Y|X=x_p}, l(yt_i, .)> = E[l(Y, yt_i) | x_p] = sqrt(ell^2/V) exp(-(yt_i - f(x_p))^2 / (2V)),
        V = ell^2 + noise2."""
        f = self.mean(x)
        return _conditional_cross(f, self.noise2, _points(Yt, "Yt"), _lengthscale(kernel_y, "kernel_y") ** 2)

    def amcmd_squared(
        self, Xt: Any, Yt: Any, kernel_x: GaussianKernel, kernel_y: GaussianKernel, reg: float
    ) -> float:
        """Exact population AMCMD^2 of the compressed set (Xt, Yt) with P_{X*} = P_X:

            E_x ||mu_x||^2 - 2 Tr(W Q) + Tr(W L_tt W M),   W = (K_tt + reg I)^{-1} (Cholesky solve),

        Tr(W Q) = sum_{i,j} W_ij Q[j, i]. The raw value is returned: it is >= 0 mathematically but
        may come out slightly negative by rounding when the set is nearly perfect (``amcmd`` clips).
        """
        xt, yt = _compressed(Xt, Yt)
        reg = _positive(reg, "reg")
        K = kernel_x(xt[:, None])
        L = kernel_y(yt[:, None])
        W = kcme_inverse(K, reg)
        M = self.marginal_moments(xt, kernel_x)
        Q = self.joint_moments(xt, yt, kernel_x, kernel_y)
        cross = float(np.sum(W * Q.T))
        fit = float(np.sum((W @ L @ W) * M))
        return self.embedding_norm(kernel_y) - 2.0 * cross + fit

    def amcmd(self, Xt: Any, Yt: Any, kernel_x: GaussianKernel, kernel_y: GaussianKernel, reg: float) -> float:
        """sqrt(max(amcmd_squared, 0))."""
        return float(np.sqrt(max(self.amcmd_squared(Xt, Yt, kernel_x, kernel_y, reg), 0.0)))


@dataclass(frozen=True)
class HeteroscedasticModel(_GaussianConditional):
    """The paper's heteroscedastic task: X ~ N(mu, sigma2) = N(0, 2^2), Y | X=x ~ N(f(x), s2(x)),

        f(x) = sum_{i=1..4} a_i exp(-(x - c_i)^2 / b_i),  a = (3, -3, 6, -6), b = (1, 0.1, 2, 0.5),
        c = (-5, -2, 2, 5);   s2(x) = noise_base + |noise_amp sin x|.

    Defaults noise_base = 0.1, noise_amp = 0.75 follow the paper's main text; its appendix states the
    two constants the other way round (0.75 + |0.1 sin x|). Swap them to reproduce that variant.
    x arguments are (q,) or (q, 1); results are (q,).
    """

    mu: float = 0.0
    sigma2: float = 4.0
    noise_base: float = 0.1
    noise_amp: float = 0.75
    amplitudes: tuple[float, ...] = (3.0, -3.0, 6.0, -6.0)
    widths: tuple[float, ...] = (1.0, 0.1, 2.0, 0.5)
    centres: tuple[float, ...] = (-5.0, -2.0, 2.0, 5.0)

    def __post_init__(self) -> None:
        if not np.isfinite(float(self.mu)):
            raise ValueError(f"mu: must be finite, got {self.mu!r}")
        _positive(self.sigma2, "sigma2")
        _positive(self.noise_base, "noise_base")
        if not np.isfinite(float(self.noise_amp)):
            raise ValueError(f"noise_amp: must be finite, got {self.noise_amp!r}")
        check_positive(self.widths, "widths")
        if not len(self.amplitudes) == len(self.widths) == len(self.centres):
            raise ValueError(
                "amplitudes, widths and centres: must have the same length, got "
                f"{len(self.amplitudes)}, {len(self.widths)} and {len(self.centres)}"
            )

    def _sample_x(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return self.mu + np.sqrt(self.sigma2) * rng.standard_normal(n)

    def mean(self, x: Any) -> np.ndarray:
        """f(x); x (q,) or (q, 1) -> (q,)."""
        x = _points(x, "x")
        a, b, c = (np.asarray(v, dtype=np.float64) for v in (self.amplitudes, self.widths, self.centres))
        return np.exp(-((x[:, None] - c) ** 2) / b) @ a

    def variance(self, x: Any) -> np.ndarray:
        """s2(x) = noise_base + |noise_amp sin x|; x (q,) or (q, 1) -> (q,)."""
        x = _points(x, "x")
        return self.noise_base + np.abs(self.noise_amp * np.sin(x))
