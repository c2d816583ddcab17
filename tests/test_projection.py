"""The projection onto probability vectors on hard rows: narrow conditional laws and rows at the boundary
of the moment set, against a conic solver (cvxpy + Clarabel) and a linear program (HiGHS) for
feasibility; what a row gets when its solvers fail; and the arithmetic guards around the laws."""
import warnings

import numpy as np
import pytest

from jdlcore import JDL, GaussianKernel, Matern32Kernel
from jdlcore.conditional.laws import FAILED, MomentBasis, crps, project
from jdlcore.conditional.support import Support

linprog = pytest.importorskip("scipy.optimize").linprog


def conic_projection(u: np.ndarray, pi: np.ndarray, columns: np.ndarray) -> tuple[str, np.ndarray | None]:
    """(status, p) of min sum (p - pi u)^2 / pi  s.t.  p >= 0, columns^T p = columns^T (pi u) (Clarabel).
    ``columns`` (M, K) should be well scaled (the row's own coordinates): the problem is the same for
    any invertible recombination of the moment functions."""
    cp = pytest.importorskip("cvxpy")
    p = cp.Variable(pi.size)
    problem = cp.Problem(cp.Minimize(cp.sum(cp.multiply(1 / pi, cp.square(p - pi * u)))),
                         [p >= 0, columns.T @ p == columns.T @ (pi * u)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "solution may be inaccurate" is read from the status
        try:
            problem.solve(solver=cp.CLARABEL, tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12)
        except cp.error.SolverError:
            return "error", None
    return problem.status, p.value


def lp_feasible(columns: np.ndarray, target: np.ndarray) -> bool:
    """Whether some probability vector p on the atoms has columns^T p = target (HiGHS)."""
    result = linprog(np.zeros(columns.shape[0]), A_eq=columns.T, b_eq=target, bounds=(0, None), method="highs")
    return result.status == 0


def row_powers(y: np.ndarray, weights: np.ndarray, degree: int) -> np.ndarray:
    """[1, s, ..., s^degree] (M, degree + 1) at s = (y - mean) / spread of the positive part of ``weights``."""
    plus = np.maximum(weights, 0.0)
    mean = weights @ y
    s = (y - mean) / np.sqrt(plus @ (y - mean) ** 2 / plus.sum())
    return np.stack([s**k for k in range(degree + 1)], axis=1)


@pytest.fixture(scope="module")
def narrow():
    """3,000 rows of y = sin(x) + 0.02 e with lengthscales 0.05 / 0.05 and reg 1e-8 (the kind of setting a
    tuning picks on low-noise data); R = 1 + h at 2,000 query x from the data's range."""
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, (3000, 1))
    Y = np.sin(X) + 0.02 * rng.standard_normal((3000, 1))
    model = JDL(GaussianKernel(0.05), GaussianKernel(0.05), reg=1e-8).fit(X, Y)
    R = model._signed_values(model._directions(rng.uniform(-3, 3, (2000, 1))))
    return model, R


def test_a_narrow_model_keeps_every_moment_that_a_probability_vector_can_have(narrow):
    """Every row with negative signed weight among the first 240: where cvxpy keeps mass, mean and
    second moment the row is at level 2 with cvxpy's weights (1e-5) and the signed moments (1e-10);
    where no probability vector has them (cvxpy and an LP agree) it is at level 1 with the mean
    kept. Few rows need the exact path."""
    model, R = narrow
    pi, y = model.support_.weights, model.support_.atoms[:, 0]
    P, level, exact = project(R, pi, model._moments)
    assert np.mean(exact > 0) <= 0.01  # measured: none of the 2,000
    rows = np.flatnonzero(R.min(axis=1) < 0)[:240]
    signed = pi * R[rows] / (R[rows] @ pi)[:, None]
    powers = np.stack([np.ones_like(y), y, y * y], axis=1)
    np.testing.assert_allclose(P[rows] @ powers[:, :2], signed @ powers[:, :2], rtol=0, atol=1e-10)
    kept = feasible = 0
    for i, row in enumerate(rows):
        u = R[row] / (R[row] @ pi)
        columns = row_powers(y, pi * u, 2)
        status, reference = conic_projection(u, pi, columns)
        if status == "infeasible":
            assert not lp_feasible(columns, columns.T @ (pi * u)), row
            assert level[row] == 1, row
            continue
        assert status in ("optimal", "optimal_inaccurate"), (row, status)
        feasible += 1
        assert level[row] == 2, row
        np.testing.assert_allclose(P[row] @ powers, signed[i] @ powers, rtol=0, atol=1e-10)
        if status == "optimal":
            kept += 1
            np.testing.assert_allclose(P[row], reference, rtol=0, atol=1e-5)
    assert feasible >= 150 and kept >= 150 and len(rows) - feasible >= 30  # both kinds of row, in number
    assert P.min() >= 0 and not np.signbit(P).any()
    np.testing.assert_allclose(P.sum(axis=1), 1.0, rtol=0, atol=1e-14)


def test_a_narrow_two_dimensional_y_keeps_mass_and_mean_wherever_a_probability_vector_can():
    """y = (sin x, cos x) + 0.01 e, lengthscales 0.05 / 0.05: every row cvxpy can project keeping mass
    and mean is at level 1 with cvxpy's weights. (Before the rows' own coordinates, 824 of these
    2,000 rows were at level 0, 0.2 from cvxpy's weights, on 512 atoms.) m_Y = 512 here, so the
    default support is every training atom (3,000, more than its 24 (1 + m_Y)), on which cvxpy
    solves 73 of the 120 rows checked to "optimal" (the others "optimal_inaccurate": their mean is
    checked, not their weights)."""
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, (3000, 1))
    Y = np.hstack([np.sin(X), np.cos(X)]) + 0.01 * rng.standard_normal((3000, 2))
    model = JDL(GaussianKernel(0.05), GaussianKernel(0.05), reg=1e-8).fit(X, Y)
    R = model._signed_values(model._directions(rng.uniform(-3, 3, (2000, 1))))
    pi, atoms = model.support_.weights, model.support_.atoms
    P, level, _ = project(R, pi, model._moments)
    np.testing.assert_array_equal(level, 1)
    assert not np.signbit(P).any() and P.min() >= 0
    checked = 0
    for row in np.flatnonzero(R.min(axis=1) < 0)[:120]:
        u = R[row] / (R[row] @ pi)
        columns = np.hstack([np.ones((pi.size, 1)), atoms - (pi * u) @ atoms])
        status, reference = conic_projection(u, pi, columns)
        assert status in ("optimal", "optimal_inaccurate"), (row, status)
        np.testing.assert_allclose(P[row] @ atoms, (pi * u) @ atoms, rtol=0, atol=1e-10)
        if status == "optimal":
            checked += 1
            np.testing.assert_allclose(P[row], reference, rtol=0, atol=1e-5)
    assert checked >= 60


