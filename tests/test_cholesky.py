import numpy as np
import pytest

from jdlcore import GaussianKernel, LaplaceKernel, pivoted_cholesky


def algorithm_1(K: np.ndarray, eps: float):
    """Plain transcription of Algorithm 1 (greedy, column by column, explicit matrix)."""
    n = K.shape[0]
    d = np.diag(K).copy()
    L = np.zeros((n, 0))
    B = np.zeros((n, 0))
    pivots = []
    while d.sum() > eps:
        p = int(np.argmax(d))
        e = np.zeros(n)
        e[p] = 1.0
        ell = (K - L @ L.T) @ e / np.sqrt(d[p])
        b = (e - B @ L.T @ e) / np.sqrt(d[p])
        L, B = np.column_stack([L, ell]), np.column_stack([B, b])
        d = d - ell * ell
        pivots.append(p)
    return np.array(pivots), L, B


@pytest.mark.parametrize("n,dim,tol", [(300, 1, 1e-8), (800, 3, 1e-4)])
def test_greedy_pivots_identical_to_algorithm_1(n, dim, tol, rng):
    X = rng.standard_normal((n, dim))
    kernel = GaussianKernel(1.0)
    K = kernel(X)
    pivots, L, B = algorithm_1(K, tol * np.trace(K))
    for block in (1, 16, 64, n):
        f = pivoted_cholesky(kernel, X, tol=tol, pivoting="greedy", block_size=block)
        np.testing.assert_array_equal(f.pivots, pivots)
        np.testing.assert_allclose(f.L, L, atol=1e-9)
        np.testing.assert_allclose(f.basis(), B, atol=1e-6 * np.abs(B).max())


@pytest.mark.parametrize("pivoting", ["greedy", "random"])
@pytest.mark.parametrize("block", [1, 64])
def test_biorthogonality_identities(pivoting, block, rng):
    X = rng.standard_normal((2000, 2))
    kernel = GaussianKernel(0.7)
    K = kernel(X)
    f = pivoted_cholesky(kernel, X, tol=1e-5, pivoting=pivoting, block_size=block, seed=3)
    B = f.basis()
    np.testing.assert_allclose(K @ B, f.L, rtol=0, atol=1e-10)
    np.testing.assert_allclose(B.T @ f.L, np.eye(f.rank), rtol=0, atol=1e-10)
    assert np.allclose(np.triu(f.L[f.pivots], 1), 0.0, atol=0)
    assert np.allclose(np.tril(f.B_pivots, -1), 0.0, atol=0)
    residual = np.trace(K) - np.sum(f.L**2)
    assert f.trace_error[-1] == pytest.approx(residual, abs=1e-9)
    assert f.trace_error[-1] <= 1e-5 * np.trace(K)
    assert np.all(np.diff(f.trace_error) <= 1e-12)
    assert len(f.trace_error) == f.rank + 1
    assert np.linalg.eigvalsh(K - f.L @ f.L.T).min() > -1e-10  # Schur complement stays PSD


def test_random_pivoting_is_seeded(rng):
    X = rng.standard_normal((3000, 3))
    a = pivoted_cholesky(GaussianKernel(1.0), X, tol=1e-2, seed=7)
    b = pivoted_cholesky(GaussianKernel(1.0), X, tol=1e-2, seed=7)
    c = pivoted_cholesky(GaussianKernel(1.0), X, tol=1e-2, seed=8)
    np.testing.assert_array_equal(a.pivots, b.pivots)
    assert not np.array_equal(a.pivots, c.pivots)


@pytest.mark.parametrize("pivoting", ["greedy", "random"])
def test_duplicates_and_exact_low_rank(pivoting, rng):
    base = rng.standard_normal((7, 2))
    X = np.repeat(base, 40, axis=0)  # rank-7 kernel matrix, each point 40 times
    f = pivoted_cholesky(GaussianKernel(1.0), X, tol=0.0, pivoting=pivoting)
    assert f.rank == 7
    assert f.stop_reason == "exhausted"
    assert np.all(np.isfinite(f.L)) and np.all(np.isfinite(f.B_pivots))
    K = GaussianKernel(1.0)(X)
    np.testing.assert_allclose(f.L @ f.L.T, K, atol=1e-10)
    np.testing.assert_allclose(K @ f.basis(), f.L, atol=1e-10)


def test_max_rank_and_absolute_tolerance(rng):
    X = rng.standard_normal((500, 2))
    f = pivoted_cholesky(LaplaceKernel(1.0), X, tol=0.0, max_rank=25)
    assert f.rank == 25 and f.stop_reason == "max_rank"
    g = pivoted_cholesky(GaussianKernel(1.0), X, tol=0.0, atol=1.0, pivoting="greedy")
    assert g.trace_error[-1] <= 1.0 < g.trace_error[-2]


