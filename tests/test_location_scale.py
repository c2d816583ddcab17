"""A model of a standardised y, r = (y - location) / scale, read on y's scale: every answer against the
law of y built by hand (atoms location + scale z_k with the law of r's weights, clipped to y's range
where there is one), by brute force."""
import numpy as np
import pytest

from jdlcore import JDL, GaussianKernel
from jdlcore.conditional.laws import crps as law_crps
from jdlcore.conditional.location_scale import LocationScale, cdf_per_row, crps_per_row, own_law_crps

TIGHT = 1e-10


@pytest.fixture(scope="module")
def fitted():
    """A JDL of r given x on 400 rows (r's law depends on x), and 25 queries with their own location and
    scale, some far from the data."""
    rng = np.random.default_rng(3)
    X = rng.uniform(-2, 2, size=(400, 1))
    r = (np.sin(X[:, 0]) + (0.3 + 0.2 * np.abs(X[:, 0])) * rng.standard_normal(400))[:, None]
    model = JDL(GaussianKernel(0.6), GaussianKernel(0.4), reg=1e-6).fit(X, r)
    Xq = np.vstack([rng.uniform(-2, 2, size=(22, 1)), [[-6.0], [0.0], [7.5]]])
    on = LocationScale.of(rng.normal(scale=50.0, size=25), np.exp(rng.normal(size=25)))
    return model, Xq, on


def by_hand(model, Xq, on):
    """The laws of y at the queries: per-row atoms (q, M), clipped to ``on``'s range, and their weights (q, M)."""
    z = model.support_atoms_[:, 0]
    atoms = np.clip(on.location[:, None] + on.scale[:, None] * z[None, :], on.low, on.high)
    return atoms, model.conditional_weights(Xq)


def bounded(on):
    """``on`` with y's range [0, 20]: it cuts the laws of its first four rows inside (located at the ends
    of the range or widened past both), and holds every atom of others at one of its ends (their location
    is far outside it)."""
    location, scale = on.location.copy(), on.scale.copy()
    location[:4], scale[:4] = [0.0, 20.0, 10.0, 1.0], [1.0, 1.0, 15.0, 2.0]
    return LocationScale.of(location, scale, low=0.0, high=20.0)


def partly_cut(atoms, P, on):
    """The rows whose law has mass strictly inside the range and mass held at one of its ends."""
    inside = np.sum(P * ((atoms > on.low) & (atoms < on.high)), axis=1)
    held = np.sum(P * ((atoms == on.low) | (atoms == on.high)), axis=1)
    return (inside > 0.01) & (held > 0.01)


@pytest.mark.parametrize("ranged", [False, True], ids=["unbounded", "range"])
def test_moments_cdf_and_quantiles_match_the_law_of_y(fitted, ranged):
    model, Xq, on = fitted
    on = bounded(on) if ranged else on
    atoms, P = by_hand(model, Xq, on)
    assert np.all(P >= 0) and np.allclose(P.sum(axis=1), 1, atol=1e-12)  # the law of y is a probability vector
    if ranged:  # the hard cases are there: laws cut inside, and laws held at one end
        assert np.any(np.all(atoms == on.low, axis=1)) and np.any(np.all(atoms == on.high, axis=1))
        assert partly_cut(atoms, P, on).sum() >= 3
    thresholds = np.array([-80.0, -10.0, 0.0, 3.0, 19.0, 20.0, 60.0])
    levels = np.array([0.05, 0.5, 0.9, 0.99])
    got = model.answer_requests({"mean": ("mean", None), "second_moment": ("second_moment", None),
                                 "cdf": ("cdf", thresholds), "q": ("quantile", levels)}, Xq, on=on)
    assert got["mean"].shape == (25, 1) and got["second_moment"].shape == (25, 1, 1)
    np.testing.assert_allclose(got["mean"][:, 0], np.sum(P * atoms, axis=1), rtol=TIGHT, atol=TIGHT)
    np.testing.assert_allclose(got["second_moment"][:, 0, 0], np.sum(P * atoms**2, axis=1), rtol=TIGHT)
    cdf = np.stack([np.sum(P * (atoms <= t), axis=1) for t in thresholds], axis=1)
    np.testing.assert_allclose(got["cdf"], cdf, atol=TIGHT)
    for i in range(len(Xq)):  # the smallest atom whose running mass reaches each level
        order = np.argsort(atoms[i])
        running = np.cumsum(P[i, order])
        for k, level in enumerate(levels):
            assert got["q"][i, k] == atoms[i, order][np.argmax(running >= level * (1 - 1e-12))]


