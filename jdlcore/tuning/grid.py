"""The scoring of a tuning grid: every (k_x, k_y, reg) candidate fitted on each fold's training rows
and scored on its validation rows (``score_grid``). Each side is factorised once per lengthscale
(pivoted Cholesky on the training rows; the y factorisations are kept between pairs while they fit
``CACHE_MEMORY_SHARE`` of the machine's memory), each pair of factorisations gives one problem (bases,
reductions, support) that every reg reuses, and a candidate that fails is recorded (score NaN) while
the grid goes on."""
from __future__ import annotations

import time
from typing import Any, Callable, Sequence

import numpy as np

from ..conditional.support import MIN_DEFAULT_SIZE
from ..kernels import Kernel
from ..pool import pool_map
from ..lowrank.cholesky import Factorisation, PivotedCholesky, pivoted_cholesky
from ..models.degeneracy import physical_memory, rank_budget
from ..models.jdl import JDL
from ..models.problem import ProblemSide, problem_from_factors, problem_side
from .constants import CACHE_MEMORY_SHARE, SEARCH_TOLERANCE
from .folds import Fold
from .regs import Regs, as_regs

__all__ = ["screening_params", "screening_support", "score_grid", "best_row", "near_best", "kernels_at", "score_regs"]

_CANDIDATE_ERRORS = (ValueError, RuntimeError, np.linalg.LinAlgError, MemoryError, FloatingPointError)


def screening_params(base: JDL) -> dict[str, Any]:
    """The estimator's parameters as a tuning candidate scores them: its own, except that grid
    positivity (a cutting-plane solve per candidate) is screened through the projection, the law
    it falls back to; the winner is then fitted with the estimator's own rule."""
    params = base.get_params(deep=False)
    if params.get("constraints") == "positivity" and params.get("positivity") == "grid":
        params["positivity"] = "project"
    return params


def screening_support(base: JDL) -> int:
    """The support atoms a candidate is scored on (at most its training rows, ``support_size_for``):
    ``base``'s support_size, else ``MIN_DEFAULT_SIZE``. Every candidate is compared on the same
    support whatever its y basis; the winner is then fitted on the default support of its basis
    (``default_support_size``: four atoms per sum kept), which costs more per query where the basis is
    large. (With the default for every candidate, the tuning took 16-18% longer on diamonds and births
    at 40,000 rows: docs/peers.md, "Support atoms for the y basis".)"""
    return base.support_size or MIN_DEFAULT_SIZE


def _factoriser(Zs: Sequence[np.ndarray], factorisation: Factorisation) -> tuple[Callable, list[int | None]]:
    """A function (kernel, its factorisations if already made: one per fold, None where not; the folds
    to factorise, None: every one) -> (the ``ProblemSide`` of the pivoted Cholesky of each of those
    folds' rows ``Zs`` with that kernel, or the first error one raised; seconds), each under the
    default rank budget of its rows where max_rank is None, and those budgets. The folds are factorised
    side by side on the kernel pool (``pool_map``, BLAS at one thread meanwhile): a fold's kernel blocks
    are too small to keep the pool's threads busy."""
    budgets = [rank_budget(len(Z)) if factorisation.max_rank is None else None for Z in Zs]
    options = [factorisation.cholesky_arguments(max_rank=_rank_cap(len(Z), factorisation)) for Z in Zs]

    def factorise(kernel: Kernel, given: Sequence[PivotedCholesky | None] | None = None,
                  which: Sequence[int] | None = None) -> tuple[tuple[ProblemSide, ...] | Exception, float]:
        def side(fold: tuple[np.ndarray, dict[str, Any], PivotedCholesky | None]) -> ProblemSide:
            Z, option, made = fold
            return problem_side(pivoted_cholesky(kernel, Z, **option) if made is None else made, kernel)

        chosen = range(len(Zs)) if which is None else which
        started = time.perf_counter()
        try:
            sides: tuple[ProblemSide, ...] | Exception = tuple(
                pool_map(side, [(Zs[k], options[k], given[k] if given else None) for k in chosen],
                         one_blas_thread=True))
        except _CANDIDATE_ERRORS as error:
            sides = error
        return sides, time.perf_counter() - started

    return factorise, budgets


