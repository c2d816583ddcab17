"""The low-rank solvers against independent computations: the full n^2 problem (13) solved by brute
force, and a generic conic solver (cvxpy + Clarabel)."""
import numpy as np
import pytest

from jdlcore import Factorisation, GaussianKernel, build_problem
from jdlcore.solvers import (
    grid_minimum, solve_grid_positivity, solve_normalized, solve_tightened, solve_unconstrained, tightening_bounds,
)
from jdlcore.solvers.active_set import ProjectionQP
from jdlcore.solvers.tightening import tightening_value

from .conftest import bivariate_gaussian


def full_problem_grid_values(X, Y, kx, ky, reg, normalize):
    """Brute force: minimise R_lambda(H) of (14) over all H in R^{n x n} (vectorised normal equations,
    plus a Lagrange multiplier for (11)), return h on the grid, K_Y H K_X."""
    n = X.shape[0]
    KX, KY = kx(X), ky(Y)
    one = np.ones(n)
    # vec(K_Y H K_X) = (K_X kron K_Y) vec(H) (column-major vec)
    hessian = (2 / n**2) * np.kron(KX @ KX, KY @ KY) + 2 * reg * np.kron(KX, KY)
    linear = (2 / n) * np.kron(KX, KY) @ np.eye(n).ravel(order="F") - (2 / n**2) * np.kron(KX @ one, KY @ one)
    if normalize:
        e = np.kron(KX @ one, KY @ one)
        kkt = np.block([[hessian, e[:, None]], [e[None, :], np.zeros((1, 1))]])
        solution = np.linalg.lstsq(kkt, np.append(linear, 0.0), rcond=1e-14)[0][:-1]
    else:
        solution = np.linalg.lstsq(hessian, linear, rcond=1e-14)[0]
    H = solution.reshape(n, n, order="F")
    return KY @ H @ KX


@pytest.mark.parametrize("normalize", [False, True])
def test_full_rank_low_rank_solution_equals_full_n2_problem(normalize):
    X, Y = bivariate_gaussian(30, seed=4)
    kx, ky = GaussianKernel(0.15), GaussianKernel(0.15)
    reg = 1e-3
    problem = build_problem(X, Y, kx, ky, Factorisation(tol=1e-14, pivoting="greedy"))
    assert problem.factors["rank_x"] == 30 and problem.factors["rank_y"] == 30
    solve = solve_normalized if normalize else solve_unconstrained
    H = solve(problem.reductions, reg)
    low_rank = problem.A_y @ H @ problem.A_x.T
    full = full_problem_grid_values(X, Y, kx, ky, reg, normalize)
    np.testing.assert_allclose(low_rank, full, rtol=0, atol=1e-6 * np.abs(full).max())
    if normalize:
        assert abs(low_rank.sum()) < 1e-8 * np.abs(low_rank).max() * 30**2


def full_problem_cvxpy(X, Y, kx, ky, reg, positivity):
    """Brute force with positivity: minimise R_lambda(H) of (14) over all H in R^{n x n} with cvxpy, subject
    to the normalization (11) and, for "grid", (12): E + K_Y H K_X >= 0 on the whole n x n grid; for
    "tightening", (33) with the bounds (34)-(35) taken over every product of basis values, where the
    basis is the double-orthogonal one written as Q = K^{-1} A (full rank). Returns h on the grid."""
    import cvxpy as cp

    n = X.shape[0]
    KX, KY = kx(X), ky(Y)
    root_x, root_y = (np.linalg.cholesky(K + 1e-13 * np.eye(n)) for K in (KX, KY))
    H = cp.Variable((n, n))
    grid = KY @ H @ KX
    objective = (cp.sum_squares(grid) / n**2 - 2 / n * cp.trace(grid) + 2 / n**2 * cp.sum(grid)
                 + reg * cp.sum_squares(root_y.T @ H @ root_x))  # trace(H^T K_Y H K_X) = ||R_Y^T H R_X||^2
    constraints = [cp.sum(grid) == 0]
    if positivity == "grid":
        constraints.append(grid >= -1)
    else:
        problem = build_problem(X, Y, kx, ky, Factorisation(tol=1e-14, pivoting="greedy"))
        A_x, A_y = problem.A_x, problem.A_y
        Q_x, Q_y = np.linalg.solve(KX, A_x), np.linalg.solve(KY, A_y)  # K Q = A
        products = np.einsum("si,tj->stij", A_y, A_x)
        low, up = products.min(axis=(0, 1)), products.max(axis=(0, 1))
        Htil = Q_y.T @ KY @ H @ KX @ Q_x  # the coefficients of h in the basis: H = Q_Y Htil Q_X^T
        plus, minus = cp.Variable(low.shape, nonneg=True), cp.Variable(low.shape, nonneg=True)
        constraints += [Htil == plus - minus, 1 + cp.sum(cp.multiply(low, plus)) - cp.sum(cp.multiply(up, minus)) >= 0]
    cp.Problem(cp.Minimize(objective), constraints).solve(solver=cp.CLARABEL)
    return KY @ H.value @ KX