@pytest.mark.parametrize("ranged", [False, True], ids=["unbounded", "range"])
def test_crps_on_y_is_the_brute_force_crps_of_the_law_of_y(fitted, ranged):
    model, Xq, on = fitted
    on = bounded(on) if ranged else on
    atoms, P = by_hand(model, Xq, on)
    y = on.location + on.scale * np.linspace(-3, 3, len(Xq))  # in the range and out of it, at its ends too
    if ranged:
        y[[3, 7]] = on.low, on.high
        assert partly_cut(atoms, P, on).sum() >= 3
    pairwise = np.abs(atoms[:, :, None] - atoms[:, None, :])
    expected = (np.sum(P * np.abs(atoms - y[:, None]), axis=1)
                - 0.5 * np.einsum("ij,ijk,ik->i", P, pairwise, P))
    np.testing.assert_allclose(model.crps(Xq, y, on=on), expected, rtol=1e-9)


def test_unit_location_scale_gives_the_plain_answers(fitted):
    model, Xq, _ = fitted
    unit = LocationScale.of(np.zeros(len(Xq)), np.ones(len(Xq)))
    thresholds, levels = np.array([-1.0, 0.2, 1.5]), np.array([0.1, 0.5, 0.9])
    requests = {"mean": ("mean", None), "second_moment": ("second_moment", None), "q": ("quantile", levels)}
    plain = model.answer_requests(requests, Xq)
    read = model.answer_requests({**requests, "cdf": ("cdf", thresholds)}, Xq, on=unit)
    for name in requests:
        np.testing.assert_allclose(read[name], plain[name], rtol=TIGHT, atol=TIGHT)
    np.testing.assert_allclose(read["cdf"], model.conditional_cdf(Xq, thresholds), atol=TIGHT)
    y = np.linspace(-1, 1, len(Xq))
    np.testing.assert_allclose(model.crps(Xq, y, on=unit), model.crps(Xq, y), rtol=TIGHT)


def test_the_pit_and_the_quantiles_read_the_clipped_law_and_stay_in_the_range(fitted):
    """``LocationScale.pit`` against F(y-) + V (F(y) - F(y-)) of the clipped law by hand (an observation
    below the range has PIT 0, one at its low end V times the mass held there); every quantile in range."""
    model, Xq, on = fitted
    on = bounded(on)
    atoms, P = by_hand(model, Xq, on)
    y = on.location + on.scale * np.linspace(-3, 3, len(Xq))
    y[[3, 7, 11]] = on.low, on.high, on.low - 5.0
    uniform = np.random.default_rng(0).uniform(size=len(Xq))
    pit = on.pit(P, model.support_atoms_[:, 0], y, uniform)
    below, at = np.sum(P * (atoms < y[:, None]), axis=1), np.sum(P * (atoms == y[:, None]), axis=1)
    np.testing.assert_allclose(pit, np.clip(below + uniform * at, 0, 1), atol=TIGHT)
    assert pit[11] == 0.0 and at[3] > 0
    levels = np.array([0.01, 0.25, 0.5, 0.75, 0.99])
    q = model.answer_requests({"q": ("quantile", levels)}, Xq, on=on)["q"]
    assert np.all((q >= on.low) & (q <= on.high)) and np.any(q == on.low) and np.any(q == on.high)