def boundary_rows(delta: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(R, support atoms, weights): ringing rows on 60 atoms whose second moment is moved to a relative
    distance ``delta`` of the boundary of the moment set (above the lower chord of the two atoms
    around the mean, below the chord of the outermost ones; inside for delta > 0, outside for < 0),
    their mass and mean unchanged; 31 centres x 3 widths x 2 chords."""
    rng = np.random.default_rng(0)
    z = np.sort(rng.standard_normal(60) * 1.3 + 0.2)
    pi = rng.uniform(0.5, 1.5, 60)
    pi /= pi.sum()
    basis = np.stack([np.ones(60), z], axis=1)
    q = z * z - basis @ np.linalg.solve(basis.T @ (pi[:, None] * basis), basis.T @ (pi * z * z))  # 1, z -> 0
    q /= pi @ (q * z * z)  # adding a q moves the second moment by a, nothing else
    rows = []
    for centre in np.linspace(-1.5, 1.5, 31):
        for width in (0.2, 0.4, 0.8):
            t = (z - centre) / width
            r = 0.02 + 5 * np.exp(-0.5 * t * t) * (1 - 0.2 * t * t)
            r /= pi @ r
            m1, m2 = pi @ (r * z), pi @ (r * z * z)
            i1 = np.searchsorted(z, m1, side="right")
            lower = z[i1 - 1] ** 2 + (z[i1] ** 2 - z[i1 - 1] ** 2) * (m1 - z[i1 - 1]) / (z[i1] - z[i1 - 1])
            upper = z[0] ** 2 + (z[-1] ** 2 - z[0] ** 2) * (m1 - z[0]) / (z[-1] - z[0])
            for target in (lower + delta * (upper - lower), upper - delta * (upper - lower)):
                rows.append(r + (target - m2) * q)
    return np.array(rows), z, pi


@pytest.mark.parametrize("delta", [1e-6, -1e-6, 1e-8, -1e-8])
def test_rows_at_the_boundary_of_the_moment_set_get_the_right_level(delta):
    """Within 1e-6 and 1e-8 (relative) of the boundary: inside, level 2 with the moments kept (1e-10)
    and cvxpy's weights where the exact path was needed; outside, level 1 (at 1e-6 an LP confirms
    which side each row is on; at 1e-8 the rows are built on their side by exact chords)."""
    R, z, pi = boundary_rows(delta)
    support = Support(z[:, None], pi, "bins", 0.0, "second moment", 60)
    P, level, exact = project(R, pi, MomentBasis(support))
    powers = np.stack([np.ones(60), z, z * z], axis=1)
    signed = pi * R / (R @ pi)[:, None]
    for row in range(len(R) if abs(delta) >= 1e-6 else 0):  # HiGHS's tolerance (1e-7) cannot tell 1e-8
        u = R[row] / (R[row] @ pi)
        feasible = lp_feasible(row_powers(z, pi * u, 2), row_powers(z, pi * u, 2).T @ (pi * u))
        assert feasible == (delta > 0), row
    np.testing.assert_array_equal(level, 2 if delta > 0 else 1)
    np.testing.assert_allclose(P @ powers[:, :3 if delta > 0 else 2], signed @ powers[:, :3 if delta > 0 else 2],
                               rtol=0, atol=1e-10)
    if delta > 0:
        for row in np.flatnonzero(exact)[:6]:
            u = R[row] / (R[row] @ pi)
            status, reference = conic_projection(u, pi, row_powers(z, pi * u, 2))
            if status == "optimal":
                np.testing.assert_allclose(P[row], reference, rtol=0, atol=1e-5)


@pytest.mark.parametrize("side", ["inside", "outside"])
def test_a_mean_at_the_edge_of_the_atoms_gets_the_right_level(side):
    """A signed mean 1e-6 of the span inside the last atom keeps it (level 1: the second moment cannot
    be kept that close to the edge); 1e-6 beyond it, only the mass is kept (level 0)."""
    rng = np.random.default_rng(2)
    z = np.sort(rng.standard_normal(50))
    pi = np.full(50, 1 / 50)
    support = Support(z[:, None], pi, "bins", 0.0, "second moment", 50)
    r = np.full(50, 0.05)
    r[-1], r[-2] = 30.0, -2.0
    mean = (pi * r / (pi @ r)) @ z
    shift = z[-1] - mean + (-1e-6 if side == "inside" else 1e-6) * (z[-1] - z[0])
    r2 = r + shift / (pi @ ((z - pi @ z) * z)) * (z - pi @ z) * (pi @ r)  # moves the mean by shift
    P, level, _ = project(r2[None, :], pi, MomentBasis(support))
    u = r2 / (pi @ r2)
    assert ((pi * u) @ z < z[-1]) == (side == "inside")
    assert level[0] == (1 if side == "inside" else 0)
    if side == "inside":
        assert P[0] @ z == pytest.approx((pi * u) @ z, abs=1e-10)
    assert P.min() >= 0 and P.sum() == pytest.approx(1.0, abs=1e-14)


def test_the_exact_path_alone_takes_boundary_rows_to_their_level():
    """With two fast iterations, every row 1e-6 inside the boundary is left to the exact path, which
    brings each to level 2 with the moments kept and cvxpy's weights."""
    R, z, pi = boundary_rows(1e-6)
    support = Support(z[:, None], pi, "bins", 0.0, "second moment", 60)
    P, level, exact = project(R, pi, MomentBasis(support), budgets=(2, 60))
    assert (exact > 0).all()
    np.testing.assert_array_equal(level, 2)
    powers = np.stack([np.ones(60), z, z * z], axis=1)
    np.testing.assert_allclose(P @ powers, (pi * R / (R @ pi)[:, None]) @ powers, rtol=0, atol=1e-10)
    for row in range(0, len(R), 31):
        u = R[row] / (R[row] @ pi)
        status, reference = conic_projection(u, pi, row_powers(z, pi * u, 2))
        assert status == "optimal"
        np.testing.assert_allclose(P[row], reference, rtol=0, atol=1e-5)


