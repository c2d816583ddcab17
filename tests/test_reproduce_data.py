"""experiments.data: Archakov-Hansen correlations, the simulated cases of Sec. 5.1 and the return data of
Sec. 5.2, each checked against an independent computation."""

import subprocess
import sys

import numpy as np
import pytest
import scipy.linalg

from experiments import data
from experiments.data import (
    DEFAULT_GAMMA_SCALE,
    CauchyCase,
    GaussianCase,
    UniformCase,
    correlation_from_gamma,
    gamma_from_correlation,
    random_correlation,
    return_events,
)


def _factor_correlation(dim: int, rng: np.random.Generator, factors: int = 2) -> np.ndarray:
    """A correlation matrix built without Archakov-Hansen: a factor model normalised to a unit diagonal."""
    b = rng.standard_normal((dim, factors))
    s = b @ b.T + np.diag(rng.uniform(0.1, 1.0, dim))
    scale = 1.0 / np.sqrt(np.diag(s))
    c = s * scale[:, None] * scale[None, :]
    c = 0.5 * (c + c.T)
    np.fill_diagonal(c, 1.0)
    return c


# ------------------------------------------------------------------------------------------------ correlations


@pytest.mark.parametrize("dim", [2, 3, 4, 6, 10])
def test_random_correlation_is_a_correlation_with_the_drawn_gamma(dim):
    c = random_correlation(dim, np.random.default_rng(dim))
    assert c.shape == (dim, dim)
    np.testing.assert_allclose(np.diag(c), 1.0, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(c, c.T)
    assert np.linalg.eigvalsh(c)[0] > 0
    np.linalg.cholesky(c)
    # The drawn gamma: the same generator stream, uniform on [-scale, scale] (the documented law).
    drawn = np.random.default_rng(dim).uniform(-DEFAULT_GAMMA_SCALE, DEFAULT_GAMMA_SCALE, dim * (dim - 1) // 2)
    np.testing.assert_allclose(gamma_from_correlation(c), drawn, rtol=0, atol=1e-10)
    # Independently: scipy's logm (Schur-Pade, not eigh) has these off-diagonal entries, column by column.
    log_c = np.real(scipy.linalg.logm(c))
    rows, cols = np.tril_indices(dim, -1)
    order = np.lexsort((rows, cols))  # vecl: column by column
    np.testing.assert_allclose(log_c[rows[order], cols[order]], drawn, rtol=0, atol=1e-9)
    np.testing.assert_allclose(log_c, log_c.T, atol=1e-9)


@pytest.mark.parametrize("dim", [2, 3, 5, 8])
def test_roundtrip_of_an_independently_built_correlation(dim):
    c = _factor_correlation(dim, np.random.default_rng(100 + dim))
    gamma = gamma_from_correlation(c)
    assert gamma.shape == (dim * (dim - 1) // 2,)
    np.testing.assert_allclose(correlation_from_gamma(gamma, dim), c, rtol=0, atol=1e-10)


def test_two_by_two_is_fisher_z_and_vecl_order_in_three_dims():
    # dim 2: log [[1, r], [r, 1]] has off-diagonal artanh(r), so correlation_from_gamma(g) = tanh(g).
    for g in (-2.0, -0.3, 0.0, 0.7, 3.0):
        c = correlation_from_gamma([g], 2)
        np.testing.assert_allclose(c, [[1.0, np.tanh(g)], [np.tanh(g), 1.0]], rtol=0, atol=1e-13)
    # dim 3: the order is (1,0), (2,0), (2,1).
    gamma = np.array([0.3, -0.5, 0.8])
    log_c = np.real(scipy.linalg.logm(correlation_from_gamma(gamma, 3)))
    np.testing.assert_allclose([log_c[1, 0], log_c[2, 0], log_c[2, 1]], gamma, atol=1e-10)


def test_dim_one_and_bad_arguments():
    np.testing.assert_array_equal(random_correlation(1, np.random.default_rng(0)), [[1.0]])
    np.testing.assert_array_equal(correlation_from_gamma([], 1), [[1.0]])
    assert gamma_from_correlation(np.eye(1)).shape == (0,)
    np.testing.assert_array_equal(random_correlation(4, np.random.default_rng(0), scale=0.0), np.eye(4))
    with pytest.raises(ValueError, match="dim"):
        random_correlation(0, np.random.default_rng(0))
    with pytest.raises(ValueError, match="gamma"):
        correlation_from_gamma([0.1, 0.2], 3)
    with pytest.raises(ValueError, match="scale"):
        random_correlation(3, np.random.default_rng(0), scale=-1.0)
    with pytest.raises(ValueError, match="positive definite"):
        gamma_from_correlation([[1.0, 1.0], [1.0, 1.0]])
    with pytest.raises(ValueError, match="unit diagonal"):
        gamma_from_correlation([[2.0, 0.0], [0.0, 1.0]])


def test_random_correlation_is_reproducible():
    a = random_correlation(6, np.random.default_rng(7))
    b = random_correlation(6, np.random.default_rng(7))
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, random_correlation(6, np.random.default_rng(8)))


# ------------------------------------------------------------------------------------------------ Gaussian


def test_gaussian_conditional_second_moment_closed_forms():
    # d = 1: E[y^2 | x] = 1 - r^2 + r^2 x^2.
    r = 0.6
    case = GaussianCase(np.array([[1.0, r], [r, 1.0]]))
    x = np.linspace(-3, 3, 7)[:, None]
    np.testing.assert_allclose(case.conditional_second_moment(x)[:, 0, 0], 1 - r**2 + r**2 * x[:, 0] ** 2, rtol=1e-14)
    # d = 2: with explicit inverses.
    c = _factor_correlation(4, np.random.default_rng(3))
    case = GaussianCase(c)
    x = np.random.default_rng(4).standard_normal((5, 2))
    cxx, cxy, cyx, cyy = c[:2, :2], c[:2, 2:], c[2:, :2], c[2:, 2:]
    inv = np.linalg.inv(cxx)
    expected = np.array([cyy - cyx @ inv @ cxy + np.outer(cyx @ inv @ xi, cyx @ inv @ xi) for xi in x])
    np.testing.assert_allclose(case.conditional_second_moment(x), expected, rtol=0, atol=1e-12)
    np.testing.assert_allclose(case.conditional_mean(x), x @ (inv @ cxy), atol=1e-12)


def test_gaussian_conditional_second_moment_monte_carlo():
    rng = np.random.default_rng(11)
    case = GaussianCase(random_correlation(4, rng))
    n = 200_000
    x, y = case.sample(n, rng)
    assert x.shape == (n, 2) and y.shape == (n, 2)
    z = np.hstack([x, y])
    np.testing.assert_allclose(z.T @ z / n, case.correlation, atol=0.02)

    def worst_z_score(m):
        resid = (y[:, :, None] * y[:, None, :] - m).reshape(n, -1)
        scores = []
        for g in (np.ones(n), x[:, 0], x[:, 0] * x[:, 1], x[:, 1] ** 2 - 1.0, np.cos(x[:, 0])):
            prod = resid * g[:, None]
            scores.append(np.abs(prod.mean(axis=0)) / (prod.std(axis=0) / np.sqrt(n)))
        return np.max(scores)

    assert worst_z_score(case.conditional_second_moment(x)) < 5.0
    # Power: the conditional covariance alone (the mean term dropped) is rejected by the same check.
    assert worst_z_score(np.broadcast_to(case.conditional_covariance, (n, 2, 2))) > 20.0


def test_gaussian_case_validation():
    with pytest.raises(ValueError, match="even"):
        GaussianCase(np.eye(3))
    case = GaussianCase.random(2, np.random.default_rng(0))
    assert case.d == 2 and case.correlation.shape == (4, 4)
    with pytest.raises(ValueError, match=r"\(n, 2\)"):
        case.conditional_second_moment(np.zeros((3, 3)))


@pytest.mark.parametrize(
    "case",
    [GaussianCase(np.eye(2)), UniformCase(2), CauchyCase(np.eye(4))],
    ids=["gaussian", "uniform", "cauchy"],
)
def test_sample_refuses_bad_n(case):
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match=r"\bn\b"):
            case.sample(bad, np.random.default_rng(0))
    x, y = case.sample(1, np.random.default_rng(0))
    assert x.shape == (1, case.d) and y.shape == (1, case.d)


# ------------------------------------------------------------------------------------------------ uniform, Cauchy


def test_uniform_case_moments():
    case = UniformCase(3)
    m = case.conditional_second_moment(np.zeros((4, 3)))
    assert m.shape == (4, 3, 3)
    np.testing.assert_allclose(m, np.broadcast_to(np.full((3, 3), 0.25) + np.eye(3) / 12.0, (4, 3, 3)), atol=1e-15)
    rng = np.random.default_rng(5)
    x, y = case.sample(100_000, rng)
    assert x.shape == y.shape == (100_000, 3)
    assert x.min() >= 0 and y.max() <= 1
    np.testing.assert_allclose(y.T @ y / len(y), case.second_moment, atol=0.01)
    np.testing.assert_allclose(np.corrcoef(np.hstack([x, y]).T), np.eye(6), atol=0.02)
    with pytest.raises(ValueError, match="d"):
        UniformCase(0)


def test_cauchy_case_heavy_tails():
    rng = np.random.default_rng(9)
    case = CauchyCase.random(2, rng)
    n = 100_000
    x, y = case.sample(n, rng)
    assert x.shape == y.shape == (n, 2)
    # Each coordinate is standard Cauchy (unit diagonal scale): P(|z| > 10) = 1 - 2 arctan(10) / pi = 0.0635,
    # against 1.5e-23 for a standard Gaussian.
    p = 1 - 2 * np.arctan(10.0) / np.pi
    for col in (x[:, 0], x[:, 1], y[:, 0], y[:, 1]):
        freq = np.mean(np.abs(col) > 10.0)
        assert abs(freq - p) < 5 * np.sqrt(p * (1 - p) / n)
    # Median of |z_i| is 1 for a standard Cauchy (0.674 for a Gaussian).
    assert abs(np.median(np.abs(x[:, 0])) - 1.0) < 0.02
    assert not hasattr(case, "conditional_second_moment")


# ------------------------------------------------------------------------------------------------ returns


def test_import_is_numpy_scipy_only():
    code = "import sys, experiments.data; print('skfolio' in sys.modules, 'pandas' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]


def test_missing_skfolio_names_the_extra(monkeypatch):
    data._load_returns.cache_clear()
    monkeypatch.setitem(sys.modules, "skfolio", None)
    monkeypatch.setitem(sys.modules, "skfolio.datasets", None)
    try:
        with pytest.raises(ImportError, match=r"pip install -e '\.\[reproduce\]'"):
            data.daily_returns()
    finally:
        data._load_returns.cache_clear()


def test_return_events_by_hand():
    r = np.arange(12.0).reshape(4, 3) / 100  # rows: days 0..3, columns: assets 0..2
    x, y_sum, threshold = return_events(r, 2, 0.25)
    np.testing.assert_array_equal(x, [[0.00, 0.01], [0.03, 0.04], [0.06, 0.07]])  # days 0, 1, 2
    np.testing.assert_allclose(y_sum, [0.03 + 0.04, 0.06 + 0.07, 0.09 + 0.10])  # days 1, 2, 3
    assert threshold == pytest.approx(np.quantile(y_sum, 0.25))
    x1, y1, _ = return_events(r, 1, 0.5)
    np.testing.assert_array_equal(x1[:, 0], r[:-1, 0])
    np.testing.assert_array_equal(y1, r[1:, 0])
    for bad in (0, 4, 2.0, True):
        with pytest.raises(ValueError, match="d must"):
            return_events(r, bad, 0.05)
    for bad in (0.0, 1.0, -0.1):
        with pytest.raises(ValueError, match="level"):
            return_events(r, 2, bad)


def test_daily_returns_from_skfolio():
    pytest.importorskip("skfolio")
    from skfolio.datasets import load_sp500_dataset

    dates, returns, names = data.daily_returns()
    assert returns.shape == (8312, 20) and dates.shape == (8312,) and len(names) == 20
    assert np.all(np.isfinite(returns))
    assert str(dates[0]) == "1990-01-03" and str(dates[-1]) == "2022-12-28"
    assert np.all(np.diff(dates) > np.timedelta64(0, "D"))
    # Independently, with pandas.
    prices = load_sp500_dataset()
    expected = prices.pct_change().iloc[1:]
    assert list(expected.columns) == list(names)
    np.testing.assert_allclose(returns, expected.to_numpy(), rtol=1e-12, atol=1e-15)
    # Fresh copies.
    returns[0, 0] = 99.0
    assert data.daily_returns()[1][0, 0] != 99.0

    for d in (1, 5, 20):
        for level in (0.01, 0.05):
            x, y_sum, threshold = return_events(returns, d, level)
            assert x.shape == (8311, d) and y_sum.shape == (8311,)
            assert threshold == np.quantile(y_sum, level)
            # Day t's aggregate against day t-1's returns, t = 1 (index 0) and t = 5000.
            for t in (1, 5000):
                assert y_sum[t - 1] == pytest.approx(expected.iloc[t, :d].sum(), rel=1e-12, abs=1e-15)
                np.testing.assert_array_equal(x[t - 1], returns[t - 1, :d])
            assert abs(np.mean(y_sum <= threshold) - level) < 0.002
    for bad in (0, 21):
        with pytest.raises(ValueError, match="d must"):
            return_events(returns, bad, 0.01)
