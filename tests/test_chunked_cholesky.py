"""The chunked (Dask) pivoted Cholesky runs jdlcore's driver and must agree with the in-memory path."""
import numpy as np
import pytest

from jdlcore import GaussianKernel, InMemoryFactorStorage, run_pivoted_cholesky

pytest.importorskip("distributed")
from pipeline.chunked_cholesky import DaskFactorStorage  # noqa: E402


def chunks_of(X, size):
    return [X[start:start + size] for start in range(0, X.shape[0], size)]


@pytest.mark.parametrize("pivoting", ["greedy", "random"])
def test_chunked_factor_equals_in_memory(dask_client, pivoting):
    X = np.random.default_rng(5).standard_normal((6000, 3))
    kernel = GaussianKernel(1.0)
    memory = InMemoryFactorStorage(kernel, X)
    expected = run_pivoted_cholesky(memory, kernel, tol=1e-3, pivoting=pivoting, seed=4)
    futures = dask_client.scatter(chunks_of(X, 1700))
    chunked = DaskFactorStorage(dask_client, kernel, futures)
    result = run_pivoted_cholesky(chunked, kernel, tol=1e-3, pivoting=pivoting, seed=4)
    np.testing.assert_array_equal(result.pivots, expected.pivots)
    np.testing.assert_allclose(result.history, expected.history, rtol=1e-10, atol=1e-9)
    np.testing.assert_allclose(chunked.factor(), memory.factor(), rtol=0, atol=1e-10)
    assert result.stop_reason == expected.stop_reason == "tolerance"