@pytest.mark.parametrize("fast, kept", [(8, "mass and mean"), (2, "mass")])
def test_a_row_the_solvers_cannot_certify_is_a_failure_with_a_lower_levels_vector(fast, kept):
    """With no exact path, the boundary rows fail at level 2: they are counted at level -2, never as a
    level they did not reach, and get the nearest probability vector of the highest lower level that
    converged (cvxpy): with 8 fast iterations mass and mean (every row), with 2 the mass alone."""
    R, z, pi = boundary_rows(1e-6)
    support = Support(z[:, None], pi, "bins", 0.0, "second moment", 60)
    P, level, _ = project(R, pi, MomentBasis(support), budgets=(fast, 0))
    np.testing.assert_array_equal(level, FAILED)
    u = R / (R @ pi)[:, None]
    mean_kept = np.abs(P @ z - (pi * u) @ z) < 1e-10
    assert mean_kept.all() if kept == "mass and mean" else not mean_kept.any()
    for row in range(0, len(R), 31):
        status, reference = conic_projection(u[row], pi, row_powers(z, pi * u[row], 1 if mean_kept[row] else 0))
        assert status == "optimal"
        np.testing.assert_allclose(P[row], reference, rtol=0, atol=1e-6)
    assert P.min() >= 0 and not np.signbit(P).any()
    np.testing.assert_allclose(P.sum(axis=1), 1.0, rtol=0, atol=1e-14)


