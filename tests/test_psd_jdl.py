"""PSDJDL: closed forms against brute force, the ADMM solver against cvxpy and its Kronecker solve
against a dense one, positivity on and off the data, queries."""
import numpy as np
import pytest

from jdlcore import JDL, DegeneracyWarning, GaussianKernel
from jdlcore.models.psd_jdl import PSDJDL, apply_T, diagonal_moments, fourth_moments, psd_jdl_objective

from .conftest import bivariate_gaussian


def _augmented(model, X, Y):
    At = np.hstack([np.ones((X.shape[0], 1)), model.basis_x_.features(X)])
    Bt = np.hstack([np.ones((Y.shape[0], 1)), model.basis_y_.features(Y)])
    return At, Bt


def _grid_features(At, Bt):
    """phi(x_s, y_t) for every pair (s, t), shape (n^2, p)."""
    n, qx = At.shape
    qy = Bt.shape[1]
    return (At[:, None, :, None] * Bt[None, :, None, :]).reshape(n * n, qx * qy)


@pytest.fixture(scope="module")
def data():
    return bivariate_gaussian(300, seed=3)


@pytest.fixture(scope="module")
def model(data):
    model = PSDJDL(GaussianKernel(0.5), GaussianKernel(0.5), reg=1e-2, tol=1e-2, max_rank=6,
                   solver_tol=1e-8).fit(*data)
    assert model.diagnostics_["converged"] and model.diagnostics_["degeneracies"] == {}  # 100 iterations measured
    return model


# -- closed forms -----------------------------------------------------------------------------------
def test_closed_forms_against_brute_force(rng):
    n, qx, qy = 7, 3, 4
    At = np.hstack([np.ones((n, 1)), rng.standard_normal((n, qx - 1))])
    Bt = np.hstack([np.ones((n, 1)), rng.standard_normal((n, qy - 1))])
    p = qx * qy
    R = rng.standard_normal((p, p))
    M = R @ R.T
    F_x, F_y = fourth_moments(At), fourth_moments(Bt)
    D = diagonal_moments(At, Bt)
    Phi = _grid_features(At, Bt)
    g = np.einsum("ip,pq,iq->i", Phi, M, Phi)
    brute_Q = np.sum(g**2)
    assert np.sum(M * apply_T(M, F_x, F_y)) == pytest.approx(brute_Q, rel=1e-10)
    diag = [np.kron(At[i], Bt[i]) for i in range(n)]
    brute_D = sum(np.outer(v, v) for v in diag)
    np.testing.assert_allclose(D, brute_D, rtol=1e-10, atol=1e-10 * np.abs(brute_D).max())
    assert np.sum(M * D) == pytest.approx(sum(v @ M @ v for v in diag), rel=1e-10)
    # T is the (symmetric) gradient operator: <A, T(B)> = <T(A), B> and the polarisation of Q
    A2 = rng.standard_normal((p, p))
    A2 = A2 + A2.T
    gA = np.einsum("ip,pq,iq->i", Phi, A2, Phi)
    assert np.sum(A2 * apply_T(M, F_x, F_y)) == pytest.approx(np.sum(g * gA), rel=1e-10)
    reg = 0.3
    E0 = np.zeros((p, p))
    E0[0, 0] = 1.0
    brute_R = brute_Q / n**2 - 2.0 / n * sum(v @ M @ v for v in diag) + reg * np.sum((M - E0) ** 2)
    assert psd_jdl_objective(M, F_x, F_y, D, n, reg) == pytest.approx(brute_R, rel=1e-10)
    # the normalization <S, M> = sum_{s,t} g_st with S = G_X (x) G_Y
    S = np.kron(At.T @ At, Bt.T @ Bt)
    assert np.sum(S * M) == pytest.approx(g.sum(), rel=1e-10)


def test_fitted_model_closed_forms_on_training_grid(model, data):
    X, Y = data
    n = X.shape[0]
    G = model.radon_nikodym(X)  # g(x_s, y_t) on the training grid
    assert np.all(G >= 0)
    assert G.sum() / n**2 == pytest.approx(1.0, abs=1e-9)  # normalization
    At, Bt = _augmented(model, X, Y)
    F_x, F_y, D = fourth_moments(At), fourth_moments(Bt), diagonal_moments(At, Bt)
    M = model.coef_
    E0 = np.zeros_like(M)
    E0[0, 0] = 1.0
    brute = np.sum(G**2) / n**2 - 2.0 / n * np.trace(G) + model.reg * np.sum((M - E0) ** 2)
    assert model.diagnostics_["objective"] == pytest.approx(brute, rel=1e-9)
    assert psd_jdl_objective(M, F_x, F_y, D, n, model.reg) == pytest.approx(brute, rel=1e-9)


