"""The polynomial JDL (JPDL, Sec. 4.5) against independent computations: the kernel from raw
monomials, the full n^2 problem (14) by brute force, and a generic cvxpy SOS formulation in raw
monomial coefficients with the paper's full Gram basis (39)."""
import itertools
import json
import warnings
from math import comb

import numpy as np
import pytest

from jdlcore.models.polynomial import PolynomialJDL, build_polynomial_problem
from jdlcore.models.polynomial_basis import PolynomialBasis, fit_polynomial_basis, monomial_exponents
from jdlcore.models.sos import gram_exponents, solve_sos_positivity, sos_certificate


def gaussian_pairs(n, d, rho=0.7, seed=0):
    g = np.random.default_rng(seed)
    X = g.standard_normal((n, d))
    Y = rho * X + np.sqrt(1 - rho**2) * g.standard_normal((n, d))
    return X, Y


def exponents(d, q):
    """All alpha in N^d with |alpha| <= q (any order; independent of the module's enumeration)."""
    return np.array([a for a in itertools.product(range(q + 1), repeat=d) if sum(a) <= q], dtype=int)


def monomials(Z, alphas):
    return np.prod(Z[:, None, :] ** alphas[None, :, :], axis=2)


def far_grid(X, Y, points):
    """Grids over [-3R, 3R]^d for x and for y, R the largest |value| of the data."""
    R = 3 * max(np.abs(X).max(), np.abs(Y).max())
    t = np.linspace(-R, R, points)

    def grid(d):
        return np.stack(np.meshgrid(*[t] * d, indexing="ij"), axis=-1).reshape(-1, d)
    return grid(X.shape[1]), grid(Y.shape[1])


def one_plus_h(model, gx, gy):
    """1 + h(x, y) on the product of query grids, (len(gy), len(gx))."""
    return 1.0 + model.basis_y_.features(gy) @ model.coef_ @ model.basis_x_.features(gx).T


# -- basis ------------------------------------------------------------------------------------------
def test_monomial_exponents_graded_and_complete():
    for d, q in [(1, 4), (2, 3), (3, 4)]:
        e = monomial_exponents(d, q)
        assert e.shape == (comb(d + q, d), d)
        assert len({tuple(row) for row in e}) == e.shape[0]
        assert np.all(e[0] == 0) and np.all(np.diff(e.sum(axis=1)) >= 0)
        assert {tuple(row) for row in e} == {tuple(row) for row in exponents(d, q)}


def test_basis_is_double_orthogonal_and_reproduces_the_polynomial_kernel():
    X, _ = gaussian_pairs(500, 2, seed=1)
    X = 2.0 + 0.5 * X  # off-centre data: the basis standardises, the direct kernel does not
    basis, A = fit_polynomial_basis(X, 3, "X")
    n, m = A.shape
    assert m == comb(2 + 3, 2)
    assert np.max(np.abs(A.T @ A / n - np.eye(m))) < 1e-10
    np.testing.assert_array_equal(basis.eigenvalues, np.full(m, float(n)))
    np.testing.assert_array_equal(A, basis.features(X))
    # k(x, x') = tau(x) G^{-1} tau(x')^T from raw, unstandardised monomials
    alphas = exponents(2, 3)
    V = monomials(X, alphas)
    G = V.T @ V / n
    Xq = np.random.default_rng(7).uniform(-1, 5, size=(40, 2))
    Tq = monomials(Xq, alphas)
    direct = Tq @ np.linalg.solve(G, Tq.T)
    psi = basis.features(Xq)
    np.testing.assert_allclose(psi @ psi.T, direct, rtol=0, atol=1e-9 * np.abs(direct).max())


@pytest.mark.parametrize("constraints,tol", [("none", 1e-10), ("normalization", 1e-10), ("positivity", 1e-6)])
def test_fit_is_invariant_to_shift_and_scale_of_the_data(constraints, tol):
    X, Y = gaussian_pairs(300, 1, seed=2)
    Xq = np.linspace(-3, 3, 9)[:, None]
    base = PolynomialJDL(degree=4, constraints=constraints).fit(X, Y)
    moved = PolynomialJDL(degree=4, constraints=constraints).fit(3 * X + 5, 0.5 * Y - 2)
    np.testing.assert_allclose(moved.conditional_expectation(3 * Xq + 5), 0.5 * base.conditional_expectation(Xq) - 2,
                               rtol=0, atol=tol)


