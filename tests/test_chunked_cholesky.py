"""The chunked (Dask) pivoted Cholesky runs jdlcore's driver and must agree with the in-memory path."""
import numpy as np
import pytest

from jdlcore import GaussianKernel, InMemoryFactorStorage, run_pivoted_cholesky

pytest.importorskip("distributed")
from pipeline.chunked_cholesky import DaskFactorStorage  # noqa: E402


def chunks_of(X, size):
    return [X[start:start + size] for start in range(0, X.shape[0], size)]


@pytest.mark.parametrize("pivoting", ["greedy", "random"])
@pytest.mark.parametrize("budget", ["kept", "dropped mid-run", "factor-free"])
def test_chunked_factor_equals_in_memory(dask_client, pivoting, budget):
    """With L kept on the workers the chunked factor equals the in-memory one to 1e-10. Dropping L
    (a memory budget) switches to recomputing K[:, S] B[S, :]: same pivots, same residual traces."""
    X = np.random.default_rng(5).standard_normal((3000, 3))
    kernel = GaussianKernel(1.5)  # rank 139 (greedy), 118 (random): L is dropped mid-run at 40 columns
    memory = InMemoryFactorStorage(kernel, X)
    expected = run_pivoted_cholesky(memory, kernel, tol=1e-3, pivoting=pivoting, seed=4, block_size=16)
    futures = dask_client.scatter(chunks_of(X, 850), hash=False)
    factor_budget = {"kept": 1e12, "dropped mid-run": 8.0 * 3000 * 40, "factor-free": 0}[budget]
    chunked = DaskFactorStorage(dask_client, kernel, futures, factor_budget=factor_budget)
    result = run_pivoted_cholesky(chunked, kernel, tol=1e-3, pivoting=pivoting, seed=4, block_size=16)
    assert expected.pivots.size > 60
    np.testing.assert_array_equal(result.pivots, expected.pivots)
    np.testing.assert_allclose(result.history, expected.history, rtol=1e-10, atol=1e-9)
    assert result.stop_reason == expected.stop_reason == "tolerance"
    assert chunked.keeps_factor == (budget == "kept")
    if chunked.keeps_factor:
        np.testing.assert_allclose(chunked.factor(), memory.factor(), rtol=0, atol=1e-10)
    else:
        with pytest.raises(RuntimeError, match="dropped L"):
            chunked.factor()


@pytest.mark.parametrize("constraints, positivity", [("normalization", "project"), ("positivity", "project"),
                                                     ("positivity", "tightening"), ("positivity", "grid")])
def test_chunked_jdl_fit_equals_in_memory(dask_client, constraints, positivity):
    """The same reductions, support and law from chunks on Dask workers as in memory. The support's
    atoms agree to rounding and keep the same sums; its weights solve an ill-conditioned system whose
    targets the two paths sum in different orders, so single weights agree to about 1e-5 relative
    (1e-6 absolute) and the moments they keep to 1e-10."""
    from jdlcore import JDL, Factorisation, build_problem
    from jdlcore.conditional.support import sample_rows
    from pipeline.chunked_fit import chunked_problem

    rng = np.random.default_rng(8)
    X = rng.standard_normal((3000, 2))
    Y = X @ np.array([[0.8], [0.3]]) + 0.5 * rng.standard_normal((3000, 1))
    kx, ky = GaussianKernel(1.0), GaussianKernel(0.7)
    factorisation = Factorisation(tol=1e-4, pivoting="random", seed=2)
    memory = build_problem(X, Y, kx, ky, factorisation, support_size=600)
    chunked = chunked_problem(dask_client, dask_client.scatter(chunks_of(X, 700), hash=False),
                              dask_client.scatter(chunks_of(Y, 700), hash=False), kx, ky, factorisation,
                              y_sample=Y[sample_rows(3000, 2)], grid_x=X[sample_rows(3000, 2, 1000)], support_size=600)
    for name in ("lam_x", "lam_y", "cross", "sum_x", "sum_y", "min_x", "max_x", "min_y", "max_y"):
        a, b = getattr(chunked.reductions, name), getattr(memory.reductions, name)
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-10 * max(1.0, np.abs(b).max()), err_msg=name)
    np.testing.assert_array_equal(chunked.grid_x, memory.grid_x)
    np.testing.assert_allclose(chunked.support.atoms, memory.support.atoms, rtol=1e-11)
    assert chunked.support.exact == memory.support.exact != "none"
    estimator = dict(kernel_x=kx, kernel_y=ky, reg=1e-3, constraints=constraints, positivity=positivity,
                     support_size=600)
    a = JDL(**estimator).fit_problem(chunked, Y)
    b = JDL(**estimator).fit_problem(memory, Y)
    assert a.support_ is chunked.support and b.support_ is memory.support  # neither rebuilt
    Xq = rng.standard_normal((50, 2)) * 2
    np.testing.assert_allclose(a.conditional_weights(Xq), b.conditional_weights(Xq), rtol=0, atol=1e-6)
    np.testing.assert_allclose(a.conditional_expectation(Xq), b.conditional_expectation(Xq), rtol=0, atol=1e-10)


