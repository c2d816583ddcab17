"""Tests for jdlcore.psd.fit (Gaussian PSD density fitting, Rudi & Ciliberto 2021, estimator (12)).

f is computed here by brute force (explicit double sums over the centres) and integrals by
Gauss-Legendre quadrature, independently of jdlcore.psd.model.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from jdlcore.psd.model import GaussianPSDModel
from jdlcore.solvers.fista import ConvergenceWarning
from jdlcore.psd.fit import (
    project_psd_affine,
    fit_psd_density,
    held_out_loss,
    psd_l2_gram,
    psd_objective_terms,
)


# ------------------------------------------------------------------------------------------------
# brute-force references
# ------------------------------------------------------------------------------------------------
def _kvec(x: np.ndarray, c: np.ndarray, l: np.ndarray) -> np.ndarray:
    """k(x, c) = exp(-|x - c|^2 / (2 l^2)) for x (q, d), one centre c (d,): shape (q,)."""
    return np.exp(-np.sum((x - c) ** 2 / (2.0 * l**2), axis=1))


def brute_f(A: np.ndarray, C: np.ndarray, l, x: np.ndarray) -> np.ndarray:
    """f(x) = sum_i sum_j A_ij k(x, c_i) k(x, c_j), double loop over the centres."""
    x = np.atleast_2d(np.asarray(x, dtype=float))
    l = np.broadcast_to(np.asarray(l, dtype=float), (C.shape[1],))
    ks = [_kvec(x, C[i], l) for i in range(C.shape[0])]
    out = np.zeros(x.shape[0])
    for i in range(C.shape[0]):
        for j in range(C.shape[0]):
            out += A[i, j] * ks[i] * ks[j]
    return out


def gl_grid(d: int, lo: float, hi: float, nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """Tensor Gauss-Legendre points (q, d) and weights (q,) on [lo, hi]^d."""
    t, w = np.polynomial.legendre.leggauss(nodes)
    t = lo + (hi - lo) * (t + 1.0) / 2.0
    w = w * (hi - lo) / 2.0
    if d == 1:
        return t[:, None], w
    T1, T2 = np.meshgrid(t, t, indexing="ij")
    W1, W2 = np.meshgrid(w, w, indexing="ij")
    return np.column_stack([T1.ravel(), T2.ravel()]), (W1 * W2).ravel()


def random_psd(m: int, rng: np.random.Generator, rank: int | None = None) -> np.ndarray:
    G = rng.standard_normal((m, rank or m))
    return G @ G.T


def mixture_pdf(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=float).ravel()
    g = lambda mu, s: np.exp(-((x - mu) ** 2) / (2 * s * s)) / np.sqrt(2 * np.pi * s * s)  # noqa: E731
    return 0.4 * g(-1.0, 0.35) + 0.6 * g(1.2, 0.6)


def mixture_sample(n: int, rng: np.random.Generator) -> np.ndarray:
    first = rng.random(n) < 0.4
    return np.where(first, rng.normal(-1.0, 0.35, n), rng.normal(1.2, 0.6, n))[:, None]


def n_matrix(C: np.ndarray, l) -> np.ndarray:
    """<N, A> = int f_A (brute: via quadrature-free closed form is under test elsewhere)."""
    l = np.broadcast_to(np.asarray(l, dtype=float), (C.shape[1],))
    eta = 1.0 / (2.0 * l**2)
    diff = C[:, None, :] - C[None, :, :]
    Khalf = np.exp(-np.sum(eta / 2.0 * diff**2, axis=2))
    return np.pi ** (C.shape[1] / 2.0) * np.prod((2.0 * eta) ** -0.5) * Khalf


# ------------------------------------------------------------------------------------------------
# closed forms
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed, centres, lengthscale, box, nodes, repeats", [
    (0, (5, 1), 0.7, 15.0, 600, 3),  # 1-D, one lengthscale
    (1, (4, 2), np.array([0.6, 0.9]), 10.0, 160, 2),  # 2-D, a lengthscale per feature
])
def test_l2_gram_and_integral_match_quadrature(seed, centres, lengthscale, box, nodes, repeats):
    """The L2 Gram of the centre-kernel products (a symmetric PSD matrix), the objective's squared L2
    norm and the integral's closed form, each against Gauss-Legendre quadrature of f = k^T A k."""
    rng = np.random.default_rng(seed)
    C, l = rng.normal(0.0, 1.0, centres), lengthscale
    G = psd_l2_gram(C, l)
    m = centres[0]
    assert G.shape == (m * m, m * m)
    np.testing.assert_allclose(G, G.T, rtol=0, atol=1e-14 * np.abs(G).max())
    assert np.linalg.eigvalsh(G)[0] > -1e-12 * np.linalg.eigvalsh(G)[-1]
    x, w = gl_grid(centres[1], -box, box, nodes)
    for _ in range(repeats):
        A = random_psd(m, rng)
        quad = float(w @ brute_f(A, C, l, x) ** 2)
        assert abs(float(A.ravel() @ G @ A.ravel()) - quad) <= 1e-8 * quad
        assert abs(psd_objective_terms(A, C, l, rng.normal(size=(7, centres[1])))["l2_square"] - quad) <= 1e-8 * quad
        integral = GaussianPSDModel(A, C, l).integral()
        assert abs(integral - float(w @ brute_f(A, C, l, x))) <= 1e-10 * integral