# -- solver -----------------------------------------------------------------------------------------
def test_the_kronecker_solve_inverts_the_dense_hessian(rng):
    """(Hess + rho I)^-1 through the eigendecompositions of F_x and F_y equals a dense solve with the
    p^2 x p^2 Hessian built column by column from T, and the value is R(M)."""
    from jdlcore.models.psd_jdl_admm import _KroneckerQuadratic

    n, qx, qy, reg, rho = 9, 3, 2, 1e-3, 0.37
    At = np.hstack([np.ones((n, 1)), rng.standard_normal((n, qx - 1))])
    Bt = np.hstack([np.ones((n, 1)), rng.standard_normal((n, qy - 1))])
    F_x, F_y, D = fourth_moments(At), fourth_moments(Bt), diagonal_moments(At, Bt)
    quadratic = _KroneckerQuadratic(F_x, F_y, D, n, reg)
    p = qx * qy
    basis = np.eye(p * p).reshape(p * p, p, p)
    dense = np.stack([(2.0 / n**2) * apply_T(E, F_x, F_y) + 2.0 * reg * E for E in basis]).reshape(p * p, p * p)
    B = rng.standard_normal((p, p))
    B = B + B.T
    expected = np.linalg.solve(dense + rho * np.eye(p * p), B.ravel()).reshape(p, p)
    np.testing.assert_allclose(quadratic.solve(B, rho), expected, rtol=1e-9, atol=1e-12 * np.abs(expected).max())
    M = B @ B.T
    assert quadratic.value(M) == pytest.approx(psd_jdl_objective(M, F_x, F_y, D, n, reg), rel=1e-12)


def test_without_reg_the_solver_reports_the_frank_wolfe_gap(data):
    """reg = 0: the Hessian may be singular, so the dual bound is not available; the gap is the Frank-Wolfe
    one (valid for any convex objective), and the fit is still PSD and normalised."""
    with pytest.warns(DegeneracyWarning, match="solver_unconverged"):
        model = PSDJDL(GaussianKernel(0.5), GaussianKernel(0.5), reg=0.0, tol=1e-2, max_rank=4, max_iter=30).fit(*data)
    info = model.diagnostics_
    assert info["gap_kind"] == "frank-wolfe" and 0.0 <= info["gap"] < np.inf
    assert abs(info["normalization_defect"]) < 1e-10 and info["min_eigenvalue"] > -1e-12


def test_the_solver_matches_cvxpy_reference():
    cp = pytest.importorskip("cvxpy")
    X, Y = bivariate_gaussian(40, seed=5)
    reg = 1e-2
    model = PSDJDL(GaussianKernel(0.8), GaussianKernel(0.8), reg=reg, tol=1e-12, max_rank=3,
                   solver_tol=1e-11, max_iter=20000, scaling="none").fit(X, Y)  # the reference's kernels
    info = model.diagnostics_
    assert info["converged"]
    assert abs(info["normalization_defect"]) < 1e-10 and info["min_eigenvalue"] > -1e-12
    n = X.shape[0]
    At, Bt = _augmented(model, X, Y)
    p = At.shape[1] * Bt.shape[1]
    assert p == 16
    Phi = _grid_features(At, Bt)
    N = np.kron(At.T @ At / n, Bt.T @ Bt / n)
    D = diagonal_moments(At, Bt)
    E0 = np.zeros((p, p))
    E0[0, 0] = 1.0
    M = cp.Variable((p, p), PSD=True)
    g = cp.sum(cp.multiply(Phi @ M, Phi), axis=1)
    objective = cp.sum_squares(g) / n**2 - 2.0 / n * cp.trace(D @ M) + reg * cp.sum_squares(M - E0)
    problem = cp.Problem(cp.Minimize(objective), [cp.trace(N @ M) == 1])
    try:
        problem.solve(solver=cp.CLARABEL, tol_gap_abs=1e-9, tol_gap_rel=1e-9, tol_feas=1e-9)
    except (cp.error.SolverError, TypeError):
        problem.solve(solver=cp.SCS, eps=1e-10, max_iters=200000)
    assert problem.status == "optimal"
    reference = psd_jdl_objective(M.value, fourth_moments(At), fourth_moments(Bt), D, n, reg)
    ours = psd_jdl_objective(model.coef_, fourth_moments(At), fourth_moments(Bt), D, n, reg)
    assert ours == pytest.approx(reference, rel=1e-6)
    assert ours <= reference + 1e-8 * abs(reference)  # ADMM is at least as good as the reference
    assert ours == pytest.approx(info["objective"], rel=1e-9)
    # the certified gap bounds the excess over the optimum (the reference's rounding as slack)
    assert info["gap_kind"] == "dual" and info["gap"] <= 1e-11
    assert ours - reference <= info["gap"] * max(1.0, abs(ours)) + 1e-9 * abs(reference)
    # strongly convex (reg > 0): the minimisers agree too
    assert np.linalg.norm(model.coef_ - M.value) <= 1e-3 * np.linalg.norm(M.value)