@pytest.mark.parametrize("d", [2, 3, 4])
def test_a_vector_mean_is_kept_exactly_where_the_atoms_hull_holds_it(d):
    """Signed laws tilted along a random direction move their mean out of the atoms' hull: level 1 where
    an LP finds a probability vector with that mean, level 0 (the mass alone, proved by a certificate)
    where it finds none. d = 4 runs the general loops."""
    rng = np.random.default_rng(d)
    atoms = rng.standard_normal((150, d))
    pi = rng.uniform(0.5, 1.5, 150)
    pi /= pi.sum()
    rows, feasible = [], []
    for tilt in np.linspace(0.2, 6, 30):
        direction = rng.standard_normal(d)
        u = 1 + tilt * (atoms - pi @ atoms) @ (direction / np.linalg.norm(direction))
        rows.append(u)
        columns = np.hstack([np.ones((150, 1)), atoms])
        feasible.append(lp_feasible(columns, columns.T @ (pi * u) / (pi @ u)))
    R, feasible = np.array(rows), np.array(feasible)
    assert 5 <= feasible.sum() <= 25 and (R.min(axis=1) < 0).mean() > 0.8  # both kinds, most rows signed
    P, level, _ = project(R, pi, MomentBasis(Support(atoms, pi, "cells", 0.0, "normalization", 150)))
    np.testing.assert_array_equal(level, np.where(feasible, 1, 0))
    np.testing.assert_allclose(P[feasible] @ atoms, (pi * R[feasible] / (R[feasible] @ pi)[:, None]) @ atoms,
                               rtol=0, atol=1e-10)
    assert P.min() >= 0 and not np.signbit(P).any()


def test_fitting_records_the_projection_and_warns_when_rows_fail(narrow, monkeypatch):
    """``check_degeneracies`` (run by fit) records the levels at the training x it samples; a failed row
    there is a finding, with a warning."""
    import jdlcore.conditional.laws as laws

    model, _ = narrow
    record = model.diagnostics_["projection"]
    assert record["rows"] == 2000 and record["failed"] == 0.0
    assert abs(sum(record["levels"].values()) - 1.0) < 1e-12 and record["levels"]["2"] > 0.5
    monkeypatch.setitem(laws.BUDGETS, "scalar", (1, 0))
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, (3000, 1))
    Y = np.sin(X) + 0.02 * rng.standard_normal((3000, 1))
    with pytest.warns(UserWarning, match="projection_failed"):
        found = model.check_degeneracies(X[:500], Y[:500])
    assert "projection_failed" in found and model.diagnostics_["projection"]["failed"] > 0


@pytest.mark.parametrize("kernel", [GaussianKernel, Matern32Kernel])
def test_enormous_finite_x_gives_the_marginal_law(kernel):
    """Far beyond the data every kernel value is 0, so the law is the marginal (up to its normalisation's
    rounding), with no NaN from overflowing distances (|x| up to the largest double)."""
    rng = np.random.default_rng(1)
    X = rng.uniform(-3, 3, (400, 2))
    Y = X[:, :1] + 0.3 * rng.standard_normal((400, 1))
    model = JDL(kernel(3.0), GaussianKernel(0.5), reg=1e-6).fit(X, Y)
    far = np.array([[1e154, 0.0], [-1e200, 3.0], [1.7e308, -1.7e308], [0.0, 1e300]])
    W = model.conditional_weights(far)
    np.testing.assert_allclose(W, np.broadcast_to(model.support_.weights, W.shape), rtol=1e-14, atol=0)
    np.testing.assert_array_equal(model.law_levels(far), 2)
    assert np.all(np.isfinite(model.conditional_quantile(far, [0.1, 0.9])))


def test_the_crps_keeps_its_digits_under_a_large_offset_in_y():
    """The CRPS is translation invariant; computed relative to a centre, an offset of 1e10 costs no
    more than the offset's own rounding of the values."""
    rng = np.random.default_rng(3)
    values = rng.standard_normal(200)
    P = rng.dirichlet(np.ones(200), size=20)
    y = rng.standard_normal(20)
    base = crps(P, values, y)
    for offset in (1e8, 1e10):
        shifted = crps(P, values + offset, y + offset)
        rounding = np.spacing(offset) * 4  # the shifted values are themselves rounded by this much
        np.testing.assert_allclose(shifted, base, rtol=0, atol=rounding)


