"""GaussianPSDModel: every closed form against an independent computation (quadrature, brute-force
double sums, Monte Carlo with tolerances from the standard error)."""
from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import integrate, stats

from jdlcore.kernels import GaussianKernel
from jdlcore.psd.model import GaussianPSDModel

INF = np.inf


def random_model(n: int, d: int, seed: int, lengthscale=0.6, rank: int | None = None, spread: float = 1.0):
    rng = np.random.default_rng(seed)
    G = rng.standard_normal((n, rank or n))
    return GaussianPSDModel(G @ G.T, rng.uniform(-spread, spread, (n, d)), lengthscale)


def brute(model: GaussianPSDModel, X: np.ndarray) -> np.ndarray:
    """Double sum sum_ij A_ij k(x, c_i) k(x, c_j) with jdlcore's GaussianKernel."""
    K = GaussianKernel(model.lengthscale)(X, model.centers)  # (q, n)
    A = model.A
    pairs = [(i, j) for i in range(model.n) for j in range(model.n)]
    return np.array([sum(A[i, j] * K[q, i] * K[q, j] for i, j in pairs) for q in range(len(X))])


def quad1(fun, a=-INF, b=INF):
    return integrate.quad(fun, a, b, epsabs=0, epsrel=1e-12, limit=200)[0]


def quad2(fun, box=(-8, 8, -8, 8)):
    x0, x1, y0, y1 = box
    return integrate.dblquad(lambda y, x: fun(x, y), x0, x1, y0, y1, epsabs=1e-14, epsrel=1e-11)[0]


# -- evaluation ------------------------------------------------------------------------------------
def test_nonnegative_and_batched_equals_double_sum():
    for seed, rank in [(0, None), (1, 2)]:  # full rank and rank-deficient A (negative entries)
        model = random_model(6, 2, seed, lengthscale=[0.5, 0.9], rank=rank)
        X = np.random.default_rng(seed + 10).uniform(-3, 3, (200, 2))
        f = model(X)
        assert f.shape == (200,) and np.all(f >= 0)
        np.testing.assert_allclose(f, brute(model, X), rtol=1e-12, atol=1e-300)
        assert model.lengthscale.shape == (2,) and model.n == 6 and model.d == 2
        # one point as a flat vector
        np.testing.assert_allclose(model(X[0]), f[:1], rtol=1e-14)


def test_mixture_special_case_remark_1():
    rng = np.random.default_rng(3)
    c, a, ell = rng.uniform(-1, 1, (4, 2)), rng.uniform(0.5, 2, 4), np.array([0.4, 0.7])
    # k_l(x, c)^2 = k_{l / sqrt 2}(x, c): lengthscale l * sqrt(2) in the model gives sum_i a_i k_l(x, c_i)
    model = GaussianPSDModel(np.diag(a), c, ell * np.sqrt(2))
    X = rng.uniform(-2, 2, (50, 2))
    np.testing.assert_allclose(model(X), GaussianKernel(ell)(X, c) @ a, rtol=1e-12)
    np.testing.assert_allclose(model.integral(), np.sum(a) * 2 * np.pi * np.prod(ell), rtol=1e-12)
    np.testing.assert_allclose(model.mean(), c.T @ a / a.sum(), rtol=1e-12)


def test_remark_2_negative_weights_give_a_square():
    # eta = 1 <-> lengthscale 1 / sqrt(2); A = v v^T with v = (1, -1/2), centres 0 and 2
    v = np.array([1.0, -0.5])
    model = GaussianPSDModel(np.outer(v, v), [0.0, 2.0], 1 / np.sqrt(2))
    x = np.linspace(-3, 5, 101)
    expected = (np.exp(-(x**2)) - 0.5 * np.exp(-((x - 2) ** 2))) ** 2
    np.testing.assert_allclose(model(x), expected, rtol=1e-12, atol=1e-300)


# -- integral --------------------------------------------------------------------------------------
def test_integral_matches_quadrature_1d_and_2d():
    m1 = random_model(5, 1, 4, lengthscale=0.5, rank=2)
    q1 = quad1(lambda x: m1([x])[0])
    assert abs(m1.integral() - q1) <= 1e-8 * q1
    m2 = random_model(4, 2, 5, lengthscale=[0.5, 0.8], rank=2)
    q2 = quad2(lambda x, y: m2([[x, y]])[0])
    assert abs(m2.integral() - q2) <= 1e-8 * q2
    p = m1.normalized()
    assert abs(quad1(lambda x: p([x])[0]) - 1) < 1e-10
    assert abs(m2.normalized().integral() - 1) < 1e-13


