"""Weighted support atoms (jdlcore.conditional.support) against brute-force sums over the training atoms."""
import numpy as np
import pytest

from jdlcore import JDL, Factorisation, GaussianKernel, build_problem
from jdlcore.models.problem import marginal_sums
from jdlcore.conditional.support import (
    MarginalSums, Support, build_support, finish_support, plan_support, reweight, sample_rows, sum_groups,
    support_partial, two_point_rule, value_range,
)

cp = pytest.importorskip("cvxpy")


def heteroscedastic(n, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-3, 3, n)
    return x[:, None], (np.sin(x) + x / 3 + (0.15 + 0.25 * np.abs(x)) * rng.standard_normal(n))[:, None]


def brute_force_sums(Y, features):
    """sum_j f(y_j) [1, Psi_Y(y_j)] for f = 1, y, y^2 (scalar Y), by an explicit loop-free product."""
    P = np.column_stack([np.ones(Y.shape[0]), features(Y)])
    return [P.sum(axis=0), (Y[:, :1] * P).sum(axis=0), (Y[:, :1] ** 2 * P).sum(axis=0)]


@pytest.fixture(scope="module")
def fitted():
    X, Y = heteroscedastic(20_000)
    model = JDL(GaussianKernel(0.4), GaussianKernel(0.2), reg=1e-6, tol=1e-3).fit(X, Y)  # m_Y = 47
    return model, X, Y


def test_support_reproduces_every_kept_sum_to_1e10(fitted):
    """On the demo's data (lengthscale_y 0.2, m_Y = 47) the default 512 atoms carry the normalisation,
    mean and second moment groups: each sum over the M atoms equals the sum over the n training atoms
    to 1e-10 (relative to its size)."""
    model, X, Y = fitted
    support = model.support_
    assert support.construction == "bins" and support.exact == "second moment"
    assert 300 <= support.size <= 512
    features = model.basis_y_.features
    P = np.column_stack([np.ones(support.size), features(support.atoms)])
    n = Y.shape[0]
    for power, brute in enumerate(brute_force_sums(Y, features)):
        on_support = n * (support.weights * support.atoms[:, 0] ** power) @ P
        scale = np.abs(np.column_stack([np.ones(n), features(Y)]) * Y ** power).sum(axis=0)
        assert np.max(np.abs(on_support - brute) / scale) < 1e-10


def test_signed_law_on_the_support_equals_the_signed_law_on_the_training_atoms(fitted):
    """Because the sums are kept, the signed conditional mean and second moment on M atoms equal those
    of the n training atoms (brute force through radon_nikodym), at any x."""
    model, X, Y = fitted
    signed = JDL(**{**model.get_params(deep=False), "constraints": "normalization"}).fit(X, Y)
    Xq = np.linspace(-5, 5, 31)[:, None]
    raw = signed.radon_nikodym(Xq)
    W = raw / raw.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(signed.conditional_expectation(Xq)[:, 0], W @ Y[:, 0], rtol=0, atol=1e-9)
    np.testing.assert_allclose(signed.conditional_expectation(Xq, lambda y: y**2)[:, 0], W @ Y[:, 0] ** 2,
                               rtol=0, atol=1e-9)


def test_distinct_values_are_kept_exactly():
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 7, 3000).astype(float)
    X = labels[:, None] + rng.standard_normal((3000, 1))
    model = JDL(GaussianKernel(0.5), GaussianKernel(0.5), reg=1e-5).fit(X, labels)
    support = model.support_
    assert support.construction == "distinct" and support.defect == 0.0
    values, counts = np.unique(labels, return_counts=True)
    np.testing.assert_array_equal(support.atoms[:, 0], values)
    np.testing.assert_array_equal(support.weights, counts / 3000)


