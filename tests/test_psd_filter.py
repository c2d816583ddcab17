"""The PSD filter (jdlcore.psd.filter) against a quadrature of the recursion (20) on a fine grid."""
import numpy as np
import pytest

from jdlcore.psd.filter import PSDFilter, psd_quantiles
from jdlcore.psd.model import GaussianPSDModel

GRID = np.linspace(-9.0, 9.0, 3601)  # spacing 0.005: the trapezoid rule is spectrally accurate here
STEP = GRID[1] - GRID[0]


def random_model(rng, centres, lengthscale, rank=None):
    n = centres.shape[0]
    G = rng.standard_normal((n, rank or n))
    return GaussianPSDModel(G @ G.T, centres, lengthscale)


@pytest.fixture
def hmm():
    """A transition tau(x', x) pulling x' toward 0.7 x, an observation omega(y, x) around y = x, a prior;
    each a random Gaussian PSD model (signed mixtures, not Gaussians)."""
    rng = np.random.default_rng(7)
    x = rng.uniform(-2.0, 2.0, 5)
    transition = random_model(rng, np.column_stack([0.7 * x + 0.1 * rng.standard_normal(5), x]), [0.6, 0.8])
    z = rng.uniform(-2.0, 2.0, 4)
    observation = random_model(rng, np.column_stack([z + 0.2 * rng.standard_normal(4), z]), [0.5, 0.7])
    prior = random_model(rng, rng.uniform(-1.0, 1.0, (3, 1)), 0.9)
    return transition, observation, prior


def integrate(values):
    """The trapezoid rule on GRID along the last axis."""
    return STEP * (values.sum(axis=-1) - 0.5 * (values[..., 0] + values[..., -1]))


def quadrature_filter(transition, observation, prior, ys):
    """The recursion (20) on GRID: beliefs (T, grid) normalised, and each step's log evidence."""
    X1, X0 = np.meshgrid(GRID, GRID, indexing="ij")
    tau = transition(np.column_stack([X1.ravel(), X0.ravel()])).reshape(GRID.size, GRID.size)
    belief = prior(GRID[:, None])
    belief /= integrate(belief)
    beliefs, evidence = [], []
    for y in ys:
        predicted = integrate(tau * belief[None, :])
        predicted /= integrate(predicted)
        joint = observation(np.column_stack([np.full(GRID.size, y), GRID])) * predicted
        evidence.append(np.log(integrate(joint)))
        belief = joint / integrate(joint)
        beliefs.append(belief)
    return np.array(beliefs), np.array(evidence)


def test_each_filter_step_equals_a_quadrature_of_the_recursion(hmm):
    transition, observation, prior = hmm
    ys = [0.4, -0.9, 1.3]
    result = PSDFilter(transition, observation, prior).run(ys, levels=[0.1, 0.5, 0.9])
    expected, evidence = quadrature_filter(transition, observation, prior, ys)
    for t, belief in enumerate(result.beliefs):
        assert belief.integral() == pytest.approx(1.0, abs=1e-12)
        density = belief(GRID[:, None])
        assert np.max(np.abs(density - expected[t])) < 1e-8 * np.max(expected[t])
        mean = integrate(GRID * expected[t])
        assert result.means[t, 0] == pytest.approx(mean, abs=1e-8)
        assert result.variances[t, 0] == pytest.approx(integrate((GRID - mean) ** 2 * expected[t]), abs=1e-8)
        cdf = np.concatenate([[0.0], np.cumsum(0.5 * (expected[t][1:] + expected[t][:-1]) * STEP)])
        np.testing.assert_allclose(result.quantiles[t, 0], np.interp([0.1, 0.5, 0.9], cdf, GRID), atol=2e-5)
    np.testing.assert_allclose(result.log_evidence, evidence, rtol=0, atol=1e-8)
    ffilter = PSDFilter(transition, observation, prior)  # each step's predictive mass (quadrature-checked below)
    before = [prior.normalized(), *result.beliefs[:-1]]
    np.testing.assert_allclose(result.predicted_mass, [ffilter.predictive_mass(ffilter.predict(b)) for b in before],
                               rtol=1e-12)
    # the base points stay fixed: n m of them from the second step on
    assert {belief.n for belief in result.beliefs} == {transition.n * observation.n}
    np.testing.assert_array_equal(result.beliefs[1].centers, result.beliefs[2].centers)


