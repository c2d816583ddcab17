"""Hyperparameter selection on train/validation splits (4:1 as in the paper): the one grid search of
jdl, run in this process here and fanned out over Dask by ``pipeline.tuning``.

The candidates are scored on folds (``fold_rows``): disjoint validation blocks of a seeded permutation,
each a ``validation_fraction`` of the rows, the other rows training. A candidate is fitted on each
fold's training rows, and its score is the mean of the criterion over every validated row. By
default (``folds="auto"``) one split validates ``MIN_VALIDATED_ROWS`` rows or more (from 10,000 rows
on), and below that every row is validated (5-fold cross-validation), so small tunings are not
decided by the noise of a thousand validation rows.

The grid is lengthscales_x x lengthscales_y x regs. By default the regs are a ladder of decades
(``DEFAULT_REGS``) that each pair of lengthscales walks from its best neighbour on (``walk_ladder``)
instead of scoring every rung. Each side is factorised once per lengthscale
(pivoted Cholesky on the training rows; the y factorisations are kept between pairs while they fit
an eighth of the machine's memory), each pair of factorisations gives one problem (bases,
reductions, support) that every ``reg`` reuses, and each candidate is scored on the validation rows
by a criterion (model, X_val, Y_val) -> float. By default both kernels standardise their inputs
(``scaling="robust"``: each feature by its median and interquartile range, estimated on the training
rows), so the lengthscales are in standard units and columns in different units weigh alike. Unset
lengthscales are ``LENGTHSCALE_FACTORS`` times the median heuristic of the (standardised) rows; the
best setting is refitted on all the data. Where the grid's cheapest x factorisation already reaches
its rank cap on a seeded screen of ``SEARCH_ROWS`` training rows, the grid and the per-feature search
run on that screen, and the best lengthscales found there are scored on all of them.
"""
from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from .lowrank.cholesky import Factorisation, PivotedCholesky, pivoted_cholesky
from .models.degeneracy import physical_memory, rank_budget
from .models.jdl import JDL, ProblemSide, problem_from_factors, problem_side
from .kernels import Kernel, median_heuristic
from .scaling import check_scaling_choice
from .conditional.losses import ClippedLogisticLoss, CRPSLoss, LogLoss, PinballLoss, SecondMomentLoss
from .validation import as_samples, check_paired

__all__ = ["TuneResult", "tune", "Fold", "split_rows", "fold_rows", "resolve_folds", "splits_for", "make_folds", "MIN_VALIDATED_ROWS",
           "score_grid", "best_row", "resolve_criterion", "screening_params",
           "Regs", "as_regs", "walk_ladder", "REG_LADDER", "REG_START",
           "check_grid", "default_lengthscales", "scaled_kernel", "standardised_grid", "search_lengthscales", "search_best",
           "refine", "search_grid", "Screen", "screen_rows", "screened", "score_regs", "kernels_at",
           "LENGTHSCALE_FACTORS", "DEFAULT_REGS", "CRITERIA", "SEARCH_ROWS"]

LENGTHSCALE_FACTORS = (1 / 8, 1 / 4, 1 / 2)  # times the median heuristic, when no lengthscales are given
# the per-feature search (search_lengthscales): steps, the longest lengthscale (standard units: the
# kernel then hardly varies along the feature), the score tolerance and the sweeps
# (a third sweep by 2, run where the second moved something, changed the test CRPS of the peer tables by
# -1.7% to +0.6%, within their run-to-run noise, and cost up to a third of the tuning time: docs/peers.md)
SEARCH_STEPS = (4.0, 2.0)  # one sweep per step
SEARCH_LONGEST = 100.0
SEARCH_TOLERANCE = 2e-3
SEARCH_KEPT_FACTORS = 3  # factorisations kept per side (the current lengthscales' among them: each move pairs them)
# the training rows of the screen (screen_rows) and of the search's subsample, used where the grid's longest
# factorisation reaches its rank cap on them (each candidate on all n rows would then cost O(n cap^2) at
# least); their results are scored on all the rows
SEARCH_ROWS = 4_000
# the default regs: a ladder of decades, walked (``walk_ladder``) from REG_START by each pair of lengthscales
# (from the previous pair's best after the first); regs given by the caller are all scored
REG_LADDER = (1e-10, 1e-9, 1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3)
REG_START = 1e-6
CACHE_MEMORY_SHARE = 0.125  # of physical memory: y factorisations kept between pairs (else recomputed)
_CANDIDATE_ERRORS = (ValueError, RuntimeError, np.linalg.LinAlgError, MemoryError, FloatingPointError)
# the validation rows of one split below which ``folds="auto"`` cross-validates: with one split of 10,000
# rows (2,000 validated) a noise column moved the test CRPS by -0.6%..+0.9% (14 seeds); at 5,000 rows
# (1,000) by up to +4.1%, with all five folds by -1.1%..+0.6% (14 seeds; docs/peers.md)
MIN_VALIDATED_ROWS = 2_000

# one train/validation split of a tuning: (X_train, Y_train, X_val, Y_val), rows by features
Fold = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


@dataclass
class TuneResult:
    """table: one dict per candidate of the grid (``score_grid``'s rows); search: the rows of the
    per-feature search that followed it (``search_lengthscales``; empty without one); best: the
    winning row; model: the best setting refitted on all data; folds: how many train/validation
    splits each candidate was scored on (``fold_rows``)."""

    table: list[dict[str, Any]]
    best: dict[str, Any]
    model: JDL
    search: list[dict[str, Any]] = field(default_factory=list)
    folds: int = 1

    def scores(self) -> np.ndarray:
        return np.array([row["score"] for row in self.table])


CRITERIA = ("auto", "second_moment", "crps", "pinball:LEVELS", "log", "logistic")


def resolve_criterion(criterion: str | Callable, threshold: float | None = None, y_width: int | None = None
                      ) -> Callable:
    """A validation criterion (model, X_val, Y_val) -> float from its name or a callable: "second_moment"
    (the paper's loss (40)), "crps" (the exact CRPS of the conditional laws), "pinball:0.05,0.5,0.95"
    (the mean pinball loss at those levels), "log" (the negative log density of the conditional laws
    smoothed by the y kernel, ``LogLoss``), "logistic" (the clipped logistic loss of the event
    Y <= threshold) or "auto" (the default: "crps" for a scalar y, a proper score of the whole law,
    else "second_moment"). ``y_width``: the data's number of y features, checked against the
    criteria that need a scalar y (and needed by "auto"). ``ValueError`` naming the criterion and the rule."""
    if callable(criterion):
        return criterion
    name, _, levels = str(criterion).partition(":")
    if name == "auto" and not levels:
        if y_width is None:
            raise ValueError("criterion: 'auto' needs the number of y features")
        name = "crps" if y_width == 1 else "second_moment"
    if name == "second_moment" and not levels:
        score = SecondMomentLoss()
    elif name == "crps" and not levels:
        score = CRPSLoss()
    elif name == "log" and not levels:
        score = LogLoss()
    elif name == "pinball":
        try:
            score = PinballLoss([float(level) for level in levels.split(",") if level.strip()])
        except ValueError as error:
            raise ValueError(f"criterion: {criterion!r}: {error}") from None
    elif name == "logistic" and not levels:
        if threshold is None:
            raise ValueError("threshold: the logistic criterion needs the event threshold (Y <= threshold)")
        score = ClippedLogisticLoss(threshold)
    else:
        raise ValueError(f"criterion: unknown value {criterion!r}; choose one of {', '.join(CRITERIA)} or a callable")
    if y_width is not None and y_width != 1 and score.scalar_y:
        raise ValueError(f"criterion: {criterion} needs a scalar y, the data has {y_width} y features")
    return score


