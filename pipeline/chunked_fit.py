"""The JDL problem assembled from sample chunks on Dask: factorisations, bases and reductions.

Both pivoted Cholesky decompositions run jdlcore's driver over ``DaskFactorStorage``; the
reductions are jdlcore's ``FactorPartials`` and the test-function sums L_Y^T f(y), summed over
chunks (pass 1), and the column extremes of A = L V (pass 2, once V is known). Where the workers
dropped L (memory budget), both passes recompute it slab by slab as K[chunk, S] B[S, :]. Only
m x m quantities reach the client; the small problem is then solved centrally by jdlcore's solvers.
"""
from __future__ import annotations

import time
from functools import reduce
from operator import add
from typing import Callable

import numpy as np

from jdlcore.conditional.atoms import STANDARD_FUNCTIONS, FunctionSums, block_sums
from jdlcore.lowrank.basis import (
    FactorPartials, column_extremes, factor_partials, reductions_from_partials, spectral_basis, unknown_extremes,
)
from jdlcore.lowrank.cholesky import Factorisation, PivotedCholesky, run_pivoted_cholesky
from jdlcore.models.degeneracy import rank_budget
from jdlcore.models.problem import JDLProblem, factor_diagnostics, marginal_sums, support_resolution
from jdlcore.kernels import Kernel
from jdlcore.conditional.support import (
    SupportPlan, finish_support, plan_support, support_partial, support_size_for, value_range,
)

from .chunked_cholesky import ChunkState, DaskFactorStorage, recomputed_factor, slabs
from .cluster import broadcast

__all__ = ["chunked_factor", "chunked_problem"]


def chunked_factor(client, kernel: Kernel, chunks: list, factor_budget: float | None = None,
                   **options) -> tuple[PivotedCholesky, DaskFactorStorage]:
    """Pivoted Cholesky over chunks (futures of (n_c, d) arrays); L stays on the workers or is dropped.

    ``options`` are those of ``run_pivoted_cholesky`` (tol, atol, max_rank, pivoting, seed, ...); a
    max_rank of None is the default budget (``jdlcore.models.degeneracy.rank_budget``, L not held in this
    process). ``factor_budget``: that of ``DaskFactorStorage``. The returned factor has ``L=None``.
    """
    storage = DaskFactorStorage(client, kernel, chunks, factor_budget=factor_budget)
    if options.get("max_rank") is None:
        options["max_rank"] = rank_budget(storage.n, holds_factor=False)
    run = run_pivoted_cholesky(storage, kernel, **options)
    points, B = storage.pivot_basis()
    factor = PivotedCholesky(
        pivots=run.pivots, L=None, B_pivots=B, trace_error=run.history,
        trace=run.trace, stop_reason=run.stop_reason, pivot_points=points,
    )
    return factor, storage


def _factor_slab(state: ChunkState, kernel: Kernel, points: np.ndarray, B: np.ndarray, start: int, stop: int) -> np.ndarray:
    """Rows [start, stop) of the chunk's L (kept on the worker, or recomputed as K[:, S] B[S, :])."""
    if state.Lt is not None:
        return state.Lt[:, start:stop].T
    return recomputed_factor(kernel, state.X[start:stop], points, B)


def _partials(
    x: ChunkState, y: ChunkState, kernel_x: Kernel, kernel_y: Kernel, points_x: np.ndarray, B_x: np.ndarray,
    points_y: np.ndarray, B_y: np.ndarray, test_functions: dict, plan: SupportPlan | None,
) -> tuple[FactorPartials, dict[str, FunctionSums], object]:
    """Pass 1 over a pair of chunks: factor partial sums, L_Y^T f(y) and f(y)^T 1 per test function, and
    the chunk's part of the support (``jdlcore.conditional.support.support_partial``; None without a plan)."""
    support = support_partial(y.X, plan) if plan is not None else None
    partials, sums = None, {}
    for start, stop in slabs(x.X.shape[0]):
        L_x = _factor_slab(x, kernel_x, points_x, B_x, start, stop)
        L_y = _factor_slab(y, kernel_y, points_y, B_y, start, stop)
        part = factor_partials(L_x, L_y)
        partials = part if partials is None else partials + part
        for name, f in test_functions.items():
            term = block_sums(f, y.X[start:stop], L_y)
            sums[name] = sums[name] + term if name in sums else term
    return partials, sums, support


def _value_range(state: ChunkState) -> np.ndarray:
    """A chunk's least and greatest y values, (2, d_y) (``jdlcore.conditional.support.value_range``)."""
    return value_range([state.X])


