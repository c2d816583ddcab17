"""Conditional laws on support atoms (jdlcore.conditional.laws) against independent computations: the projection
against a conic solver (cvxpy), clipping and quantiles against brute force, the CRPS against quadrature."""
import numpy as np
import pytest

from jdlcore.conditional.laws import MomentBasis, apply_rule, crps, quantiles
from jdlcore.conditional.support import Support

from .conftest import step_crps

cp = pytest.importorskip("cvxpy")


def scalar_support(M=60, seed=0):
    rng = np.random.default_rng(seed)
    atoms = np.sort(rng.standard_normal(M) * 1.3 + 0.2)[:, None]
    weights = rng.uniform(0.5, 1.5, M)
    return Support(atoms, weights / weights.sum(), "bins", 0.0, "second moment", M)


def ringing_rows(support, count=8, seed=1):
    """Values R = 1 + h(x, z_k) of a narrow conditional law with negative side lobes, as a kernel fit
    gives: a Mexican hat (positive mass, negative shoulders) on a small floor."""
    rng = np.random.default_rng(seed)
    z = support.atoms[:, 0]
    rows = []
    for _ in range(count):
        t = (z - rng.uniform(-1, 1)) / rng.uniform(0.3, 0.6)
        rows.append(0.02 + 5.0 * np.exp(-0.5 * t * t) * (1.0 - 0.2 * t * t))
    return np.array(rows)


def reference_projection(R, support, columns):
    """min sum (p - pi u)^2 / pi  s.t.  p >= 0, sum_k p_k c(z_k) = sum_k pi_k u_k c(z_k)  (cvxpy, Clarabel)."""
    pi = support.weights
    out = []
    for r in R:
        u = r / (pi @ r)
        target = (pi * u) @ columns
        p = cp.Variable(pi.size)
        problem = cp.Problem(cp.Minimize(cp.sum(cp.multiply(1 / pi, cp.square(p - pi * u)))),
                             [p >= 0, columns.T @ p == target])
        problem.solve(solver=cp.CLARABEL, tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12)
        out.append(p.value)
    return np.array(out)


def test_projection_equals_the_conic_solution_and_keeps_the_moments():
    support = scalar_support()
    basis = MomentBasis(support)
    R = ringing_rows(support)
    assert R.min() < 0  # there is something to project
    P, level = apply_rule(R.copy(), support.weights, "project", basis)
    np.testing.assert_array_equal(level, 2)
    np.testing.assert_allclose(P, reference_projection(R, support, basis.columns), rtol=0, atol=1e-7)
    signed = support.weights * R / (R @ support.weights)[:, None]
    np.testing.assert_allclose(P @ basis.columns, signed @ basis.columns, rtol=0, atol=1e-12)
    assert P.min() >= 0
    np.testing.assert_allclose(P.sum(1), 1.0, rtol=0, atol=1e-14)


def test_projection_of_a_vector_y_equals_the_conic_solution():
    """A vector y keeps mass and mean (level 1)."""
    rng = np.random.default_rng(3)
    atoms = rng.standard_normal((80, 2))
    weights = np.full(80, 1 / 80)
    support = Support(atoms, weights, "cells", 0.0, "second moment", 80)
    basis = MomentBasis(support)
    assert basis.columns.shape == (80, 3)  # 1, z1, z2
    centre = np.array([0.3, -0.2])
    distance = np.sum((atoms - centre) ** 2, axis=1)
    R = (0.05 + 6.0 * np.exp(-distance / 0.6) * (1.0 - distance / 1.2))[None, :]  # a Mexican hat in 2-D
    assert R.min() < 0
    P, level = apply_rule(R.copy(), weights, "project", basis)
    assert level[0] == 1
    np.testing.assert_allclose(P, reference_projection(R, support, basis.columns), rtol=0, atol=1e-7)
    np.testing.assert_allclose(P @ atoms, (weights * R / (R @ weights)) @ atoms, rtol=0, atol=1e-12)