def _rank_cap(n: int, factorisation: Factorisation) -> int:
    """The rank a factorisation of n rows stops at: ``max_rank``, else the default budget."""
    return rank_budget(n) if factorisation.max_rank is None else factorisation.max_rank


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

    Returns one row per candidate: lengthscale_x, lengthscale_y, reg, score, fold_scores (each fold's),
    rank_x, rank_y, stop_x, stop_y (the factorisations' stop reasons; the highest rank of the folds),
    seconds (its share of the factorisations and of its pair's problem, plus its own solves and
    scoring), and ``error`` (the
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

    def problem(pair: tuple[ProblemSide, ProblemSide, Fold, int | None]) -> Any:
        side_x, side_y, (X, Y, _, _), budget = pair
        return problem_from_factors(side_x, side_y, kernel_x, kernel_y, X, Y,
                                    support_size=screening_support(base),
                                    seed=base.seed, grid_points=base.grid_points, rank_budget=budget,
                                    values_x=base.reads_x_values)

    try:  # the folds side by side
        return tuple(pool_map(problem, list(zip(factors_x, factors_y, folds, budgets)), one_blas_thread=True)), None
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
    validation rows (``fold_scores``); the score is the mean of the folds' weighted by their validation
    rows (``scored_row``)."""
    started = time.perf_counter()
    try:
        values = fold_scores(problems, params, kernel_x, kernel_y, reg, folds, score)
    except _CANDIDATE_ERRORS as error:
        return _failed(kernel_x, kernel_y, reg, error, shared_seconds + time.perf_counter() - started, problems)
    return scored_row(kernel_x, kernel_y, reg, values, folds, problems,
                      shared_seconds + time.perf_counter() - started)


def fold_scores(problems: Sequence[Any], params: dict[str, Any], kernel_x: Kernel, kernel_y: Kernel, reg: float,
                folds: Sequence[Fold], score: Callable) -> list[float]:
    """The validation score of each of ``folds``: the estimator (``params`` with these kernels and reg)
    fitted on the fold's problem (one per fold, in order) and scored by ``score`` on its validation rows,
    the folds side by side. Raises what a fit or a score raised."""
    def scored(pair: tuple[Any, Fold]) -> float:
        problem, (_, Y_train, X_val, Y_val) = pair
        model = JDL(**{**params, "kernel_x": kernel_x, "kernel_y": kernel_y, "reg": float(reg),
                       "support_size": problem.support.requested})  # the problem's support (``screening_support``)
        return float(score(model.fit_problem(problem, Y_train), X_val, Y_val))

    return pool_map(scored, list(zip(problems, folds)), one_blas_thread=True)


def scored_row(kernel_x: Kernel, kernel_y: Kernel, reg: float, values: Sequence[float], folds: Sequence[Fold],
               problems: Sequence[Any], seconds: float) -> dict[str, Any]:
    """The table row of a candidate scored ``values`` on ``folds`` (its problems ``problems``): its score
    is their mean weighted by the folds' validation rows (the criteria being means over rows, the mean
    over every validated row), ``fold_scores`` the folds' own."""
    value = values[0] if len(values) == 1 else float(np.average(values, weights=validation_weights(folds)))
    return {
        "lengthscale_x": _plain(kernel_x.lengthscale), "lengthscale_y": _plain(kernel_y.lengthscale),
        "reg": float(reg), "score": value, "fold_scores": [float(v) for v in values], **_fold_ranks(problems),
        "seconds": seconds,
    }


def validation_weights(folds: Sequence[Fold]) -> np.ndarray:
    """Each fold's weight in a candidate's score: its validation rows, shape (len(folds),)."""
    return np.array([len(fold[2]) for fold in folds], dtype=np.float64)


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


def best_row(table: list[dict[str, Any]]) -> dict[str, Any]:
    """The row with the smallest finite score; ``RuntimeError`` if none is finite."""
    finite = [row for row in table if np.isfinite(row["score"])]
    if not finite:
        errors = sorted({row["error"] for row in table if "error" in row})
        raise RuntimeError("tune: every candidate scored NaN or inf" + (f" (errors: {'; '.join(errors)[:500]})"
                                                                         if errors else ""))
    return min(finite, key=lambda row: row["score"])


def near_best(table: list[dict[str, Any]], tolerance: float = SEARCH_TOLERANCE) -> list[dict[str, Any]]:
    """The rows whose finite score is within ``tolerance`` (relative) of the lowest (``best_row``, which
    is always among them), in table order: the candidates a search cannot tell apart."""
    best = best_row(table)["score"]
    bound = max(best, best + tolerance * abs(best))
    return [row for row in table if np.isfinite(row["score"]) and row["score"] <= bound]


def simplest_best(table: list[dict[str, Any]], tolerance: float = SEARCH_TOLERANCE) -> dict[str, Any]:
    """The grid's row the search starts from: of the pairs of lengthscales whose best score is within
    ``tolerance`` (relative) of the lowest, the one with the longest x lengthscales (geometric mean;
    then the longest y ones), at its best reg. The search keeps a feature's move only where it beats the
    tolerance, and the grid's start is judged the same way: on a flat grid a shorter lengthscale at
    the rank cap can win by noise, and a fit on more rows then meets the rank budget far from the
    trace tolerance (flights, 200,000 rows, y standardised by the summaries: all nine pairs within
    0.2%, the shortest taken, m_X at the budget with 57% of the trace left, a fit of 142 s)."""
    near = near_best(table, tolerance)

    def length(value: Any) -> float:
        return float(np.exp(np.mean(np.log(np.atleast_1d(np.asarray(value, dtype=np.float64))))))

    return max(near, key=lambda row: (length(row["lengthscale_x"]), length(row["lengthscale_y"]), -row["score"]))