def test_the_prediction_is_a_psd_model_and_the_predictive_law_of_y_matches_quadrature(hmm):
    transition, observation, prior = hmm
    ffilter = PSDFilter(transition, observation, prior)
    belief, _ = ffilter.step(prior.normalized(), 0.4)
    predicted = ffilter.predict(belief)
    assert np.linalg.eigvalsh(predicted.A).min() > -1e-12 * np.abs(predicted.A).max()
    X1, X0 = np.meshgrid(GRID, GRID, indexing="ij")
    tau = transition(np.column_stack([X1.ravel(), X0.ravel()])).reshape(GRID.size, GRID.size)
    by_grid = integrate(tau * belief(GRID[:, None])[None, :])
    by_grid /= integrate(by_grid)
    assert np.max(np.abs(predicted(GRID[:, None]) - by_grid)) < 1e-8 * by_grid.max()
    law_y = ffilter.predictive_y(predicted)
    for y in (-1.0, 0.2, 1.7):
        joint = observation(np.column_stack([np.full(GRID.size, y), GRID])) * by_grid
        assert law_y(np.array([[y]]))[0] == pytest.approx(integrate(joint), rel=1e-8)
    # the mass by quadrature over y as well, and in closed form over the product's centres
    assert ffilter.predictive_mass(predicted) == pytest.approx(integrate(law_y(GRID[:, None])), rel=1e-8)
    assert ffilter.predictive_mass(predicted) == pytest.approx(law_y.integral(), rel=1e-12)
    mean, variance = ffilter.predictive_moments(predicted)  # without forming the product's n N centres
    assert mean[0] == pytest.approx(law_y.mean()[0], abs=1e-12)
    assert variance[0] == pytest.approx(law_y.covariance()[0, 0], rel=1e-11)


def test_compression_onto_a_superset_of_the_centres_is_exact_and_onto_fewer_stays_close(hmm):
    transition, observation, prior = hmm
    exact = PSDFilter(transition, observation, prior).run([0.4, -0.9])
    centres = exact.beliefs[0].centers
    same = PSDFilter(transition, observation, prior, compress_to=centres).run([0.4, -0.9])
    np.testing.assert_allclose(same.means, exact.means, atol=1e-7)
    fewer = PSDFilter(transition, observation, prior, compress_to=np.linspace(-4, 4, 25)[:, None]).run([0.4, -0.9])
    assert fewer.beliefs[1].n == 25
    np.testing.assert_allclose(fewer.means, exact.means, atol=1e-3)


def test_bad_input_is_refused_by_name(hmm):
    transition, observation, prior = hmm
    with pytest.raises(ValueError, match=r"^transition: must have 2 d_x = 2 coordinates"):
        PSDFilter(prior, observation, prior)
    with pytest.raises(ValueError, match=r"^y: must be 1 finite value"):
        PSDFilter(transition, observation, prior).run([0.3, np.nan])
    with pytest.raises(ValueError, match=r"^levels: must lie in \(0, 1\)"):
        PSDFilter(transition, observation, prior).run([0.3], levels=[0.5, 1.0])
    with pytest.raises(ValueError, match=r"^model: quantiles need a one-coordinate model"):
        psd_quantiles(transition, [0.5])


def test_the_compressed_step_equals_compressing_the_whole_product(hmm):
    """The observe step with ``compress_to`` never forms the n m x n m product, and equals forming it and
    compressing it (eq. 9) to rounding; its evidence is the product's exact integral."""
    transition, observation, prior = hmm
    centres = np.linspace(-3.0, 3.0, 17)[:, None]
    ffilter = PSDFilter(transition, observation, prior, compress_to=centres)
    predicted = ffilter.predict(prior.normalized())
    fused, log_evidence = ffilter.update(predicted, 0.4)
    likelihood = observation.partial_evaluate(([0], [0.4]))
    whole = predicted.product(likelihood)
    expected = whole.normalized().compress(centres).normalized()
    np.testing.assert_allclose(fused.A, expected.A, rtol=0, atol=1e-10 * np.abs(expected.A).max())
    assert log_evidence == pytest.approx(np.log(whole.integral()), abs=1e-12)
