"""Low-rank CME against the dense estimator (44), the objective (46) and a conic reference solver."""
import numpy as np
import pytest

from jdlcore import CME, GaussianKernel
from jdlcore import Factorisation
from jdlcore.models.problem import build_problem
from jdlcore.models.cme import solve_cme


def sample(n=30, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, (n, 1))
    return X, np.sin(X) + 0.3 * rng.standard_normal((n, 1))


QUERIES = np.linspace(-4, 4, 13)[:, None]


def dense_weights(kernel, X, reg, Xq):
    """Weights of (45) on the n samples: (K_X + n reg I)^{-1} k_X(X, x_q), shape (n, q)."""
    n = X.shape[0]
    return np.linalg.solve(kernel(X, X) + n * reg * np.eye(n), kernel(X, Xq))


def test_full_rank_equals_dense_cme():
    X, Y = sample()
    kernel = GaussianKernel(0.25)
    model = CME(kernel, GaussianKernel(0.08), reg=1e-3, tol=0, scaling="none").fit(X, Y)  # the dense CME's kernels
    assert model.basis_x_.size == model.basis_y_.size == X.shape[0]  # full rank on both sides
    F = dense_weights(kernel, X, 1e-3, QUERIES)
    np.testing.assert_allclose(model.conditional_expectation(QUERIES)[:, 0], Y[:, 0] @ F, rtol=0, atol=1e-11)
    np.testing.assert_allclose(model.conditional_expectation(QUERIES, lambda y: y**2)[:, 0], Y[:, 0] ** 2 @ F,
                               rtol=0, atol=1e-11)
    np.testing.assert_allclose(model.total_mass(QUERIES), F.sum(axis=0), rtol=0, atol=1e-11)
    # The weights on the pivot atoms are the dense weights of those samples.
    order = np.array([int(np.flatnonzero(Y[:, 0] == y)[0]) for y in model.y_atoms_[:, 0]])
    np.testing.assert_allclose(model.conditional_weights(QUERIES), F[order].T, rtol=0, atol=1e-11)


def _dense_B(factor, n):
    B = np.zeros((n, factor.rank))
    B[factor.pivots] = factor.B_pivots
    return B


def test_low_rank_objective_is_the_dense_objective_46():
    """(46) at F = B_Y V_Y Ftil V_X^T B_X^T equals the corrected (48) for any Ftil, at low rank."""
    from jdlcore.lowrank.cholesky import pivoted_cholesky

    X, Y = sample(40, seed=3)
    n, reg = X.shape[0], 1e-2
    kx, ky = GaussianKernel(0.8), GaussianKernel(0.6)
    problem = build_problem(X, Y, kx, ky, Factorisation(tol=1e-3))
    red = problem.reductions
    fx, fy = pivoted_cholesky(kx, X, tol=1e-3), pivoted_cholesky(ky, Y, tol=1e-3)
    assert fx.rank < n and fy.rank < n
    Bx, By = _dense_B(fx, n), _dense_B(fy, n)
    Kx, Ky = kx(X, X), ky(Y, Y)
    rng = np.random.default_rng(1)
    for _ in range(3):
        Ft = rng.standard_normal(red.cross.shape)
        F = By @ problem.basis_y.rotation @ Ft @ problem.basis_x.rotation.T @ Bx.T
        dense = -2 * np.trace(Ky @ F @ Kx) + np.trace(F.T @ Ky @ F @ Kx @ (Kx + n * reg * np.eye(n)))
        low = -2 * np.sum(red.cross * Ft) + np.sum(Ft**2 * (red.lam_x[None, :] + n * reg))
        assert abs(dense - low) <= 1e-8 * max(1.0, abs(dense))
    # and the closed form is its minimiser (zero gradient)
    Ft, _ = solve_cme(red, reg, problem.basis_y.coefficients)
    np.testing.assert_allclose(-2 * red.cross + 2 * Ft * (red.lam_x[None, :] + n * reg), 0, atol=1e-9)