@pytest.mark.parametrize("d", [1, 2])
def test_linear_and_regulariser_terms(d):
    rng = np.random.default_rng(2 + d)
    C = rng.normal(size=(6, d))
    X = rng.normal(size=(40, d))
    l = 0.8 if d == 1 else np.array([0.8, 1.3])
    A = random_psd(6, rng)
    terms = psd_objective_terms(A, C, l, X)
    assert terms["linear"] == pytest.approx(2.0 * brute_f(A, C, l, X).mean(), rel=1e-12)
    lv = np.broadcast_to(np.asarray(l, dtype=float), (d,))
    K = np.array([[_kvec(C[i][None, :], C[j], lv)[0] for j in range(6)] for i in range(6)])
    reg_brute = sum(A[i, j] * K[j, k] * A[k, q] * K[q, i] for i in range(6) for j in range(6) for k in range(6) for q in range(6))
    assert terms["regulariser"] == pytest.approx(reg_brute, rel=1e-12)


def test_affine_psd_projection_is_the_nearest_feasible_point():
    rng = np.random.default_rng(5)
    m = 6
    N = random_psd(m, rng) + 0.5 * np.eye(m)
    B = rng.normal(size=(m, m))
    B = (B + B.T) / 2.0
    A, mu, _ = project_psd_affine(B, N, 0.0, 1.0)
    assert np.linalg.eigvalsh(A)[0] >= -1e-12
    assert np.sum(N * A) == pytest.approx(1.0, abs=1e-10)
    dist = np.linalg.norm(A - B)
    for _ in range(200):
        Z = random_psd(m, rng, rank=rng.integers(1, m + 1))
        Z /= np.sum(N * Z)
        Z = A + rng.uniform(0, 1) * (Z - A)  # feasible points, including ones near A
        assert np.linalg.norm(Z - B) >= dist - 1e-12


# ------------------------------------------------------------------------------------------------
# fitting
# ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def data_1d():
    return mixture_sample(600, np.random.default_rng(11))


def test_unnormalised_fit_is_the_raw_minimiser(data_1d):
    """normalize=False solves without int f = 1 and divides afterwards: both solvers reach the same raw
    minimum (measured: agree to 1e-12), whose integral is not 1, and which lies below the minimum
    under the equality (a constraint can only raise it)."""
    fits = {solver: fit_psd_density(data_1d, m=15, lengthscale=0.4, reg=1e-4, solver=solver, normalize=False)
            for solver in ("cvxpy", "pgd")}
    raw = {solver: fit.fit_info_["objective_unnormalized"] for solver, fit in fits.items()}
    assert raw["cvxpy"] == pytest.approx(raw["pgd"], rel=1e-9)
    assert abs(fits["cvxpy"].fit_info_["integral_before_normalization"] - 1.0) > 1e-4
    constrained = fit_psd_density(data_1d, m=15, lengthscale=0.4, reg=1e-4, solver="cvxpy", normalize=True)
    assert raw["cvxpy"] < constrained.fit_info_["objective"]


