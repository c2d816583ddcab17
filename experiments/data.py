"""Data for reproducing Sec. 5 of Filipovic, Multerer & Schneider, "Adaptive joint distribution learning".

Simulated cases (Sec. 5.1)
    * :class:`GaussianCase`: ``z ~ N(0, C)`` in dimension ``2d`` with ``C`` a random correlation matrix drawn
      with the Archakov & Hansen (2021) parametrisation (:func:`random_correlation`); ``x`` is the first ``d``
      coordinates of ``z``, ``y`` the last ``d``. The exact conditional second moment ``E[y y^T | x]`` is known.
    * :class:`UniformCase`: the later version's small-n case, ``z`` i.i.d. uniform on ``[0, 1]^{2d}``; ``x``
      and ``y`` are independent, so ``E[y y^T | x] = E[y y^T]`` (1/3 on, 1/4 off the diagonal).
    * :class:`CauchyCase`: the later version's heavy-tailed case, a multivariate Cauchy (multivariate t with one
      degree of freedom) with the same ``x``/``y`` split. Its moments do not exist: only the structural metrics
      (positivity, normalisation) apply to it.

Real data (Sec. 5.2)
    The paper uses 25 Fama-French portfolios (a download). Here: the daily adjusted closes of 20 S&P 500
    constituents shipped inside the PyPI package ``skfolio`` (see :data:`RETURNS_SOURCE`), turned into simple
    daily returns (:func:`daily_returns`) and into the paper's lagged aggregate-return events
    (:func:`return_events`). ``skfolio`` is imported lazily, only by :func:`daily_returns`.

Only numpy and scipy are imported at import time.
"""

from __future__ import annotations

import functools
import numbers
from dataclasses import dataclass, field

import numpy as np
import scipy.linalg

__all__ = [
    "DEFAULT_GAMMA_SCALE",
    "RETURNS_SOURCE",
    "CauchyCase",
    "GaussianCase",
    "UniformCase",
    "correlation_from_gamma",
    "daily_returns",
    "gamma_from_correlation",
    "gamma_size",
    "random_correlation",
    "return_events",
]

# ----------------------------------------------------------------------------------------------------------------
# Archakov & Hansen (2021) parametrisation of correlation matrices
# ----------------------------------------------------------------------------------------------------------------

DEFAULT_GAMMA_SCALE = 1.5
"""Default half-width of the uniform law of the entries of gamma in :func:`random_correlation` (see there)."""

_AH_TOL = 1e-14
_AH_MAX_ITER = 1000


def gamma_size(dim: int) -> int:
    """Number of free parameters of a ``dim x dim`` correlation matrix: ``dim (dim - 1) / 2``."""
    dim = _check_positive_int(dim, "dim")
    return dim * (dim - 1) // 2