# -- marginalise, partial evaluation, condition ------------------------------------------------------
def test_marginalize_2d_to_1d_matches_quadrature():
    model = random_model(5, 2, 6, lengthscale=[0.5, 0.8], rank=3)
    for keep, axis in [([0], 1), ([1], 0)]:
        marg = model.marginalize(keep)
        assert marg.d == 1
        for u in [-1.3, 0.0, 0.4, 2.0]:
            point = (lambda t: [u, t]) if axis == 1 else (lambda t: [t, u])
            q = quad1(lambda t: model([point(t)])[0])
            assert abs(marg([u])[0] - q) <= 1e-9 * q
        assert abs(marg.integral() - model.integral()) <= 1e-12 * model.integral()


def test_marginalize_3d_to_2d_matches_quadrature_and_keeps_order():
    model = random_model(4, 3, 7, lengthscale=[0.5, 0.7, 0.9], rank=2)
    marg = model.marginalize([2, 0])  # integrate out coordinate 1; result ordered (x2, x0)
    np.testing.assert_allclose(marg.lengthscale, [0.9, 0.5])
    for z, x in [(0.1, -0.5), (-1.0, 0.8), (1.5, 1.5)]:
        q = quad1(lambda y: model([[x, y, z]])[0])
        assert abs(marg([[z, x]])[0] - q) <= 1e-9 * q
    assert abs(marg.integral() - model.integral()) <= 1e-12 * model.integral()


def test_partial_evaluate_pointwise():
    model = random_model(5, 3, 8, lengthscale=[0.5, 0.7, 0.9])
    rng = np.random.default_rng(0)
    Y = rng.uniform(-2, 2, (30, 2))
    part = model.partial_evaluate({1: 0.3})
    full = model(np.column_stack([Y[:, 0], np.full(30, 0.3), Y[:, 1]]))
    np.testing.assert_allclose(part(Y), full, rtol=1e-12)
    part2 = model.partial_evaluate(([2, 0], [-0.4, 0.6]))
    y = rng.uniform(-2, 2, 20)
    np.testing.assert_allclose(part2(y), model(np.column_stack([np.full(20, 0.6), y, np.full(20, -0.4)])), rtol=1e-12)


def test_condition_normalised_and_bayes_rule():
    joint = random_model(5, 2, 9, lengthscale=[0.5, 0.8], rank=3).normalized()
    for x0 in [-0.7, 0.2, 1.9]:
        cond = joint.condition([0], [x0])  # p(y | x0)
        assert abs(quad1(lambda y: cond([y])[0]) - 1) < 1e-10
        px0 = joint.marginalize([0])([x0])[0]
        y = np.linspace(-3, 3, 25)
        expected = joint(np.column_stack([np.full(25, x0), y]))
        np.testing.assert_allclose(cond(y) * px0, expected, rtol=1e-11, atol=1e-300)
    # 3-D, condition on the middle coordinate: the result is normalised in 2-D
    joint3 = random_model(4, 3, 10, lengthscale=[0.5, 0.7, 0.9], rank=2).normalized()
    cond3 = joint3.condition([1], [0.25])
    assert abs(quad2(lambda x, z: cond3([[x, z]])[0]) - 1) < 1e-8
    p1 = joint3.marginalize([1])([0.25])[0]
    XZ = np.random.default_rng(1).uniform(-2, 2, (20, 2))
    expected = joint3(np.column_stack([XZ[:, 0], np.full(20, 0.25), XZ[:, 1]]))
    np.testing.assert_allclose(cond3(XZ) * p1, expected, rtol=1e-11)


def test_condition_far_from_every_centre_does_not_underflow():
    # k at the given point is exp(-2 * 30^2 / 0.5^2) ~ exp(-7200): naive B = A o (k k^T) is all zeros
    model = GaussianPSDModel(np.diag([1.0, 2.0]), [[0.0, -1.0], [0.5, 1.0]], 0.5)
    assert model.partial_evaluate({0: 30.0}).integral() == 0.0
    cond = model.condition([0], [30.0])
    assert abs(cond.integral() - 1) < 1e-12
    # the nearest centre (x = 0.5) dominates by exp(-eta * (29.5^2 - 30^2) * 2) = exp(118): its y-mode is 1.0
    assert abs(cond.mean()[0] - 1.0) < 1e-12


