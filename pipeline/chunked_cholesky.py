"""Pivoted Cholesky over sample chunks held by Dask workers: a ``FactorStorage`` for jdlcore's driver.

The driver (``jdlcore.lowrank.cholesky.run_pivoted_cholesky``) is the same one the in-memory path uses; this
module only feeds it. Each chunk of samples keeps its own state on a worker: its points (n_c, d),
its slab of L^T (rank, n_c) while L fits the memory budget, its residual diagonal (n_c,) and the
local positions of the pivots it holds. Past the budget the chunks drop L and work factor-free,
evaluating K[chunk, S] against the committed pivots S where L was read (L = K[:, S] B[S, :]).
Every operation maps the old state to a new one (no mutation), so a lost worker is rebuilt from
the task graph and a fit survives it with the same result.

Per round the scheduler sees four fan-outs (select or sample, pivot rows, extend, commit), so the
number of round trips is about 4 m / b for rank m and b pivots accepted per round; only O(b m)
numbers and per-chunk scalars travel to the client. L never leaves the workers.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from distributed.client import FutureCancelledError
from distributed.scheduler import KilledWorker

from jdlcore.lowrank.cholesky import pivot_block_inverse, top_candidates
from jdlcore.kernels import Kernel

from .cluster import broadcast

__all__ = ["ChunkState", "DaskFactorStorage"]

_LOST = (FutureCancelledError, KilledWorker)  # data or tasks lost with a worker


@dataclass(frozen=True)
class ChunkState:
    """One chunk of samples and its share of the factorisation (immutable).

    With the factor kept (``Lt`` not None) the chunk holds its slab of L^T; factor-free chunks hold
    only points and residual diagonal, and recompute K[chunk, S] B[S, :] where L is needed.
    """

    offset: int  # global index of the chunk's first sample
    X: np.ndarray  # (n_c, d)
    Lt: np.ndarray | None  # (rank, n_c) committed columns of L, transposed; None when factor-free
    diag: np.ndarray  # (n_c,) residual diagonal
    pivots: np.ndarray  # local positions of the committed pivots held by this chunk
    staged: np.ndarray | None = None  # (b, n_c) columns awaiting commit (factor kept)
    staged_norms: np.ndarray | None = None  # (b,) squared norms of the staged columns over the chunk
    staged_diag: np.ndarray | None = None  # (n_c,) diag after all b staged columns (factor-free)
    staged_args: tuple | None = None  # what recomputes the staged columns (factor-free)
    staged_local: np.ndarray | None = None  # local positions of staged pivots (their order in b)
    staged_order: np.ndarray | None = None  # positions within b of staged_local


SLAB_ROWS = 1 << 13  # sample columns per slab where a chunk evaluates kernel blocks against all pivots


def slabs(n: int) -> list[tuple[int, int]]:
    """[start, stop) bounds of the slabs of a chunk of n samples."""
    return [(start, min(start + SLAB_ROWS, n)) for start in range(0, n, SLAB_ROWS)]


def _initial_state(X: np.ndarray, offset: int, kernel: Kernel, keep_factor: bool = True) -> ChunkState:
    X = np.ascontiguousarray(X, dtype=np.float64)
    return ChunkState(offset, X, np.zeros((0, X.shape[0])) if keep_factor else None,
                      np.array(kernel.diag(X), dtype=np.float64), np.empty(0, dtype=np.int64))


def recomputed_factor(kernel: Kernel, X: np.ndarray, pivot_points: np.ndarray, B_pivots: np.ndarray) -> np.ndarray:
    """L = K[X, S] B[S, :] (n_c, m) for points X (n_c, d), pivots S (m, d) and B[S, :] (m, m)."""
    if pivot_points.shape[0] == 0:
        return np.zeros((X.shape[0], 0))
    return kernel.block(X, pivot_points) @ B_pivots


def _rebuild_state(
    X: np.ndarray, offset: int, kernel: Kernel, keep_factor: bool, pivot_points: np.ndarray, pivots: np.ndarray,
    L_pivots: np.ndarray, B_pivots: np.ndarray,
) -> ChunkState:
    """A chunk's committed state from scratch: L = K[:, S] B[S, :], exact rows at its own pivots."""
    state = _initial_state(X, offset, kernel, keep_factor)
    if pivots.size == 0:
        return state
    mine = np.flatnonzero((pivots >= offset) & (pivots < offset + state.X.shape[0]))
    local = pivots[mine] - offset
    diag = state.diag.copy()
    factor_slabs = []
    for start, stop in slabs(state.X.shape[0]):
        L = recomputed_factor(kernel, state.X[start:stop], pivot_points, B_pivots)
        here = (local >= start) & (local < start + L.shape[0])
        L[local[here] - start] = L_pivots[mine[here]]
        diag[start:start + L.shape[0]] -= np.einsum("ij,ij->i", L, L)
        if keep_factor:
            factor_slabs.append(L.T)
    diag[local] = 0.0
    np.maximum(diag, 0.0, out=diag)
    Lt = np.ascontiguousarray(np.hstack(factor_slabs)) if keep_factor else None
    return ChunkState(offset, state.X, Lt, diag, local)