def test_fit_survives_a_killed_worker():
    """SIGKILL one worker process in the middle of a chunked factorisation: lost chunk states are
    recomputed from the task graph and the result equals an undisturbed run's."""
    import os
    import signal

    from pipeline.chunked_fit import chunked_factor

    from .conftest import dask_cluster

    def seeded_chunk(index: int, size: int) -> np.ndarray:  # nested: pickled by value for the workers
        return np.random.default_rng([11, index]).standard_normal((size, 3))

    sizes = [1500] * 4
    kernel = GaussianKernel(1.0)
    X = np.vstack([seeded_chunk(i, s) for i, s in enumerate(sizes)])
    expected = run_pivoted_cholesky(InMemoryFactorStorage(kernel, X), kernel, tol=1e-4, pivoting="greedy", block_size=16)
    with dask_cluster(2) as client:
        chunks = client.map(seeded_chunk, range(len(sizes)), sizes, pure=False)
        killed = []

        def kill_one_worker(rank: int, residual: float) -> None:
            if not killed and rank >= 60:
                pids = client.run(os.getpid)
                address, pid = sorted(pids.items())[0]
                os.kill(pid, signal.SIGKILL)
                killed.append((address, rank))

        factor, storage = chunked_factor(client, kernel, chunks, tol=1e-4, pivoting="greedy", block_size=16,
                                         progress=kill_one_worker)
        assert killed, "the fit ended before the worker could be killed"
        np.testing.assert_array_equal(factor.pivots, expected.pivots)
        np.testing.assert_allclose(factor.trace_error, expected.history, rtol=1e-10, atol=1e-8)
        assert factor.rank > killed[0][1]
        assert storage.recoveries >= 1


def test_chunked_problem_with_large_bases(dask_client):
    """Ranks above ~150 make the m x m rotations large enough for Dask to ship them as separate
    tasks; x and y must not collide (found at n = 1e6)."""
    from jdlcore import Factorisation, build_problem
    from pipeline.chunked_fit import chunked_problem

    rng = np.random.default_rng(3)
    X, Y = rng.uniform(-3, 3, (2500, 2)), rng.uniform(-3, 3, (2500, 2))
    kx, ky = GaussianKernel(0.4), GaussianKernel(0.45)
    chunked = chunked_problem(dask_client, dask_client.scatter(chunks_of(X, 600), hash=False),
                              dask_client.scatter(chunks_of(Y, 600), hash=False),
                              kx, ky, Factorisation(tol=1e-4, seed=1))
    memory = build_problem(X, Y, kx, ky, Factorisation(tol=1e-4, seed=1))
    assert min(chunked.factors["rank_x"], chunked.factors["rank_y"]) > 200
    np.testing.assert_allclose(chunked.reductions.cross, memory.reductions.cross, rtol=0,
                               atol=1e-10 * np.abs(memory.reductions.cross).max())
    np.testing.assert_allclose(chunked.reductions.max_y, memory.reductions.max_y, rtol=0, atol=1e-10)


def test_factor_free_chunked_problem_equals_in_memory(dask_client):
    """With no memory for L on the workers (budget 0) the reductions and the registered test-function
    sums are computed from L = K[:, S] B[S, :] slab by slab; they equal the in-memory ones."""
    from jdlcore import JDL, Factorisation, build_problem
    from jdlcore.conditional.atoms import STANDARD_FUNCTIONS
    from pipeline.chunked_fit import chunked_problem

    rng = np.random.default_rng(12)
    X = rng.standard_normal((2000, 2))
    Y = np.column_stack([X[:, 0] * X[:, 1], X[:, 1]]) + 0.3 * rng.standard_normal((2000, 2))
    kx, ky = GaussianKernel(0.9), GaussianKernel(0.8)
    factorisation = Factorisation(tol=1e-4, pivoting="greedy")
    memory = build_problem(X, Y, kx, ky, factorisation, test_functions=STANDARD_FUNCTIONS)
    chunked = chunked_problem(dask_client, dask_client.scatter(chunks_of(X, 450), hash=False),
                              dask_client.scatter(chunks_of(Y, 450), hash=False),
                              kx, ky, factorisation, factor_budget=0, test_functions=STANDARD_FUNCTIONS)
    assert chunked.A_x is None and chunked.A_y is None and not chunked.factors["factor_kept"]
    np.testing.assert_array_equal(chunked.factors["pivots_x"], memory.factors["pivots_x"])
    for name in ("lam_x", "lam_y", "cross", "sum_x", "sum_y", "min_x", "max_x", "min_y", "max_y"):
        a, b = getattr(chunked.reductions, name), getattr(memory.reductions, name)
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-9 * max(1.0, np.abs(b).max()), err_msg=name)
    for name in STANDARD_FUNCTIONS:
        a, b = chunked.function_sums[name], memory.function_sums[name]
        assert a.shape == b.shape
        np.testing.assert_allclose(a.moments, b.moments, rtol=0, atol=1e-9 * np.abs(b.moments).max(), err_msg=name)
        np.testing.assert_allclose(a.totals, b.totals, rtol=1e-12, err_msg=name)
    model = JDL(kx, ky, reg=1e-4, constraints="normalization").fit_problem(chunked, Y)
    reference = JDL(kx, ky, reg=1e-4, constraints="normalization").fit_problem(memory, Y)
    Xq = rng.standard_normal((30, 2))
    # registered sums (from the workers) against a pass over the atoms of the in-memory model
    np.testing.assert_allclose(model.expectation("second_moment", Xq),
                               reference.conditional_expectation(Xq, STANDARD_FUNCTIONS["second_moment"]),
                               rtol=0, atol=1e-8)
