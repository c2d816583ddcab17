"""The fitted model's query API against direct computations from its weights."""
import numpy as np
import pytest

from jdlcore import JDL, DeltaKernel, GaussianKernel, tune
from jdlcore.losses import clipped_logistic_loss, conditional_second_moments, relative_second_moment_loss, second_moment

from .conftest import bivariate_gaussian


@pytest.fixture(scope="module")
def data():
    return bivariate_gaussian(400, seed=1)


@pytest.fixture(scope="module", params=["none", "normalization", "tightening", "pointwise", "grid", "clip"])
def model(request, data):
    X, Y = data
    constraints = {"none": "none", "normalization": "normalization"}.get(request.param, "positivity")
    return JDL(GaussianKernel(0.6), GaussianKernel(0.6), reg=1e-4, tol=1e-6, constraints=constraints,
               positivity=request.param if constraints == "positivity" else "grid").fit(X, Y)


def queries(n=37, seed=9):
    return np.random.default_rng(seed).uniform(-4, 4, (n, 1))  # also far outside the data


def test_weights_sum_to_one_anywhere(model):
    W = model.conditional_weights(queries())
    assert W.shape == (37, 400)
    np.testing.assert_allclose(W.sum(axis=1), 1.0, rtol=0, atol=1e-12)


def test_expectations_equal_weighted_sums(model, data):
    Xq = queries()
    W = model.conditional_weights(Xq)
    Y = data[1]
    np.testing.assert_allclose(model.conditional_expectation(Xq), W @ Y, atol=1e-10)
    second = model.conditional_expectation(Xq, lambda y: y[:, :, None] * y[:, None, :])
    assert second.shape == (37, 1, 1)
    np.testing.assert_allclose(second[:, 0, 0], W @ Y[:, 0] ** 2, atol=1e-10)
    thresholds = [-1.0, 0.0, 0.5]
    cdf = model.conditional_cdf(Xq, thresholds)
    np.testing.assert_allclose(cdf, W @ (Y <= np.array(thresholds)[None, :]).astype(float), atol=1e-10)


def test_registered_functions_match_general_path(model):
    if model.clips:
        with pytest.raises(ValueError, match="clipped"):
            model.register("mean", lambda y: y)
            model.expectation("mean", queries())
        return
    model.register("square", lambda y: y**2)
    Xq = queries()
    np.testing.assert_allclose(model.expectation("square", Xq), model.conditional_expectation(Xq, lambda y: y**2), atol=1e-12)
    with pytest.raises(ValueError, match="no test function 'cube'"):
        model.expectation("cube", Xq)


def test_quantiles_are_generalised_inverse_of_cdf(model, data):
    Xq = queries(11)
    levels = [0.05, 0.5, 0.95]
    quantiles = model.conditional_quantile(Xq, levels)
    W = model.conditional_weights(Xq)
    atoms = np.sort(data[1][:, 0])
    order = np.argsort(data[1][:, 0], kind="stable")
    for i in range(len(Xq)):
        cdf = np.maximum.accumulate(np.cumsum(W[i, order]))
        for k, level in enumerate(levels):
            expected = atoms[np.flatnonzero(cdf >= level * (1 - 1e-12))[0]]
            assert quantiles[i, k] == expected


def test_grid_positivity_has_no_negative_weight_on_training_grid(data):
    X, Y = data
    model = JDL(GaussianKernel(0.4), GaussianKernel(0.4), reg=1e-5, tol=1e-8).fit(X, Y)
    values = model.radon_nikodym(X)  # (x_t, y_s) for every training pair
    assert values.min() >= 0.0
    unconstrained = JDL(GaussianKernel(0.4), GaussianKernel(0.4), reg=1e-5, tol=1e-8, constraints="normalization").fit(X, Y)
    assert unconstrained.radon_nikodym(X).min() < 0  # the constraint is doing work here
    assert model.diagnostics_["grid_min"] >= 0


def test_clip_mode_gives_nonnegative_weights_and_reports_negative_mass(data):
    X, Y = data
    model = JDL(GaussianKernel(0.4), GaussianKernel(0.4), reg=1e-5, tol=1e-8, positivity="clip").fit(X, Y)
    Xq = queries()
    assert model.conditional_weights(Xq).min() >= 0
    mass = model.negative_mass(Xq)
    raw = model.radon_nikodym(Xq)
    np.testing.assert_allclose(mass, -np.minimum(raw, 0).sum(1) / raw.sum(1), atol=1e-12)
    assert mass.max() > 0


def test_conditional_mean_accuracy_on_gaussian():
    X, Y = bivariate_gaussian(2000, seed=3)
    Xq = np.linspace(-2, 2, 41)[:, None]
    for positivity in ("grid", "clip"):
        model = JDL(GaussianKernel(0.5), GaussianKernel(0.5), reg=1e-4, tol=1e-6, positivity=positivity).fit(X, Y)
        error = np.sqrt(np.mean((model.conditional_expectation(Xq)[:, 0] - 0.8 * Xq[:, 0]) ** 2))
        assert error < 0.12