def _drop_factor(state: ChunkState) -> ChunkState:
    return replace(state, Lt=None)


def _summary(state: ChunkState) -> tuple[float, float]:
    return float(state.diag.sum()), float(state.diag.max()) if state.diag.size else 0.0


def _top(state: ChunkState, count: int) -> tuple[np.ndarray, np.ndarray]:
    indices, _ = top_candidates(state.diag, min(count, state.diag.size))
    return indices + state.offset, state.diag[indices]


def _sample(state: ChunkState, targets: np.ndarray) -> np.ndarray:
    cumulative = np.cumsum(state.diag)
    local = np.searchsorted(cumulative, targets, side="right")
    return np.minimum(local, state.diag.size - 1) + state.offset


def _rows(state: ChunkState, local: np.ndarray) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    rows = state.Lt[:, local].T if state.Lt is not None else None
    return state.X[local], rows, state.diag[local]


def _new_columns(
    state: ChunkState, kernel: Kernel, pivot_points: np.ndarray, pivot_L: np.ndarray, transform_t: np.ndarray,
    factor_rows: np.ndarray, local: np.ndarray, order: np.ndarray, basis: tuple | None,
    start: int = 0, stop: int | None = None,
) -> np.ndarray:
    """Columns (K[chunk, P] - L L[P]^T) T of the chunk's samples [start, stop), transposed (b, stop - start).

    With the factor kept, L L[P]^T uses the chunk's slab of L. Factor-free, ``basis`` = (S points,
    W) with W = B[S, :] L[P]^T (m x b), so L L[P]^T = K[chunk, S] W: one kernel block against the
    new and the committed pivots together.
    """
    stop = state.X.shape[0] if stop is None else stop
    X = state.X[start:stop]
    if basis is None:
        residual = kernel.block(pivot_points, X)
        if state.Lt.shape[0]:
            residual -= pivot_L @ state.Lt[:, start:stop]
        new = transform_t @ residual
    else:
        committed_points, mixing = basis  # mixing = [T^T, -T^T W^T] (b, b + m)
        new = mixing @ kernel.block(np.vstack([pivot_points, committed_points]), X)
    committed = state.pivots[(state.pivots >= start) & (state.pivots < stop)]
    new[:, committed - start] = 0.0
    here = (local >= start) & (local < stop)
    new[:, local[here] - start] = factor_rows.T[:, order[here]]
    return new