def test_condition_errors():
    model = random_model(3, 2, 11)
    with pytest.raises(ValueError, match="all 2 coordinates"):
        model.condition([0, 1], [0.0, 0.0])
    with pytest.raises(ValueError, match="out of range"):
        model.condition([2], [0.0])
    with pytest.raises(ValueError, match="values"):
        model.condition([0], [0.0, 1.0])
    zero = GaussianPSDModel(np.zeros((2, 2)), [[0.0, 0.0], [1.0, 1.0]], 1.0)
    with pytest.raises(ValueError, match="density at the given point is 0"):
        zero.condition([0], [0.0])
    # exact cancellation: two identical centres with v = (1, -1) give f = (k - k)^2 == 0 everywhere
    cancel = GaussianPSDModel(np.array([[1.0, -1.0], [-1.0, 1.0]]), [[0.0, 0.5], [0.0, 0.5]], 1.0)
    with pytest.raises(ValueError, match="density at the given point is 0"):
        cancel.condition([0], [0.3])


# -- product ---------------------------------------------------------------------------------------
def test_product_same_coordinates_pointwise():
    f1 = random_model(3, 2, 12, lengthscale=[0.5, 0.9], rank=2)
    f2 = random_model(5, 2, 13, lengthscale=[0.8, 0.6], spread=1.5)
    prod = f1.product(f2)
    assert prod.n == 15 and prod.d == 2 and prod.lengthscale.shape == (2,)
    X = np.random.default_rng(2).uniform(-2, 2, (100, 2))
    np.testing.assert_allclose(prod(X), f1(X) * f2(X), rtol=1e-12, atol=1e-300)
    eig = np.linalg.eigvalsh(prod.A)
    assert eig[0] >= -1e-12 * eig[-1]
    np.testing.assert_allclose(1 / (2 * prod.lengthscale**2), 1 / (2 * f1.lengthscale**2) + 1 / (2 * f2.lengthscale**2))


def test_product_ordering_regression_column_major_is_wrong():
    f1 = random_model(3, 1, 14, lengthscale=0.5)
    f2 = random_model(4, 1, 15, lengthscale=0.7, spread=2.0)
    prod = f1.product(f2)
    x = np.linspace(-2, 2, 41)
    np.testing.assert_allclose(prod(x), f1(x) * f2(x), rtol=1e-12)
    # the same construction with v = vec(K) in column-major (Fortran) order is a different function
    e1, e2 = f1.eta[0], f2.eta[0]
    c1, c2 = f1.centers[:, 0], f2.centers[:, 0]
    K = np.exp(-(e1 * e2 / (e1 + e2)) * (c1[:, None] - c2[None, :]) ** 2)
    v_wrong = K.ravel(order="F")
    wrong = GaussianPSDModel(np.kron(f1.A, f2.A) * np.outer(v_wrong, v_wrong), prod.centers, prod.lengthscale)
    rel = np.max(np.abs(wrong(x) - f1(x) * f2(x))) / np.max(f1(x) * f2(x))
    assert rel > 1e-2


def test_product_with_shared_and_disjoint_coordinates():
    f1 = random_model(3, 2, 16, lengthscale=[0.5, 0.8], rank=2)  # f1(x, y)
    f2 = random_model(4, 2, 17, lengthscale=[0.6, 0.9])  # f2(y, z)
    prod = f1.product(f2, shared=[(1, 0)])  # over (x, y, z)
    assert prod.d == 3 and prod.n == 12
    P = np.random.default_rng(3).uniform(-2, 2, (80, 3))
    np.testing.assert_allclose(prod(P), f1(P[:, :2]) * f2(P[:, 1:]), rtol=1e-12, atol=1e-300)
    # no shared coordinates: an outer product f1(x, y) f2(z, w)
    outer = f1.product(f2, shared=[])
    Q = np.random.default_rng(4).uniform(-2, 2, (30, 4))
    np.testing.assert_allclose(outer(Q), f1(Q[:, :2]) * f2(Q[:, 2:]), rtol=1e-12, atol=1e-300)
    with pytest.raises(ValueError, match="other"):
        f1.product(random_model(2, 3, 1))
    with pytest.raises(ValueError, match="shared"):
        f1.product(f2, shared=[(1, 5)])


# -- compression -----------------------------------------------------------------------------------
def test_compress_exact_when_new_centres_contain_old():
    model = GaussianPSDModel(np.eye(3) + 0.3, [[0.0, 0.0], [1.5, 0.0], [0.0, 1.5]], 0.5)
    extra = np.array([[-1.5, 0.0], [1.5, 1.5], [-1.5, -1.5]])
    new = np.vstack([extra[:1], model.centers[::-1], extra[1:]])
    comp = model.compress(new)
    X = np.random.default_rng(5).uniform(-2, 2, (100, 2))
    err = np.max(np.abs(comp(X) - model(X))) / np.max(model(X))
    assert err < 1e-10
    eig = np.linalg.eigvalsh(comp.A)
    assert eig[0] >= -1e-12 * eig[-1]