@pytest.mark.parametrize("d", [2, 3, 4])
def test_projection_of_a_vector_y_equals_the_conic_solution_row_by_row(d):
    """Six rows of ringing laws on 150 atoms in d dimensions, each keeping its mass and d means (level 1).
    d = 2 and 3 run the fused four-row loops (2 padded with a zero row), d = 4 the general ones."""
    rng = np.random.default_rng(4)
    spread = np.array([1.0, 2.0, 0.5, 1.5])[:d]
    atoms = rng.standard_normal((150, d)) * spread
    weights = rng.uniform(0.5, 1.5, 150)
    weights /= weights.sum()
    support = Support(atoms, weights, "cells", 0.0, "normalization", 150)
    basis = MomentBasis(support)
    assert basis.columns.shape == (150, d + 1)
    rows = []
    for centre in rng.standard_normal((6, d)) * 0.5:
        distance = np.sum(((atoms - centre) / spread) ** 2, axis=1)
        rows.append(0.05 + 6.0 * np.exp(-distance / (0.4 * d)) * (1.0 - distance / (0.8 * d)))
    R = np.array(rows)
    assert (R.min(axis=1) < 0).all()
    P, level = apply_rule(R.copy(), weights, "project", basis)
    np.testing.assert_array_equal(level, 1)
    np.testing.assert_allclose(P, reference_projection(R, support, basis.columns), rtol=0, atol=1e-7)
    np.testing.assert_allclose(P @ atoms, (weights * R / (R @ weights)[:, None]) @ atoms, rtol=0, atol=1e-12)
    assert P.min() >= 0
    np.testing.assert_allclose(P.sum(1), 1.0, rtol=0, atol=1e-14)


def test_rows_without_negative_values_are_the_signed_law():
    support = scalar_support()
    R = 1.0 + 0.5 * np.sin(support.atoms[:, 0])[None, :]
    P, level = apply_rule(R.copy(), support.weights, "project", MomentBasis(support))
    np.testing.assert_allclose(P, support.weights * R / (R @ support.weights), rtol=0, atol=1e-15)
    assert level[0] == 2


def test_moments_that_no_probability_vector_has_are_let_go_in_order():
    """A signed law whose second moment is below its squared mean cannot be matched: the mean is
    kept; one whose mean lies beyond every atom keeps only the mass; one without positive mass
    becomes the closest probability vector to its weights. All stay probability vectors."""
    support = scalar_support()
    z = support.atoms[:, 0]
    basis = MomentBasis(support)
    pi = support.weights
    middle, last = z.size // 2, z.size - 1
    signed = np.zeros((3, z.size))
    signed[0, [middle, 0, last]] = [2.0, -0.5, -0.5]  # the outer atoms' negative mass: variance < 0
    signed[1, [last, 0]] = [1.5, -0.5]  # mean beyond the last atom
    signed[2] = -pi  # no positive mass at all
    R = signed / pi
    normalised = pi * R / (R @ pi)[:, None]
    mean, second = normalised @ z, normalised @ z**2
    assert second[0] < mean[0] ** 2 and mean[1] > z.max() and (R[2] @ pi) < 0  # the three cases hold
    P, level = apply_rule(R.copy(), pi, "project", basis)
    np.testing.assert_array_equal(level, [1, 0, -1])
    assert P.min() >= 0
    np.testing.assert_allclose(P.sum(1), 1.0, rtol=0, atol=1e-14)
    assert P[0] @ z == pytest.approx(mean[0], abs=1e-12)  # level 1 keeps the mean
    # each row is the chi-square projection keeping what its level names (cvxpy): mass and mean, mass,
    # and for the row without positive mass, mass 1 near its signed weights pi R themselves
    np.testing.assert_allclose(P[:1], reference_projection(R[:1], support, basis.columns[:, :2]), rtol=0, atol=1e-7)
    np.testing.assert_allclose(P[1:2], reference_projection(R[1:2], support, basis.columns[:, :1]), rtol=0, atol=1e-7)
    p = cp.Variable(z.size)
    cp.Problem(cp.Minimize(cp.sum(cp.multiply(1 / pi, cp.square(p - pi * R[2])))), [p >= 0, cp.sum(p) == 1]).solve(
        solver=cp.CLARABEL, tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12)
    np.testing.assert_allclose(P[2], p.value, rtol=0, atol=1e-7)