def test_reweight_is_the_chi_square_projection_onto_the_sums():
    """Against cvxpy: min sum (w - c)^2 / c  s.t.  columns^T w = targets, w >= 0."""
    rng = np.random.default_rng(2)
    counts = rng.integers(1, 30, 40).astype(float)
    columns = np.column_stack([np.ones(40), rng.standard_normal((40, 3))])
    targets = columns.T @ (counts * rng.uniform(0.8, 1.2, 40))
    weights, defect = reweight(columns, counts, targets)
    w = cp.Variable(40)
    cp.Problem(cp.Minimize(cp.sum(cp.multiply(1 / counts, cp.square(w - counts)))),
               [columns.T @ w == targets, w >= 0]).solve(solver=cp.CLARABEL)
    np.testing.assert_allclose(weights, w.value, rtol=0, atol=1e-6)
    assert defect < 1e-12 and weights.min() >= 0


def test_partials_add_up_over_blocks_as_over_the_whole():
    _, Y = heteroscedastic(5000, seed=3)
    plan = plan_support(Y[sample_rows(5000, 0, 1000)], 200, resolution=0.05)
    whole = support_partial(Y, plan)
    parts = [support_partial(Y[a:a + 777], plan) for a in range(0, 5000, 777)]
    total = parts[0]
    for part in parts[1:]:
        total = total + part
    np.testing.assert_array_equal(total.counts, whole.counts)
    np.testing.assert_allclose(total.sums, whole.sums, rtol=1e-12)
    cells = plan.assign(Y)
    for cell in np.unique(cells)[::7]:  # each cell's least and greatest member, by brute force
        members = Y[cells == cell, 0]
        assert total.lows[cell, 0] == members.min() and total.highs[cell, 0] == members.max()
    empty = total.counts == 0
    assert np.all(np.isinf(total.lows[empty])) and np.all(np.isinf(total.highs[empty]))
    assert total.n == 5000 and total.counts.sum() == 5000 and total.distinct is None
    assert np.all(np.diff(plan.edges) > 0)


def test_bins_resolve_the_kernel_where_equal_count_bins_are_wide():
    """Half the edges on an even grid of spacing >= half the Y lengthscale: no bin wider than that."""
    _, Y = heteroscedastic(20_000, seed=4)
    plan = plan_support(Y, 512, resolution=0.05)  # 256 bins of two atoms, 128 of them from the even grid
    widths = np.diff(np.concatenate([[Y.min()], plan.edges, [Y.max()]]))
    assert widths.max() <= max(0.05, (Y.max() - Y.min()) / 128) + 1e-12
    assert plan.cells <= 256


def test_vector_y_cells_reproduce_the_sums_they_report():
    """A vector Y (M = 600 cells, m_Y = 36): the weights carry the normalisation group, and its sums
    over the atoms equal the brute-force sums over the n training atoms to 1e-10 (relative to their size)."""
    rng = np.random.default_rng(5)
    X = rng.standard_normal((4000, 2))
    Y = np.column_stack([X[:, 0] + 0.3 * rng.standard_normal(4000), rng.standard_normal(4000)])
    model = JDL(GaussianKernel(1.0), GaussianKernel(1.0), reg=1e-4, tol=1e-3, support_size=600).fit(X, Y)
    support = model.support_
    assert support.construction == "cells" and support.size <= 600 and support.exact == "normalization"
    features = model.basis_y_.features
    on_support = 4000 * support.weights @ np.column_stack([np.ones(support.size), features(support.atoms)])
    brute = np.column_stack([np.ones(4000), features(Y)])
    relative = np.abs(on_support - brute.sum(axis=0)) / np.abs(brute).sum(axis=0)
    assert relative.max() < 1e-10 and support.defect < 1e-9


def test_vector_y_cells_without_reweighting_keep_the_mean():
    """Cells whose sums cannot be carried (a tolerance no reweighting meets) fall back to the cell
    means with their counts: not even the normalisation group is claimed, and the mean of y stays
    exact (each atom is its cell's mean, weighted by the cell's count)."""
    rng = np.random.default_rng(6)
    X = rng.standard_normal((3000, 1))
    Y = np.column_stack([X[:, 0], 50.0 * rng.standard_normal(3000)])
    problem = build_problem(X, Y, GaussianKernel(1.0), GaussianKernel(1.0), Factorisation(tol=1e-3))
    plan = plan_support(Y, 300, seed=0)
    partial = support_partial(Y[:1000], plan) + support_partial(Y[1000:], plan)
    support = finish_support(partial, problem.basis_y.features, marginal_sums(problem.reductions, problem.function_sums),
                             tolerance=-1.0)
    assert support.construction == "cells" and support.exact == "none" and support.defect > 0
    np.testing.assert_allclose(support.weights @ support.atoms, Y.mean(axis=0), rtol=1e-13, atol=1e-13)