def test_compress_error_decreases_with_more_uniform_centres():
    model = random_model(6, 1, 18, lengthscale=0.4)
    x = np.linspace(-1, 1, 201)
    errors = []
    for m in [4, 8, 16]:
        comp = model.compress(np.linspace(-1.5, 1.5, m)[:, None])
        errors.append(np.max(np.abs(comp(x) - model(x))) / np.max(model(x)))
    assert errors[0] > errors[1] > errors[2] and errors[2] < 1e-3


# -- box integral ----------------------------------------------------------------------------------
def test_box_integral_matches_quadrature_and_tends_to_integral():
    m1 = random_model(5, 1, 19, lengthscale=0.5, rank=2)
    q = quad1(lambda x: m1([x])[0], -0.3, 0.8)
    assert abs(m1.box_integral(-0.3, 0.8) - q) <= 1e-10 * q
    assert abs(m1.box_integral(-INF, INF) - m1.integral()) <= 1e-13 * m1.integral()
    m2 = random_model(4, 2, 20, lengthscale=[0.5, 0.8], rank=2)
    q2 = quad2(lambda x, y: m2([[x, y]])[0], box=(-0.5, 1.0, -1.0, 0.2))
    assert abs(m2.box_integral([-0.5, -1.0], [1.0, 0.2]) - q2) <= 1e-8 * q2
    assert abs(m2.box_integral([-1e3, -1e3], [1e3, 1e3]) - m2.integral()) <= 1e-13 * m2.integral()
    # far tail: erfc-based differences keep relative accuracy
    tail = m1.box_integral(6.0, INF)
    qt = quad1(lambda x: m1([x])[0], 6.0, INF)
    assert tail > 0 and abs(tail - qt) <= 1e-8 * qt
    with pytest.raises(ValueError, match="low"):
        m2.box_integral([1.0, 0.0], [0.0, 1.0])


# -- moments ---------------------------------------------------------------------------------------
def test_moments_match_quadrature():
    m1 = random_model(5, 1, 21, lengthscale=0.5, rank=2)
    Z = quad1(lambda x: m1([x])[0])
    mu = quad1(lambda x: x * m1([x])[0]) / Z
    var = quad1(lambda x: (x - mu) ** 2 * m1([x])[0]) / Z
    assert abs(m1.mean()[0] - mu) < 1e-10
    assert abs(m1.covariance()[0, 0] - var) < 1e-10 * var
    m2 = random_model(4, 2, 22, lengthscale=[0.5, 0.8], rank=2)
    Z2 = quad2(lambda x, y: m2([[x, y]])[0])
    mean = np.array([quad2(lambda x, y: x * m2([[x, y]])[0]), quad2(lambda x, y: y * m2([[x, y]])[0])]) / Z2
    np.testing.assert_allclose(m2.mean(), mean, atol=1e-8)
    cov = np.empty((2, 2))
    for s in range(2):
        for t in range(2):
            cov[s, t] = quad2(lambda x, y: ([x, y][s] - mean[s]) * ([x, y][t] - mean[t]) * m2([[x, y]])[0]) / Z2
    np.testing.assert_allclose(m2.covariance(), cov, atol=1e-8)


def test_moments_match_importance_sampling_monte_carlo():
    model = random_model(6, 2, 23, lengthscale=[0.5, 0.8], rank=3)
    rng = np.random.default_rng(7)
    n = 200_000
    proposal = stats.multivariate_normal(mean=[0, 0], cov=np.diag([2.0, 2.0]))
    X = proposal.rvs(size=n, random_state=rng)
    w = model(X) / proposal.pdf(X)
    w /= w.mean()
    mu_hat = (w[:, None] * X).mean(axis=0)
    se = np.sqrt(((w[:, None] * (X - mu_hat)) ** 2).mean(axis=0) / n)
    assert np.all(np.abs(model.mean() - mu_hat) < 5 * se)
    D = X - model.mean()
    for s, t in [(0, 0), (0, 1), (1, 1)]:
        terms = w * D[:, s] * D[:, t]
        assert abs(model.covariance()[s, t] - terms.mean()) < 5 * terms.std() / np.sqrt(n)