def test_input_errors():
    with pytest.raises(ValueError, match="X: contains NaN"):
        pivoted_cholesky(GaussianKernel(1.0), np.array([[0.0], [np.nan]]))
    with pytest.raises(ValueError, match="pivoting: unknown value 'best'"):
        pivoted_cholesky(GaussianKernel(1.0), np.zeros((3, 1)), pivoting="best")
    with pytest.raises(ValueError, match="tol"):
        pivoted_cholesky(GaussianKernel(1.0), np.zeros((3, 1)), tol=-1)


@pytest.mark.parametrize("field, value, message", [
    ("tol", 1.0, "tol: must be in \\[0, 1\\), got 1.0"),
    ("tol", float("nan"), "tol: must be in \\[0, 1\\)"),
    ("max_rank", 0, "max_rank: must be an integer >= 1 or None, got 0"),
    ("max_rank", 2.5, "max_rank: must be an integer >= 1 or None, got 2.5"),
    ("pivoting", "best", "pivoting: unknown value 'best'"),
    ("block_size", True, "block_size: must be an integer >= 1 or None, got True"),
])
def test_factorisation_settings_are_refused_when_made(field, value, message):
    from jdlcore import Factorisation

    with pytest.raises(ValueError, match=message):
        Factorisation(**{field: value})


def test_factorisation_settings_reach_the_decomposition_whole():
    """``Factorisation.of`` reads an estimator's parameters; its options give exactly the decomposition
    the same keywords give."""
    from jdlcore import JDL, Factorisation

    settings = Factorisation.of(JDL(tol=1e-4, max_rank=40, pivoting="greedy", seed=3, block_size=8))
    assert settings == Factorisation(tol=1e-4, max_rank=40, pivoting="greedy", seed=3, block_size=8)
    X = np.random.default_rng(2).standard_normal((300, 2))
    given = pivoted_cholesky(GaussianKernel(0.7), X, **settings.cholesky_arguments())
    spelled = pivoted_cholesky(GaussianKernel(0.7), X, tol=1e-4, max_rank=40, pivoting="greedy", seed=3, block_size=8)
    np.testing.assert_array_equal(given.pivots, spelled.pivots)
    assert settings.cholesky_arguments(max_rank=7)["max_rank"] == 7 and settings.max_rank == 40


def test_the_factor_is_the_same_whether_its_reservation_is_granted_or_refused(monkeypatch, rng):
    """The factor buffer is reserved at the rank cap; where the system refuses that, it grows by
    doubling from 128 columns. Both give the same factor, and a factor that stops below its
    reservation is shrunk to its rank."""
    X = rng.standard_normal((400, 3))
    kernel = GaussianKernel(0.3)
    granted = pivoted_cholesky(kernel, X, tol=0.0, max_rank=300)
    real_empty = np.empty

    def refuse_the_reservation(shape, *args, **kwargs):
        if shape == (300, 400):
            raise MemoryError("refused")
        return real_empty(shape, *args, **kwargs)

    monkeypatch.setattr(np, "empty", refuse_the_reservation)
    refused = pivoted_cholesky(kernel, X, tol=0.0, max_rank=300)
    monkeypatch.undo()
    assert granted.rank == refused.rank == 300
    np.testing.assert_array_equal(granted.pivots, refused.pivots)
    np.testing.assert_array_equal(granted.L, refused.L)
    early = pivoted_cholesky(GaussianKernel(2.0), X, tol=1e-3, max_rank=300)
    assert early.rank < 300 and early.L.shape == (400, early.rank) and early.L.base.shape == (early.rank, 400)


def test_the_factor_shrinks_in_place_and_copies_where_a_view_of_its_buffer_is_alive(rng):
    """``factor()`` releases the reservation past the rank: in place (the same buffer, no copy) when
    nothing else refers to it, else by copying the first rank rows; both give the same L."""
    from jdlcore.lowrank.cholesky import InMemoryFactorStorage, run_pivoted_cholesky

    X = rng.standard_normal((500, 2))
    kernel = GaussianKernel(1.5)
    factors = []
    for hold_a_view in (False, True):
        storage = InMemoryFactorStorage(kernel, X, capacity=300)
        run_pivoted_cholesky(storage, kernel, tol=1e-6, max_rank=300)
        buffer = id(storage._Lt)
        view = storage._Lt[:1] if hold_a_view else None
        L = storage.factor()
        assert 0 < storage.rank < 300 and L.shape == (500, storage.rank) and L.base.shape == (storage.rank, 500)
        assert (id(L.base) == buffer) is not hold_a_view  # the same array resized in place, or a copy
        if view is not None:
            np.testing.assert_array_equal(view[0], L[:, 0])  # the view still reads the old buffer's first row
        factors.append(L)
    np.testing.assert_array_equal(*factors)


def test_the_factorisation_arguments_keep_their_old_name_for_one_release():
    from jdlcore import Factorisation

    settings = Factorisation(tol=1e-4, max_rank=12)
    assert settings.options(max_rank=3) == settings.cholesky_arguments(max_rank=3)
    assert settings.cholesky_arguments()["tol"] == 1e-4