# -- brute force: the full n^2 problem (14) with the kernel built from raw monomials ----------------
def brute_force_conditional_expectations(X, Y, Xq, q, reg, normalize, functions):
    n = X.shape[0]
    ax, ay = exponents(X.shape[1], q), exponents(Y.shape[1], q)
    VX, VY = monomials(X, ax), monomials(Y, ay)
    GX, GY = VX.T @ VX / n, VY.T @ VY / n
    KX, KY = VX @ np.linalg.solve(GX, VX.T), VY @ np.linalg.solve(GY, VY.T)
    M = np.kron(KX, KY)  # vec(K_Y H K_X) = M vec(H), column-major
    one = np.ones(n)
    # gradient of (14) / 2: (M M / n^2 + reg M) h - M (vec(I) / n - vec(E) / n^2)
    Q = M @ M / n**2 + reg * M
    b = M @ (np.eye(n).ravel(order="F") / n - np.ones(n * n) / n**2)
    if normalize:
        e = np.kron(KX @ one, KY @ one)
        kkt = np.block([[Q, e[:, None]], [e[None, :], np.zeros((1, 1))]])
        h = np.linalg.lstsq(kkt, np.append(b, 0.0), rcond=1e-12)[0][:-1]
    else:
        h = np.linalg.lstsq(Q, b, rcond=1e-12)[0]
    H = h.reshape(n, n, order="F")
    kq = VX @ np.linalg.solve(GX, monomials(Xq, ax).T)  # (n, q): k_X(x_l, x_query)
    weights = 1.0 + KY @ H @ kq  # (n atoms, queries)
    objective = (np.sum((KY @ H @ KX) ** 2) / n**2 - 2 / n * np.trace(KY @ H @ KX)
                 + 2 / n**2 * one @ KY @ H @ KX @ one + reg * np.trace(H.T @ KY @ H @ KX))
    return [(weights.T @ f(Y)) / weights.sum(axis=0)[:, None] for f in functions], objective


@pytest.mark.parametrize("constraints", ["none", "normalization"])
def test_closed_forms_equal_the_brute_force_n2_problem(constraints):
    X, Y = gaussian_pairs(30, 1, seed=3)
    Xq = np.linspace(-2.5, 2.5, 7)[:, None]
    reg = 1e-3
    functions = [lambda y: y, lambda y: y**2]
    expected, objective = brute_force_conditional_expectations(
        X, Y, Xq, 2, reg, constraints == "normalization", functions)
    model = PolynomialJDL(degree=2, reg=reg, constraints=constraints).fit(X, Y)
    for f, value in zip(functions, expected):
        np.testing.assert_allclose(model.conditional_expectation(Xq, f), value, rtol=0, atol=1e-8)
    assert model.diagnostics_["objective"] == pytest.approx(objective, abs=1e-9)
    if constraints == "normalization":
        assert abs(model.diagnostics_["normalization_defect"]) < 1e-12