def test_sum_groups_are_the_normalisation_mean_and_second_moment_columns():
    atoms = np.array([[0.0, 1.0], [2.0, -1.0], [1.0, 1.0]])
    psi = np.array([[1.0], [2.0], [3.0]])
    from jdlcore.conditional.atoms import FunctionSums

    sums = MarginalSums(3, np.array([6.0]), FunctionSums(np.zeros((1, 2)), np.zeros(2), (2,)),
                        FunctionSums(np.zeros((1, 4)), np.zeros(4), (2, 2)))
    groups = sum_groups(atoms, psi, sums)
    assert [g[0].shape[1] for g in groups] == [2, 4, 6]  # [1, psi], y_i [1, psi], y_i y_j [1, psi] (i <= j)
    np.testing.assert_array_equal(groups[1][0][:, 2:], atoms[:, 1:2] * np.column_stack([np.ones(3), psi]))
    np.testing.assert_array_equal(groups[2][0][:, 2:4], atoms[:, :1] * atoms[:, 1:2] * np.column_stack([np.ones(3), psi]))


def test_support_of_a_problem_is_reused_across_reg(fitted):
    model, X, Y = fitted
    problem = build_problem(X[:3000], Y[:3000], GaussianKernel(0.4), GaussianKernel(0.2), Factorisation(tol=1e-3))
    first = JDL(GaussianKernel(0.4), GaussianKernel(0.2), reg=1e-6).fit_problem(problem, Y[:3000])
    second = JDL(GaussianKernel(0.4), GaussianKernel(0.2), reg=1e-3).fit_problem(problem, Y[:3000])
    assert first.support_ is second.support_ is problem.support
    smaller = JDL(GaussianKernel(0.4), GaussianKernel(0.2), reg=1e-3, support_size=100).fit_problem(problem, Y[:3000])
    assert smaller.support_.requested == 100 and smaller.support_.size <= 100


def test_support_class_is_plain_data():
    support = Support(np.zeros((2, 1)), np.array([0.5, 0.5]), "distinct")
    assert support.size == 2 and support.d == 1
    assert set(support.to_arrays()) == {"support_atoms", "support_weights"}


def test_build_support_from_blocks_equals_the_single_block(fitted):
    model, X, Y = fitted
    from jdlcore.models.problem import marginal_sums

    sums = marginal_sums(model.reductions_, model._training_sums)
    args = (Y[sample_rows(Y.shape[0], 0)], 512, model.basis_y_.features, sums, 0, 0.1)
    whole = build_support([Y], *args)
    blocks = build_support([Y[a:a + 1000] for a in range(0, Y.shape[0], 1000)], *args)
    np.testing.assert_allclose(blocks.atoms, whole.atoms, rtol=1e-11)  # sums in another order
    # The weights solve an ill-conditioned system (they agree to about 1e-4); what they keep is unique:
    assert blocks.exact == whole.exact == "second moment"
    Xq = np.linspace(-3, 3, 20)[:, None]
    R = model._directions(Xq)
    for support in (blocks, whole):
        assert support.defect < 1e-9
    means = [((1 + R @ model.basis_y_.features(s.atoms).T) * s.weights) @ s.atoms[:, 0]
             / ((1 + R @ model.basis_y_.features(s.atoms).T) @ s.weights) for s in (blocks, whole)]
    np.testing.assert_allclose(means[0], means[1], rtol=0, atol=1e-10)


def test_default_size_is_four_atoms_per_sum_kept():
    """(1 + d + d (d + 1) / 2) (1 + m_Y) sums in the three groups, four atoms each, at least 512."""
    from jdlcore.conditional.support import default_support_size

    assert default_support_size(1, 340) == 4 * 3 * 341
    assert default_support_size(2, 100) == 4 * 6 * 101
    assert default_support_size(1, 20) == 512


