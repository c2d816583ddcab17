import numpy as np

from jdlcore import GaussianKernel, Matern52Kernel, build_problem, pivoted_cholesky, spectral_basis
from jdlcore.basis import reductions_from_values


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
    problem = build_problem(X, Y, GaussianKernel(1.0), GaussianKernel(1.0), tol=1e-4)
    red, A_x, A_y = problem.reductions, problem.A_x, problem.A_y
    np.testing.assert_allclose(red.cross, sum(np.outer(A_y[i], A_x[i]) for i in range(500)), atol=1e-9)
    np.testing.assert_allclose(red.sum_x, A_x.sum(0), atol=1e-12)
    # splitting the samples and adding the partial reductions gives the same problem (chunked path)
    halves = [reductions_from_values(A_x[s], A_y[s]) for s in (slice(0, 250), slice(250, 500))]
    np.testing.assert_allclose(halves[0].cross + halves[1].cross, red.cross, atol=1e-10)
    np.testing.assert_allclose(np.minimum(halves[0].min_y, halves[1].min_y), red.min_y)
    # the objective (22) equals the full objective (14) evaluated at H = Q_Y Htil Q_X^T
    H = rng.standard_normal(red.cross.shape)
    n = 500
    values = A_y @ H @ A_x.T  # h on the grid
    direct = (np.sum(values**2) / n**2 - 2 / n * np.trace(values) + 2 / n**2 * values.sum() + 1e-3 * np.sum(H**2))
    assert abs(red.objective(H, 1e-3) - direct) < 1e-9 * abs(direct)