@pytest.mark.parametrize("positivity, tolerance", [("grid", 1e-5), ("tightening", 1e-7)])  # measured 1.9e-6, 5.7e-9
def test_full_rank_positivity_solution_equals_full_n2_problem(positivity, tolerance):
    """The low-rank solvers at full rank against (13) with positivity, solved over all n^2 entries of H
    by a generic conic solver, from the kernel matrices alone."""
    X, Y = bivariate_gaussian(18, seed=6)
    kx, ky = GaussianKernel(0.3), GaussianKernel(0.3)
    reg = 1e-3
    problem = build_problem(X, Y, kx, ky, Factorisation(tol=1e-14, pivoting="greedy"))
    assert problem.factors["rank_x"] == 18 and problem.factors["rank_y"] == 18
    if positivity == "grid":
        H = solve_grid_positivity(problem.reductions, reg, problem.A_x, problem.A_y).H
    else:
        H = solve_tightened(problem.reductions, reg)[0]
    low_rank = problem.A_y @ H @ problem.A_x.T
    full = full_problem_cvxpy(X, Y, kx, ky, reg, positivity)
    normalized = full_problem_grid_values(X, Y, kx, ky, reg, normalize=True)
    assert normalized.min() < -2 and np.abs(normalized - full).max() > 1  # the constraint binds
    np.testing.assert_allclose(low_rank, full, rtol=0, atol=tolerance * np.abs(full).max())
    assert low_rank.min() >= -1 - 1e-9


@pytest.fixture(scope="module")
def small_problem():
    X, Y = bivariate_gaussian(60, seed=2)
    return build_problem(X, Y, GaussianKernel(0.5), GaussianKernel(0.5), Factorisation(tol=1e-5))


def relative(a, b):
    return np.abs(a - b).max() / np.abs(b).max()


@pytest.mark.parametrize("reg", [1e-4, 1e-2])
def test_fast_solvers_match_cvxpy(small_problem, reg):
    from jdlcore.solvers.reference import reference_solve

    red, A_x, A_y = small_problem.reductions, small_problem.A_x, small_problem.A_y
    assert relative(solve_unconstrained(red, reg), reference_solve(red, reg, normalize=False)) < 1e-6
    assert relative(solve_normalized(red, reg), reference_solve(red, reg, normalize=True)) < 1e-6
    tight, info = solve_tightened(red, reg)
    assert relative(tight, reference_solve(red, reg, normalize=True, positivity="tightening")) < 1e-6
    assert info["slack"] >= 0
    grid = solve_grid_positivity(red, reg, A_x, A_y)
    reference = reference_solve(red, reg, normalize=True, positivity="grid", A_x=A_x, A_y=A_y)
    assert relative(grid.H, reference) < 1e-6
    assert grid.grid_min >= 0


def test_tightening_implies_grid_positivity(small_problem):
    red = small_problem.reductions
    low, up = tightening_bounds(red)
    products = np.einsum("si,tj->stij", small_problem.A_y, small_problem.A_x)
    np.testing.assert_allclose(low, products.min(axis=(0, 1)), atol=1e-14)  # (34)
    np.testing.assert_allclose(up, products.max(axis=(0, 1)), atol=1e-14)  # (35)
    H, info = solve_tightened(red, 1e-4)
    assert tightening_value(H, low, up) >= -1e-12
    assert grid_minimum(H, small_problem.A_x, small_problem.A_y) >= -1e-12
    assert abs(red.total_mass_defect(H)) < 1e-9 * red.n**2