def _extend(
    state: ChunkState, kernel: Kernel, pivot_points: np.ndarray, pivot_L: np.ndarray, transform_t: np.ndarray,
    factor_rows: np.ndarray, local: np.ndarray, order: np.ndarray,
    committed_points: np.ndarray | None = None, mixing: np.ndarray | None = None,
) -> ChunkState:
    """Stage the new columns: kept whole with the factor; factor-free, only their squared norms and
    the diagonal after all of them (a partial commit recomputes them)."""
    basis = None if mixing is None else (committed_points, mixing)
    args = (pivot_points, pivot_L, transform_t, factor_rows, local, order, basis)
    if basis is None:
        staged = _new_columns(state, kernel, *args)
        return replace(state, staged=staged, staged_norms=np.einsum("ij,ij->i", staged, staged),
                       staged_local=local, staged_order=order)
    diag = state.diag.copy()
    norms = np.zeros(transform_t.shape[0])
    for start, stop in slabs(state.X.shape[0]):
        new = _new_columns(state, kernel, *args, start=start, stop=stop)
        squares = new * new
        diag[start:start + new.shape[1]] -= squares.sum(axis=0)
        norms += squares.sum(axis=1)
    return replace(state, staged_diag=diag, staged_norms=norms, staged_args=(kernel, *args),
                   staged_local=local, staged_order=order)


def _norms(state: ChunkState) -> np.ndarray:
    return state.staged_norms


def _commit(state: ChunkState, count: int) -> ChunkState:
    accepted = state.staged_local[state.staged_order < count]
    if state.staged is not None:
        kept = state.staged[:count]
        diag = state.diag - np.einsum("ij,ij->j", kept, kept)
        Lt = np.vstack([state.Lt, kept])
    elif count == state.staged_args[3].shape[0]:  # every staged column kept
        diag, Lt = state.staged_diag.copy(), None
    else:  # a partial last round: recompute the kept columns (deterministic, so identical)
        diag, Lt = state.diag.copy(), None
        for start, stop in slabs(state.X.shape[0]):
            new = _new_columns(state, *state.staged_args, start=start, stop=stop)[:count]
            diag[start:start + new.shape[1]] -= np.einsum("ij,ij->j", new, new)
    diag[accepted] = 0.0
    np.maximum(diag, 0.0, out=diag)
    return ChunkState(state.offset, state.X, Lt, diag, np.concatenate([state.pivots, accepted]))


def worker_memory(client) -> float:
    """Sum of the workers' memory limits in bytes (the machine's memory where a worker has none)."""
    import psutil

    limits = [w.get("memory_limit") or 0 for w in client.scheduler_info()["workers"].values()]
    total = psutil.virtual_memory().total
    return float(sum(limit if limit else total / max(len(limits), 1) for limit in limits))


def _length(X: np.ndarray) -> int:
    return int(np.shape(X)[0])


def _factor_block(state: ChunkState) -> np.ndarray:
    return state.Lt.T