@pytest.mark.parametrize("low, high", [(1.0, 1.0), (2.0, 1.0), (np.nan, 1.0), (0.0, np.nan)])
def test_a_range_without_low_below_high_is_refused(low, high):
    with pytest.raises(ValueError, match="summaries: y's range must have low < high"):
        LocationScale.of([0.0], [1.0], where="summaries", low=low, high=high)


def test_cdf_per_row_counts_an_atom_at_the_threshold_and_keeps_signed_weights():
    values = np.array([2.0, -1.0, 0.5, 0.5])
    P = np.array([[0.1, 0.2, 0.3, 0.4], [-0.2, 0.6, 0.3, 0.3]])
    order = np.argsort(values, kind="stable")
    thresholds = np.array([[-1.0, 0.5, 1.9, 2.0], [-2.0, 0.49, 0.5, 9.0]])
    expected = np.array([[0.2, 0.9, 0.9, 1.0], [0.0, 0.6, 1.2, 1.0]])
    np.testing.assert_allclose(cdf_per_row(P, values, order, thresholds), expected, atol=1e-15)


def test_tiny_scale_far_location_keeps_the_atoms_apart(fitted):
    model, Xq, _ = fitted
    on = LocationScale.of(np.full(len(Xq), 1e6), np.full(len(Xq), 1e-6))
    atoms, P = by_hand(model, Xq, on)
    z = model.support_atoms_[:, 0]
    t = 1e6 + 1e-6 * np.median(z)
    got = model.answer_requests({"cdf": ("cdf", np.array([t]))}, Xq, on=on)["cdf"][:, 0]
    np.testing.assert_allclose(got, np.sum(P * (atoms <= t), axis=1), atol=TIGHT)