def test_a_large_y_basis_gets_the_atoms_to_keep_every_sum():
    """A right-skewed y at a short y lengthscale: m_Y is large, and 512 atoms cannot carry the three
    groups' sums (3 (1 + m_Y) of them), so the default sizes the support to the basis. Its sums then
    equal the brute-force sums over the n training atoms to 1e-8 relative to their size (the weights
    meet them to 1e-9 relative to the atoms' own terms, ``finish_support``; the tail atoms reach y = 20)."""
    rng = np.random.default_rng(5)
    x = rng.uniform(-2, 2, 6_000)
    Y = np.exp(0.5 * x + 0.8 * rng.standard_normal(x.size))[:, None]
    kernels = dict(kernel_x=GaussianKernel(0.5), kernel_y=GaussianKernel(0.08), reg=1e-6, tol=1e-5)  # m_Y = 213
    model = JDL(**kernels).fit(x[:, None], Y)
    m_y = model.basis_y_.size
    assert 3 * (1 + m_y) > 256  # over half of 512 atoms: the old default could not carry them
    assert JDL(**kernels, support_size=512).fit(x[:, None], Y).support_.exact == "none"
    support = model.support_
    assert support.requested == 12 * (1 + m_y) and support.exact == "second moment"
    features = model.basis_y_.features
    P = np.column_stack([np.ones(support.size), features(support.atoms)])
    scale_rows = np.column_stack([np.ones(Y.shape[0]), features(Y)])
    for power, brute in enumerate(brute_force_sums(Y, features)):
        on_support = Y.shape[0] * (support.weights * support.atoms[:, 0] ** power) @ P
        scale = np.abs(scale_rows * Y ** power).sum(axis=0)
        assert np.max(np.abs(on_support - brute) / scale) < 1e-8


def test_the_grid_covers_the_rows_that_the_sample_missed(fitted):
    """The plan's sample misses the ten lowest and ten highest rows (a sample of 131,072 of a million
    rows misses the extremes). With the atoms' range as ``span`` (``value_range``) the grid covers them and the support
    keeps every group's sums over the n training atoms to 1e-10 (relative to their size); without it
    the rows beyond the sample fall in one wide cell each side, and the mean's sums are not kept (on
    the million rows, not even the normalisation's)."""
    model, X, Y = fitted
    sums = marginal_sums(model.reductions_, model._training_sums)
    features = model.basis_y_.features
    ordered = np.sort(Y[:, 0])
    sample = Y[(Y[:, 0] >= ordered[10]) & (Y[:, 0] <= ordered[-11])]
    missed = build_support([Y], sample, 512, features, sums, 0, 0.1)
    assert missed.exact in ("none", "normalization")  # the mean's sums are lost in the wide end cells
    span = value_range([Y[:7_000], Y[7_000:]])
    np.testing.assert_array_equal(span, [[ordered[0]], [ordered[-1]]])
    covered = build_support([Y], sample, 512, features, sums, 0, 0.1, span)
    assert covered.exact == "second moment"
    n = Y.shape[0]
    P = np.column_stack([np.ones(covered.size), features(covered.atoms)])
    for power, brute in enumerate(brute_force_sums(Y, features)):
        on_support = n * (covered.weights * covered.atoms[:, 0] ** power) @ P
        scale = np.abs(np.column_stack([np.ones(n), features(Y)]) * Y ** power).sum(axis=0)
        assert np.max(np.abs(on_support - brute) / scale) < 1e-10


def _groups_of_values():
    """Groups of values the bins meet: interior (mean -+ sd inside the range), mostly one end's value
    (zeros with a few positives, and the mirror), one outlier, two values, and equal values."""
    rng = np.random.default_rng(11)
    return [rng.normal(3.0, 0.5, 200), np.r_[np.zeros(97), rng.uniform(0, 0.01, 3)],
            np.r_[np.full(95, 2.0), 2.0 - rng.exponential(0.3, 5)], np.r_[np.ones(50), 40.0],
            np.array([-1.0, 5.0]), np.full(9, 7.25), np.r_[np.zeros(999), 1e-3], np.full(7, 0.1)]


