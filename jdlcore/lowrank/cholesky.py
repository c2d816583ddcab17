"""Pivoted Cholesky decomposition with the bi-orthogonal basis (Algorithm 1 of the JDL paper).

One algorithm, two ways to feed it. The driver ``run_pivoted_cholesky`` chooses pivots and does all
the small (c x c) linear algebra centrally; a *factor storage* holds the n x m factor L and the
residual diagonal d and performs the only operations that touch all n samples:

* ``select_top`` / ``sample``: pick candidate pivots from d (greedy / random pivoting),
* ``pivot_rows``: the candidates' points and rows of L (small),
* ``extend``: compute new columns (K[:, P] - L L[P, :]^T) T for accepted pivots P and a small
  triangular T, and report their squared norms,
* ``commit``: keep the first k of them and update d.

``InMemoryFactorStorage`` implements this with NumPy; the chunked Dask storage of ``pipeline`` does
the same chunk by chunk, so both paths run exactly this driver.

Blocking: each round proposes c candidates and accepts a prefix of them by sequential pivoted
Cholesky on the c x c block, so the accepted columns are computed with BLAS-3 products
(``run_pivoted_cholesky`` states the acceptance rules of greedy and random pivoting).

Identities kept exactly: L[P, :] is lower triangular in pivot order (entries above the diagonal are
set to 0, not left at rounding level), so B[P, :] = L[P, :]^{-T} is upper triangular, B^T L = I and
K B = L up to rounding. Pivots whose residual falls below ``pivot_floor * max(diag K)`` are never
used, which makes duplicated points and exactly low-rank kernels safe (no division by ~0).
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Protocol

import numpy as np
from scipy.linalg import solve_triangular

from ..kernels import Kernel
from ..params import Choice, Integer, Param
from ..validation import TOL, as_samples, check_choice

__all__ = [
    "PivotedCholesky",
    "FactorStorage",
    "InMemoryFactorStorage",
    "pivoted_cholesky",
    "run_pivoted_cholesky",
    "CholeskyRun",
    "pivot_block_inverse",
    "top_candidates",
    "PIVOTING_RULES",
    "Factorisation",
    "FACTORISATION_PARAMS",
    "DEFAULT_TOL",
]

PIVOTING_RULES = ("greedy", "random")
DEFAULT_TOL = 1e-3  # the relative tolerance of every factorisation not told otherwise
# the declarations of the factorisation settings, shared by every estimator that factorises a kernel
FACTORISATION_PARAMS: dict[str, Param] = {
    "tol": Param(TOL, "relative pivoted-Cholesky tolerance: stop once the residual trace is at most tol x trace K",
                 option=True),
    "max_rank": Param(Integer(optional=True), "at most this many pivots per factorisation (unset: a budget of "
                      "max(512, n/8) within a quarter of the memory)", option=True),
    "pivoting": Param(Choice(PIVOTING_RULES), "random (randomly pivoted Cholesky) or greedy (largest residual)",
                      option=True),
    "seed": Param(Integer(low=0, optional=True), "random seed of the pivoting and of the samples drawn beside it",
                  option=True),
    "block_size": Param(Integer(optional=True), "candidate pivots per round (default 64)"),
}
_DEFAULT_BLOCK = {"greedy": 64, "random": 64}


@dataclass(frozen=True)
class Factorisation:
    """How a fit's pivoted Cholesky decompositions run: one object, validated when it is made and
    passed whole from the estimator to the problem builders (in memory, chunked, class basis).

    tol: stop once trace(K - L L^T) <= tol * trace K, in [0, 1) (``jdlcore.validation.check_tol``);
    max_rank: at most this many pivots, an integer >= 1, or None for the builder's default budget
    (``jdlcore.models.degeneracy.rank_budget``); pivoting: "random" (RPCholesky) or "greedy"; seed: of the
    random pivoting and of the samples drawn beside it; block_size: candidate pivots per round
    (None: 64).
    """

    tol: float = DEFAULT_TOL
    max_rank: int | None = None
    pivoting: str = "random"
    seed: int | None = 0
    block_size: int | None = None

    NAMES: ClassVar[tuple[str, ...]] = ("tol", "max_rank", "pivoting", "seed", "block_size")

    def __post_init__(self) -> None:
        for name, param in FACTORISATION_PARAMS.items():
            param.check(name, getattr(self, name))
        object.__setattr__(self, "tol", float(self.tol))

    @classmethod
    def of(cls, owner: Any) -> "Factorisation":
        """The factorisation settings held by ``owner`` (an estimator's parameters of the same names)."""
        return cls(**{name: getattr(owner, name) for name in cls.NAMES})

    def cholesky_arguments(self, **changes: Any) -> dict[str, Any]:
        """The settings as keyword arguments of ``pivoted_cholesky`` / ``run_pivoted_cholesky``,
        with ``changes`` applied (e.g. a resolved max_rank)."""
        return {**{f.name: getattr(self, f.name) for f in fields(self)}, **changes}

    options = cholesky_arguments  # the name before 0.2 ("options" also names a fit's options): kept one release


@dataclass
class PivotedCholesky:
    """Result of a pivoted Cholesky decomposition of a kernel matrix K (n x n).

    Attributes
    ----------
    pivots: (m,) int64, sample indices in the order they were chosen.
    L: (n, m) float64, K ~ L L^T; None for storages that keep L elsewhere (chunked path).
    B_pivots: (m, m) float64, upper triangular, the only non-zero rows of the bi-orthogonal basis
        B (n x m): B = zeros((n, m)); B[pivots] = B_pivots. Satisfies K B = L and B^T L = I.
    trace_error: (m + 1,) float64, trace(K - L_k L_k^T) after k = 0..m pivots (trace_error[0] = trace K).
    trace: trace(K).
    stop_reason: "tolerance", "max_rank" or "exhausted" (every residual below the pivot floor).
    """

    pivots: np.ndarray
    L: np.ndarray | None
    B_pivots: np.ndarray
    trace_error: np.ndarray
    trace: float
    stop_reason: str
    pivot_points: np.ndarray = field(repr=False, default=None)  # type: ignore[assignment]

    @property
    def rank(self) -> int:
        return int(self.pivots.size)

    @property
    def n(self) -> int:
        return int(self.L.shape[0]) if self.L is not None else -1

    @property
    def relative_error(self) -> float:
        """Final residual trace relative to trace(K)."""
        return float(self.trace_error[-1] / self.trace) if self.trace > 0 else 0.0

    def basis(self) -> np.ndarray:
        """Dense B (n x m). Only for small n (tests, inspection): the algorithms never need it."""
        B = np.zeros((self.n, self.rank))
        B[self.pivots] = self.B_pivots
        return B


@dataclass(frozen=True)
class CholeskyRun:
    """What the driver decides: pivots in order, residual-trace history, trace(K), stop reason."""

    pivots: np.ndarray
    history: np.ndarray
    trace: float
    stop_reason: str


class FactorStorage(Protocol):
    """Where L and the residual diagonal live, and how kernel columns are computed."""

    n: int
    rank: int

    def diagonal_trace(self) -> float: ...

    def select_top(self, count: int) -> tuple[np.ndarray, float]:
        """Indices of the ``count`` largest residuals (descending) and the largest residual outside them."""

    def sample(self, count: int, rng: np.random.Generator) -> np.ndarray:
        """``count`` i.i.d. indices drawn with probability proportional to the residual diagonal."""

    def max_residual(self) -> float: ...

    def pivot_rows(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(points (c, d), rows of L (c, rank), residual diagonal (c,)) at ``indices``."""

    def extend(self, pivots: np.ndarray, transform: np.ndarray, factor_rows: np.ndarray) -> np.ndarray:
        """Stage columns (K[:, P] - L L[P]^T) @ transform; return their squared norms, shape (b,).

        ``factor_rows`` (b, b) are the new columns' values at the pivot rows themselves (the
        Cholesky factor of the pivot block), written exactly; rows of earlier pivots are set to 0.
        """

    def commit(self, count: int) -> float:
        """Keep the first ``count`` staged columns, update the residual diagonal, return its sum."""


class InMemoryFactorStorage:
    """Factor storage with L held as a NumPy array (stored transposed, one row per column of L)."""

    _SLAB = 1 << 16  # sample columns processed per slab in ``extend``

    _INITIAL = 128  # columns reserved when no capacity is given; grown by doubling

    def __init__(self, kernel: Kernel, X: np.ndarray, capacity: int | None = None):
        """``capacity``: columns of L to reserve up front, e.g. the rank cap (the reserved memory is
        committed only as columns are written, so a factorisation that stops early does not pay
        for it); past it, or where the system refuses the reservation, the buffer grows by doubling."""
        self.kernel = kernel
        self.X = X
        self.n = X.shape[0]
        self.rank = 0
        self.diag = np.array(kernel.diag(X), dtype=np.float64)
        self._trace = float(self.diag.sum())
        self._capacity = int(min(self.n, capacity if capacity is not None else self._INITIAL))
        try:
            self._Lt = np.empty((self._capacity, self.n))
        except MemoryError:
            self._capacity = int(min(self.n, self._INITIAL))
            self._Lt = np.empty((self._capacity, self.n))
        self._pivots: list[np.ndarray] = []
        self._staged_pivots = np.empty(0, dtype=np.int64)

    # -- selection --------------------------------------------------------------------------------
    def diagonal_trace(self) -> float:
        return self._trace

    def select_top(self, count: int) -> tuple[np.ndarray, float]:
        return top_candidates(self.diag, count)

    def sample(self, count: int, rng: np.random.Generator) -> np.ndarray:
        cumulative = np.cumsum(self.diag)
        draws = rng.random(count) * cumulative[-1]
        return np.minimum(np.searchsorted(cumulative, draws, side="right"), self.n - 1)

    def max_residual(self) -> float:
        return float(self.diag.max())

    def pivot_rows(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.X[indices], self._Lt[: self.rank, indices].T, self.diag[indices]

    # -- update -----------------------------------------------------------------------------------
    def extend(self, pivots: np.ndarray, transform: np.ndarray, factor_rows: np.ndarray) -> np.ndarray:
        b, m = len(pivots), self.rank
        self._reserve(m + b)
        Lt, new = self._Lt, self._Lt[m : m + b]
        pivot_points = self.X[pivots]
        pivot_L = Lt[:m, pivots].T  # (b, m)
        transform_t = np.ascontiguousarray(transform.T)
        norms = np.zeros(b)
        for start in range(0, self.n, self._SLAB):
            stop = min(start + self._SLAB, self.n)
            residual = self.kernel.block(pivot_points, self.X[start:stop])  # (b, slab)
            if m:
                residual -= pivot_L @ Lt[:m, start:stop]
            new[:, start:stop] = transform_t @ residual
        previous = np.concatenate(self._pivots) if self._pivots else np.empty(0, dtype=np.int64)
        new[:, previous] = 0.0
        new[:, pivots] = factor_rows.T
        for start in range(0, self.n, self._SLAB):
            block = new[:, start : start + self._SLAB]
            norms += np.einsum("ij,ij->i", block, block)
        self._staged_pivots = pivots
        return norms

    def commit(self, count: int) -> float:
        m = self.rank
        for start in range(0, self.n, self._SLAB):
            block = self._Lt[m : m + count, start : start + self._SLAB]
            self.diag[start : start + self._SLAB] -= np.einsum("ij,ij->j", block, block)
        accepted = self._staged_pivots[:count]
        self.diag[accepted] = 0.0
        np.maximum(self.diag, 0.0, out=self.diag)
        self._pivots.append(accepted)
        self.rank = m + count
        return float(self.diag.sum())

    def factor(self) -> np.ndarray:
        """L as an (n, rank) view; the storage's buffer is shrunk to fit first, so the rest of the
        reservation is released, not kept alive by the view: in place where nothing else refers to it
        (its first ``rank`` rows are a contiguous prefix; no copy), else as a copy of those rows."""
        if self._capacity != self.rank:
            try:
                self._Lt.resize((self.rank, self.n), refcheck=True)
            except ValueError:  # a view of the buffer is alive elsewhere
                self._Lt = self._Lt[: self.rank].copy()
            self._capacity = self.rank
        return self._Lt.T

    def _reserve(self, size: int) -> None:
        if size <= self._capacity:
            return
        capacity = int(min(self.n, max(size, 2 * self._capacity)))
        grown = np.empty((capacity, self.n))
        grown[: self.rank] = self._Lt[: self.rank]
        self._Lt, self._capacity = grown, capacity


def top_candidates(d: np.ndarray, count: int, offset: int = 0) -> tuple[np.ndarray, float]:
    """The ``count`` largest entries of d, ties broken by lower index as Algorithm 1's argmax does.

    Returns their indices (+ ``offset``) sorted by (-d, index) and the largest value left outside.
    """
    n = d.shape[0]
    if count >= n:
        return np.lexsort((np.arange(n), -d)) + offset, -np.inf
    part = np.argpartition(-d, count - 1)[:count]
    boundary = float(d[part].min())
    above = np.flatnonzero(d > boundary)
    tied = np.flatnonzero(d == boundary)
    need = count - above.size
    top = np.concatenate([above, tied[:need]])
    if tied.size > need:
        outside = boundary
    else:
        below = d[d < boundary]
        outside = float(below.max()) if below.size else -np.inf
    top = top[np.lexsort((top, -d[top]))]
    return top + offset, outside


def _accept_block(
    R: np.ndarray,
    candidates: np.ndarray,
    rule: str,
    outside_bound: float,
    floor: float,
    limit: int,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """Sequential pivoted Cholesky on the candidate block R = K[S, S] - L[S] L[S]^T (c x c).

    * Greedy pivoting proposes the c largest residual diagonal entries and accepts the block's next
      greedy pivot only while its updated residual is at least the largest residual outside the block
      (an upper bound for every outside entry, since d only decreases). The pivots are therefore exactly
      those of the column-by-column Algorithm 1, with far fewer passes over L.
    * Random pivoting (RPCholesky, Chen, Epperly, Tropp & Webber) proposes c i.i.d. indices with
      probability proportional to d and accepts proposal i with probability R_cur[i, i] / R[i, i]
      (rejection sampling, as in their accelerated variant); the accepted pivots follow the law of
      sequential RPCholesky.

    Returns the accepted positions (into the candidate list, in pivot order) and the lower-triangular
    Cholesky factor C of R[acc, acc] in that order. Greedy: take the largest current residual while
    it is >= ``outside_bound``. Random: visit proposals in order, accept with probability
    R_cur[i, i] / R[i, i]. Ties go to the lower sample index, and a greedy pivot after the first of
    the round must beat every outside residual strictly, so the pivots equal Algorithm 1's.
    """
    c = R.shape[0]
    current = R.copy()
    original = np.diag(R).copy()
    taken = np.zeros(c, dtype=bool)
    order: list[int] = []
    columns: list[np.ndarray] = []
    uniforms = rng.random(c) if rule == "random" else None
    for step in range(c):
        if len(order) >= limit:
            break
        residual = np.where(taken, -np.inf, np.diag(current))
        if rule == "greedy":
            best = residual.max()
            ties = np.flatnonzero(residual == best)
            j = int(ties[np.argmin(candidates[ties])])
            if best <= floor or (order and best <= outside_bound):
                break
        else:
            j = step
            if taken[j] or residual[j] <= floor or uniforms[j] * original[j] >= residual[j]:
                continue
        column = current[:, j] / np.sqrt(current[j, j])
        current -= np.outer(column, column)
        taken[j] = True
        order.append(j)
        columns.append(column)
    positions = np.asarray(order, dtype=np.int64)
    if not order:
        return positions, np.zeros((0, 0))
    C = np.stack(columns, axis=1)[positions]  # C[k, l] = column_l at the k-th accepted pivot
    return positions, np.tril(C)


def run_pivoted_cholesky(
    storage: FactorStorage,
    kernel: Kernel,
    *,
    tol: float = DEFAULT_TOL,
    atol: float = 0.0,
    max_rank: int | None = None,
    pivoting: str = "random",
    block_size: int | None = None,
    seed: int | None = 0,
    pivot_floor: float = 1e-12,
    progress: Any = None,
) -> "CholeskyRun":
    """Drive a pivoted Cholesky decomposition over any ``FactorStorage`` (see module docstring).

    Blocking. Each round proposes c candidates, accepts a prefix of them (``_accept_block``) and
    computes the accepted columns with matrix-matrix products (BLAS-3) instead of one matrix-vector
    product per pivot. Near the tolerance a round computes only about twice the columns the remaining
    residual trace should need (estimated from the previous round's trace reduction per pivot): the
    last round of a large factorisation would otherwise compute up to c columns to keep one.

    Stops at the first pivot after which trace(K - L L^T) <= max(tol * trace K, atol), at
    ``max_rank`` pivots, or when every residual is below ``pivot_floor * max(diag K)``.
    ``progress``, if given, is called as progress(rank, residual_trace) after every round.
    """
    check_choice(pivoting, "pivoting", PIVOTING_RULES)
    n = storage.n
    limit_rank = n if max_rank is None else int(max_rank)
    if limit_rank < 0:
        raise ValueError(f"max_rank: must be >= 0, got {max_rank}")
    block = int(block_size or _DEFAULT_BLOCK[pivoting])
    if block < 1:
        raise ValueError(f"block_size: must be >= 1, got {block_size}")
    rng = np.random.default_rng(seed)
    trace = storage.diagonal_trace()
    threshold = max(float(tol) * trace, float(atol))
    floor = pivot_floor * storage.max_residual()
    history = [trace]
    residual_trace = trace
    pivots: list[np.ndarray] = []
    stop_reason = "tolerance"
    idle_rounds = 0
    typical_norm = 0.0
    while True:
        if residual_trace <= threshold:
            stop_reason = "tolerance"
            break
        if storage.rank >= limit_rank:
            stop_reason = "max_rank"
            break
        if storage.max_residual() <= floor:
            stop_reason = "exhausted"
            break
        if pivoting == "greedy":
            candidates, outside = storage.select_top(min(block, n))
        else:
            candidates, outside = storage.sample(block, rng), 0.0
        points, rows, residual_diagonal = storage.pivot_rows(candidates)
        R = kernel.block(points, points)
        if rows.shape[1]:
            R -= rows @ rows.T
        # The maintained residual diagonal is what Algorithm 1 compares; recomputing it from
        # distances would differ by rounding and could reorder (near-)ties.
        R[np.diag_indices_from(R)] = residual_diagonal
        positions, C = _accept_block(R, candidates, pivoting, outside, floor, limit_rank - storage.rank, rng)
        if positions.size == 0:
            idle_rounds += 1
            if idle_rounds > 1000:  # only random pivoting can reject a whole round
                stop_reason = "exhausted"
                break
            continue
        idle_rounds = 0
        if typical_norm > 0 and positions.size > 1:
            # Work cap: columns beyond what the tolerance can need are not computed. The previous
            # round's mean trace reduction per pivot estimates the next ones; twice the estimated
            # count keeps an extra round rare. Only work changes: the kept pivots are a prefix.
            cap = int(np.ceil(2.0 * (residual_trace - threshold) / typical_norm)) + 1
            if cap < positions.size:
                positions, C = positions[:cap], C[:cap, :cap]
        accepted = candidates[positions]
        transform = solve_triangular(C, np.eye(C.shape[0]), lower=True).T  # C^{-T}
        norms = storage.extend(accepted, transform, C)
        after = residual_trace - np.cumsum(norms)
        reached = np.flatnonzero(after <= threshold)
        keep = int(reached[0]) + 1 if reached.size else accepted.size
        residual_trace = storage.commit(keep)
        typical_norm = float(np.mean(norms[:keep]))
        history.extend(after[: keep - 1].tolist())
        history.append(residual_trace)
        pivots.append(accepted[:keep])
        if progress is not None:
            progress(storage.rank, residual_trace)
    pivot_array = np.concatenate(pivots) if pivots else np.empty(0, dtype=np.int64)
    return CholeskyRun(pivot_array, np.asarray(history), trace, stop_reason)


def pivoted_cholesky(
    kernel: Kernel,
    X: Any,
    tol: float = DEFAULT_TOL,
    max_rank: int | None = None,
    pivoting: str = "random",
    seed: int | None = 0,
    *,
    atol: float = 0.0,
    block_size: int | None = None,
    pivot_floor: float = 1e-12,
    progress: Any = None,
) -> PivotedCholesky:
    """Pivoted Cholesky decomposition of the kernel matrix K = k(X, X), shape (n, n), in memory.

    Parameters
    ----------
    kernel: a ``Kernel``.
    X: (n, d) samples (1-D input is one feature).
    tol: stop once trace(K - L L^T) <= tol * trace(K) (relative tolerance, as in the paper's experiments),
        in [0, 1): the rule of ``FACTORISATION_PARAMS``.
    max_rank: at most this many pivots.
    pivoting: "random" (RPCholesky, default: reaches a tolerance at a lower rank) or "greedy"
        (Algorithm 1: the largest residual diagonal entry).
    seed: seeds the random pivoting.
    atol: absolute tolerance on the residual trace; the looser of the two stops.
    block_size: candidates per round (default 64); 1 gives the textbook column-by-column loop.
    pivot_floor: residuals below pivot_floor * max(diag K) are treated as zero.
    """
    X = as_samples(X, "X")
    FACTORISATION_PARAMS["tol"].check("tol", tol)
    storage = InMemoryFactorStorage(kernel, X, capacity=max_rank)
    run = run_pivoted_cholesky(
        storage, kernel, tol=tol, atol=atol, max_rank=max_rank, pivoting=pivoting,
        block_size=block_size, seed=seed, pivot_floor=pivot_floor, progress=progress,
    )
    L = storage.factor()
    return PivotedCholesky(
        pivots=run.pivots,
        L=L,
        B_pivots=pivot_block_inverse(L[run.pivots]),
        trace_error=run.history,
        trace=run.trace,
        stop_reason=run.stop_reason,
        pivot_points=X[run.pivots].copy(),
    )


def pivot_block_inverse(L_pivots: np.ndarray) -> np.ndarray:
    """B[P, :] = L[P, :]^{-T} for the lower-triangular pivot rows L[P, :] (m x m)."""
    m = L_pivots.shape[0]
    if m == 0:
        return np.zeros((0, 0))
    return solve_triangular(L_pivots, np.eye(m), lower=True).T