@pytest.mark.parametrize("solver", ["cvxpy", "pgd"])
@pytest.mark.parametrize("normalize", [True, False])
def test_fit_is_psd_and_normalised(data_1d, solver, normalize):
    res = fit_psd_density(data_1d, m=15, lengthscale=0.4, reg=1e-4, solver=solver, normalize=normalize)
    info = res.fit_info_
    assert np.linalg.eigvalsh(res.A)[0] >= -1e-10
    assert info["min_eigenvalue"] >= -1e-10
    assert res.A.shape == (15, 15) and res.centers.shape == (15, 1)
    x, w = gl_grid(1, -12.0, 12.0, 600)
    assert float(w @ brute_f(res.A, res.centers, 0.4, x)) == pytest.approx(1.0, abs=1e-8)
    assert res.integral() == pytest.approx(1.0, abs=1e-10)
    np.testing.assert_allclose(res(x[:50]), brute_f(res.A, res.centers, 0.4, x[:50]), rtol=1e-10, atol=1e-14)
    for key in ("objective", "iterations", "solver", "seconds", "min_eigenvalue"):
        assert key in info
    assert info["center_source"] == "pivoted_cholesky"


def _objective(A, C, l, X, reg):
    t = psd_objective_terms(A, C, l, X)
    return t["l2_square"] - t["linear"] + reg * t["regulariser"]


@pytest.mark.parametrize("d", [1, 2])
def test_solution_beats_feasible_perturbations(d):
    rng = np.random.default_rng(20 + d)
    X = rng.normal(size=(400, d))
    l, reg = (0.5, 1e-3) if d == 1 else (np.array([0.6, 0.8]), 1e-3)
    res = fit_psd_density(X, m=10, lengthscale=l, reg=reg, solver="cvxpy")
    A, C = res.A, res.centers
    N = n_matrix(C, l)
    J0 = _objective(A, C, l, X, reg)
    assert J0 == pytest.approx(res.fit_info_["objective"], rel=1e-10)
    lam, U = np.linalg.eigh(A)
    for k in range(60):
        if k % 3 == 0:  # add a random PSD direction
            P = random_psd(10, rng, rank=1)
            Z = A + 10.0 ** rng.uniform(-4, 0) * P * np.linalg.norm(A) / np.linalg.norm(P)
        elif k % 3 == 1:  # move towards a random feasible PSD point
            P = random_psd(10, rng)
            Z = A + 10.0 ** rng.uniform(-4, 0) * (P / np.sum(N * P) - A)
        else:  # shrink/grow one eigen-direction (stays PSD)
            i = rng.integers(10)
            Z = A + (rng.uniform(-1, 1) * lam[i] + 1e-3 * rng.random()) * np.outer(U[:, i], U[:, i])
        Z = Z / np.sum(N * Z)
        assert np.linalg.eigvalsh(Z)[0] >= -1e-9 * np.abs(Z).max()
        assert J0 <= _objective(Z, C, l, X, reg) + 1e-10 * abs(J0)