def test_grid_positivity_without_normalization(small_problem):
    from jdlcore.solvers.reference import reference_solve

    red, A_x, A_y = small_problem.reductions, small_problem.A_x, small_problem.A_y
    grid = solve_grid_positivity(red, 1e-4, A_x, A_y, normalize=False)
    reference = reference_solve(red, 1e-4, normalize=False, positivity="grid", A_x=A_x, A_y=A_y)
    assert relative(grid.H, reference) < 1e-6


def test_active_set_qp_against_kkt(rng):
    """A random projection QP with more constraints than variables: check the KKT conditions."""
    M, K = 12, 40
    D = rng.uniform(0.5, 3.0, M)
    g = rng.standard_normal(M) * 3
    C = rng.standard_normal((K, M))
    beta = rng.uniform(0.1, 1.0, K)
    e = rng.standard_normal(M)
    qp = ProjectionQP(D, g, equality=e)
    pending = np.arange(25)
    for _ in range(50):  # cutting planes: pool the violated ones, solve, forget the inactive
        qp.add(C[pending], beta[pending])
        qp.solve()
        qp.prune()
        pending = np.flatnonzero(C @ qp.h + beta < -1e-12)
        if pending.size == 0:
            break
    h = qp.h
    assert np.all(qp.multipliers() >= 0)
    slack = C @ h + beta
    assert slack.min() >= -1e-10
    assert abs(e @ h) < 1e-10
    # stationarity: D h - g = C^T nu + mu e with nu >= 0 supported on active constraints
    tight = np.flatnonzero(slack < 1e-9)
    basis = np.column_stack([C[tight].T, e])
    coefficients = np.linalg.lstsq(basis, D * h - g, rcond=None)[0]
    np.testing.assert_allclose(basis @ coefficients, D * h - g, atol=1e-9)
    assert np.all(coefficients[:-1] >= -1e-9)


def test_basis_ranges_bound_every_point(small_problem, rng):
    """SpectralBasis.ranges bounds each Psi_j over the whole domain, not only at the samples."""
    for basis in (small_problem.basis_x, small_problem.basis_y):
        low, high = basis.ranges()
        Z = np.vstack([rng.uniform(-10, 10, (4000, basis.width)), basis.pivot_points])
        values = basis.features(Z)
        assert np.all(values >= low - 1e-12) and np.all(values <= high + 1e-12)


def test_pointwise_positivity_lemma_4_2(small_problem):
    """(29) with whole-domain bounds: matches the conic reference, and 1 + h >= 0 far off the data."""
    from jdlcore.solvers import pointwise_bounds
    from jdlcore.solvers.reference import reference_solve

    red, basis_x, basis_y = small_problem.reductions, small_problem.basis_x, small_problem.basis_y
    bounds = pointwise_bounds(basis_x, basis_y)
    H, info = solve_tightened(red, 1e-4, bounds=bounds)
    reference = reference_solve(red, 1e-4, normalize=True, positivity="tightening", bounds=bounds)
    assert relative(H, reference) < 1e-6
    assert info["slack"] >= -1e-12
    grid = np.linspace(-12, 12, 241)[:, None]  # far outside the data in both x and y
    values = 1 + basis_y.features(grid) @ H @ basis_x.features(grid).T
    assert values.min() >= -1e-12
    unconstrained = 1 + basis_y.features(grid) @ solve_normalized(red, 1e-4) @ basis_x.features(grid).T
    assert unconstrained.min() < -1e-3  # the constraint binds, so this test can fail
    low, up = tightening_bounds(red)
    assert np.all(bounds[0] <= low + 1e-12) and np.all(bounds[1] >= up - 1e-12)  # (29) implies (33)


def test_grid_positivity_with_repeated_points_equals_distinct_grid(small_problem):
    """Repeated x or y values repeat grid constraints: the solution is that of the distinct grid."""
    red, A_x, A_y = small_problem.reductions, small_problem.A_x, small_problem.A_y
    distinct = solve_grid_positivity(red, 1e-4, A_x, A_y)
    repeated = solve_grid_positivity(red, 1e-4, np.vstack([A_x, A_x[::-1], A_x[:7]]), np.vstack([A_y, A_y[3:9]]))
    assert relative(repeated.H, distinct.H) < 1e-10
    assert repeated.constraints == distinct.constraints and repeated.grid_min >= 0