@pytest.mark.parametrize("constraints", ["normalization", "positivity"])
def test_constrained_solutions_match_conic_reference(constraints):
    cp = pytest.importorskip("cvxpy")
    X, Y = sample(200, seed=5)
    reg = 1e-4
    problem = build_problem(X, Y, GaussianKernel(0.5), GaussianKernel(0.3), Factorisation(tol=1e-4))
    red, C = problem.reductions, problem.basis_y.coefficients
    F_ours, info = solve_cme(red, reg, C, constraints)
    D = red.lam_x[None, :] + red.n * reg
    F = cp.Variable(red.cross.shape)
    scale = float(np.max(D))
    objective = cp.Minimize((cp.sum(cp.multiply(D / scale, cp.square(F))) - 2 * cp.sum(cp.multiply(red.cross / scale, F))))
    w = F @ red.sum_x / red.n
    rules = [cp.sum(C @ w) == 1]
    if constraints == "positivity":
        rules.append(C @ w >= 0)
    cp.Problem(objective, rules).solve(solver=cp.CLARABEL, tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12)
    np.testing.assert_allclose(F_ours, F.value, atol=1e-6 * max(1.0, np.max(np.abs(F.value))))
    mean_weights = C @ F_ours @ red.sum_x / red.n
    assert abs(mean_weights.sum() - 1) < 1e-10  # (53)
    assert info["unconditional_mass"] == pytest.approx(1.0, abs=1e-10)
    if constraints == "positivity":
        assert mean_weights.min() >= -1e-10  # (54)
        unconstrained = C @ solve_cme(red, reg, C, "normalization")[0] @ red.sum_x / red.n
        assert unconstrained.min() < -1e-6  # the constraint was binding, so the test can fail


@pytest.fixture(scope="module")
def model():
    X, Y = sample(300, seed=7)
    return CME(GaussianKernel(0.5), GaussianKernel(0.4), reg=1e-4, tol=1e-6).fit(X, Y)


def test_queries_are_the_weights(model):
    W = model.conditional_weights(QUERIES)
    atoms = model.y_atoms_
    assert W.shape == (QUERIES.shape[0], model.basis_y_.size)
    np.testing.assert_allclose(model.conditional_expectation(QUERIES), W @ atoms, atol=1e-12)
    t = [-0.5, 0.0, 0.7]
    np.testing.assert_allclose(model.conditional_cdf(QUERIES, t), W @ (atoms <= np.array(t)).astype(float), atol=1e-12)
    np.testing.assert_allclose(model.total_mass(QUERIES), W.sum(axis=1), atol=1e-12)
    model.register("square", lambda y: y**2)
    np.testing.assert_allclose(model.expectation("square", QUERIES),
                               model.conditional_expectation(QUERIES, lambda y: y**2), atol=1e-10)
    with pytest.raises(ValueError, match="no test function 'cube'"):
        model.expectation("cube", QUERIES)


def test_quantiles_invert_the_running_cdf(model):
    levels = [0.1, 0.5, 0.9]
    q = model.conditional_quantile(QUERIES, levels)
    W = model.conditional_weights(QUERIES)
    atoms = model.y_atoms_[:, 0]
    order = np.argsort(atoms)
    running = np.maximum.accumulate(np.cumsum(W[:, order], axis=1), axis=1)
    for i in range(QUERIES.shape[0]):
        for k, level in enumerate(levels):
            reached = np.flatnonzero(running[i] >= level * (1 - 1e-12))
            expected = atoms[order][reached[0]] if reached.size else np.nan
            np.testing.assert_equal(q[i, k], expected)


def test_unnormalized_mass_is_reported_as_is(model):
    """CME is not normalized off the data: its total mass differs from 1 and a level may be unreachable."""
    far = np.array([[8.0], [-9.0]])
    assert np.all(np.abs(model.total_mass(far) - 1) > 0.5)
    assert np.all(np.isnan(model.conditional_quantile(far, [0.5])))


def test_state_round_trip_is_exact(model):
    rebuilt = CME.from_state(model.state())
    for query in ("conditional_weights", "conditional_expectation", "total_mass"):
        assert np.array_equal(getattr(rebuilt, query)(QUERIES), getattr(model, query)(QUERIES))
    broken = model.state()
    del broken["arrays"]["coef"]
    with pytest.raises(ValueError, match="missing part 'coef'"):
        CME.from_state(broken)


@pytest.mark.parametrize("kwargs, data, match", [
    ({"constraints": "psd"}, None, "constraints: unknown value 'psd'"),
    ({"reg": -1.0}, None, "reg: must be finite and >= 0"),
    ({"tol": -0.5}, None, r"tol: must be in \[0, 1\)"),
    ({"pivoting": "max"}, None, "pivoting: unknown value"),
    ({}, "nan", "X: contains NaN or inf"),
    ({}, "lengths", "same number of rows"),
    ({}, "one", "needs at least 2 row"),
])
def test_bad_input(kwargs, data, match):
    X, Y = sample(20)
    if data == "nan":
        X[3, 0] = np.nan
    elif data == "lengths":
        Y = Y[:-1]
    elif data == "one":
        X, Y = X[:1], Y[:1]
    with pytest.raises(ValueError, match=match):
        CME(**kwargs).fit(X, Y)