def test_the_two_point_rule_keeps_each_bin_s_moments_inside_its_range():
    """Brute force on each group: the two atoms keep its count (shares sum to 1), mean and variance to
    1e-12 (relative), and lie in [min, max]; mean -+ sd with equal shares where those lie in the range;
    an atom on the range's end where they do not (the zeros stay at 0); equal values summed with
    rounding, one atom at their mean, without a warning."""
    groups = _groups_of_values()
    mean = np.array([g.mean() for g in groups])
    variance = np.array([g.var() for g in groups])
    # the last group's moments as the bins sum them: seven 0.1s leave a mean an ulp above 0.1 and a
    # variance of 1.7e-18, which took t to 1e300 and overflowed its square
    mean[-1] = groups[-1].sum() / 7
    variance[-1] = (groups[-1] ** 2).sum() / 7 - mean[-1] ** 2
    assert mean[-1] != 0.1 and variance[-1] > 0
    low, high = np.array([g.min() for g in groups]), np.array([g.max() for g in groups])
    atoms, shares = two_point_rule(mean, variance, low, high)
    np.testing.assert_allclose(shares.sum(axis=1), 1.0, rtol=0, atol=1e-15)
    assert np.all(shares >= 0)
    scale = np.maximum(np.abs(mean), 1.0)
    np.testing.assert_allclose((shares * atoms).sum(axis=1), mean, rtol=0, atol=1e-12 * scale.max())
    np.testing.assert_allclose((shares * (atoms - mean[:, None]) ** 2).sum(axis=1), variance, rtol=1e-10,
                               atol=1e-15)
    inside_range = (atoms >= low[:, None]) & (atoms <= high[:, None])
    assert np.all(inside_range[:-1]) and shares[-1, 0] == 1.0 and atoms[-1, 0] == mean[-1]  # one atom
    spread = np.sqrt(variance)
    inside = (mean - spread >= low) & (mean + spread <= high)
    assert inside[0] and not inside[1] and not inside[2] and not inside[3]
    np.testing.assert_allclose(atoms[inside], np.column_stack([mean - spread, mean + spread])[inside], rtol=1e-14)
    np.testing.assert_array_equal(shares[inside & (variance > 0)], 0.5)
    assert atoms[1, 0] == 0.0 and atoms[6, 0] == 0.0 and atoms[2, 1] == 2.0 and atoms[3, 0] == 1.0
    np.testing.assert_array_equal(atoms[4], [-1.0, 5.0])  # two values: the group itself
    assert atoms[5, 0] == 7.25 and shares[5, 0] == 1.0  # equal values: one atom


def test_a_y_often_zero_gets_laws_with_no_mass_below_zero():
    """A y >= 0 that is 0 on 30-90% of the rows (more at larger x): the bins holding the zeros kept their
    moments with atoms at mean -+ sd, one of them below 0, and the laws put up to 42% of their mass
    there. With the bins' atoms in their range the least atom is 0, every law has no mass below it,
    P(y <= 0 | x) is the law's mass at 0 (it grows with x, as the zeros' share does), the quantiles below
    that mass are exactly 0, and the support still reproduces the normalisation's sums."""
    rng = np.random.default_rng(0)
    n = 20_000
    x = rng.uniform(-1, 1, (n, 1))
    zero_share = 0.6 + 0.3 * x[:, 0]
    Y = np.where(rng.uniform(size=n) < zero_share, 0.0, rng.lognormal(0.0, 1.0, n) * (1 + x[:, 0] ** 2))[:, None]
    model = JDL(GaussianKernel(0.3), GaussianKernel(0.1), reg=1e-4, scaling="robust").fit(x, Y)
    assert model.support_.construction == "bins" and model.support_.exact != "none"
    assert model.support_atoms_.min() == 0.0
    grid = np.linspace(-0.9, 0.9, 7)[:, None]
    at_zero = model.conditional_cdf(grid, [0.0])[:, 0]
    np.testing.assert_allclose(model.conditional_cdf(grid, [-1e-9])[:, 0], 0.0, atol=1e-12)
    assert np.all(np.diff(at_zero) > 0)
    np.testing.assert_allclose(at_zero, 0.6 + 0.3 * grid[:, 0], atol=0.06)
    np.testing.assert_array_equal(model.conditional_quantile(grid, [0.05, 0.25]), 0.0)