# -- sampling --------------------------------------------------------------------------------------
def test_samples_ks_test_against_box_integral_cdf_1d():
    # Remark-2-like model with negative off-diagonal weights: rejection is not trivial
    v = np.array([1.0, -0.8, 0.5])
    model = GaussianPSDModel(np.outer(v, v) + 0.05 * np.eye(3), [-1.0, 0.0, 1.5], 0.5)
    Z = model.integral()
    cdf = np.vectorize(lambda x: model.box_integral(-INF, x) / Z)
    samples = model.sample(4000, seed=0)
    assert samples.shape == (4000, 1)
    assert stats.kstest(samples[:, 0], cdf).pvalue > 1e-3
    # reproducible with a seed
    np.testing.assert_array_equal(model.sample(10, seed=3), model.sample(10, seed=3))
    # a wrong density (shifted) is rejected by the same test
    assert stats.kstest(samples[:, 0] + 0.2, cdf).pvalue < 1e-3


def test_samples_2d_mean_and_covariance_within_5_standard_errors():
    model = random_model(5, 2, 24, lengthscale=[0.5, 0.8], rank=2)
    n = 4000
    S = model.sample(n, seed=1)
    mu, cov = model.mean(), model.covariance()
    se_mean = np.sqrt(np.diag(cov) / n)
    assert np.all(np.abs(S.mean(axis=0) - mu) < 5 * se_mean)
    D = S - mu
    for s, t in [(0, 0), (0, 1), (1, 1)]:
        terms = D[:, s] * D[:, t]
        assert abs(terms.mean() - cov[s, t]) < 5 * terms.std() / np.sqrt(n)


# -- serialisation and validation -------------------------------------------------------------------
def test_to_dict_round_trip():
    model = random_model(3, 2, 25, lengthscale=[0.5, 0.8])
    back = GaussianPSDModel.from_dict(json.loads(json.dumps(model.to_dict())))
    X = np.random.default_rng(6).uniform(-1, 1, (10, 2))
    np.testing.assert_allclose(back(X), model(X), rtol=1e-14)


def test_bad_inputs():
    c = [[0.0, 0.0], [1.0, 1.0]]
    with pytest.raises(ValueError, match=r"A: is not positive semi-definite \(min eigenvalue -1"):
        GaussianPSDModel([[1.0, 2.0], [2.0, 1.0]], c, 1.0)
    with pytest.raises(ValueError, match="A: must be symmetric"):
        GaussianPSDModel([[1.0, 0.1], [0.0, 1.0]], c, 1.0)
    GaussianPSDModel([[1.0, 0.1], [0.1 * (1 + 1e-12), 1.0]], c, 1.0)  # rounding-level asymmetry is fine
    GaussianPSDModel([[1.0, 1.0], [1.0, 1.0 - 1e-13]], c, 1.0)  # rounding-level negative eigenvalue is fine
    with pytest.raises(ValueError, match="A: must be a square"):
        GaussianPSDModel(np.ones((2, 3)), c, 1.0)
    with pytest.raises(ValueError, match="A: has shape"):
        GaussianPSDModel(np.eye(3), c, 1.0)
    with pytest.raises(ValueError, match="A: contains NaN"):
        GaussianPSDModel([[1.0, np.nan], [np.nan, 1.0]], c, 1.0)
    with pytest.raises(ValueError, match="centers: contains NaN"):
        GaussianPSDModel(np.eye(2), [[0.0, np.nan], [1.0, 1.0]], 1.0)
    with pytest.raises(ValueError, match="lengthscale: must be finite and > 0"):
        GaussianPSDModel(np.eye(2), c, 0.0)
    with pytest.raises(ValueError, match="lengthscale: must be finite and > 0"):
        GaussianPSDModel(np.eye(2), c, [1.0, -1.0])
    with pytest.raises(ValueError, match="lengthscale: must be a scalar or have one entry per coordinate"):
        GaussianPSDModel(np.eye(2), c, [1.0, 1.0, 1.0])
    model = GaussianPSDModel(np.eye(2), c, 1.0)
    with pytest.raises(ValueError, match="Xq: has 3 features"):
        model(np.zeros((4, 3)))
    with pytest.raises(ValueError, match="keep: index 2 is out of range"):
        model.marginalize([2])
    with pytest.raises(ValueError, match="keep: must name at least one"):
        model.marginalize([])
    with pytest.raises(ValueError, match="keep: indices must be distinct"):
        model.marginalize([0, 0])
    with pytest.raises(ValueError, match="values: fixes all"):
        model.partial_evaluate({0: 1.0, 1: 2.0})
    with pytest.raises(ValueError, match="k: must be a non-negative integer"):
        model.sample(-1)
    with pytest.raises(ValueError, match="new_centers"):
        model.compress([[0.0, 0.0], [0.0, 0.0]], jitter=0.0)