def split_rows(n: int, validation_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, validation) row indices of a seeded random split; the validation part has
    round(validation_fraction * n) >= 1 rows. The first of ``fold_rows``'s folds."""
    return fold_rows(n, validation_fraction, 1, seed)[0]


def _blocks(n: int, validation_fraction: float) -> tuple[float, int]:
    """(s, K): the disjoint validation blocks of n rows (positions in a permutation) are
    [round(k s), round((k + 1) s)) for k < K, with s = validation_fraction * n rows (at least 1) and K
    as many as fit in n rows. The first has round(validation_fraction * n) >= 1 rows; at a fraction
    1 / K the K blocks cover every row."""
    if not 0 < validation_fraction < 1:
        raise ValueError(f"validation_fraction: must be in (0, 1), got {validation_fraction}")
    share = max(validation_fraction * n, 1.0)
    count = int(n // share)  # count * share <= n; one more block fits where rounding takes its end down to n
    return share, count + (round((count + 1) * share) <= n)


def resolve_folds(folds: int | str, n: int, validation_fraction: float, held_out: bool = False) -> int:
    """The number of folds of n rows: ``folds`` itself (an int from 1 to the number of disjoint
    validation blocks of ``validation_fraction`` that n rows hold, 5 at 0.2), or for "auto" one where a
    block has ``MIN_VALIDATED_ROWS`` rows or more, else every block (cross-validation: 5 folds at 0.2).
    ``held_out``: the candidates are scored on a validation set given, one fold ("auto" or 1).
    ``ValueError`` naming folds."""
    if held_out:
        if not (folds == "auto" or (folds == 1 and not isinstance(folds, bool))):
            raise ValueError(f"folds: the candidates are scored on the validation set given (one fold), got {folds!r}")
        return 1
    share, most = _blocks(n, validation_fraction)
    if isinstance(folds, str) and folds == "auto":
        return 1 if round(share) >= MIN_VALIDATED_ROWS else most
    if isinstance(folds, (bool, np.bool_)) or not isinstance(folds, (int, np.integer)) or not 1 <= folds <= most:
        raise ValueError(f"folds: must be 'auto' or an integer from 1 to {most} (the disjoint validation blocks of "
                         f"validation_fraction {validation_fraction:g} in {n:,} rows), got {folds!r}")
    return int(folds)


def fold_rows(n: int, validation_fraction: float, folds: int | str, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """(train, validation) row indices of seeded splits of n rows, as many as ``folds`` (``resolve_folds``:
    a number, or "auto"): the validation blocks are consecutive blocks of about validation_fraction * n
    rows of one seeded permutation (so disjoint; ``_blocks``), and each fold trains on the other
    rows; the first fold is ``split_rows``'s split. With validation_fraction 0.2 and 5 folds, 5-fold
    cross-validation: every row is validated once."""
    folds = resolve_folds(folds, n, validation_fraction)
    share, _ = _blocks(n, validation_fraction)
    bounds = [round(k * share) for k in range(folds + 1)]
    order = np.random.default_rng(seed).permutation(n)
    return [(np.concatenate([order[:start], order[stop:]]), order[start:stop])
            for start, stop in zip(bounds[:folds], bounds[1:folds + 1])]


def splits_for(n: int, validation_fraction: float, folds: int | str, seed: int, held_out: bool = False
               ) -> list[tuple[np.ndarray, np.ndarray]] | None:
    """``fold_rows`` of n rows, or None where the candidates are scored on a validation set given
    (``held_out``), ``folds`` then checked to be one fold (``resolve_folds``). Called before any work,
    so a bad ``folds`` fails first."""
    if held_out:
        resolve_folds(folds, n, validation_fraction, held_out=True)
        return None
    return fold_rows(n, validation_fraction, folds, seed)


def make_folds(X: np.ndarray, Y: np.ndarray, splits: Sequence[tuple[np.ndarray, np.ndarray]]) -> list[Fold]:
    """The ``Fold`` of each (train, validation) split of the rows of X and Y (``fold_rows``)."""
    return [(X[train], Y[train], X[val], Y[val]) for train, val in splits]


def default_lengthscales(samples: np.ndarray, seed: int = 0, kernel: Kernel | None = None) -> list[float]:
    """``LENGTHSCALE_FACTORS`` times the median pairwise distance of ``samples`` (rows, features), as
    ``kernel`` sees them (standardised by its scaling, if it has one; a categorical mismatch counts 1)."""
    median = median_heuristic(samples, seed=seed, kernel=kernel)
    return [float(f * median) for f in LENGTHSCALE_FACTORS]


def scaled_kernel(kernel: Kernel, Z: np.ndarray, scaling: str, names: Sequence[str] | None = None,
                  role: str = "x") -> Kernel:
    """``kernel`` standardised to the columns of ``Z`` when ``scaling`` is "robust" and it has no scaling
    of its own (one given is kept); as it is for "none". ``ValueError`` naming a constant column."""
    if check_scaling_choice(scaling) == "none" or kernel.scale is not None or not kernel.scalable:
        return kernel
    return kernel.standardised(Z, None if names is None else list(names), role)


def standardised_grid(Z: np.ndarray, kernel: Kernel, scaling: str, given: Sequence[float] | None, seed: int,
                      name: str, names: Sequence[str] | None = None, role: str = "x") -> tuple[Kernel, list[float]]:
    """(``kernel`` standardised to the columns of ``Z`` by ``scaling`` (``scaled_kernel``), the grid of its
    lengthscales: ``given``, else ``default_lengthscales`` as that kernel sees Z), the grid checked
    (``check_grid``, errors naming ``name``)."""
    kernel = scaled_kernel(kernel, Z, scaling, names, role)
    return kernel, check_grid(default_lengthscales(Z, seed, kernel) if given is None else given, name)


def check_grid(values: Sequence[float], name: str) -> list[float]:
    """One axis of the grid, sorted: at least one value, all finite, > 0 and distinct."""
    values = [float(v) for v in values]
    if not values or not all(np.isfinite(v) and v > 0 for v in values):
        raise ValueError(f"{name}: needs at least one value, all finite and > 0 (got {values})")
    if len(set(values)) != len(values):
        raise ValueError(f"{name}: values must be distinct (got {values})")
    return sorted(values)


def walk_ladder(count: int, score_at: Callable[[int], float], start: int, tolerance: float = SEARCH_TOLERANCE) -> int:
    """The index of the lowest score on a ladder of ``count`` settings, walked from ``start``: its
    neighbours are scored, and the walk goes on toward the better of them for as long as each rung
    scores within ``tolerance`` (relative) of the lowest score so far (a non-finite score counts as
    +inf); the lowest scored is returned. Where the score is unimodal along the ladder this is its
    minimum, usually found with far fewer than ``count`` scores; a bump smaller than the tolerance, which
    validation noise makes, does not stop the walk (on a noise column's synthetic case, reg 1e-5 scored
    0.1% below 1e-6 and 2% above 1e-8). ``score_at`` is called at most once per index."""
    if not 0 <= start < count:
        raise ValueError(f"start: must index the ladder of {count}, got {start}")
    scores: dict[int, float] = {}

    def near(k: int) -> bool:  # scored, and within the tolerance of the lowest score so far
        if k not in scores:
            value = float(score_at(k))
            scores[k] = value if np.isfinite(value) else np.inf
        lowest = min(scores.values())
        return scores[k] <= lowest + tolerance * abs(lowest)

    near(start)
    neighbours = [k for k in (start - 1, start + 1) if 0 <= k < count]
    for k in neighbours:
        near(k)
    if neighbours:
        k = min(neighbours, key=scores.__getitem__)
        step = k - start
        while near(k) and 0 <= k + step < count:
            k += step
    return min(scores, key=scores.__getitem__)


@dataclass(frozen=True)
class Regs:
    """The reg axis of a tuning: ``values`` (ascending, distinct, > 0) and whether each pair of
    lengthscales scores all of them or only the ones its walk visits (``walk``: ``walk_ladder`` from a
    start reg). ``DEFAULT_REGS`` walks ``REG_LADDER``; regs a caller lists are all scored (``as_regs``)."""

    values: tuple[float, ...]
    walk: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", tuple(check_grid(self.values, "regs")))

    def scored(self, candidate: Callable[[float], dict[str, Any]], start: float | None = None
               ) -> tuple[list[dict[str, Any]], float]:
        """(the rows ``candidate(reg)`` gave for the regs scored, in ascending reg; the reg of the lowest
        score, ``start`` where none is finite). ``start``: the reg a walk starts at, the ladder's rung
        nearest to it (in log scale; None: ``REG_START``)."""
        rows: dict[int, dict[str, Any]] = {}

        def score_at(k: int) -> float:
            rows[k] = candidate(self.values[k])
            return rows[k]["score"]

        origin = self.nearest(REG_START if start is None else start)
        if self.walk:
            walk_ladder(len(self.values), score_at, origin)
        else:
            for k in range(len(self.values)):
                score_at(k)
        ordered = [rows[k] for k in sorted(rows)]
        finite = [row for row in ordered if np.isfinite(row["score"])]
        return ordered, (min(finite, key=lambda row: row["score"])["reg"] if finite else self.values[origin])

    def nearest(self, reg: float) -> int:
        """The index of the value nearest to ``reg`` in log scale."""
        return int(np.argmin(np.abs(np.log(np.asarray(self.values)) - np.log(float(reg)))))


DEFAULT_REGS = Regs(REG_LADDER, walk=True)


def as_regs(regs: "Regs | Sequence[float] | None") -> Regs:
    """The reg axis of a tuning: ``DEFAULT_REGS`` for None, a ``Regs`` as it is, and regs a caller
    lists all scored (checked: at least one, finite, > 0, distinct; ``ValueError`` naming regs)."""
    if regs is None:
        return DEFAULT_REGS
    return regs if isinstance(regs, Regs) else Regs(tuple(float(v) for v in regs))


def screening_params(base: JDL) -> dict[str, Any]:
    """The estimator's parameters as a tuning candidate scores them: its own, except that grid
    positivity (a cutting-plane solve per candidate) is screened through the projection, the law
    it falls back to; the winner is then fitted with the estimator's own rule."""
    params = base.get_params()
    if params.get("constraints") == "positivity" and params.get("positivity") == "grid":
        params["positivity"] = "project"
    return params


def _factoriser(Zs: Sequence[np.ndarray], factorisation: Factorisation) -> tuple[Callable, list[int | None]]:
    """A function (kernel, its factorisations if already made: one per fold, None where not) -> (the
    ``ProblemSide`` of the pivoted Cholesky of each fold's rows ``Zs`` with that kernel, or the first
    error one raised; seconds), each under the default rank budget of its rows where max_rank is None,
    and those budgets."""
    budgets = [rank_budget(len(Z)) if factorisation.max_rank is None else None for Z in Zs]
    options = [factorisation.options(max_rank=_rank_cap(len(Z), factorisation)) for Z in Zs]

    def factorise(kernel: Kernel, given: Sequence[PivotedCholesky | None] | None = None
                  ) -> tuple[tuple[ProblemSide, ...] | Exception, float]:
        started = time.perf_counter()
        try:
            sides: tuple[ProblemSide, ...] | Exception = tuple(
                problem_side(pivoted_cholesky(kernel, Z, **option) if made is None else made, kernel)
                for Z, option, made in zip(Zs, options, given or [None] * len(Zs)))
        except _CANDIDATE_ERRORS as error:
            sides = error
        return sides, time.perf_counter() - started

    return factorise, budgets


def _rank_cap(n: int, factorisation: Factorisation) -> int:
    """The rank a factorisation of n rows stops at: ``max_rank``, else the default budget."""
    return rank_budget(n) if factorisation.max_rank is None else factorisation.max_rank


def _subsample(n: int, max_rows: int, seed: int | None) -> np.ndarray:
    """Sorted indices of a seeded random subset of ``max_rows`` of n rows (the screen of the search
    and of ``screen_rows``: the same rows for the same seed)."""
    return np.sort(np.random.default_rng(seed).choice(n, max_rows, replace=False))


def _fold_subsamples(folds: Sequence[Fold], max_rows: int, seed: int | None) -> tuple[np.ndarray, ...]:
    """``_subsample`` of ``max_rows`` of each fold's training rows (the screen's and the search's)."""
    return tuple(_subsample(len(fold[0]), max_rows, seed) for fold in folds)


@dataclass
class Screen:
    """Where a tuning grid is scored (``screen_rows``): ``rows``, indices into each fold's training rows
    (None: all of them), and the factorisation on the first fold's of the grid's longest x lengthscale
    that decided it (None without a screen), the grid's own for that lengthscale there."""

    rows: tuple[np.ndarray, ...] | None
    factor_x: PivotedCholesky | None = None

    @property
    def size(self) -> int | None:
        """The training rows of each fold on the screen (None: all of them)."""
        return None if self.rows is None else int(self.rows[0].size)


def screen_rows(folds: Sequence[Fold], base: JDL, kernel_x: Kernel, max_rows: int | None = None) -> Screen:
    """The training rows the grid and the search are scored on: all of them, or a seeded subsample of
    ``max_rows`` (None: ``SEARCH_ROWS``, read when called) of each fold's where the x factorisation of
    ``kernel_x`` (the grid's longest lengthscale, the lowest rank of the grid) on the first fold's
    subsample reaches its rank cap there (the default budget of ``max_rows`` rows, or ``base``'s
    max_rank). The rank a factorisation needs for its tolerance hardly falls as rows are added (once they
    outnumber it, the residual trace per row at a given rank follows the kernel's spectrum, not the row
    count), so every candidate on all the n rows would cost a factorisation of at least about that rank,
    O(n cap^2), and its fit would be limited by the cap rather than by the data; on the subsample each
    candidate is cheaper. ``refine`` scores the result on all the rows."""
    max_rows = SEARCH_ROWS if max_rows is None else max_rows
    if min(len(fold[0]) for fold in folds) <= max_rows:
        return Screen(None)
    factorisation = Factorisation.of(base)
    rows = _fold_subsamples(folds, max_rows, base.seed)
    cap = _rank_cap(max_rows, factorisation)
    try:
        factor = pivoted_cholesky(kernel_x, folds[0][0][rows[0]], **factorisation.options(max_rank=cap))
    except _CANDIDATE_ERRORS:
        return Screen(None)
    return Screen(rows, factor) if factor.rank >= cap else Screen(None)


def screened(folds: Sequence[Fold], rows: Sequence[np.ndarray] | None) -> list[Fold]:
    """The folds (X_train, Y_train, X_val, Y_val) with each one's training rows cut to its screen
    ``rows`` (None: all)."""
    if rows is None:
        return list(folds)
    return [(X_train[kept], Y_train[kept], X_val, Y_val) for (X_train, Y_train, X_val, Y_val), kept in zip(folds, rows)]


def score_grid(
    folds: Sequence[Fold], base: JDL,
    kernels_x: Sequence[Kernel], kernels_y: Sequence[Kernel], regs: Regs | Sequence[float], score: Callable,
    progress: Callable[[str], None] | None = None, usable: Callable[[PivotedCholesky], bool] | None = None,
    factors_x: Sequence[Sequence[PivotedCholesky | None] | None] | None = None, stop_early: bool = False,
    reg_start: float | None = None,
) -> list[dict[str, Any]]:
    """Validation scores of every (k_x, k_y, reg), in that order, on ``folds`` (each (X_train, Y_train,
    X_val, Y_val); a candidate's score is the mean of its folds' weighted by their validation rows:
    ``_candidate``): each x factorisation of each fold is computed once
    and each y factorisation once as long as the kept ones fit ``CACHE_MEMORY_SHARE`` of the machine's
    memory (else again for each pair), with ``base``'s factorisation settings; each pair's problem
    (bases, reductions, support) is built once and shared by the regs, and each candidate is ``base``
    with those kernels and reg (``screening_params``) scored by ``score``. ``regs`` (``as_regs``): with
    a walk, each pair scores the regs its walk visits, the first pair's walk starting at ``reg_start``
    (None: ``REG_START``) and each later one at the best reg of the pair before it.

    Returns one row per candidate: lengthscale_x, lengthscale_y, reg, score, rank_x, rank_y, stop_x,
    stop_y (the factorisations' stop reasons; the highest rank of the folds), seconds (its share of the
    factorisations and of its pair's problem, plus its own solves and scoring), and ``error`` (the
    message) for a candidate that failed, whose score is NaN: the search goes on. ``progress`` is called
    with a line per finished pair. ``usable``: a test of each factorisation; the candidates of a pair
    with a factorisation that fails it are left out unscored (score NaN, ``error`` says why).
    ``factors_x``: factorisations of ``kernels_x`` already made, in their order, each one per fold (None
    where there is none).

    ``stop_early``: ``kernels_x`` (in increasing lengthscale, one number each) are scored from the
    longest down, and once one's best score is worse than the longer one's, the shorter ones are left
    out (no rows): past the minimum of the validation loss a shorter lengthscale costs a higher rank and
    fits worse.
    """
    factorisation = Factorisation.of(base)
    params = screening_params(base)
    factorise_x, budgets = _factoriser([fold[0] for fold in folds], factorisation)
    factorise_y, _ = _factoriser([fold[1] for fold in folds], factorisation)
    kept_y: dict[int, tuple[tuple[ProblemSide, ...] | Exception, float]] = {}
    room = CACHE_MEMORY_SHARE * physical_memory()
    regs = as_regs(regs)
    rows: list[dict[str, Any]] = []
    pairs = list(zip(kernels_x, factors_x or [None] * len(kernels_x)))
    previous = np.inf  # the best score of the longer lengthscale, with stop_early
    done = 0
    for kernel_x, given in (pairs[::-1] if stop_early else pairs):
        rows_x: list[dict[str, Any]] = []
        factor_x, seconds_x = factorise_x(kernel_x, given)
        for j, kernel_y in enumerate(kernels_y):
            started = time.perf_counter()
            if j in kept_y:
                factor_y, seconds_y = kept_y[j]
                shared_y = seconds_y / len(kernels_x)
            else:
                factor_y, seconds_y = factorise_y(kernel_y)
                size = 0 if isinstance(factor_y, Exception) else sum(side.nbytes for side in factor_y)
                shared_y = seconds_y
                if size <= room:
                    kept_y[j], room, shared_y = (factor_y, seconds_y), room - size, seconds_y / len(kernels_x)
            problem, failed = _pair_problem(factor_x, factor_y, kernel_x, kernel_y, folds, base, budgets, usable)
            shared = seconds_x / len(kernels_y) + shared_y + time.perf_counter() - started
            pair_rows, reg_start = _pair_rows(problem, failed, params, kernel_x, kernel_y, regs, reg_start, folds,
                                              score, shared)
            rows_x += pair_rows
            done += 1
            if progress is not None:
                progress(f"tuned {done}/{len(kernels_x) * len(kernels_y)} lengthscale pairs")
        rows += rows_x
        if stop_early:
            current = min((row["score"] for row in rows_x if np.isfinite(row["score"])), default=np.inf)
            if current > previous:
                break
            previous = min(previous, current)
    return rows


def _pair_problem(factors_x: tuple[ProblemSide, ...] | Exception, factors_y: tuple[ProblemSide, ...] | Exception,
                  kernel_x: Kernel, kernel_y: Kernel, folds: Sequence[Fold], base: JDL, budgets: Sequence[int | None],
                  usable: Callable[[PivotedCholesky], bool] | None) -> tuple[tuple[Any, ...] | None, Exception | None]:
    """(the JDL problem of each fold from its pair of factorisations (their ``ProblemSide``), None) or
    (None, why the pair has none)."""
    failed = next((f for f in (factors_x, factors_y) if isinstance(f, Exception)), None)
    if failed is None and usable is not None:
        failed = next((_LeftOut(side, f.factor.stop_reason, f.factor.rank)
                       for side, sides in (("x", factors_x), ("y", factors_y)) for f in sides if not usable(f.factor)),
                      None)
    if failed is not None:
        return None, failed
    try:
        return tuple(problem_from_factors(fx, fy, kernel_x, kernel_y, X, Y, support_size=base.support_size,
                                          seed=base.seed, grid_points=base.grid_points, rank_budget=budget,
                                          values_x=base.reads_x_values)
                     for fx, fy, (X, Y, _, _), budget in zip(factors_x, factors_y, folds, budgets)), None
    except _CANDIDATE_ERRORS as error:
        return None, error


def _pair_rows(problems: tuple[Any, ...] | None, failed: Exception | None, params: dict[str, Any], kernel_x: Kernel,
               kernel_y: Kernel, regs: Regs, start: float | None, folds: Sequence[Fold], score: Callable,
               shared_seconds: float) -> tuple[list[dict[str, Any]], float | None]:
    """(the rows of a pair's regs, in ascending reg: each scored (``Regs.scored`` from ``start``), or
    every one failed with ``failed`` where the pair has no problems (one per fold); the best reg,
    ``start`` where there is none). The pair's ``shared_seconds`` are spread over its rows."""
    if problems is None:
        rows = [_failed(kernel_x, kernel_y, reg, failed, 0.0) for reg in regs.values]
    else:
        rows, start = regs.scored(lambda reg: _candidate(problems, params, kernel_x, kernel_y, reg, folds, score, 0.0),
                                  start)
    for row in rows:
        row["seconds"] += shared_seconds / len(rows)
    return rows, start


class _LeftOut(Exception):
    """A pair whose factorisation the caller's ``usable`` test refused."""

    def __init__(self, side: str, stop_reason: str, rank: int):
        super().__init__(f"left out: the {side} factorisation stopped ({stop_reason}) at rank {rank}")


def _candidate(problems: tuple[Any, ...], params: dict[str, Any], kernel_x: Kernel, kernel_y: Kernel, reg: float,
               folds: Sequence[Fold], score: Callable, shared_seconds: float) -> dict[str, Any]:
    """The table row of one candidate: the estimator fitted on each fold's problem and scored on its
    validation rows; the score is the mean of the folds' weighted by their validation rows (the
    criteria being means over rows, the mean over every validated row)."""
    started = time.perf_counter()
    try:
        values = []
        for problem, (_, Y_train, X_val, Y_val) in zip(problems, folds):
            model = JDL(**{**params, "kernel_x": kernel_x, "kernel_y": kernel_y, "reg": float(reg)})
            model.fit_problem(problem, Y_train)
            values.append(float(score(model, X_val, Y_val)))
        value = values[0] if len(values) == 1 else float(np.average(values, weights=[len(fold[2]) for fold in folds]))
    except _CANDIDATE_ERRORS as error:
        return _failed(kernel_x, kernel_y, reg, error, shared_seconds + time.perf_counter() - started, problems)
    return {
        "lengthscale_x": _plain(kernel_x.lengthscale), "lengthscale_y": _plain(kernel_y.lengthscale),
        "reg": float(reg), "score": value, **_fold_ranks(problems),
        "seconds": shared_seconds + time.perf_counter() - started,
    }


def _fold_ranks(problems: Sequence[Any]) -> dict[str, Any]:
    """rank_x, rank_y, stop_x, stop_y of a candidate's problems (one per fold): per side, the highest
    rank of the folds and that factorisation's stop reason."""
    highest = {side: max((problem.factors for problem in problems), key=lambda factors: factors[f"rank_{side}"])
               for side in ("x", "y")}
    return {**{f"rank_{side}": int(factors[f"rank_{side}"]) for side, factors in highest.items()},
            **{f"stop_{side}": factors[f"stop_reason_{side}"] for side, factors in highest.items()}}


def _failed(kernel_x: Kernel, kernel_y: Kernel, reg: float, error: Exception, seconds: float,
            problems: Sequence[Any] = ()) -> dict[str, Any]:
    """The table row of a candidate that raised: score NaN, the error's message kept."""
    ranks = _fold_ranks(problems) if problems else {"rank_x": 0, "rank_y": 0, "stop_x": None, "stop_y": None}
    return {"lengthscale_x": _plain(kernel_x.lengthscale), "lengthscale_y": _plain(kernel_y.lengthscale),
            "reg": float(reg), "score": float("nan"), **ranks, "seconds": seconds,
            "error": f"{type(error).__name__}: {error}"}


def _plain(lengthscale: float | np.ndarray) -> float | list[float]:
    """A lengthscale as JSON: a float, or a list of floats (one per feature)."""
    return float(lengthscale) if np.ndim(lengthscale) == 0 else [float(v) for v in lengthscale]


def _one_or_each(lengthscale: np.ndarray) -> float | np.ndarray:
    """A per-feature lengthscale (d,) as the kernel takes it: a float for one feature, else the array."""
    return lengthscale if lengthscale.size > 1 else float(lengthscale[0])


def search_lengthscales(
    folds: Sequence[Fold], base: JDL, kernel_x: Kernel, kernel_y: Kernel, regs: Regs | Sequence[float],
    start: dict[str, Any], score: Callable,
    progress: Callable[[str], None] | None = None, max_rows: int | None = SEARCH_ROWS, shear: bool = True,
) -> list[dict[str, Any]]:
    """A coordinate search for one lengthscale per feature of x and of y, from the grid's best row
    ``start`` (its scalar lengthscales on every feature, its reg), each candidate scored on ``folds`` as
    ``score_grid`` scores them.

    Each sweep visits the features in turn, x's then y's. (An only feature of y is moved too: the grid
    chose its lengthscale at the grid's x lengthscale, and the best y lengthscale changes as x's move;
    at 40,000 rows this took diamonds' test CRPS from 222.4 to 215.6 and births' from 11.42 to 11.30.) A
    feature's lengthscale is tried at ``SEARCH_LONGEST`` (the feature left out, in effect: the kernel is
    flat along it) and, unless that is kept, ``step`` times longer; the first whose validation score is
    within ``SEARCH_TOLERANCE`` (relative) of the best score before them is kept (the longer of the two,
    as if both were scored), so a feature that does not help ends up long and the model cheaper. The
    only feature of a side is not left out: it is tried one step longer, kept there only where that
    lowers the score by more than the tolerance (a longer y lengthscale within the validation noise
    coarsens every law: on the noise column's 10,000-row cases, keeping it within the tolerance moved
    one seed's test CRPS by +2.9%). If neither is kept, the lengthscale is made ``step`` times shorter
    as long as that lowers the score by more than the tolerance. A feature left out earlier is first
    tried back at its start lengthscale, kept where that lowers the score by more than the tolerance,
    and then made shorter as above: near ``SEARCH_LONGEST`` the score is flat along it, so steps down
    from there cannot tell that a feature left out when the others were at the start helps once they
    have moved (on births at 40,000 rows, year comes back this way: test CRPS -2%). After the last
    sweep, the features it did not change are moved again where another feature moved after their turn,
    and each still unchanged that is in (shorter than ``SEARCH_LONGEST``), with m other features of its
    side in, is sheared: ``step`` times shorter, each of the others ``step ** (1 / m)`` times longer (at
    most ``SEARCH_LONGEST``), so the product of the side's lengthscales (the volume of the kernel's
    neighbourhood) is kept. A shear is kept where it lowers the score by more than the tolerance, and
    after one is kept every feature is swept again by the last step. A move of one feature changes the
    neighbourhood's shape and its size together, and where the size is already right, a better shape can
    lie where no single move sees it (the noise column's 5,000-row cases: without the column the search
    stayed at the grid's start, 0.81 on both features, while 0.4 and 1.6 scored better; the shear
    reached it; tried at each feature's turn instead, it pre-empted later features' own moves). Only
    ``shear`` (the default) tries these, and never on a subsample (below, or ``refine``'s screen): the
    moves there are decided on fewer rows than the result is fitted on, and a move of every feature at
    once carried over worst (births at 40,000 rows: kept on the 4,000-row screen by 0.21%, its result
    scored 0.9% worse on all the training rows and 1.4% worse on the test rows). The first sweep steps
    by 4, the second by 2. The y factorisation is shared while x moves (and the other way round);
    ``kernel_x``, ``kernel_y``: the kernels of the grid (their families and scalings). Last, the regs of
    ``regs`` (``as_regs``; a walk starting at the start's reg) are scored at the lengthscales found.
    Returns the rows of every candidate scored (``score_grid``'s columns, lengthscales as lists, plus
    ``step``: "x:k" / "y:k" for the feature moved, "x:k:shear" / "y:k:shear", "start", or "reg"); the
    best is ``search_best`` of them (the start is among them).

    Where the start's factorisation reached its rank cap (the default rank budget, or ``base``'s
    max_rank), every candidate would cost a factorisation at that cap. With more than ``max_rows``
    training rows (None: no limit) the moves are then made on a seeded subsample of ``max_rows`` of
    each fold's, whose budget is smaller: those rows carry ``subsample`` (their row count), the start is
    scored there too, and the regs at the lengthscales found are scored on all the training rows, so
    ``search_best`` compares them with the grid's best on equal terms.
    """
    all_folds = folds
    regs = as_regs(regs)
    factorisation = Factorisation.of(base)
    train_rows = min(len(fold[0]) for fold in folds)
    at_cap = max(start.get("rank_x", 0), start.get("rank_y", 0)) >= _rank_cap(train_rows, factorisation)
    subsample = at_cap and max_rows is not None and train_rows > max_rows
    if subsample:
        folds = screened(folds, _fold_subsamples(folds, max_rows, base.seed))
    params = screening_params(base)
    factorisers = {side: _factoriser([fold[k] for fold in folds], factorisation) for k, side in enumerate("xy")}
    budgets = factorisers["x"][1]
    families = {"x": kernel_x, "y": kernel_y}
    widths = {"x": folds[0][0].shape[1], "y": folds[0][1].shape[1]}
    current = {side: np.broadcast_to(np.asarray(start[f"lengthscale_{side}"], dtype=np.float64), (widths[side],)).copy()
               for side in ("x", "y")}
    reg = float(start["reg"])
    origin = {side: value.copy() for side, value in current.items()}  # where a feature left out comes back
    factors: OrderedDict[tuple, Any] = OrderedDict()  # the most recently used, SEARCH_KEPT_FACTORS per side
    rows: list[dict[str, Any]] = []
    scored: dict[tuple, float] = {}

    def factor(side: str, lengthscale: np.ndarray) -> tuple[Kernel, Any, float]:
        key = (side, *lengthscale.tolist())
        if key not in factors:
            kernel = families[side].with_lengthscale(_one_or_each(lengthscale))
            factors[key] = (kernel, *factorisers[side][0](kernel))
            kept = [other for other in factors if other[0] == side]
            for other in kept[:-SEARCH_KEPT_FACTORS]:
                del factors[other]
        factors.move_to_end(key)
        return factors[key]

    def problem_of(lx: np.ndarray, ly: np.ndarray) -> tuple[Any, Exception | None, Kernel, Kernel, float]:
        (kx, fx, tx), (ky, fy, ty) = factor("x", lx), factor("y", ly)
        started = time.perf_counter()
        problem, failed = _pair_problem(fx, fy, kx, ky, folds, base, budgets, None)
        return problem, failed, kx, ky, tx + ty + time.perf_counter() - started

    def point(lx: np.ndarray, ly: np.ndarray) -> tuple:  # the key of a setting in ``scored``
        return (*lx.tolist(), "|", *ly.tolist())

    def evaluate(lx: np.ndarray, ly: np.ndarray, step: str) -> float:
        key = point(lx, ly)
        if key not in scored:
            problem, failed, kx, ky, seconds = problem_of(lx, ly)
            row = (_failed(kx, ky, reg, failed, seconds) if problem is None else
                   _candidate(problem, params, kx, ky, reg, folds, score, seconds))
            rows.append({**row, "step": step, **({"subsample": max_rows} if subsample else {})})
            scored[key] = row["score"] if np.isfinite(row["score"]) else np.inf
        return scored[key]

    # the start is the grid's best row, already scored (the same kernels, factorisations and solve)
    rows.append({**start, "lengthscale_x": _plain(_one_or_each(current["x"])),
                 "lengthscale_y": _plain(_one_or_each(current["y"])), "step": "start"})
    if subsample:  # scored again on the subsample, where the moves are compared
        best = evaluate(current["x"], current["y"], "start")
    else:
        best = scored[point(current["x"], current["y"])] = (
            start["score"] if np.isfinite(start["score"]) else np.inf)
    def scored_with(side: str, value: np.ndarray, step: str) -> float:  # ``value``: the side's lengthscales
        other = {**current, side: value}
        return evaluate(other["x"], other["y"], step)

    def sweep(factor_step: float, features: list[tuple[str, int]]) -> list[tuple[str, int]]:
        """The moves of each of ``features`` (side, index) in turn by ``factor_step``; returns those that
        none of them changed."""
        nonlocal best
        stalled = []
        for side, k in features:
            def trial(lengthscale: float) -> tuple[np.ndarray, float]:
                value = current[side].copy()
                value[k] = min(lengthscale, SEARCH_LONGEST)
                return value, scored_with(side, value, f"{side}:{k}")

            before = current[side][k]
            # longer: the feature dropped (the longest), else one step; the first within the tolerance of
            # the best score before them wins (a lucky score of the one step does not keep a feature:
            # leaving one out is preferred within the tolerance of where the move started, so the step
            # is not scored when the drop is kept). An only feature stays in, and moves longer only where that
            # helps by more than the tolerance: keeping the longer within it is there to leave features out
            kept = False
            longer, slack = ((np.inf, factor_step), SEARCH_TOLERANCE) if widths[side] > 1 else (
                (factor_step,), -SEARCH_TOLERANCE)
            for multiplier in longer if current[side][k] < SEARCH_LONGEST else ():
                value, result = trial(current[side][k] * multiplier)
                if result <= best + slack * abs(best):
                    current[side], best, kept = value, min(best, result), True
                    break
            if current[side][k] >= SEARCH_LONGEST > origin[side][k]:  # left out (so not kept): back at its start
                value, result = trial(origin[side][k])
                if result < best - SEARCH_TOLERANCE * abs(best):
                    current[side], best = value, result
            while not kept:  # shorter, as long as that helps by more than the tolerance
                value, result = trial(current[side][k] / factor_step)
                if not result < best - SEARCH_TOLERANCE * abs(best):
                    break
                current[side], best = value, result
            if current[side][k] == before:
                stalled.append((side, k))
            if progress is not None:
                progress(f"searched {side} feature {k}: lengthscale {current[side][k]:.4g}")
        return stalled

    def sheared(features: list[tuple[str, int]], factor_step: float) -> bool:
        """The shear of each of ``features`` that is in, with other features of its side in; whether one
        was kept."""
        nonlocal best
        kept = False
        for side, k in features:
            others = [j for j in range(widths[side]) if j != k and current[side][j] < SEARCH_LONGEST]
            if current[side][k] >= SEARCH_LONGEST or not others:
                continue
            value = current[side].copy()
            value[k] /= factor_step
            value[others] = np.minimum(value[others] * factor_step ** (1 / len(others)), SEARCH_LONGEST)
            result = scored_with(side, value, f"{side}:{k}:shear")
            if result < best - SEARCH_TOLERANCE * abs(best):
                current[side], best, kept = value, result, True
        return kept

    everyone = [(side, k) for side in ("x", "y") for k in range(widths[side])]
    for factor_step in SEARCH_STEPS:
        stalled = sweep(factor_step, everyone)
    if shear and not subsample:
        if len(stalled) < len(everyone):  # their moves again (new candidates only where others moved after them)
            stalled = sweep(SEARCH_STEPS[-1], stalled)
        if sheared(stalled, SEARCH_STEPS[-1]):
            sweep(SEARCH_STEPS[-1], everyone)  # the single moves again, from where the shears left them
    if subsample:  # the lengthscales found, on all the training rows
        kernels = kernels_at(kernel_x, kernel_y, {f"lengthscale_{side}": current[side] for side in ("x", "y")})
        return rows + score_regs(all_folds, base, *kernels, regs, score, start=reg)
    problem, failed, kx, ky, seconds = problem_of(current["x"], current["y"])
    final, _ = _pair_rows(problem, failed, params, kx, ky, regs, reg, folds, score, seconds)
    return rows + [{**row, "step": "reg"} for row in final]


def kernels_at(kernel_x: Kernel, kernel_y: Kernel, row: dict[str, Any]) -> tuple[Kernel, Kernel]:
    """The kernels (families and scalings of ``kernel_x``, ``kernel_y``) at the lengthscales of a table
    row (``lengthscale_x``, ``lengthscale_y``: a number, or one per feature)."""
    return tuple(kernel.with_lengthscale(_one_or_each(np.atleast_1d(np.asarray(row[f"lengthscale_{side}"],
                                                                               dtype=np.float64))))
                 for side, kernel in (("x", kernel_x), ("y", kernel_y)))


def score_regs(folds: Sequence[Fold], base: JDL, kernel_x: Kernel, kernel_y: Kernel,
               regs: Regs | Sequence[float], score: Callable, start: float | None = None) -> list[dict[str, Any]]:
    """``score_grid``'s rows of the regs (every one, or a walk's from ``start``) at the kernels
    ``kernel_x``, ``kernel_y``, fitted on the training rows of ``folds`` (each X_train, Y_train, X_val,
    Y_val) and scored on their validation rows, with step "reg"."""
    return [{**row, "step": "reg"} for row in score_grid(folds, base, [kernel_x], [kernel_y], regs, score,
                                                        reg_start=start)]


def refine(folds: Sequence[Fold], base: JDL, kernel_x: Kernel, kernel_y: Kernel, regs: Regs | Sequence[float],
           best: dict[str, Any], score: Callable, search: bool = True,
           progress: Callable[[str], None] | None = None, screen: Screen | None = None,
           ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(the rows that refined the grid, the best row). ``folds``: each X_train, Y_train, X_val, Y_val;
    ``screen``: where the grid was scored (``screen_rows``; None: on all the training rows).

    With ``search`` and several features in x or y, ``search_lengthscales`` from the grid's ``best`` on
    the same training rows. On all of them the best is its ``search_best``; without a search it is
    ``best`` itself, and there are no rows. On a screen the regs (all, or a walk's from the screen's
    best reg) are then scored, fitted on all the training rows, at the best lengthscales the search
    found there (step "reg"; without a search the grid's), and the best of those is the result. (The
    grid's best is not scored on all the rows: on a screen it is at or near the rank cap, a model the
    screen is there to avoid; on the screened peer tables it scored 4-31% worse there than the
    search's result, and took a third of the tuning time.) The rows scored on the screen carry
    ``subsample`` (its row count)."""
    searching = search and max(folds[0][0].shape[1], folds[0][1].shape[1]) > 1
    screen = screen or Screen(None)
    if screen.rows is None:
        if not searching:
            return [], best
        searched = search_lengthscales(folds, base, kernel_x, kernel_y, regs, best, score, progress)
        return searched, search_best(searched)
    if not searching:
        final = score_regs(folds, base, *kernels_at(kernel_x, kernel_y, best), regs, score, start=best["reg"])
        return final, best_row(final)
    searched = [{**row, "subsample": screen.size} for row in
                search_lengthscales(screened(folds, screen.rows), base, kernel_x, kernel_y, regs, best, score,
                                    progress, shear=False)]
    result = best_row(searched)
    final = score_regs(folds, base, *kernels_at(kernel_x, kernel_y, result), regs, score, start=result["reg"])
    return searched + final, best_row(final)


def search_grid(
    folds: Sequence[Fold], base: JDL, kernel_x: Kernel, kernel_y: Kernel, grid_x: Sequence[float],
    grid_y: Sequence[float], regs: Regs | Sequence[float], score: Callable, *, search: bool = True,
    stop_early: bool = False,
    progress: Callable[[str], None] | None = None, grid: Callable | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any], Screen]:
    """The whole tuning search on ``folds`` (each X_train, Y_train, X_val, Y_val): the screen
    (``screen_rows`` at the grid's longest x lengthscale), the grid grid_x x grid_y x regs of ``kernel_x``,
    ``kernel_y`` scored on it (``score_grid`` with ``stop_early``; or ``grid(folds, kernels_x, kernels_y)`` -> its
    rows, e.g. fanned out over Dask), then ``refine``. Returns (the grid's rows, rows scored on a
    screen carrying ``subsample``; the refining rows; the best row; the screen)."""
    kernels_x, kernels_y = [kernel_x.with_lengthscale(v) for v in grid_x], [kernel_y.with_lengthscale(v) for v in grid_y]
    screen = screen_rows(folds, base, kernels_x[-1])
    if screen.rows is not None and progress is not None:
        progress(f"the grid's longest x lengthscale reaches the rank cap on {screen.size:,} of the "
                 f"{len(folds[0][0]):,} training rows: the grid and the search run on those, the result on all")
    grid_folds = screened(folds, screen.rows)
    factors_x = [None] * (len(kernels_x) - 1) + [[screen.factor_x] + [None] * (len(folds) - 1)]
    table = (score_grid(grid_folds, base, kernels_x, kernels_y, regs, score, progress, factors_x=factors_x,
                        stop_early=stop_early)
             if grid is None else grid(grid_folds, kernels_x, kernels_y))
    if screen.rows is not None:
        table = [{**row, "subsample": screen.size} for row in table]
    searched, best = refine(folds, base, kernel_x, kernel_y, regs, best_row(table), score, search, progress, screen)
    return table, searched, best, screen


def search_best(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The best row of ``search_lengthscales`` among those scored on all the training rows (the grid's
    best, the start, among them)."""
    return best_row([row for row in rows if "subsample" not in row])


def best_row(table: list[dict[str, Any]]) -> dict[str, Any]:
    """The row with the smallest finite score; ``RuntimeError`` if none is finite."""
    finite = [row for row in table if np.isfinite(row["score"])]
    if not finite:
        errors = sorted({row["error"] for row in table if "error" in row})
        raise RuntimeError("tune: every candidate scored NaN or inf" + (f" (errors: {'; '.join(errors)[:500]})"
                                                                         if errors else ""))
    return min(finite, key=lambda row: row["score"])


def tune(
    X: Any,
    Y: Any,
    *,
    estimator: JDL | None = None,
    lengthscales_x: Sequence[float] | None = None,
    lengthscales_y: Sequence[float] | None = None,
    regs: Sequence[float] | None = None,
    criterion: str | Callable = "auto",
    threshold: float | None = None,
    validation: tuple[Any, Any] | None = None,
    validation_fraction: float = 0.2,
    folds: int | str = "auto",
    seed: int = 0,
    scaling: str = "robust",
    search: bool = True,
    refit: bool = True,
) -> TuneResult:
    """Grid search over kernel lengthscales and ``reg`` for a JDL ``estimator`` (its kernel families,
    factorisation settings and constraints are kept; lengthscales and reg are replaced). ``scaling``:
    "robust" (the default) standardises the kernels' inputs by the median and interquartile range of
    X and of Y (``jdlcore.scaling``; a kernel given with a scaling keeps it), so lengthscales are in
    standard units; "none" leaves the columns as they are. Lengthscales default to
    ``LENGTHSCALE_FACTORS`` times the median heuristic of the (standardised) X and Y; regs (None, the
    default) to ``DEFAULT_REGS``, ``REG_LADDER`` walked from ``REG_START`` by each pair (``walk_ladder``),
    while regs given are all scored: the grid ``jdl tune`` searches. The default x lengthscales are scored from the
    longest down, and the shorter ones are left out of the table once one scores worse than the
    longer (``score_grid``'s ``stop_early``); given ones are all scored. ``criterion``: see ``resolve_criterion``.
    ``validation``: held-out rows (X_val, Y_val) to score on, the candidates training on all of X, Y
    (one fold); without it the candidates are scored on ``folds`` (``fold_rows``) of the rows, each
    holding out a seeded ``validation_fraction`` of them: "auto" (the default) is one where that
    validates ``MIN_VALIDATED_ROWS`` rows (from 10,000 rows on), else cross-validation (5 folds).
    The model's kernels carry the scaling, so it applies wherever the model is queried. ``search`` (the default): where x (or y)
    has several features, the grid's best is refined to one lengthscale per feature of x and of y
    (``search_lengthscales``: features that do not help end up with long lengthscales).

    Where even the grid's longest x lengthscale needs a factorisation at the rank cap on a seeded screen
    of ``SEARCH_ROWS`` training rows (``screen_rows``), the grid and the search are scored on that
    screen, and the lengthscales found there are scored with the regs on all the training rows, which
    choose the best (``refine``)."""
    X = as_samples(X, "X", min_rows=5)
    Y = as_samples(Y, "Y", min_rows=5)
    check_paired(X, Y)
    if validation is not None:
        X_val, Y_val = as_samples(validation[0], "X_val"), as_samples(validation[1], "Y_val")
        check_paired(X_val, Y_val, "X_val", "Y_val")
        for name, part, whole in (("X_val", X_val, X), ("Y_val", Y_val, Y)):
            if part.shape[1] != whole.shape[1]:
                raise ValueError(f"{name}: has {part.shape[1]} features, the training rows have {whole.shape[1]}")
    splits = splits_for(X.shape[0], validation_fraction, folds, seed, held_out=validation is not None)
    regs = as_regs(regs)
    score = resolve_criterion(criterion, threshold, Y.shape[1])
    base = estimator if estimator is not None else JDL()
    base.check_params()
    kernel_x, grid_x = standardised_grid(X, base._kernel("kernel_x"), scaling, lengthscales_x, seed, "lengthscales_x",
                                         role="X")
    kernel_y, grid_y = standardised_grid(Y, base._kernel("kernel_y"), scaling, lengthscales_y, seed, "lengthscales_y",
                                         role="Y")
    folds_scored = [(X, Y, X_val, Y_val)] if splits is None else make_folds(X, Y, splits)
    table, searched, best, _ = search_grid(folds_scored, base, kernel_x, kernel_y, grid_x, grid_y, regs, score,
                                           search=search, stop_early=lengthscales_x is None)
    params = {
        **base.get_params(),
        "kernel_x": kernel_x.with_lengthscale(np.asarray(best["lengthscale_x"])),
        "kernel_y": kernel_y.with_lengthscale(np.asarray(best["lengthscale_y"])),
        "reg": best["reg"],
    }
    model = JDL(**params).fit(X, Y) if refit else JDL(**params)
    return TuneResult(table=table, best=best, model=model, search=searched, folds=len(folds_scored))
