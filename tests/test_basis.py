import numpy as np
import pytest

from jdlcore import Factorisation, GaussianKernel, Matern52Kernel, build_problem, pivoted_cholesky, spectral_basis
from jdlcore.models.problem import problem_from_factors
from jdlcore.lowrank.basis import reductions_from_values


def test_double_orthogonality(rng):
    X = rng.standard_normal((700, 2))
    kernel = Matern52Kernel(0.8)
    K = kernel(X)
    factor = pivoted_cholesky(kernel, X, tol=1e-6, pivoting="greedy")
    basis = spectral_basis(factor, kernel)
    Q = factor.basis() @ basis.rotation  # (21): Q = B V
    m = factor.rank
    np.testing.assert_allclose(Q.T @ K @ Q, np.eye(m), atol=1e-8)  # (28): orthonormal in the RKHS
    A = basis.features(X)  # Psi at the training points equals L V
    np.testing.assert_allclose(A, factor.L @ basis.rotation, atol=1e-9)
    np.testing.assert_allclose(A.T @ A, np.diag(basis.eigenvalues), atol=1e-8 * basis.eigenvalues.max())
    assert np.all(np.diff(basis.eigenvalues) <= 0)


def test_reductions_are_sums_over_samples(rng):
    X, Y = rng.standard_normal((500, 1)), rng.standard_normal((500, 2))
    problem = build_problem(X, Y, GaussianKernel(1.0), GaussianKernel(1.0), Factorisation(tol=1e-4))
    red, A_x, A_y = problem.reductions, problem.A_x, problem.A_y
    np.testing.assert_allclose(red.cross, sum(np.outer(A_y[i], A_x[i]) for i in range(500)), atol=1e-9)
    np.testing.assert_allclose(red.sum_x, A_x.sum(0), atol=1e-12)
    # Lambda = diag(A^T A), formed from the factor's Gram matrix and the rotation, against the sum of squares
    for lam, A in ((red.lam_x, A_x), (red.lam_y, A_y)):
        np.testing.assert_allclose(lam, sum(A[i] ** 2 for i in range(500)), rtol=1e-10, atol=1e-10)
    # splitting the samples and adding the partial reductions gives the same problem (chunked path)
    halves = [reductions_from_values(A_x[s], A_y[s]) for s in (slice(0, 250), slice(250, 500))]
    np.testing.assert_allclose(halves[0].cross + halves[1].cross, red.cross, atol=1e-10)
    np.testing.assert_allclose(np.minimum(halves[0].min_y, halves[1].min_y), red.min_y)


def test_low_rank_objective_is_the_full_objective_14_from_the_kernel_matrices(rng):
    """(22) at Htil equals the paper's (14), written with the n x n kernel matrices K_X, K_Y, at
    H = Q_Y Htil Q_X^T with Q = B V (21); this holds at any rank, since K B = L and Q^T K Q = I."""
    n, reg = 300, 1e-3
    X, Y = rng.standard_normal((n, 2)), rng.standard_normal((n, 1))
    kernel_x, kernel_y = GaussianKernel(0.9), Matern52Kernel(0.7)
    factor_x, factor_y = (pivoted_cholesky(k, Z, tol=1e-4) for k, Z in ((kernel_x, X), (kernel_y, Y)))
    problem = problem_from_factors(factor_x, factor_y, kernel_x, kernel_y, X, Y)
    Q_x = factor_x.basis() @ problem.basis_x.rotation
    Q_y = factor_y.basis() @ problem.basis_y.rotation
    K_x, K_y = kernel_x(X), kernel_y(Y)
    ones = np.ones(n)
    for _ in range(3):
        Htil = rng.standard_normal((problem.basis_y.size, problem.basis_x.size))
        H = Q_y @ Htil @ Q_x.T  # (n, n)
        full = (np.trace(H.T @ K_y @ K_y @ H @ K_x @ K_x) / n**2 - 2 / n * np.trace(K_y @ H @ K_x)
                + 2 / n**2 * ones @ K_y @ H @ K_x @ ones + reg * np.trace(H.T @ K_y @ H @ K_x))
        assert problem.reductions.objective(Htil, reg) == pytest.approx(full, rel=1e-9)