class DaskFactorStorage:
    """``FactorStorage`` whose L, residual diagonal and points stay in chunks on Dask workers.

    Parameters
    ----------
    client: a ``distributed.Client``.
    kernel: the kernel.
    chunks: futures of the sample chunks, each (n_c, d), in sample order. Futures of tasks (say,
        reading a zarr chunk) can be recomputed after a worker is lost; scattered data cannot.
    factor_budget: bytes of L (8 n m) the workers may keep. Once the next round would exceed it,
        the chunks drop L and continue factor-free: every round then evaluates K[chunk, S] against
        the committed pivots S (n m kernel values) instead of reading L. None: a sixteenth of
        the workers' memory limits (so the two factorisations of a fit keep at most an eighth).
        0: factor-free from the start.

    Fault tolerance: the client keeps the committed pivots, their points and the m x m pivot rows
    of L. When an operation fails because a worker (and the chunk states on it) was lost, every
    chunk state is rebuilt from its source chunk as L = K[:, S] B[S, :] and the operation is retried.
    """

    _RETRIES = 3

    def __init__(self, client, kernel: Kernel, chunks: list, factor_budget: float | None = None):
        self.client = client
        self.kernel = kernel
        self.chunks = list(chunks)
        sizes = client.gather(client.map(_length, self.chunks, pure=False))
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.n = int(self.offsets[-1])
        self.rank = 0
        self.recoveries = 0
        self.factor_budget = float(worker_memory(client) / 16 if factor_budget is None else factor_budget)
        self.keeps_factor = self.factor_budget > 0
        self._pivots = np.empty(0, dtype=np.int64)
        self._pivot_points = np.zeros((0, 0))
        self._L_pivots = np.zeros((0, 0))
        self._B = (0, np.zeros((0, 0)))
        self.states = client.map(_initial_state, self.chunks, list(self.offsets[:-1]), [kernel] * len(self.chunks),
                                 [self.keeps_factor] * len(self.chunks), pure=False)
        self._retrying(self._refresh)
        self._trace = self._sum

    def _retrying(self, operation, *args):
        """Run ``operation``; if it fails because data was lost with a worker, rebuild and retry."""
        for attempt in range(self._RETRIES + 1):
            try:
                return operation(*args)
            except _LOST as error:
                if attempt == self._RETRIES:
                    raise RuntimeError(f"chunked pivoted Cholesky: lost workers {attempt + 1} times ({error})") from error
                self._rebuild()
        raise AssertionError("unreachable")  # pragma: no cover

    def pivot_basis(self) -> tuple[np.ndarray, np.ndarray]:
        """(S points (m, d), B[S, :] (m, m)) of the committed pivots."""
        if self._B[0] != self.rank:
            self._B = (self.rank, pivot_block_inverse(self._L_pivots) if self.rank else np.zeros((0, 0)))
        return self._pivot_points, self._B[1]

    def _rebuild(self) -> None:
        self.recoveries += 1
        points, B = self.pivot_basis()
        shared = broadcast(self.client, [points, self._pivots, self._L_pivots, B])
        self.states = [
            self.client.submit(_rebuild_state, chunk, int(offset), self.kernel, self.keeps_factor, *shared, pure=False)
            for chunk, offset in zip(self.chunks, self.offsets[:-1])
        ]
        self._cached = None

    def _refresh(self) -> None:
        summaries = self.client.gather(self.client.map(_summary, self.states, pure=False))
        self._chunk_sums = np.array([s for s, _ in summaries])
        self._sum = float(self._chunk_sums.sum())
        self._max = float(max(m for _, m in summaries))

    # -- selection ---------------------------------------------------------------------------------
    def diagonal_trace(self) -> float:
        return self._trace

    def max_residual(self) -> float:
        return self._max

    def select_top(self, count: int) -> tuple[np.ndarray, float]:
        return self._retrying(self._select_top, count)

    def _select_top(self, count: int) -> tuple[np.ndarray, float]:
        parts = self.client.gather(self.client.map(_top, self.states, count=count + 1, pure=False))
        indices = np.concatenate([p[0] for p in parts])
        values = np.concatenate([p[1] for p in parts])
        order = np.lexsort((indices, -values))
        top = indices[order[:count]]
        outside = float(values[order[count]]) if order.size > count else -np.inf
        return top, outside

    def sample(self, count: int, rng: np.random.Generator) -> np.ndarray:
        return self._retrying(self._sample, rng.random(count))

    def _sample(self, uniforms: np.ndarray) -> np.ndarray:
        count = uniforms.size
        draws = uniforms * self._sum
        edges = np.cumsum(self._chunk_sums)
        chunk_of = np.minimum(np.searchsorted(edges, draws, side="right"), len(self.states) - 1)
        starts = np.concatenate([[0.0], edges[:-1]])
        out = np.empty(count, dtype=np.int64)
        jobs = {}
        for chunk in np.unique(chunk_of):
            where = np.flatnonzero(chunk_of == chunk)
            jobs[int(chunk)] = (where, self.client.submit(_sample, self.states[chunk], draws[where] - starts[chunk], pure=False))
        for where, future in jobs.values():
            out[where] = future.result()
        return out

    def _split(self, indices: np.ndarray) -> dict[int, np.ndarray]:
        chunk_of = np.searchsorted(self.offsets, indices, side="right") - 1
        return {int(c): np.flatnonzero(chunk_of == c) for c in np.unique(chunk_of)}

    def pivot_rows(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        points, rows, diag = self._retrying(self._gather_rows, indices)
        self._cached = (self.rank, {int(i): k for k, i in enumerate(indices)}, points, rows)
        return points, rows, diag

    _cached = None

    def _gather_rows(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        groups = self._split(indices)
        futures = {c: self.client.submit(_rows, self.states[c], indices[w] - self.offsets[c], pure=False)
                   for c, w in groups.items()}
        points = rows = diag = None
        for c, where in groups.items():
            x, factor_rows, d = futures[c].result()
            if points is None:
                points = np.empty((indices.size, x.shape[1]))
                rows = np.empty((indices.size, self.rank))
                diag = np.empty(indices.size)
            points[where], diag[where] = x, d
            if factor_rows is not None:
                rows[where] = factor_rows
        if not self.keeps_factor:
            rows = recomputed_factor(self.kernel, points, *self.pivot_basis())
        return points, rows, diag

    # -- update ------------------------------------------------------------------------------------
    def extend(self, pivots: np.ndarray, transform: np.ndarray, factor_rows: np.ndarray) -> np.ndarray:
        return self._retrying(self._extend, pivots, transform, factor_rows)

    def _extend(self, pivots: np.ndarray, transform: np.ndarray, factor_rows: np.ndarray) -> np.ndarray:
        rank, position, points, rows = self._cached or (-1, {}, None, None)
        if rank == self.rank and all(int(p) in position for p in pivots):
            take = np.array([position[int(p)] for p in pivots])
            points, rows = points[take], rows[take]
        else:
            points, rows, _ = self._gather_rows(pivots)
        if self.keeps_factor and 8.0 * self.n * (self.rank + pivots.size) > self.factor_budget:
            self.states = self.client.map(_drop_factor, self.states, pure=False)
            self.keeps_factor = False
        groups = self._split(pivots)
        transform_t = np.ascontiguousarray(transform.T)
        basis = None
        if not self.keeps_factor:  # L L[P]^T = K[:, S] W with W = B[S, :] L[P]^T
            committed_points, B = self.pivot_basis()
            mixing = np.hstack([transform_t, -transform_t @ (rows @ B.T)])
            basis = (committed_points.reshape(-1, points.shape[1]), mixing)
        shared = broadcast(self.client, [points, rows, transform_t, factor_rows])
        shared_basis = [None, None] if basis is None else broadcast(self.client, list(basis))
        empty = np.empty(0, dtype=np.int64)
        states = []
        for c, state in enumerate(self.states):
            where = groups.get(c, empty)
            states.append(self.client.submit(
                _extend, state, self.kernel, *shared, pivots[where] - self.offsets[c], where, *shared_basis, pure=False))
        self.states = states
        self._staged = (pivots, points, rows, factor_rows)
        return np.sum(self.client.gather(self.client.map(_norms, self.states, pure=False)), axis=0)

    def commit(self, count: int) -> float:
        # Book-keep first: a rebuild after a failure below then already includes this commit.
        pivots, points, rows, factor_rows = self._staged
        m = self.rank
        grown = np.zeros((m + count, m + count))
        grown[:m, :m] = self._L_pivots
        grown[m:, :m] = rows[:count]
        grown[m:, m:] = factor_rows[:count, :count]
        self._L_pivots = grown
        self._pivots = np.concatenate([self._pivots, pivots[:count]])
        self._pivot_points = points[:count] if m == 0 else np.vstack([self._pivot_points, points[:count]])
        self.states = self.client.map(_commit, self.states, count=count, pure=False)
        self.rank = m + count
        self._retrying(self._refresh)
        return self._sum

    def factor(self) -> np.ndarray:
        """Gather L (n, rank) to the client: for tests and small n only (needs the factor kept)."""
        if not self.keeps_factor:
            raise RuntimeError("factor: the chunks dropped L (factor budget exceeded)")
        return self._retrying(lambda: np.vstack(self.client.gather(self.client.map(_factor_block, self.states, pure=False))))