@pytest.mark.parametrize("location, scale, message", [
    ([0.0, 1.0], [1.0], "2 locations for 1 scales"),
    ([0.0, 1.0], [1.0, 0.0], "every scale must be finite and > 0; row 1 has 0.0"),
    ([0.0, 1.0], [-1.0, 1.0], "row 0 has -1.0"),
    ([np.nan, 1.0], [1.0, 1.0], "every location must be finite; row 0 has nan"),
])
def test_bad_location_or_scale_is_refused_by_row(location, scale, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        LocationScale.of(location, scale, where="summaries")


def test_requests_it_cannot_move_and_wrong_lengths_are_refused(fitted):
    model, Xq, on = fitted
    with pytest.raises(ValueError, match="'p': a model of a standardised y answers mean, second_moment, cdf"):
        model.answer_requests({"p": ("proba", np.array([0.0]))}, Xq, on=on)
    with pytest.raises(ValueError, match="on: has 25 locations and scales for 3 queries"):
        model.answer_requests({"mean": ("mean", None)}, Xq[:3], on=on)
    with pytest.raises(ValueError, match="y: has 3 rows"):
        model.crps(Xq, np.zeros(3), on=on)


@pytest.mark.parametrize("ranged", [False, True], ids=["unbounded", "range"])
def test_a_criterion_read_on_y_scale_is_the_loss_of_the_law_of_y(fitted, ranged):
    """``OnYScale``: the crps or pinball loss of the law of y the model answers with (moved, and clipped to
    y's range where there is one), at y = location + scale r, by brute force; other criteria are refused."""
    from jdlcore.conditional.losses import CRPSLoss, PinballLoss, SecondMomentLoss, pinball_loss
    from jdlcore.tuning import OnYScale

    model, Xq, on = fitted
    on = bounded(on) if ranged else on
    atoms, P = by_hand(model, Xq, on)
    r = np.linspace(-2, 2, len(Xq))[:, None]
    y = on.location + on.scale * r[:, 0]
    crps = OnYScale(CRPSLoss(), lambda X: on)(model, Xq, r)
    brute = (np.sum(P * np.abs(atoms - y[:, None]), axis=1)
             - 0.5 * np.einsum("ij,ijk,ik->i", P, np.abs(atoms[:, :, None] - atoms[:, None, :]), P))
    assert np.isclose(crps, brute.mean(), rtol=1e-9)
    unclipped = np.mean(on.scale * model.crps(Xq, r))  # the loss of r times the scale: the law before the clip
    assert np.isclose(crps, unclipped, rtol=1e-9) != ranged
    levels = np.array([0.1, 0.5, 0.9])
    pinball = OnYScale(PinballLoss(levels), lambda X: on)(model, Xq, r)
    quantiles_y = model.answer_requests({"q": ("quantile", levels)}, Xq, on=on)["q"]
    assert np.isclose(pinball, pinball_loss(quantiles_y, y, levels), rtol=1e-12)
    with pytest.raises(ValueError, match="standardising y needs crps or pinball"):
        OnYScale(SecondMomentLoss(), lambda X: on)


def test_the_marginal_ratio_on_y_scale_compares_with_the_rows_own_law_of_y(fitted):
    """``marginal_ratio(on=)``: the model's CRPS on y's scale over that of the law of the rows' own y
    (each 1 / q), both by brute force; without it the ratio is r's against the support's marginal."""
    model, Xq, on = fitted
    r = np.linspace(-2, 2, len(Xq))[:, None]
    y = on.location + on.scale * r[:, 0]
    atoms, P = by_hand(model, Xq, on)
    pairwise = np.abs(atoms[:, :, None] - atoms[:, None, :])
    model_crps = np.sum(P * np.abs(atoms - y[:, None]), axis=1) - 0.5 * np.einsum("ij,ijk,ik->i", P, pairwise, P)
    own_crps = np.mean(np.abs(y[None, :] - y[:, None]), axis=1) - 0.5 * np.mean(np.abs(y[:, None] - y[None, :]))
    ratio, name = model.marginal_ratio(Xq, r, on=on)
    assert name == "CRPS" and np.isclose(ratio, model_crps.mean() / own_crps.mean(), rtol=1e-9)
    assert not np.isclose(model.marginal_ratio(Xq, r)[0], ratio)


def test_the_crps_on_atoms_of_each_row_s_own_is_the_pairwise_sum_and_the_shared_atoms_one():
    """``crps_per_row`` against E|X - y| - E|X - X'| / 2 by brute force, with ties, a row far from 0 and
    observations beyond the atoms; on atoms every row shares, the same as ``laws.crps``."""
    rng = np.random.default_rng(11)
    P = rng.dirichlet(np.ones(9), size=6)
    ascending = np.sort(rng.normal(size=(6, 9)), axis=1)
    ascending[1, :4] = ascending[1, 4]  # a law held at one end (ties)
    ascending[2] += 1e7
    y = np.array([0.1, -4.0, 1e7, 9.0, ascending[4, 0], 0.0])
    pairwise = np.abs(ascending[:, :, None] - ascending[:, None, :])
    brute = np.sum(P * np.abs(ascending - y[:, None]), axis=1) - 0.5 * np.einsum("ij,ijk,ik->i", P, pairwise, P)
    np.testing.assert_allclose(crps_per_row(P, ascending, y), brute, rtol=1e-9, atol=1e-9)
    shared = np.sort(rng.normal(size=9))
    np.testing.assert_allclose(crps_per_row(P, np.tile(shared, (6, 1)), y), law_crps(P, shared, y), rtol=1e-12)


def test_the_crps_under_the_values_own_law_is_the_pairwise_sum():
    """``own_law_crps`` against the q x q pairwise sums, with ties and a heavy tail."""
    rng = np.random.default_rng(5)
    y = np.concatenate([rng.standard_t(2, size=300), [0.5, 0.5, 0.5, -3.0, -3.0]])
    pairwise = np.abs(y[:, None] - y[None, :])
    np.testing.assert_allclose(own_law_crps(y), pairwise.mean(axis=1) - 0.5 * pairwise.mean(), rtol=1e-10,
                               atol=1e-12)