# -- positivity on and off the data ---------------------------------------------------------------
def test_weights_nonnegative_and_normalized_far_outside(model, data):
    X, _ = data
    span = np.abs(X).max()
    Xq = np.linspace(-3 * span, 3 * span, 41)[:, None]
    W = model.conditional_weights(Xq)
    assert W.shape == (41, X.shape[0])
    assert np.all(W >= 0)
    np.testing.assert_allclose(W.sum(axis=1), 1.0, atol=1e-12)
    np.testing.assert_array_equal(model.negative_mass(Xq), 0.0)


def test_density_ratio_nonnegative_far_grid_where_normalized_jdl_is_not(model, data):
    X, Y = data
    span_x, span_y = 3 * np.abs(X).max(), 3 * np.abs(Y).max()
    gx, gy = np.meshgrid(np.linspace(-span_x, span_x, 161), np.linspace(-span_y, span_y, 161), indexing="ij")
    values = model.density_ratio(gx.ravel(), gy.ravel())
    assert values.shape == (161 * 161,)
    assert np.all(values >= 0)
    # consistent with radon_nikodym at the training atoms
    np.testing.assert_allclose(model.density_ratio(np.repeat(X[:3], 2, axis=0), np.tile(Y[:2], (3, 1))),
                               model.radon_nikodym(X[:3])[:, :2].ravel(), rtol=1e-9, atol=1e-12)
    # the check can fail: the normalization-only JDL on the same data is negative on this grid
    jdl = JDL(GaussianKernel(0.5), GaussianKernel(0.5), reg=1e-4, tol=1e-6, constraints="normalization").fit(X, Y)
    ox = jdl.basis_x_.features(gx[:, 0][:, None])
    oy = jdl.basis_y_.features(gy[0][:, None])
    assert (1.0 + ox @ jdl.coef_.T @ oy.T).min() < 0


# -- queries ----------------------------------------------------------------------------------------
def test_expectations_and_cdf_are_weighted_sums(model, data):
    X, Y = data
    Xq = np.linspace(-8, 8, 23)[:, None]
    W = model.conditional_weights(Xq)
    mean = model.conditional_expectation(Xq)
    np.testing.assert_allclose(mean, W @ Y, rtol=1e-10, atol=1e-12)
    square = model.conditional_expectation(Xq, lambda y: y[:, :, None] * y[:, None, :])
    assert square.shape == (23, 1, 1)
    np.testing.assert_allclose(square[:, 0, 0], W @ Y[:, 0] ** 2, rtol=1e-10)
    thresholds = np.array([-1.0, 0.0, 0.5, 2.0])
    cdf = model.conditional_cdf(Xq, thresholds)
    np.testing.assert_allclose(cdf, W @ (Y <= thresholds[None, :]).astype(float), rtol=1e-10, atol=1e-12)
    model.register("mean", lambda y: y)
    np.testing.assert_allclose(model.expectation("mean", Xq), mean, rtol=1e-12)
    q = model.conditional_quantile(Xq, [0.1, 0.5, 0.9])
    assert q.shape == (23, 3) and np.all(np.diff(q, axis=1) >= 0)
    # the fitted model follows the data: E[Y | x] = 0.8 x inside them, to an RMSE of 0.223 measured on
    # [-1.5, 1.5] (the marginal mean is off by 0.72 there)
    grid = np.linspace(-1.5, 1.5, 31)[:, None]
    error = np.sqrt(np.mean((model.conditional_expectation(grid)[:, 0] - 0.8 * grid[:, 0]) ** 2))
    assert error < 0.25


def test_independence_gives_the_marginal(data):
    X, Y = data
    with pytest.warns(DegeneracyWarning, match="solver_unconverged"):  # a few iterations: the coefficients are replaced
        model = PSDJDL(GaussianKernel(0.5), GaussianKernel(0.5), reg=1e-2, tol=1e-2, max_rank=4, max_iter=5).fit(X, Y)
    p = model.coef_.shape[0]
    E0 = np.zeros((p, p))
    E0[0, 0] = 1.0
    model._set_coef(E0)
    Xq = np.array([[-20.0], [0.3], [2.0]])
    np.testing.assert_allclose(model.conditional_weights(Xq), 1.0 / X.shape[0], rtol=1e-12)
    np.testing.assert_allclose(model.conditional_expectation(Xq), np.repeat(Y.mean(axis=0)[None], 3, axis=0),
                               rtol=1e-12)
    np.testing.assert_allclose(model.density_ratio(Xq, Xq), 1.0, rtol=1e-12)