def test_the_exact_line_search_finds_the_minimum_along_the_step():
    """The breakpoint walk against a bounded scalar minimisation of the dual along -d,
    phi(alpha) = 0.5 sum pi max(0, t - alpha g)^2 + alpha b.d (including steps that are no descent:
    then 0); and np.inf where it falls without bound (every atom leaves and b.d < 0)."""
    from scipy.optimize import minimize_scalar

    from jdlcore.conditional import _law_exact as kernels

    rng = np.random.default_rng(5)
    M = 80
    for trial in range(20):
        pi, t, g = rng.uniform(0.1, 1, M), rng.standard_normal(M), rng.standard_normal(M)
        bd = -abs(rng.standard_normal()) - 0.1 * trial
        alpha = kernels._exact_line_search(t, g, pi, bd, np.empty(M), np.empty(M, dtype=np.int64))

        def phi(a):
            return 0.5 * np.sum(pi * np.maximum(0.0, t - a * g) ** 2) + a * bd

        best = minimize_scalar(phi, bounds=(0.0, 50.0), method="bounded", options={"xatol": 1e-12})
        assert phi(alpha) <= best.fun + 1e-12
        derivative = -np.sum(pi * np.maximum(0.0, t - alpha * g) * g) + bd
        if alpha > 0:  # an interior minimum: the (continuous) derivative is 0 there
            assert abs(derivative) < 1e-10
        else:  # -d is no descent direction: the minimum is at the start
            assert derivative >= 0
    t, g = rng.standard_normal(M), np.abs(rng.standard_normal(M)) + 0.1  # every atom leaves
    assert kernels._exact_line_search(t, g, np.ones(M), -1.0, np.empty(M), np.empty(M, dtype=np.int64)) == np.inf
    # an atom with a tiny slope stays after one with a huge one leaves, so a running slope cancels to 0;
    # the minimum is finite: past alpha = 1e-10, phi' = -1 + 0.5 (1 + 1e-3 alpha) 1e-3 = 0
    t, g, pi = np.array([1.0, 1.0]), np.array([1e10, -1e-3]), np.array([0.5, 0.5])
    alpha = kernels._exact_line_search(t, g, pi, -1.0, np.empty(2), np.empty(2, dtype=np.int64))
    assert alpha == pytest.approx((1.0 - 0.5 * 1e-3) / (0.5 * 1e-6), rel=1e-12)


def test_the_mass_multiplier_is_the_root_of_the_mass():
    """The weighted simplex projection's theta_0 against a bracketed root of sum pi max(0, v + theta) - 1."""
    from scipy.optimize import brentq

    from jdlcore.conditional import _law_kernels as kernels

    rng = np.random.default_rng(6)
    for scale in (1.0, 0.3, 7.0):
        u, pi = rng.standard_normal(120) * 3, rng.uniform(0.1, 1, 120)
        pi /= pi.sum()
        theta = kernels._mass_multiplier(u, scale, pi, np.empty(120, dtype=np.int64))
        root = brentq(lambda c: np.sum(pi * np.maximum(0.0, scale * u + c)) - 1.0, -100, 100, xtol=1e-14)
        assert theta == pytest.approx(root, abs=1e-12)


def test_the_scalar_pass_in_a_rows_coordinates_against_numpy():
    """``_power_pass`` at s = (z - centre) inv: the sums sum w s^p (p <= 4), sum w t s^p (p <= 2) and
    sum w t^2 with t = scale u + theta . (1, s, s^2), w = pi [t >= 0]."""
    from jdlcore.conditional import _law_kernels as kernels

    rng = np.random.default_rng(7)
    z, u, pi = np.sort(rng.standard_normal(200)), rng.standard_normal(200), rng.uniform(0.1, 1, 200)
    centre, inv, scale, theta = 0.3, 2.5, 0.8, np.array([0.2, -0.4, 0.1])
    s = (z - centre) * inv
    t = scale * u + theta @ np.stack([np.ones_like(s), s, s * s])
    w = np.where(t >= 0, pi, 0.0)
    S = np.empty(9)
    kernels._power_pass(u, scale, pi, z, centre, inv, *theta, S)
    expected = [np.sum(w * s**p) for p in range(5)] + [np.sum(w * t * s**p) for p in range(3)] + [np.sum(w * t * t)]
    np.testing.assert_allclose(S, expected, rtol=1e-12, atol=1e-12)
