"""The JDL problem assembled from sample chunks on Dask: factorisations, bases and reductions.

Both pivoted Cholesky decompositions run jdlcore's driver over ``DaskFactorStorage``; the
reductions are jdlcore's ``FactorPartials`` summed over chunks (pass 1) and the column extremes of
A = L V (pass 2, once V is known). Only m x m quantities reach the client; the small problem is
then solved centrally by jdlcore's solvers.
"""
from __future__ import annotations

import time
from functools import reduce
from operator import add

import numpy as np

from jdlcore.basis import FactorPartials, column_extremes, factor_partials, reductions_from_partials, spectral_basis
from jdlcore.cholesky import PivotedCholesky, pivot_block_inverse, run_pivoted_cholesky
from jdlcore.jdl import JDLProblem, factor_diagnostics
from jdlcore.kernels import Kernel

from .chunked_cholesky import ChunkState, DaskFactorStorage

__all__ = ["chunked_factor", "chunked_problem"]


def chunked_factor(client, kernel: Kernel, chunks: list, **options) -> tuple[PivotedCholesky, DaskFactorStorage]:
    """Pivoted Cholesky over chunks (futures of (n_c, d) arrays); L stays on the workers.

    ``options`` are those of ``run_pivoted_cholesky`` (tol, atol, max_rank, pivoting, seed, ...).
    The returned ``PivotedCholesky`` has ``L=None``; the storage holds L chunk by chunk.
    """
    storage = DaskFactorStorage(client, kernel, chunks)
    run = run_pivoted_cholesky(storage, kernel, **options)
    points, rows, _ = storage.pivot_rows(run.pivots) if run.pivots.size else (np.zeros((0, 0)), np.zeros((0, 0)), None)
    factor = PivotedCholesky(
        pivots=run.pivots, L=None, B_pivots=pivot_block_inverse(rows), trace_error=run.history,
        trace=run.trace, stop_reason=run.stop_reason, pivot_points=points,
    )
    return factor, storage


def _partials(x: ChunkState, y: ChunkState) -> FactorPartials:
    return factor_partials(x.Lt.T, y.Lt.T)


def _basis_values(state: ChunkState, rotation: np.ndarray, keep: bool) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
    """One pass over the chunk: A = L V (if ``keep``) and its column minima and maxima."""
    A = state.Lt.T @ rotation
    low, high = column_extremes(A)
    return (A if keep else None), low, high


def chunked_problem(
    client,
    x_chunks: list,
    y_chunks: list,
    kernel_x: Kernel,
    kernel_y: Kernel,
    *,
    tol: float,
    max_rank: int | None = None,
    pivoting: str = "random",
    seed: int | None = 0,
    block_size: int | None = None,
    gather_x_values: bool = True,
) -> JDLProblem:
    """``jdlcore.build_problem`` computed chunk by chunk; x and y chunks must be paired row for row.

    The basis values A_Y (n x m_Y) are gathered for the model object (its atoms' coordinates);
    A_X (n x m_X) only when ``gather_x_values`` (exact grid positivity needs it), else None.
    """
    started = time.perf_counter()
    options = dict(tol=tol, max_rank=max_rank, pivoting=pivoting, seed=seed, block_size=block_size)
    factor_x, storage_x = chunked_factor(client, kernel_x, x_chunks, **options)
    factor_y, storage_y = chunked_factor(client, kernel_y, y_chunks, **options)
    if not np.array_equal(storage_x.offsets, storage_y.offsets):
        raise ValueError("y_chunks: must have the same chunk lengths as x_chunks (paired samples)")
    partials = reduce(add, client.gather(client.map(_partials, storage_x.states, storage_y.states, pure=False)))
    basis_x = spectral_basis(factor_x, kernel_x, gram=partials.gram_x)
    basis_y = spectral_basis(factor_y, kernel_y, gram=partials.gram_y)

    # Arrays go to the workers as explicitly scattered futures: large keyword arguments of
    # client.map would become tasks keyed by the argument's name and collide between x and y.
    rotation_x, rotation_y = client.scatter([basis_x.rotation, basis_y.rotation], broadcast=True)

    def values(storage: DaskFactorStorage, rotation, keep: bool):
        parts = client.gather([client.submit(_basis_values, state, rotation, keep, pure=False) for state in storage.states])
        extremes = np.min([p[1] for p in parts], axis=0), np.max([p[2] for p in parts], axis=0)
        return (np.vstack([p[0] for p in parts]) if keep else None), extremes

    A_x, extremes_x = values(storage_x, rotation_x, gather_x_values)
    A_y, extremes_y = values(storage_y, rotation_y, True)
    reductions = reductions_from_partials(partials, basis_x, basis_y, extremes_x, extremes_y)
    return JDLProblem(basis_x, basis_y, A_x, A_y, reductions, factor_diagnostics(factor_x, factor_y, started))