def test_queries_with_any_psd_coefficient_are_the_quadratic_form(data, rng):
    """With a random PSD M set by hand, every query equals its brute-force value from
    g(x, y_t) = phi(x, y_t)^T M phi(x, y_t), phi = [1, Psi_X(x)] (x) [1, Psi_Y(y_t)]: the values on the
    training atoms, at arbitrary pairs, the weights and the conditional mean and CDF."""
    X, Y = data
    with pytest.warns(DegeneracyWarning, match="solver_unconverged"):  # the coefficients are replaced below
        model = PSDJDL(GaussianKernel(0.5), GaussianKernel(0.5), reg=1e-2, tol=1e-2, max_rank=4, max_iter=5).fit(X, Y)
    p = model.coef_.shape[0]
    factor = rng.standard_normal((p, 3))
    M = factor @ factor.T
    model._set_coef(M)
    Xq = np.array([[-2.5], [0.3], [1.7]])
    Aq, Bt = _augmented(model, Xq, Y)
    G = np.array([[np.kron(a, b) @ M @ np.kron(a, b) for b in Bt] for a in Aq])  # (3, n), one pair at a time
    np.testing.assert_allclose(model.radon_nikodym(Xq), G, rtol=1e-10, atol=1e-12 * np.abs(G).max())
    np.testing.assert_allclose(model.density_ratio(Xq, Y[:3]), [G[i, i] for i in range(3)], rtol=1e-10)
    W = G / G.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(model.conditional_weights(Xq), W, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(model.conditional_expectation(Xq)[:, 0], W @ Y[:, 0], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(model.conditional_cdf(Xq, [0.0])[:, 0], W @ (Y[:, 0] <= 0.0), rtol=1e-10, atol=1e-12)


def test_predict_proba_discrete_y(rng):
    X = rng.standard_normal((120, 1))
    Y = (X[:, 0] + 0.3 * rng.standard_normal(120) > 0).astype(float)
    model = PSDJDL(GaussianKernel(0.7), GaussianKernel(0.5), reg=1e-2, tol=1e-3, max_rank=5).fit(X, Y)
    proba = model.predict_proba(np.array([[-2.0], [2.0], [30.0]]))
    assert proba.shape == (3, 2) and np.all(proba >= 0)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-12)
    assert proba[0, 0] > 0.5 and proba[1, 1] > 0.5


# -- input checks -----------------------------------------------------------------------------------
def test_bad_input(data):
    X, Y = data
    with pytest.raises(ValueError, match="NaN"):
        PSDJDL(max_rank=2).fit(np.where(np.arange(300)[:, None] == 5, np.nan, X), Y)
    with pytest.raises(ValueError, match="same number of rows"):
        PSDJDL(max_rank=2).fit(X[:-1], Y)
    with pytest.raises(ValueError, match="max_features"):
        PSDJDL(GaussianKernel(0.5), GaussianKernel(0.5), tol=1e-6, max_features=10).fit(X, Y)
    with pytest.raises(ValueError, match="reg"):
        PSDJDL(reg=-1.0).fit(X, Y)
    with pytest.raises(ValueError, match="max_iter"):
        PSDJDL(max_iter=0).fit(X, Y)
    with pytest.raises(RuntimeError, match="fit"):
        PSDJDL().conditional_weights(X)
    with pytest.warns(DegeneracyWarning, match="solver_unconverged"):
        fitted = PSDJDL(max_rank=2, max_iter=3).fit(X, Y)
    with pytest.raises(ValueError, match="features"):
        fitted.conditional_weights(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="same number of rows"):
        fitted.density_ratio(X[:3], Y[:2])
    with pytest.raises(ValueError, match="levels"):
        fitted.conditional_quantile(X[:2], [0.0])
    assert fitted.get_params()["max_features"] == 400


def test_the_solve_reports_a_certified_duality_gap_that_falls_as_it_converges(data, model):
    """The gap bounds the objective's excess over the optimum: small for the converged fit, larger after
    five iterations, and the converged fit's objective is below the capped one's by less than the
    capped gap allows."""
    converged = model.diagnostics_
    assert 0.0 <= converged["gap"] <= 1e-8  # the stopping rule itself (solver_tol 1e-8)
    with pytest.warns(DegeneracyWarning, match="solver_unconverged"):
        capped = PSDJDL(GaussianKernel(0.5), GaussianKernel(0.5), reg=1e-2, tol=1e-2, max_rank=6,
                        max_iter=5).fit(*data).diagnostics_
    assert capped["gap"] > 100 * converged["gap"]
    assert 0.0 <= capped["objective"] - converged["objective"] <= capped["gap"] * max(1.0, abs(capped["objective"]))