# -- sum-of-squares positivity ----------------------------------------------------------------------
@pytest.mark.parametrize("d,q,points", [(1, 4, 121), (2, 2, 31), (2, 4, 25), (1, 3, 121)])
def test_sos_fit_is_positive_far_outside_the_data(d, q, points):
    X, Y = gaussian_pairs(300, d, seed=4)
    gx, gy = far_grid(X, Y, points)
    sos = PolynomialJDL(degree=q).fit(X, Y)
    normalized = PolynomialJDL(degree=q, constraints="normalization").fit(X, Y)
    info = sos.diagnostics_
    assert info["sos_certified"] is True
    assert info["sos_min_eigenvalue"] >= info["sos_residual_l1"] + info["sos_rounding_bound"]
    assert info["sos_gram_size"] == comb(d + q // 2, d) ** 2
    assert one_plus_h(sos, gx, gy).min() >= 0.0
    assert one_plus_h(normalized, gx, gy).min() < -1.0  # the test can fail: without SOS it goes negative
    assert abs(info["normalization_defect"]) < 1e-12
    # the SOS fit pays for positivity with a (slightly) larger objective than normalization alone
    assert info["objective"] >= normalized.diagnostics_["objective"] - 1e-9
    np.testing.assert_allclose(sos.sos_gram_, sos.sos_gram_.T)


def test_sos_odd_degree_drops_the_unformable_top_degree():
    X, Y = gaussian_pairs(200, 1, seed=5)
    model = PolynomialJDL(degree=3).fit(X, Y)
    assert model.diagnostics_["sos_unformable_residual"] == 0.0
    assert np.all(model.coef_[3, :] == 0) and np.all(model.coef_[:, 3] == 0)  # psi_3 has degree 3


@pytest.mark.parametrize("d,q,rel", [(1, 2, 1e-6), (2, 2, 1e-6), (1, 4, 1e-3)])
def test_newton_polytope_basis_gives_the_full_gram_basis_optimum(d, q, rel):
    """Same optimum with the paper's full Gram basis (S >= 0, no margin: it has no interior point).

    For q = 4 the full-basis SDP has singularity degree 2 (x^4 must have a zero row in S, and then
    x^3), so double-precision solvers only reach about eps^(1/4) there (Sturm's error bound): measured
    7e-5 to 4e-4 relative, always below the reduced optimum (slightly infeasible). q = 2 (singularity
    degree 1) agrees to 1e-10 and is checked to 1e-6.
    """
    X, Y = gaussian_pairs(150, d, seed=6)
    problem = build_polynomial_problem(X, Y, q)
    red, reg = problem.reductions, 1e-3
    H_reduced, info_reduced = solve_sos_positivity(problem.basis_x, problem.basis_y, red, reg, margin=0.0,
                                                   certify=False)
    H_full, info_full = solve_sos_positivity(problem.basis_x, problem.basis_y, red, reg, gram="full", margin=0.0,
                                             certify=False, solver="CLARABEL")
    assert info_reduced["sos_gram_size"] == comb(d + q // 2, d) ** 2 < info_full["sos_gram_size"] == comb(2 * d + q, q)
    reduced, full = red.objective(H_reduced, reg), red.objective(H_full, reg)
    assert reduced == pytest.approx(full, rel=rel)
    assert full <= reduced + 1e-9 * abs(reduced)  # the full cone contains the reduced one
    with pytest.raises(ValueError, match="no interior point"):
        solve_sos_positivity(problem.basis_x, problem.basis_y, red, reg, gram="full")


def independent_sos_objective(X, Y, q, reg, gram="full"):
    """min (14) over raw-monomial coefficients C (h = tau_Y(y) C tau_X(x)^T) s.t. normalization and
    1 + h = tau(z) S tau(z)^T, S PSD; tau: all monomials of degree <= q in z = (x, y) (the paper's (39),
    "full") or x^a y^b with |a|, |b| <= q // 2 ("newton")."""
    import cvxpy as cp

    n, dx, dy = X.shape[0], X.shape[1], Y.shape[1]
    ax, ay = exponents(dx, q), exponents(dy, q)
    VX, VY = monomials(X, ax), monomials(Y, ay)
    LX, LY = np.linalg.cholesky(VX.T @ VX / n), np.linalg.cholesky(VY.T @ VY / n)
    C = cp.Variable((len(ay), len(ax)))
    objective = ((1 + reg) * cp.sum_squares(LY.T @ C @ LX) - 2 / n * cp.sum(cp.multiply(VY.T @ VX, C))
                 + 2 / n**2 * (VY.sum(axis=0) @ C @ VX.sum(axis=0)))
    if gram == "full":
        gram = exponents(dx + dy, q)
    else:
        gram = np.array([tuple(a) + tuple(b) for a in exponents(dx, q // 2) for b in exponents(dy, q // 2)])
    S = cp.Variable((len(gram), len(gram)), PSD=True)
    masks = {}
    for i, j in itertools.product(range(len(gram)), repeat=2):
        masks.setdefault(tuple(gram[i] + gram[j]), np.zeros((len(gram), len(gram))))[i, j] = 1.0
    model_terms = {}
    for (b, beta), (a, alpha) in itertools.product(enumerate(ay), enumerate(ax)):
        model_terms[tuple(alpha) + tuple(beta)] = C[b, a]
    constraints = [VY.sum(axis=0) @ C @ VX.sum(axis=0) == 0]
    for key in set(masks) | set(model_terms):
        left = cp.sum(cp.multiply(masks[key], S)) if key in masks else 0.0
        right = model_terms.get(key, 0.0) + (1.0 if sum(key) == 0 else 0.0)
        constraints.append(left == right)
    problem = cp.Problem(cp.Minimize(objective), constraints)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "optimal_inaccurate" for the degenerate full basis
        problem.solve(solver=cp.CLARABEL, tol_gap_abs=1e-10, tol_gap_rel=1e-10, tol_feas=1e-10)
    assert problem.status in ("optimal", "optimal_inaccurate")
    return problem.value


@pytest.mark.parametrize("d,q,gram,tol", [(1, 2, "full", 1e-5), (2, 2, "full", 1e-5), (1, 4, "newton", 1e-5),
                                          (1, 4, "full", 5e-4)])
def test_sos_agrees_with_an_independent_cvxpy_formulation(d, q, gram, tol):
    """The model (reduced basis, S >= 1e-8 I) against raw-monomial cvxpy formulations; the full
    basis at q = 4 is only solvable to about 1e-4 (see the test above)."""
    X, Y = gaussian_pairs(150, d, seed=8)
    reg = 1e-3
    model = PolynomialJDL(degree=q, reg=reg).fit(X, Y)
    expected = independent_sos_objective(X, Y, q, reg, gram)
    assert model.diagnostics_["objective"] == pytest.approx(expected, abs=tol)


def test_sos_conditional_weights_are_nonnegative_far_outside_the_data():
    X, Y = gaussian_pairs(300, 1, seed=9)
    Xq = np.linspace(-20, 20, 81)[:, None]  # the data lie in about [-3, 3]
    weights = PolynomialJDL(degree=4).fit(X, Y).conditional_weights(Xq)
    assert weights.min() >= 0.0
    np.testing.assert_allclose(weights.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    unconstrained = PolynomialJDL(degree=4, constraints="normalization").fit(X, Y)
    assert unconstrained.conditional_weights(Xq).min() < 0  # the test can fail
    assert unconstrained.negative_mass(Xq).max() > 0


def test_certificate_detects_a_non_sos_solution():
    X, Y = gaussian_pairs(200, 1, seed=10)
    model = PolynomialJDL(degree=2).fit(X, Y)
    gram = gram_exponents(1, 1, 2)
    info = sos_certificate(model.coef_, model.sos_gram_, model.basis_x_, model.basis_y_, gram)
    assert info["sos_certified"]
    broken = sos_certificate(model.coef_ + 1e-3, model.sos_gram_, model.basis_x_, model.basis_y_, gram)
    assert not broken["sos_certified"] and broken["sos_residual_l1"] > 1e-4


def test_grid_and_clip_positivity_are_inherited():
    X, Y = gaussian_pairs(120, 1, seed=11)
    assert PolynomialJDL(degree=4, constraints="normalization").fit(X, Y).grid_minimum(X) < -1.0  # binding here
    grid = PolynomialJDL(degree=4, positivity="grid").fit(X, Y)
    assert grid.grid_minimum(X) >= -1e-9
    clip = PolynomialJDL(degree=4, positivity="clip").fit(X, Y)
    assert clip.conditional_weights(np.array([[10.0]])).min() >= 0


# -- state ------------------------------------------------------------------------------------------
def test_state_round_trip_is_bit_identical():
    X, Y = gaussian_pairs(250, 2, seed=12)
    model = PolynomialJDL(degree=2).fit(X, Y)
    state = model.state()
    json.dumps({k: v for k, v in state.items() if k != "arrays"})
    m = {"x": 6, "y": 6}
    for side in ("x", "y"):
        assert state[f"kernel_{side}"] == {"name": "polynomial", "degree": 2, "width": 2, "size": 6,
                                           "standardized": True}
        assert state["arrays"][f"{side}_exponents"].shape == (m[side], 2)
        assert state["arrays"][f"{side}_coefficients"].shape == (m[side], m[side])
        assert state["arrays"][f"{side}_center"].shape == state["arrays"][f"{side}_scale"].shape == (2,)
    assert state["params"] == {"degree": 2, "reg": 1e-3, "constraints": "positivity", "positivity": "sos",
                               "sos_margin": 1e-8, "solver_tol": 1e-10, "seed": 0, "support_size": None,
                               "grid_points": 1000, "grid_rounds": 200, "grid_seconds": 120.0}
    loaded = PolynomialJDL.from_state(state)
    for fitted in (model, loaded):
        fitted.register("square", lambda y: y**2)
    Xq = np.random.default_rng(0).normal(size=(20, 2)) * 4
    np.testing.assert_array_equal(loaded.conditional_expectation(Xq), model.conditional_expectation(Xq))
    np.testing.assert_array_equal(loaded.conditional_weights(Xq), model.conditional_weights(Xq))
    np.testing.assert_array_equal(loaded.expectation("square", Xq), model.expectation("square", Xq))
    levels = [0.1, 0.9]
    np.testing.assert_array_equal(loaded.conditional_quantile(Xq, levels), model.conditional_quantile(Xq, levels))
    assert loaded.diagnostics_["sos_certified"] is True
    state["kernel_x"] = {"name": "gaussian", "lengthscale": 1.0}
    with pytest.raises(ValueError, match="not a polynomial basis"):
        PolynomialJDL.from_state(state)


def test_basis_arrays_round_trip():
    basis, _ = fit_polynomial_basis(gaussian_pairs(50, 2)[0], 3, "X")
    again = PolynomialBasis.from_arrays(basis.to_arrays("x"), "x")
    np.testing.assert_array_equal(again.exponents, basis.exponents)
    assert again.exponents.dtype.kind == "i"
    bad = {**basis.to_arrays("x"), "x_exponents": basis.exponents + 0.5}
    with pytest.raises(ValueError, match="integers"):
        PolynomialBasis.from_arrays(bad, "x")


# -- bad input --------------------------------------------------------------------------------------
def test_bad_input_is_one_clear_error():
    X, Y = gaussian_pairs(60, 2, seed=13)
    constant = X.copy()
    constant[:, 1] = 4.0
    with pytest.raises(ValueError, match=r"X: column 1 is constant"):
        PolynomialJDL().fit(constant, Y)
    few = np.repeat(np.array([[0.0], [1.0], [2.0]]), 20, axis=0)
    with pytest.raises(ValueError, match=r"Y: the 5 monomials of degree <= 4 .* rank 3 .*3 distinct"):
        PolynomialJDL(degree=4).fit(X[:, :1], few)
    with pytest.raises(ValueError, match=r"rank"):
        PolynomialJDL(degree=4).fit(X[:4], Y[:4])  # 4 points, 15 monomials
    for degree in (0, -1, 2.5, True, "4"):
        with pytest.raises(ValueError, match="degree"):
            PolynomialJDL(degree=degree).fit(X, Y)
    bad = X.copy()
    bad[3, 0] = np.nan
    with pytest.raises(ValueError, match="X: contains NaN"):
        PolynomialJDL().fit(bad, Y)
    for positivity in ("pointwise", "nope"):
        with pytest.raises(ValueError, match="positivity: unknown value"):
            PolynomialJDL(positivity=positivity).fit(X, Y)
    with pytest.raises(ValueError, match="solver_tol"):
        PolynomialJDL(solver_tol=0).fit(X, Y)
    with pytest.raises(ValueError, match="X and Y"):
        PolynomialJDL().fit(X, Y[:-1])
    with pytest.raises(ValueError, match="gram"):
        gram_exponents(1, 1, 4, "half")