def test_predict_proba_discrete_y(rng):
    X = rng.standard_normal((300, 1))
    labels = (X[:, 0] + 0.5 * rng.standard_normal(300) > 0).astype(float)
    model = JDL(GaussianKernel(0.5), DeltaKernel(), reg=1e-4, tol=1e-8).fit(X, labels)
    proba = model.predict_proba(np.array([[-2.0], [0.0], [2.0]]))
    np.testing.assert_array_equal(model.classes_, [0.0, 1.0])
    np.testing.assert_allclose(proba.sum(1), 1.0, atol=1e-12)
    assert proba[0, 0] > 0.8 and proba[2, 1] > 0.8
    assert proba.min() >= -1e-12


def test_multivariate_y_second_moments_and_joint_cdf(rng):
    X = rng.standard_normal((300, 2))
    Y = np.column_stack([X[:, 0] + 0.3 * rng.standard_normal(300), X[:, 1] - 0.3 * rng.standard_normal(300)])
    model = JDL(GaussianKernel(1.0), GaussianKernel(1.0), reg=1e-4, tol=1e-3).fit(X, Y)
    Xq = rng.standard_normal((5, 2))
    M = model.conditional_expectation(Xq, lambda y: y[:, :, None] * y[:, None, :])
    assert M.shape == (5, 2, 2)
    assert np.all(np.linalg.eigvalsh(M) >= -1e-12)  # PSD: a non-negative measure generated them
    cdf = model.conditional_cdf(Xq, [[0.0, 0.0], [10.0, 10.0]])
    np.testing.assert_allclose(cdf[:, 1], 1.0, atol=1e-12)
    with pytest.raises(ValueError, match="thresholds"):
        model.conditional_cdf(Xq, [0.0])


@pytest.mark.parametrize(
    "kwargs, X, Y, message",
    [
        ({}, [[0.0], [np.nan]], [[0.0], [1.0]], "X: contains NaN"),
        ({}, [[0.0], [1.0]], [[0.0], [np.inf]], "Y: contains NaN or inf"),
        ({}, [[0.0], [1.0], [2.0]], [[0.0], [1.0]], "same number of rows"),
        ({}, np.zeros((0, 1)), np.zeros((0, 1)), "X: needs at least 2"),
        ({}, [[1.0]], [[1.0]], "X: needs at least 2"),
        ({"constraints": "bounded"}, [[0.0], [1.0]], [[0.0], [1.0]], "constraints: unknown value 'bounded'"),
        ({"positivity": "magic"}, [[0.0], [1.0]], [[0.0], [1.0]], "positivity: unknown value"),
        ({"reg": -1.0}, [[0.0], [1.0]], [[0.0], [1.0]], "reg: must be finite and >= 0"),
        ({"kernel_x": "gaussian"}, [[0.0], [1.0]], [[0.0], [1.0]], "kernel_x: must be a jdlcore Kernel"),
        ({}, [["a"], ["b"]], [[0.0], [1.0]], "X: must be numeric"),
        ({}, np.zeros((2, 2, 2)), [[0.0], [1.0]], "X: must be 1-D"),
    ],
)
def test_bad_input_is_one_clear_error(kwargs, X, Y, message):
    with pytest.raises(ValueError, match=message):
        JDL(**kwargs).fit(np.asarray(X), np.asarray(Y))


def test_bad_lengthscale_and_query_shape(data):
    with pytest.raises(ValueError, match="lengthscale"):
        JDL(GaussianKernel(0.0))
    model = JDL(constraints="normalization").fit(*data)
    with pytest.raises(ValueError, match="Xq: has 2 features"):
        model.conditional_weights(np.zeros((3, 2)))
    with pytest.raises(ValueError, match="levels"):
        model.conditional_quantile(np.zeros((3, 1)), [1.5])
    with pytest.raises(RuntimeError, match="fit"):
        JDL().conditional_weights(np.zeros((1, 1)))


def test_losses_match_definitions(rng):
    target = rng.standard_normal((6, 2, 2))
    predicted = target + 0.1 * rng.standard_normal((6, 2, 2))
    expected = np.mean([np.sum((t - p) ** 2) / np.sum(t**2) for t, p in zip(target, predicted)])
    assert relative_second_moment_loss(predicted, target) == pytest.approx(expected, rel=1e-12)
    p = np.array([0.2, -0.1, 1.3, 0.7])
    event = np.array([True, True, False, False])
    eta = 1e-12
    expected = -np.mean([np.log(0.2), np.log(eta), np.log(eta), np.log(0.3)])
    assert clipped_logistic_loss(p, event, eta) == pytest.approx(expected, rel=1e-12)


