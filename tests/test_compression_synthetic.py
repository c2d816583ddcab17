"""Synthetic compression tasks: every closed form against an independent numerical computation."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate, stats

from jdlcore.compression.synthetic import (
    TEST_FUNCTIONS,
    GaussianLinearModel,
    HeteroscedasticModel,
    gaussian_expectations,
)
from jdlcore.kernels import GaussianKernel, LaplaceKernel

MODEL = GaussianLinearModel()
KX, KY = GaussianKernel(0.7), GaussianKernel(0.9)
QUAD = dict(epsabs=0.0, epsrel=1e-13, limit=400)


def k1(a: float, b: float, ell: float) -> float:
    return float(np.exp(-((a - b) ** 2) / (2 * ell**2)))


def npdf(x: float, mean: float, sd: float) -> float:
    """Normal density (scalar; cheaper than scipy.stats inside nested quadrature)."""
    return float(np.exp(-0.5 * ((x - mean) / sd) ** 2) / (sd * np.sqrt(2 * np.pi)))


def x_quad(func, model: GaussianLinearModel = MODEL, peak: float | None = None) -> float:
    """E_x[func(x)] for x ~ N(mu, sigma2) by adaptive quadrature on mu +- 40 sd."""
    sd = np.sqrt(model.sigma2)
    lo, hi = model.mu - 40 * sd, model.mu + 40 * sd
    pts = sorted({model.mu, *([] if peak is None else [float(np.clip(peak, lo + 1e-9, hi - 1e-9))])})
    pdf = stats.norm(model.mu, sd).pdf
    return integrate.quad(lambda x: func(x) * pdf(x), lo, hi, points=pts, **QUAD)[0]


def inner_quad(x: float, b: float, model: GaussianLinearModel = MODEL, ell: float = KY.lengthscale) -> float:
    """E[l(Y, b) | x] by quadrature over y ~ N(f(x), noise2)."""
    f, s = model.a0 + model.a1 * x, np.sqrt(model.noise2)
    pdf = stats.norm(f, s).pdf
    return integrate.quad(lambda y: k1(y, b, ell) * pdf(y), f - 40 * s, f + 40 * s, points=[f, b], **QUAD)[0]


# -- kernel moments -------------------------------------------------------------------------------
@pytest.mark.parametrize("model", [MODEL, GaussianLinearModel(mu=-0.3, sigma2=2.5, a0=0.2, a1=-1.3, noise2=0.2)])
def test_marginal_moments_match_quadrature(model):
    xt = np.array([-3.0, -0.5, 0.1, 1.0, 5.0])  # includes a far pair (-3, 5): entry ~1e-16
    M = model.marginal_moments(xt[:, None], KX)
    assert M.shape == (5, 5) and np.allclose(M, M.T)
    alpha = KX.lengthscale
    for q, j in [(0, 4), (1, 2), (3, 3), (0, 0), (2, 4)]:
        a, b = xt[q], xt[j]
        A = 1 / model.sigma2 + 2 / alpha**2
        B = model.mu / model.sigma2 + (a + b) / alpha**2
        ref = x_quad(lambda x: k1(x, a, alpha) * k1(x, b, alpha), model, peak=B / A)
        assert M[q, j] == pytest.approx(ref, rel=1e-8, abs=0)
        # the (A, B) form of the brief agrees with the stable form
        brief = (A * model.sigma2) ** -0.5 * np.exp(
            B**2 / (2 * A) - model.mu**2 / (2 * model.sigma2) - (a**2 + b**2) / (2 * alpha**2)
        )
        assert M[q, j] == pytest.approx(brief, rel=1e-10)


def test_inner_conditional_integral_and_cross_embedding():
    x = np.array([-1.2, 0.4, 2.5])
    yt = np.array([-2.0, 0.3, 1.7, 4.0])
    C = MODEL.cross_embedding(x[:, None], yt, KY)
    assert C.shape == (3, 4)
    for p in range(3):
        for i in range(4):
            assert C[p, i] == pytest.approx(inner_quad(x[p], yt[i]), rel=1e-9)


@pytest.mark.parametrize("model", [MODEL, GaussianLinearModel(mu=-0.3, sigma2=2.5, a0=0.2, a1=-1.3, noise2=0.2)])
def test_joint_moments_match_quadrature(model):
    xt = np.array([-2.0, 0.5, 1.5, 4.0])
    yt = np.array([1.0, -0.4, 0.0, -3.0])
    Q = model.joint_moments(xt, yt[:, None], KX, KY)
    assert Q.shape == (4, 4)
    V = KY.lengthscale**2 + model.noise2
    cross = lambda x, b: np.sqrt(KY.lengthscale**2 / V) * np.exp(-((b - model.a0 - model.a1 * x) ** 2) / (2 * V))
    # the analytic inner integral itself is checked against quadrature over y
    assert cross(0.7, yt[0]) == pytest.approx(inner_quad(0.7, yt[0], model), rel=1e-10)
    for j in range(4):
        for i in range(4):  # all cross pairs (j indexes Xt, i indexes Yt), including far ones
            ref = x_quad(lambda x: k1(x, xt[j], KX.lengthscale) * cross(x, yt[i]), model, peak=xt[j])
            assert Q[j, i] == pytest.approx(ref, rel=1e-7, abs=0), (j, i)


def test_joint_moment_matches_double_integral():
    """One entry as a plain double integral of the joint density (no analytic inner step)."""
    a, b = 0.5, -0.4
    f = lambda x: MODEL.a0 + MODEL.a1 * x
    sx, sy = np.sqrt(MODEL.sigma2), np.sqrt(MODEL.noise2)

    def integrand(y, x):
        return (
            k1(x, a, KX.lengthscale) * k1(y, b, KY.lengthscale)
            * npdf(x, MODEL.mu, sx) * npdf(y, f(x), sy)
        )

    ref = integrate.dblquad(
        integrand, MODEL.mu - 12 * sx, MODEL.mu + 12 * sx,
        lambda x: f(x) - 12 * sy, lambda x: f(x) + 12 * sy, epsabs=1e-13, epsrel=1e-10,
    )[0]
    assert MODEL.joint_moments([a], [b], KX, KY)[0, 0] == pytest.approx(ref, rel=1e-7)


def test_embedding_norm_matches_double_integral():
    x0 = 0.3  # the value is x-independent
    f, s = MODEL.a0 + MODEL.a1 * x0, np.sqrt(MODEL.noise2)
    ref = integrate.dblquad(
        lambda y, yp: k1(y, yp, KY.lengthscale) * npdf(y, f, s) * npdf(yp, f, s),
        f - 14 * s, f + 14 * s, f - 14 * s, f + 14 * s,
        epsabs=1e-14, epsrel=1e-12,
    )[0]
    assert MODEL.embedding_norm(KY) == pytest.approx(ref, rel=1e-8)


# -- AMCMD ----------------------------------------------------------------------------------------
def _pointwise_error(model, xt, yt, reg):
    """x -> ||mu_{Y|X=x} - mu_C(x)||^2 from beta(x) = (K + reg I)^{-1} k(Xt, x)."""
    K = KX(xt[:, None])
    L = KY(yt[:, None])
    W = np.linalg.solve(K + reg * np.eye(len(xt)), np.eye(len(xt)))
    norm = model.embedding_norm(KY)

    def err(x: float) -> float:
        beta = W @ KX(xt[:, None], np.array([[x]]))[:, 0]
        return norm - 2 * beta @ model.cross_embedding([x], yt, KY)[0] + beta @ L @ beta

    return err


def test_amcmd_squared_matches_quadrature():
    X, Y = MODEL.sample(5, seed=3)
    xt, yt = X[:, 0], Y[:, 0]
    value = MODEL.amcmd_squared(X, Y, KX, KY, 1e-2)
    ref = x_quad(_pointwise_error(MODEL, xt, yt, 1e-2))
    assert value == pytest.approx(ref, rel=1e-8)
    assert MODEL.amcmd(X, Y, KX, KY, 1e-2) == pytest.approx(np.sqrt(ref), rel=1e-8)


def test_amcmd_squared_nonnegative_on_random_sets():
    rng = np.random.default_rng(0)
    for trial in range(20):
        m = int(rng.integers(1, 12))
        X, Y = MODEL.sample(m, seed=trial)
        Y = Y + rng.normal(0, 0.5, Y.shape) * (trial % 2)  # also perturbed sets
        assert MODEL.amcmd_squared(X, Y, KX, KY, 10.0 ** rng.uniform(-4, 0)) > -1e-12


def test_amcmd_terms_monte_carlo():
    """E_x beta^T L beta and E beta(x)^T l(Yt, y) against sample averages over 2e5 pairs, each to five
    of its own standard errors."""
    xt, yt = np.array([-0.5, 0.5, 1.0, 1.8, 3.0]), np.array([-1.0, -0.2, 0.1, 0.4, 1.2])
    reg = 1e-2
    W = np.linalg.inv(KX(xt[:, None]) + reg * np.eye(5))
    X, Y = MODEL.sample(200_000, seed=7)
    B = KX(X, xt[:, None]) @ W  # rows beta(x)^T
    fit_terms = np.einsum("ni,ij,nj->n", B, KY(yt[:, None]), B)
    cross_terms = np.sum(B * KY(Y, yt[:, None]), axis=1)
    fit_mc, cross_mc = fit_terms.mean(), cross_terms.mean()
    M, Q = MODEL.marginal_moments(xt, KX), MODEL.joint_moments(xt, yt, KX, KY)
    standard_error = {name: terms.std() / np.sqrt(terms.size) for name, terms in
                      (("fit", fit_terms), ("cross", cross_terms))}
    assert np.sum((W @ KY(yt[:, None]) @ W) * M) == pytest.approx(fit_mc, abs=5 * standard_error["fit"])
    assert np.sum(W * Q.T) == pytest.approx(cross_mc, abs=5 * standard_error["cross"])
    total_mc = MODEL.embedding_norm(KY) - 2 * cross_mc + fit_mc
    assert MODEL.amcmd_squared(xt, yt, KX, KY, reg) == pytest.approx(
        total_mc, abs=5 * (2 * standard_error["cross"] + standard_error["fit"]))


# -- test functions -------------------------------------------------------------------------------
@pytest.mark.parametrize("f, s2", [(0.0, 1.0), (0.7, 0.3), (-1.9, 2.2), (3.0, 0.05)])
def test_gaussian_expectations_match_quadrature(f, s2):
    exact = gaussian_expectations(f, s2)
    assert set(exact) == set(TEST_FUNCTIONS)
    s = np.sqrt(s2)
    pdf = stats.norm(f, s).pdf
    for name, h in TEST_FUNCTIONS.items():
        ref = integrate.quad(lambda y: float(h(np.array(y))) * pdf(y), f - 40 * s, f + 40 * s,
                             points=sorted({f, 0.0}), **{**QUAD, "epsabs": 1e-14})[0]
        assert exact[name] == pytest.approx(ref, rel=1e-8, abs=1e-10), name


def test_conditional_expectations_shapes_and_broadcast():
    x = np.linspace(-3, 3, 7)
    for model in (MODEL, HeteroscedasticModel()):
        out = model.conditional_expectations(x[:, None])
        assert all(v.shape == (7,) for v in out.values())
        ref = gaussian_expectations(model.mean(x), model.variance(x))
        assert all(np.array_equal(out[k], ref[k]) for k in ref)
        # against the sampler: the mean and second moment of y over samples with x within 0.01 of 1, to five
        # standard errors plus the drift of the analytic value across the window
        X, Y = model.sample(400_000, seed=3)
        y = Y[np.abs(X[:, 0] - 1.0) < 0.01, 0]
        for name, values in (("y", y), ("y2", y**2)):
            at = [model.conditional_expectations(np.array([[edge]]))[name][0] for edge in (0.99, 1.0, 1.01)]
            bound = 5 * values.std() / np.sqrt(values.size) + abs(at[2] - at[0]) / 2
            assert abs(values.mean() - at[1]) < bound, name
    assert np.allclose(HeteroscedasticModel().conditional_expectations(x)["y2"],
                       HeteroscedasticModel().mean(x) ** 2 + HeteroscedasticModel().variance(x))


def test_heteroscedastic_mean_and_variance():
    h = HeteroscedasticModel()
    x = np.array([-5.0, -2.0, 2.0, 5.0, 0.0])
    a, b, c = (3, -3, 6, -6), (1, 0.1, 2, 0.5), (-5, -2, 2, 5)
    ref = [sum(ai * np.exp(-((xx - ci) ** 2) / bi) for ai, bi, ci in zip(a, b, c)) for xx in x]
    assert np.allclose(h.mean(x), ref, rtol=1e-14)
    assert np.allclose(h.variance(x), 0.1 + np.abs(0.75 * np.sin(x)), rtol=1e-14)


# -- samplers -------------------------------------------------------------------------------------
@pytest.mark.parametrize("model", [MODEL, HeteroscedasticModel()])
def test_sampler_reproducible_and_conditionally_correct(model):
    X, Y = model.sample(20_000, seed=11)
    X2, Y2 = model.sample(20_000, seed=11)
    assert X.shape == Y.shape == (20_000, 1)
    assert np.array_equal(X, X2) and np.array_equal(Y, Y2)
    assert not np.array_equal(Y, model.sample(20_000, seed=12)[1])
    n = len(X)
    assert abs(X.mean() - model.mu) < 5 * np.sqrt(model.sigma2 / n)
    assert abs(X.var() / model.sigma2 - 1) < 5 * np.sqrt(2 / n)
    z = (Y[:, 0] - model.mean(X)) / np.sqrt(model.variance(X))  # standardised residuals ~ N(0, 1)
    assert abs(z.mean()) < 5 / np.sqrt(n) and abs(z.var() - 1) < 5 * np.sqrt(2 / n)
    in_bin = np.abs(X[:, 0] - 1.0) < 0.05  # Y | X near 1: mean and variance roughly f(1), s2(1)
    k = in_bin.sum()
    assert k > 200
    mean1, var1 = model.mean([1.0])[0], model.variance([1.0])[0]
    assert abs(Y[in_bin].mean() - mean1) < 5 * np.sqrt(var1 / k) + 0.1
    assert abs(Y[in_bin].var() / var1 - 1) < 5 * np.sqrt(2 / k) + 0.1


# -- validation -----------------------------------------------------------------------------------
def test_bad_inputs_raise_named_errors():
    xt, yt = np.array([0.0, 1.0]), np.array([0.5, -0.5])
    with pytest.raises(ValueError, match="sigma2"):
        GaussianLinearModel(sigma2=0.0)
    with pytest.raises(ValueError, match="noise2"):
        GaussianLinearModel(noise2=-1.0)
    with pytest.raises(ValueError, match="noise_base"):
        HeteroscedasticModel(noise_base=0.0)
    with pytest.raises(ValueError, match="reg"):
        MODEL.amcmd_squared(xt, yt, KX, KY, 0.0)
    with pytest.raises(ValueError, match="kernel_x"):
        MODEL.marginal_moments(xt, LaplaceKernel(1.0))
    with pytest.raises(ValueError, match="kernel_y"):
        MODEL.joint_moments(xt, yt, KX, GaussianKernel([1.0, 2.0]))
    with pytest.raises(ValueError, match="Xt and Yt"):
        MODEL.joint_moments(xt, yt[:1], KX, KY)
    with pytest.raises(ValueError, match="Xt"):
        MODEL.marginal_moments(np.zeros((3, 2)), KX)
    with pytest.raises(ValueError, match="x"):
        MODEL.conditional_expectations([np.nan])
    with pytest.raises(ValueError, match="s2"):
        gaussian_expectations(0.0, 0.0)
    with pytest.raises(ValueError, match="n"):
        MODEL.sample(0)


def test_conditional_amcmd_at_points_matches_the_exact_population_value():
    """The pointwise formula averaged over x: equals the exact integral in the limit (Gauss-Hermite
    quadrature over x ~ N(mu, sigma2) with the plain average replaced by the quadrature weights)."""
    model = GaussianLinearModel()
    kx, ky = GaussianKernel(0.7), GaussianKernel(0.5)
    rng = np.random.default_rng(21)
    Xt, Yt = rng.normal(1.0, 1.0, size=6), rng.normal(0.0, 0.8, size=6)
    nodes, weights = np.polynomial.hermite_e.hermegauss(80)
    x = model.mu + np.sqrt(model.sigma2) * nodes
    pointwise = np.array([model.conditional_amcmd_squared(Xt, Yt, kx, ky, 1e-2, [xi]) for xi in x])
    quadrature = float(weights @ pointwise / weights.sum())
    assert quadrature == pytest.approx(model.amcmd_squared(Xt, Yt, kx, ky, 1e-2), rel=1e-9)
    # and a heteroscedastic model's value is the average of its pointwise values
    hetero = HeteroscedasticModel()
    points = rng.normal(0.0, 2.0, size=5)
    together = hetero.conditional_amcmd_squared(Xt, Yt, kx, ky, 1e-2, points)
    apart = np.mean([hetero.conditional_amcmd_squared(Xt, Yt, kx, ky, 1e-2, [p]) for p in points])
    assert together == pytest.approx(apart, rel=1e-12)
    assert together > 0