def _basis_extremes(
    state: ChunkState, kernel: Kernel, points: np.ndarray, B: np.ndarray, rotation: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Pass 2 over a chunk: the column minima and maxima of A = L V."""
    low, high = np.inf, -np.inf
    for start, stop in slabs(state.X.shape[0]):
        slab_low, slab_high = column_extremes(_factor_slab(state, kernel, points, B, start, stop) @ rotation)
        low, high = np.minimum(low, slab_low), np.maximum(high, slab_high)
    return low, high


def chunked_problem(
    client,
    x_chunks: list,
    y_chunks: list,
    kernel_x: Kernel,
    kernel_y: Kernel,
    factorisation: Factorisation = Factorisation(),
    *,
    extremes: bool = True,
    factor_budget: float | None = None,
    test_functions: dict[str, Callable] | None = None,
    y_sample: np.ndarray | None = None,
    support_size: int | None = None,
    grid_x: np.ndarray | None = None,
    grid_points: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> JDLProblem:
    """``jdlcore.build_problem`` computed chunk by chunk; x and y chunks must be paired row for row.

    Nothing n-sized leaves the workers. ``factorisation``: the settings of both decompositions. ``extremes``: compute the column minima and maxima of A_X
    and A_Y (a second pass over the chunks; only the tightening (33) needs them, and they are NaN
    when skipped). ``test_functions`` (name -> f, row-wise on y) are summed on the workers and
    registered with models fitted on the problem, besides the standard mean and second moment.
    ``y_sample``: the seeded sample of y rows (``jdlcore.conditional.support.sample_rows``) that places the
    support's bins or cells; the support (``support_size`` atoms) is then built in the same pass
    (else by the fit, in a pass over the atoms). ``grid_x``: training x rows for grid positivity
    (``grid_points`` accepted for the in-memory signature; the sample is taken by the caller).
    ``progress`` is called with a line per finished stage.
    """
    started = time.perf_counter()
    say = progress or (lambda line: None)
    seconds: dict[str, float] = {}
    options = factorisation.cholesky_arguments()
    factor_x, storage_x = chunked_factor(client, kernel_x, x_chunks, factor_budget=factor_budget, **options)
    say(f"pivots x: rank {factor_x.rank}, relative residual {factor_x.relative_error:.3g}")
    factor_y, storage_y = chunked_factor(client, kernel_y, y_chunks, factor_budget=factor_budget, **options)
    say(f"pivots y: rank {factor_y.rank}, relative residual {factor_y.relative_error:.3g}")
    seconds["cholesky"] = time.perf_counter() - started
    if not np.array_equal(storage_x.offsets, storage_y.offsets):
        raise ValueError("y_chunks: must have the same chunk lengths as x_chunks (paired samples)")

    # Arrays go to the workers as explicitly scattered futures: large keyword arguments of
    # client.map would become tasks keyed by the argument's name and collide between x and y.
    mark = time.perf_counter()
    functions = {**STANDARD_FUNCTIONS, **(test_functions or {})}
    plan = None
    if y_sample is not None:
        size = support_size_for(support_size, y_sample.shape[1], factor_y.rank, storage_y.n)
        ranges = client.gather([client.submit(_value_range, state, pure=False) for state in storage_y.states])
        span = value_range(ranges)
        plan = plan_support(y_sample, size, factorisation.seed, support_resolution(kernel_y), span)
    shared = broadcast(client, [factor_x.pivot_points, factor_x.B_pivots, factor_y.pivot_points, factor_y.B_pivots,
                                functions, plan])
    parts = client.gather([client.submit(_partials, x, y, kernel_x, kernel_y, *shared, pure=False)
                           for x, y in zip(storage_x.states, storage_y.states)])
    partials = reduce(add, [p[0] for p in parts])
    basis_x = spectral_basis(factor_x, kernel_x, gram=partials.gram_x)
    basis_y = spectral_basis(factor_y, kernel_y, gram=partials.gram_y)
    function_sums = {name: reduce(add, [p[1][name] for p in parts]).rotated(basis_y.rotation) for name in functions}

    def column_range(storage: DaskFactorStorage, points, B, rotation):
        rotation = broadcast(client, rotation)
        parts = client.gather([client.submit(_basis_extremes, state, storage.kernel, points, B, rotation, pure=False)
                               for state in storage.states])
        return np.min([p[0] for p in parts], axis=0), np.max([p[1] for p in parts], axis=0)

    if extremes:
        extremes_x = column_range(storage_x, shared[0], shared[1], basis_x.rotation)
        extremes_y = column_range(storage_y, shared[2], shared[3], basis_y.rotation)
    else:
        extremes_x, extremes_y = unknown_extremes(basis_x.size), unknown_extremes(basis_y.size)
    reductions = reductions_from_partials(partials, basis_x, basis_y, extremes_x, extremes_y)
    support = None
    if plan is not None:
        support = finish_support(reduce(add, [p[2] for p in parts]), basis_y.features,
                                 marginal_sums(reductions, function_sums))
    seconds["reductions"] = time.perf_counter() - mark
    say(f"reductions: {seconds['reductions']:.1f} s")
    budget = rank_budget(storage_x.n, holds_factor=False) if factorisation.max_rank is None else None
    factors = factor_diagnostics(factor_x, factor_y, started, budget)
    factors.update({f"{stage}_seconds": value for stage, value in seconds.items()})
    factors["factor_kept"] = bool(storage_x.keeps_factor and storage_y.keeps_factor)
    return JDLProblem(basis_x, basis_y, None, None, reductions, factors, function_sums, support, grid_x)