def test_clip_is_the_brute_force_clip_over_the_support():
    support = scalar_support()
    R = ringing_rows(support)
    P, level = apply_rule(R.copy(), support.weights, "clip")
    expected = support.weights * np.maximum(R, 0)
    np.testing.assert_allclose(P, expected / expected.sum(1, keepdims=True), rtol=0, atol=1e-15)
    assert level is None
    nothing = apply_rule(-np.ones((1, support.size)), support.weights, "clip")[0]
    np.testing.assert_allclose(nothing[0], support.weights)  # nothing left: the marginal


def test_one_pass_quantiles_equal_the_per_level_search():
    rng = np.random.default_rng(5)
    values = rng.standard_normal(300)
    P = rng.dirichlet(np.ones(300) * 0.3, size=40)
    levels = np.array([0.9, 0.01, 0.5, 0.25, 1.0, 0.999])  # unsorted on purpose
    fast = quantiles(P, values, levels)
    order = np.argsort(values, kind="stable")
    for i in range(P.shape[0]):
        cdf = np.cumsum(P[i, order])
        for k, level in enumerate(levels):
            index = np.searchsorted(cdf, level * (1 - 1e-12))  # first cumulative weight >= level
            assert fast[i, k] == values[order][min(index, values.size - 1)]


def test_quantiles_at_levels_the_cdf_hits_exactly_are_the_atoms_where_it_does():
    """The generalised inverse inf{z: F(z) >= level}: where F equals a level at an atom, that atom (a
    strict inequality would give the next one), as scipy's discrete law says."""
    from scipy.stats import rv_discrete

    values = np.array([3.0, -1.0, 0.5, 2.0])  # unsorted on purpose
    P = np.full((1, 4), 0.25)
    levels = np.array([0.25, 0.5, 0.75, 1.0, 0.3])
    law = rv_discrete(values=(np.arange(4), [0.25] * 4))  # on the ranks of the sorted values
    expected = np.sort(values)[law.ppf(levels).astype(int)]
    np.testing.assert_array_equal(quantiles(P, values, levels)[0], expected)
    np.testing.assert_array_equal(expected, [-1.0, 0.5, 2.0, 3.0, 0.5])


def test_quantiles_of_a_signed_law_use_the_running_maximum():
    values = np.array([0.0, 1.0, 2.0, 3.0])
    P = np.array([[0.6, -0.2, 0.3, 0.3]])  # running CDF 0.6, 0.4, 0.7, 1.0
    np.testing.assert_array_equal(quantiles(P, values, np.array([0.5, 0.65, 1.0])), [[0.0, 2.0, 3.0]])
    short = np.array([[0.3, 0.3, -0.2, 0.1]])  # never reaches 0.9
    assert np.isnan(quantiles(short, values, np.array([0.9])))[0, 0]


def test_crps_equals_the_exact_integral_of_the_step_cdf():
    rng = np.random.default_rng(7)
    values = rng.standard_normal(50)
    P = rng.dirichlet(np.ones(50), size=6)
    y = np.array([-3.0, -0.5, 0.0, values[3], 1.2, 4.0])  # outside, between and on an atom
    exact = [step_crps(lambda t, p=p: (p[None, :] * (values[None, :] <= t[:, None])).sum(axis=1), y_i, values)
             for p, y_i in zip(P, y)]
    np.testing.assert_allclose(crps(P, values, y), exact, rtol=0, atol=1e-12)
    # one law for every row, as a broadcast view (the marginal's loss): the same as the rows spelled out
    one_law = crps(np.broadcast_to(P[0], (6, 50)), values, y)
    np.testing.assert_array_equal(one_law, crps(np.tile(P[0], (6, 1)), values, y))