@pytest.mark.parametrize("d,normalize", [(1, True), (1, False), (2, True)])
def test_cvxpy_and_pgd_agree(d, normalize):
    rng = np.random.default_rng(30 + d)
    X = rng.normal(size=(500, d))
    l = 0.5 if d == 1 else np.array([0.7, 0.9])
    kw = dict(m=14, lengthscale=l, reg=1e-3, normalize=normalize)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = fit_psd_density(X, solver="cvxpy", **kw)
    b = fit_psd_density(X, solver="pgd", **kw)
    np.testing.assert_array_equal(a.centers, b.centers)
    ja, jb = a.fit_info_["objective"], b.fit_info_["objective"]
    assert abs(ja - jb) <= 1e-6 * abs(ja)
    Xt = rng.normal(scale=1.5, size=(100, d))
    fa, fb = a(Xt), b(Xt)
    assert np.max(np.abs(fa - fb)) <= 1e-4 * np.max(np.abs(fa))
    assert b.fit_info_["solver"] == "pgd" and a.fit_info_["solver"].startswith("cvxpy")


def test_pgd_stops_on_a_certified_duality_gap_that_bounds_its_distance_to_cvxpys_optimum():
    """At reg 1e-6, where a small step is no proof of convergence: pgd stops on the Frank-Wolfe gap
    (an upper bound on J(A) - J*), agrees with cvxpy's objective, and a capped run reports its own
    larger gap, unconverged, which still bounds its excess over the optimum."""
    rng = np.random.default_rng(8)
    X = rng.normal(size=(2000, 2))
    kw = dict(m=20, lengthscale=0.5, reg=1e-6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        optimum = fit_psd_density(X, solver="cvxpy", **kw).fit_info_["objective"]
    fit = fit_psd_density(X, solver="pgd", gap_tol=1e-7, max_iter=20_000, **kw).fit_info_
    assert fit["converged"] and fit["gap"] <= 1e-7
    assert abs(fit["objective"] - optimum) <= 1e-6 * abs(optimum)
    with pytest.warns(ConvergenceWarning, match=r"pgd stopped at max_iter = 25 with a certified relative duality gap"):
        capped = fit_psd_density(X, solver="pgd", gap_tol=1e-7, max_iter=25, **kw).fit_info_
    assert not capped["converged"] and capped["gap"] > 1e-7 and capped["iterations"] == 25
    slack = 1e-9  # cvxpy's own tolerance
    assert fit["objective"] - optimum <= fit["gap"] * max(1.0, abs(fit["objective"])) + slack
    assert capped["objective"] - optimum <= capped["gap"] * max(1.0, abs(capped["objective"])) + slack
    assert capped["objective"] - optimum > 10 * (fit["objective"] - optimum)


def test_auto_solver_choice():
    X = np.random.default_rng(3).normal(size=(200, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert fit_psd_density(X, m=8, lengthscale=0.5, reg=1e-3).fit_info_["solver"].startswith("cvxpy")
    X = np.random.default_rng(3).uniform(-3, 3, size=(500, 1))
    with pytest.warns(ConvergenceWarning):  # 50 iterations: the gap is not reached
        res = fit_psd_density(X, m=45, lengthscale=0.1, reg=1e-3, max_iter=50)
    assert res.A.shape[0] == 45 and res.fit_info_["solver"] == "pgd"


def test_given_centers_used():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(300, 2))
    C = rng.normal(size=(7, 2))
    res = fit_psd_density(X, centers=C, lengthscale=0.7, reg=1e-3, solver="pgd")
    np.testing.assert_array_equal(res.centers, C)
    assert res.fit_info_["center_source"] == "given"


def test_pgd_stays_sane_with_ill_conditioned_centres():
    """Regression: with cond(K) ~ 1e9 the rounding-level negative eigenvalues of the L2 Gram made
    J unbounded below (J ~ -1e16 before the Gram was replaced by its PSD factor)."""
    X = np.random.default_rng(2).normal(size=(2000, 1))
    with pytest.warns(ConvergenceWarning):  # 500 iterations at reg 1e-6 and cond(K) ~ 1e9: far from the gap
        res = fit_psd_density(X, m=50, lengthscale=0.3, reg=1e-6, solver="pgd", max_iter=500)
    info = res.fit_info_
    assert info["cond_K"] > 1e7
    # J = |f - p|^2 - |p|^2 + reg * ..., and |p|^2 = 1 / (2 sqrt(pi)) = 0.282 for N(0, 1)
    assert -0.3 < info["objective"] < -0.25
    assert info["min_eigenvalue_relative"] > -1e-10
    x, w = gl_grid(1, -12.0, 12.0, 800)
    assert float(w @ brute_f(res.A, res.centers, 0.3, x)) == pytest.approx(1.0, abs=1e-6)


def _l2_error(res, lengthscale) -> float:
    x, w = gl_grid(1, -8.0, 8.0, 800)
    return float(np.sqrt(w @ (brute_f(res.A, res.centers, lengthscale, x) - mixture_pdf(x)) ** 2))


def _select_and_fit(n: int, rng: np.random.Generator) -> tuple[float, float]:
    X = mixture_sample(n, rng)
    X_val = mixture_sample(max(n // 2, 100), rng)
    best = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for l in (0.25, 0.5, 0.7):
            res = fit_psd_density(X, m=25, lengthscale=l, reg=1e-4, solver="cvxpy")
            loss = held_out_loss(res, X_val)
            if best is None or loss < best[0]:
                best = (loss, res, l)
    return _l2_error(best[1], best[2]), best[2]


def test_statistical_sanity_gaussian_mixture():
    rng = np.random.default_rng(123)
    err_big, l_big = _select_and_fit(2000, rng)
    err_small, _ = _select_and_fit(200, rng)
    # |p|_L2 is about 0.55 for this mixture; loose bound on the absolute L2 error (measured: 0.054
    # at n = 2000 and 0.126 at n = 200, both with l = 0.7 selected)
    assert err_big < 0.08, (err_big, l_big)
    assert err_big < 0.7 * err_small, (err_big, err_small)


# ------------------------------------------------------------------------------------------------
# bad input
# ------------------------------------------------------------------------------------------------
def test_bad_input():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, 2))
    Xnan = X.copy()
    Xnan[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        fit_psd_density(Xnan, m=5, lengthscale=1.0)
    with pytest.raises(ValueError, match="features"):
        fit_psd_density(X, centers=rng.normal(size=(5, 3)), lengthscale=1.0)
    with pytest.raises(ValueError, match="max_centers"):
        fit_psd_density(X, m=20, lengthscale=1.0, max_centers=10)
    with pytest.raises(ValueError, match="max_centers"):
        fit_psd_density(X, centers=rng.normal(size=(12, 2)), lengthscale=1.0, max_centers=10)
    with pytest.raises(ValueError, match="max_centers"):
        psd_l2_gram(rng.normal(size=(12, 2)), 1.0, max_centers=10)
    with pytest.raises(ValueError, match="reg"):
        fit_psd_density(X, m=5, lengthscale=1.0, reg=-1e-3)
    for bad in (0.0, -1.0, np.nan, [1.0, -2.0]):
        with pytest.raises(ValueError, match="lengthscale"):
            fit_psd_density(X, m=5, lengthscale=bad)
    with pytest.raises(ValueError, match="lengthscale"):
        fit_psd_density(X, m=5, lengthscale=[1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="solver"):
        fit_psd_density(X, m=5, lengthscale=1.0, solver="newton")
    with pytest.raises(ValueError, match="A"):
        psd_objective_terms(np.eye(3), rng.normal(size=(4, 2)), 1.0, X)


# ------------------------------------------------------------------------------------------------
# the returned model
# ------------------------------------------------------------------------------------------------
def test_fit_psd_density_returns_model_matching_brute_force():
    rng = np.random.default_rng(9)
    X = rng.normal(size=(300, 2))
    l = np.array([0.6, 0.9])
    model = fit_psd_density(X, m=10, lengthscale=l, reg=1e-3, solver="pgd")
    assert isinstance(model, GaussianPSDModel)
    Xq = rng.normal(size=(30, 2))
    np.testing.assert_allclose(model(Xq), brute_f(model.A, model.centers, l, Xq), rtol=1e-9, atol=1e-14)
    assert model.integral() == pytest.approx(1.0, abs=1e-8)
    assert model.fit_info_["solver"] == "pgd"