def _lower_indices(dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Strictly-lower-triangular indices in Archakov & Hansen's ``vecl`` order (column by column):
    ``(1,0), (2,0), ..., (dim-1,0), (2,1), ...``."""
    rows, cols = np.triu_indices(dim, 1)  # upper triangle, row by row == lower triangle, column by column
    return cols, rows


def _symmetric_function(matrix: np.ndarray, fun) -> np.ndarray:
    """``fun`` applied to a symmetric matrix through its eigendecomposition: ``V diag(fun(w)) V^T``."""
    w, v = np.linalg.eigh(matrix)
    out = (v * fun(w)) @ v.T
    return 0.5 * (out + out.T)


def correlation_from_gamma(gamma, dim: int) -> np.ndarray:
    """The correlation matrix ``C`` whose matrix logarithm has strictly-lower-triangular entries ``gamma``.

    Archakov & Hansen (2021, "A new parametrization of correlation matrices", Econometrica 89(4)), Theorem 1 and
    their algorithm: with ``A[x]`` the symmetric matrix with off-diagonal ``gamma`` and diagonal ``x``, iterate
    ``x <- x - log(diag(expm(A[x])))`` from ``x = 0`` until ``max |log diag expm(A[x])| < 1e-14``; then
    ``C = expm(A[x])`` (computed through ``eigh``), symmetrised and with its diagonal set exactly to 1.

    ``gamma`` is ordered as Archakov & Hansen's ``vecl``: the strictly-lower-triangular entries column by column,
    ``(1,0), (2,0), ..., (dim-1,0), (2,1), ...``; it has ``dim (dim - 1) / 2`` entries (none for ``dim = 1``,
    which gives ``[[1.0]]``). Every real ``gamma`` gives a (positive definite) correlation matrix.
    """
    dim = _check_positive_int(dim, "dim")
    gamma = np.asarray(gamma, dtype=float).reshape(-1)
    if gamma.size != gamma_size(dim):
        raise ValueError(
            f"gamma must have dim (dim - 1) / 2 = {gamma_size(dim)} entries for dim={dim}, got {gamma.size}"
        )
    if not np.all(np.isfinite(gamma)):
        raise ValueError("gamma must be finite")
    a = np.zeros((dim, dim))
    rows, cols = _lower_indices(dim)
    a[rows, cols] = gamma
    a[cols, rows] = gamma
    x = np.zeros(dim)
    for _ in range(_AH_MAX_ITER):
        np.fill_diagonal(a, x)
        log_diag = np.log(np.diag(_symmetric_function(a, np.exp)))
        if np.max(np.abs(log_diag)) < _AH_TOL:
            break
        x = x - log_diag
    else:  # pragma: no cover - the iteration is a contraction (Archakov & Hansen, Theorem 2)
        raise RuntimeError(f"Archakov-Hansen iteration did not reach {_AH_TOL} in {_AH_MAX_ITER} steps")
    np.fill_diagonal(a, x)
    c = _symmetric_function(a, np.exp)
    np.fill_diagonal(c, 1.0)
    return c


def gamma_from_correlation(correlation) -> np.ndarray:
    """The Archakov & Hansen parameter of a correlation matrix: the strictly-lower-triangular entries (``vecl``
    order, see :func:`correlation_from_gamma`) of ``log C = V diag(log w) V^T`` (``C = V diag(w) V^T``)."""
    c = _check_correlation(correlation, "correlation")
    log_c = _symmetric_function(c, np.log)
    return log_c[_lower_indices(c.shape[0])].copy()


def random_correlation(dim: int, rng: np.random.Generator, scale: float = DEFAULT_GAMMA_SCALE) -> np.ndarray:
    """A random ``dim x dim`` correlation matrix through the Archakov & Hansen (2021) parametrisation.

    The paper (Sec. 5.1) draws its correlation matrices "following the algorithm described in Archakov and
    Hansen [2021]" but does not state the law of the parameter. Our choice: the ``dim (dim - 1) / 2`` entries
    of ``gamma`` (the off-diagonal of ``log C``) are i.i.d. uniform on ``[-scale, scale]``, then
    ``C = correlation_from_gamma(gamma, dim)``. The law of ``C`` is invariant under simultaneous permutations
    of rows and columns and under sign flips of coordinates (uniform is symmetric).

    Why uniform on ``[-1.5, 1.5]`` by default (so that correlations of all strengths occur): in dimension 2
    (the paper's ``d = 1``), ``gamma = artanh(rho)``, so ``rho = tanh(gamma)`` ranges over ``[-0.905, 0.905]``
    with ``|rho|`` below 0.3 in 20% of the draws and above 0.8 in 26%; in dimensions 4 and 6 (``d = 2, 3``) the
    off-diagonal entries of ``log C`` add up and the correlations spread over about ``(-0.98, 0.98)`` (median
    ``|rho|`` about 0.5), while ``C`` stays usable for sampling (in dimension 6 the median condition number is
    about 250, the 95% quantile about 750). With ``scale = 1`` no ``|rho| > 0.76`` could occur for ``d = 1``.
    Larger ``scale`` gives stronger dependence; ``scale = 0`` gives the identity.
    """
    dim = _check_positive_int(dim, "dim")
    scale = float(scale)
    if not np.isfinite(scale) or scale < 0:
        raise ValueError(f"scale must be finite and >= 0, got {scale}")
    gamma = rng.uniform(-scale, scale, size=gamma_size(dim))
    return correlation_from_gamma(gamma, dim)


# ----------------------------------------------------------------------------------------------------------------
# Simulated cases
# ----------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class _EllipticalCase:
    """Shared part of the Gaussian and Cauchy cases: a 2d x 2d correlation (scale) matrix ``C``, its
    Cholesky factor, and correlated standard normal draws ``g ~ N(0, C)``."""

    correlation: np.ndarray
    _chol: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        c = _check_correlation(self.correlation, "correlation")
        if c.shape[0] % 2:
            raise ValueError(f"correlation must have an even dimension 2d, got {c.shape[0]}")
        c.setflags(write=False)
        object.__setattr__(self, "correlation", c)
        object.__setattr__(self, "_chol", np.linalg.cholesky(c))

    @classmethod
    def random(cls, d: int, rng: np.random.Generator, scale: float = DEFAULT_GAMMA_SCALE):
        """A case with ``C = random_correlation(2 d, rng, scale)``."""
        return cls(random_correlation(2 * _check_positive_int(d, "d"), rng, scale))

    @property
    def d(self) -> int:
        return self.correlation.shape[0] // 2

    def _gaussian(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` draws of ``g ~ N(0, C)``, shape (n, 2d)."""
        return rng.standard_normal((_check_positive_int(n, "n"), 2 * self.d)) @ self._chol.T

    def _split(self, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return z[:, : self.d].copy(), z[:, self.d :].copy()


@dataclass(frozen=True, eq=False)
class GaussianCase(_EllipticalCase):
    """``z ~ N(0, C)`` in dimension ``2d``; ``x = z[:d]``, ``y = z[d:]`` (the paper's Sec. 5.1).

    ``conditional_second_moment`` gives the exact ``E[y y^T | x] = S + mu mu^T`` with
    ``mu = C_yx C_xx^{-1} x`` and ``S = C_yy - C_yx C_xx^{-1} C_xy``.
    """

    _coef: np.ndarray = field(init=False, repr=False)
    _cond_cov: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        c, d = self.correlation, self.correlation.shape[0] // 2
        cxx, cxy, cyy = c[:d, :d], c[:d, d:], c[d:, d:]
        factor = scipy.linalg.cho_factor(cxx, lower=True)
        coef = scipy.linalg.cho_solve(factor, cxy)  # C_xx^{-1} C_xy, so mu(x)^T = x^T coef
        cond_cov = cyy - cxy.T @ coef
        object.__setattr__(self, "_coef", coef)
        object.__setattr__(self, "_cond_cov", 0.5 * (cond_cov + cond_cov.T))

    def sample(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """``n`` i.i.d. draws: ``(X (n, d), Y (n, d))``."""
        return self._split(self._gaussian(n, rng))

    def conditional_mean(self, x) -> np.ndarray:
        """``E[y | x] = C_yx C_xx^{-1} x`` for each row of ``x``: ``(n, d)``."""
        return _check_x(x, self.d) @ self._coef

    @property
    def conditional_covariance(self) -> np.ndarray:
        """``Cov[y | x] = C_yy - C_yx C_xx^{-1} C_xy`` (the same for every ``x``): ``(d, d)``."""
        return self._cond_cov.copy()

    def conditional_second_moment(self, x) -> np.ndarray:
        """Exact ``E[y y^T | x]`` for each row of ``x``: ``(n, d, d)``."""
        mu = self.conditional_mean(x)
        return self._cond_cov[None, :, :] + mu[:, :, None] * mu[:, None, :]


@dataclass(frozen=True)
class UniformCase:
    """``z`` i.i.d. uniform on ``[0, 1]^{2d}``; ``x = z[:d]``, ``y = z[d:]`` (the later version's small-n case).

    ``x`` and ``y`` are independent: ``E[y y^T | x] = E[y y^T]``, 1/3 on the diagonal and 1/4 off it.
    """

    d: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "d", _check_positive_int(self.d, "d"))

    def sample(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """``n`` i.i.d. draws: ``(X (n, d), Y (n, d))``."""
        n = _check_positive_int(n, "n")
        z = rng.uniform(0.0, 1.0, size=(n, 2 * self.d))
        return z[:, : self.d].copy(), z[:, self.d :].copy()

    @property
    def second_moment(self) -> np.ndarray:
        """``E[y y^T]``: ``(d, d)``, 1/3 on the diagonal, 1/4 off it."""
        m = np.full((self.d, self.d), 0.25)
        np.fill_diagonal(m, 1.0 / 3.0)
        return m

    def conditional_second_moment(self, x) -> np.ndarray:
        """Exact ``E[y y^T | x]`` (the same for every ``x``): ``(n, d, d)``."""
        n = _check_x(x, self.d).shape[0]
        return np.broadcast_to(self.second_moment, (n, self.d, self.d)).copy()


@dataclass(frozen=True, eq=False)
class CauchyCase(_EllipticalCase):
    """Multivariate Cauchy in dimension ``2d`` (multivariate t with one degree of freedom and scale matrix
    ``C``): ``z = g / |w|`` with ``g ~ N(0, C)`` and one ``w ~ N(0, 1)`` per row; ``x = z[:d]``, ``y = z[d:]``.

    Heavy tails: no moment of order >= 1 exists, in particular no conditional second moment, so only the
    structural metrics (positivity, normalisation) apply to this case; there is no ``conditional_second_moment``.
    """

    def sample(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """``n`` i.i.d. draws: ``(X (n, d), Y (n, d))``."""
        g = self._gaussian(n, rng)
        return self._split(g / np.abs(rng.standard_normal((g.shape[0], 1))))


# ----------------------------------------------------------------------------------------------------------------
# Real daily returns (Sec. 5.2)
# ----------------------------------------------------------------------------------------------------------------

RETURNS_SOURCE: dict[str, str] = {
    "package": "skfolio (PyPI, BSD-3-Clause licence)",
    "function": "skfolio.datasets.load_sp500_dataset",
    "content": "daily adjusted closing prices of 20 S&P 500 constituents: AAPL, AMD, BAC, BBY, CVX, GE, HD, JNJ, "
    "JPM, KO, LLY, MRK, MSFT, PEP, PFE, PG, RRC, UNH, WMT, XOM",
    "date_range": "1990-01-02 to 2022-12-28 (8,313 trading days; 8,312 daily returns)",
    "origin": "Yahoo Finance, as stated by skfolio",
    "licence": "BSD-3-Clause (the skfolio package, which ships the data file)",
    "caveat": "skfolio provides this data set solely for testing and example purposes: it is stale, does not "
    "reflect current or accurate market prices, and is not authoritative market data. Prices are rounded to 3 "
    "decimals, so early low-priced series have coarse returns (and some zero returns). The paper instead uses "
    "25 Fama-French portfolio excess returns (more than 25,000 days), which need a download.",
    "install": "pip install -e '.[reproduce]'",
}


@functools.lru_cache(maxsize=1)
def _load_returns() -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    try:
        from skfolio.datasets import load_sp500_dataset
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise ImportError(
            "daily_returns needs the optional dependency skfolio (the S&P 500 price data set): "
            "install the extra with `pip install -e '.[reproduce]'`"
        ) from exc
    prices_frame = load_sp500_dataset()
    prices = prices_frame.to_numpy(dtype=float)
    if prices.ndim != 2 or prices.shape[0] < 2:
        raise ValueError(f"unexpected price table shape {prices.shape}")
    if not np.all(np.isfinite(prices)) or np.any(prices <= 0):
        raise ValueError("the skfolio S&P 500 prices must be finite and positive")
    returns = prices[1:] / prices[:-1] - 1.0
    if not np.all(np.isfinite(returns)):
        raise ValueError("daily returns are not all finite")
    dates = np.asarray(prices_frame.index.to_numpy()[1:]).astype("datetime64[D]")
    names = tuple(str(c) for c in prices_frame.columns)
    for array in (dates, returns):
        array.setflags(write=False)
    return dates, returns, names


def daily_returns() -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    """Simple daily returns ``p_t / p_{t-1} - 1`` of the 20 S&P 500 constituents of :data:`RETURNS_SOURCE`.

    Returns ``(dates (T,) datetime64[D], returns (T, 20) float64, names)`` with ``T = 8312``: the first price
    day (1990-01-02) is dropped; ``dates[t]`` is the day of ``returns[t]``. Needs ``skfolio``
    (``pip install -e '.[reproduce]'``); the arrays are fresh copies.
    """
    dates, returns, names = _load_returns()
    return dates.copy(), returns.copy(), names


def return_events(returns, d: int, level: float) -> tuple[np.ndarray, np.ndarray, float]:
    """The paper's classification data (Sec. 5.2) from a ``(T, k)`` return table.

    For ``t = 1, ..., T-1``: ``y_t = sum_{i < d} returns[t, i]`` (the aggregate return of the first ``d``
    assets on day ``t``) and ``x_t = returns[t-1, :d]`` (the same assets' returns the previous day).
    Returns ``(X (T-1, d), y_sum (T-1,), threshold)`` with ``threshold = np.quantile(y_sum, level)``; the
    binary label is ``y_sum <= threshold``. ``d`` must lie in ``1..k`` (``k = 20`` for :func:`daily_returns`),
    ``level`` in ``(0, 1)`` (the paper: 0.01; 0.05 also used).

    The paper sets the threshold per experiment from the empirical quantile of the subsample used; this
    function gives the full-sample quantile, and a caller subsampling can recompute it with ``np.quantile``.
    """
    r = np.asarray(returns, dtype=float)
    if r.ndim != 2 or r.shape[0] < 2:
        raise ValueError(f"returns must be a (T, k) array with T >= 2, got shape {r.shape}")
    if not np.all(np.isfinite(r)):
        raise ValueError("returns must be finite")
    if isinstance(d, bool) or not isinstance(d, numbers.Integral) or not 1 <= int(d) <= r.shape[1]:
        raise ValueError(f"d must be an integer in 1..{r.shape[1]}, got {d!r}")
    d = int(d)
    level = float(level)
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    x = r[:-1, :d].copy()
    y_sum = r[1:, :d].sum(axis=1)
    threshold = float(np.quantile(y_sum, level))
    return x, y_sum, threshold


# ----------------------------------------------------------------------------------------------------------------
# Validation helpers
# ----------------------------------------------------------------------------------------------------------------


def _check_positive_int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or int(value) < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return int(value)


def _check_correlation(matrix, name: str) -> np.ndarray:
    c = np.array(matrix, dtype=float)  # a copy
    if c.ndim != 2 or c.shape[0] != c.shape[1] or c.shape[0] < 1:
        raise ValueError(f"{name} must be a square matrix, got shape {c.shape}")
    if not np.all(np.isfinite(c)):
        raise ValueError(f"{name} must be finite")
    if not np.allclose(c, c.T, rtol=0.0, atol=1e-12):
        raise ValueError(f"{name} must be symmetric")
    if not np.allclose(np.diag(c), 1.0, rtol=0.0, atol=1e-12):
        raise ValueError(f"{name} must have a unit diagonal")
    c = 0.5 * (c + c.T)
    np.fill_diagonal(c, 1.0)
    if np.linalg.eigvalsh(c)[0] <= 0.0:
        raise ValueError(f"{name} must be positive definite")
    return c


def _check_x(x, d: int) -> np.ndarray:
    arr = np.asarray(x, dtype=float)
    if arr.ndim != 2 or arr.shape[1] != d:
        raise ValueError(f"x must have shape (n, {d}), got {arr.shape}")
    return arr