def test_map_rows_covers_every_row_once_on_the_pool_with_single_threaded_blas(monkeypatch):
    """Each block runs whole in a pool thread (when the pool has several), with BLAS at one thread
    there; BLAS's own thread count is back afterwards. Nested pool work runs on the pool's threads."""
    import threading

    from threadpoolctl import threadpool_info

    import jdlcore.pool as pool
    import jdlcore.conditional.laws as laws

    def blas_threads() -> list[int]:
        return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]

    monkeypatch.setattr(pool, "_THREADS", 2)  # a pool of two threads on any machine
    monkeypatch.setattr(laws, "ROW_ELEMENTS", 40)  # 4 rows per block at width 10: many blocks
    before = blas_threads()
    seen = []

    def work(rows):
        inner = pool.pool_map(lambda item: threading.current_thread().name, [0, 1, 2])
        seen.append((threading.current_thread().name, blas_threads(), inner))
        return rows

    out = laws.map_rows(103, 10, work)
    np.testing.assert_array_equal(np.concatenate([np.arange(r.start, r.stop) for r in out]), np.arange(103))
    assert [r.stop - r.start for r in out[:-1]] == [4] * (len(out) - 1)
    assert len(seen) == len(out) == -(-103 // 4)
    for name, threads, inner in seen:
        assert name.startswith("jdl-kernel") and len(inner) == 3 and all(n.startswith("jdl-kernel") for n in inner)
        assert all(t == 1 for t in threads)
    assert blas_threads() == before
    # fewer rows than a block: split evenly over the pool's threads, not left to one of them
    monkeypatch.setattr(laws, "ROW_ELEMENTS", 1 << 20)
    assert [(r.start, r.stop) for r in laws.map_rows(11, 10, lambda rows: rows)] == [(0, 6), (6, 11)]


@pytest.mark.parametrize("d", [3, 4])
def test_the_projection_passes_against_numpy(d):
    """The compiled passes of the vector-y Newton (d = 3: the fused four-row loops; d = 4: the general
    ones) against NumPy at random multipliers: t = scale u + theta . C, w = pi [t >= 0], F = C (w t),
    the value sum w t^2 and the Jacobian C diag(w) C^T."""
    from jdlcore.conditional import _law_kernels as kernels

    rng = np.random.default_rng(9)
    M = 301
    pi = rng.uniform(0.1, 1.0, M)
    basis = MomentBasis(Support(rng.standard_normal((M, d)), pi / pi.sum(), "cells", 0.0, "normalization", M))
    C, rows = basis.columns_by_row, d + 1
    u, theta = rng.standard_normal(M), rng.standard_normal(rows) * 0.5
    t = 0.7 * u + theta @ C
    w = np.where(t >= 0, pi, 0.0)
    F, wk, wt = np.zeros(rows), np.empty(M), np.empty(M)
    value = kernels._pass(u, 0.7, pi, C, theta, rows, F, wk, wt)
    np.testing.assert_allclose(value, np.sum(w * t * t), rtol=1e-12)
    np.testing.assert_allclose(F, C @ (w * t), rtol=0, atol=1e-12)
    np.testing.assert_array_equal(wk, w)
    np.testing.assert_allclose(wt, w * t, rtol=0, atol=1e-14)
    J, S = np.zeros((rows, rows)), np.zeros(basis.monomials.shape[0])
    kernels._jacobian(C, basis.monomials, basis.products, w, rows, S, J)
    np.testing.assert_allclose(J, (C * w) @ C.T, rtol=0, atol=1e-12)