def test_registered_second_moments_match_the_pass_over_the_atoms(data):
    from jdlcore import build_problem

    X, Y = data
    kernels = GaussianKernel(0.5), GaussianKernel(0.4)
    problem = build_problem(X, Y, *kernels, tol=1e-6, test_functions={"second_moment": second_moment})
    registered = JDL(*kernels, reg=1e-5, tol=1e-6).fit_problem(problem, Y)
    plain = JDL(*kernels, reg=1e-5, tol=1e-6).fit(X, Y)
    assert "second_moment" in registered.registered_ and "second_moment" not in plain.registered_
    Xq = np.linspace(-2, 2, 9)[:, None]
    by_atoms = registered.conditional_expectation(Xq, second_moment)
    brute = np.einsum("qj,jab->qab", registered.conditional_weights(Xq), second_moment(Y))
    np.testing.assert_allclose(by_atoms, brute, atol=1e-10)
    np.testing.assert_allclose(conditional_second_moments(registered, Xq), brute, atol=1e-10)
    np.testing.assert_allclose(conditional_second_moments(plain, Xq), brute, atol=1e-10)


def test_tune_reuses_factors_and_picks_the_best(data):
    X, Y = data
    result = tune(X, Y, estimator=JDL(tol=1e-4, constraints="normalization"),
                  lengthscales_x=(0.3, 1.0), lengthscales_y=(0.5,), regs=(1e-5, 1e-2))
    assert len(result.table) == 4
    scores = result.scores()
    assert result.best["score"] == scores.min()
    assert result.model.kernel_x.lengthscale == result.best["lengthscale_x"]
    assert result.model.n_samples_ == 400
    custom = tune(X, Y, estimator=JDL(tol=1e-4, constraints="normalization"), lengthscales_x=(0.5,),
                  lengthscales_y=(0.5,), regs=(1e-3,), criterion=lambda m, x, y: 42.0, refit=False)
    assert custom.best["score"] == 42.0
    with pytest.raises(ValueError, match="threshold"):
        tune(X, Y, criterion="logistic")


def test_grid_positivity_needs_x_values(data):
    from dataclasses import replace

    from jdlcore import build_problem

    X, Y = data
    problem = replace(build_problem(X, Y, GaussianKernel(0.6), GaussianKernel(0.6), tol=1e-4), A_x=None)
    with pytest.raises(ValueError, match="positivity: 'grid' needs the basis values A_x"):
        JDL(GaussianKernel(0.6), GaussianKernel(0.6)).fit_problem(problem, Y)
    model = JDL(GaussianKernel(0.6), GaussianKernel(0.6), constraints="normalization").fit_problem(problem, Y)
    assert not model.uses_grid and np.isfinite(model.coef_).all()


def test_clipped_and_streamed_queries_equal_cached_ones():
    """Atoms streamed block by block (A_Y recomputed per block, nothing cached) give the same
    clipped expectations, weights, negative mass and quantiles as the cached single block."""
    from jdlcore.atoms import Atoms

    X, Y = bivariate_gaussian(600, seed=21)
    model = JDL(GaussianKernel(0.4), GaussianKernel(0.4), reg=1e-5, tol=1e-6, constraints="positivity",
                positivity="clip").fit(X, Y)
    Xq = np.linspace(-4, 4, 23)[:, None]
    f = lambda y: np.column_stack([y[:, 0], np.sin(y[:, 0])])  # noqa: E731
    cached = (model.conditional_expectation(Xq, f), model.conditional_weights(Xq), model.negative_mass(Xq),
              model.conditional_quantile(Xq, [0.2, 0.8]))
    assert cached[2].max() > 0  # far from the data some weights are negative: clipping matters
    model.atoms_ = Atoms(model.y_atoms_, model.basis_y_, block_rows=101, cache_entries=0)
    streamed = (model.conditional_expectation(Xq, f), model.conditional_weights(Xq), model.negative_mass(Xq),
                model.conditional_quantile(Xq, [0.2, 0.8]))
    for a, b in zip(streamed[:3], cached[:3]):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(streamed[3], cached[3])
    weights = cached[1]
    np.testing.assert_allclose(cached[0], weights @ f(Y), rtol=0, atol=1e-12)  # against the explicit weights


def test_negative_share_counts_negative_radon_nikodym_values_block_by_block():
    X, Y = bivariate_gaussian(3000)
    model = JDL(GaussianKernel(0.3), GaussianKernel(0.3), reg=1e-7, constraints="normalization").fit(X, Y)
    Xq = np.linspace(-4, 4, 40)[:, None]
    share = model.negative_share(Xq)
    np.testing.assert_array_equal(share, np.mean(model.radon_nikodym(Xq) < -1e-12, axis=1))
    assert share.max() > 0  # far queries of an unconstrained fit do go negative


def test_problem_from_factors_is_build_problem_on_given_factorisations(data):
    from jdlcore import build_problem, pivoted_cholesky
    from jdlcore.jdl import problem_from_factors

    X, Y = data
    kx, ky = GaussianKernel(0.5), GaussianKernel(0.4)
    whole = build_problem(X, Y, kx, ky, tol=1e-6)
    paired = problem_from_factors(pivoted_cholesky(kx, X, tol=1e-6), pivoted_cholesky(ky, Y, tol=1e-6), kx, ky, Y)
    np.testing.assert_array_equal(paired.A_x, whole.A_x)
    np.testing.assert_array_equal(paired.reductions.cross, whole.reductions.cross)
    assert paired.factors["rank_y"] == whole.factors["rank_y"]
