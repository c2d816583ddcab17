"""The per-feature lengthscale search of a tuning: from the grid's best row, a coordinate search for
one lengthscale per feature of x and of y (standard units where the kernels standardise their
inputs), so features that do not help end up with long lengthscales and the model cheaper. Why it
moves as it does: docs/tuning.md."""
from __future__ import annotations

import time
from collections import OrderedDict
from functools import partial
from typing import Any, Callable, Sequence

import numpy as np

from ..kernels import Kernel
from ..lowrank.cholesky import Factorisation
from ..models.jdl import JDL
from .constants import (
    RACE_FOLDS, RACE_MARGIN, SEARCH_KEPT_FACTORS, SEARCH_LONGEST, SEARCH_ROWS, SEARCH_STEPS, SEARCH_TOLERANCE,
)
from .folds import Fold
from .grid import (
    _CANDIDATE_ERRORS, _factoriser, _failed, _one_or_each, _pair_problem, _pair_rows, _plain, _rank_cap, best_row,
    fold_scores, kernels_at, score_regs, scored_row, screening_params, validation_weights,
)
from .regs import Regs, as_regs
from .screen import _fold_subsamples, screened

__all__ = ["search_lengthscales", "search_best", "scored_on_every_fold"]



class _FactorCache:
    """The factorisations of a search, the ``SEARCH_KEPT_FACTORS`` most recently used per side: by side
    ("x" or "y") and lengthscales (d,), the kernel and, fold by fold as they are asked for, the
    ``ProblemSide`` of each fold (or the error the first failing one raised)."""

    def __init__(self, families: dict[str, Kernel], factorisers: dict[str, Callable]):
        self.families = families  # the kernel family and scaling of each side
        self.factorisers = factorisers  # ``_factoriser``'s function of each side's training rows
        self.kept: OrderedDict[tuple, tuple[Kernel, dict[int, Any], list[Exception]]] = OrderedDict()

    def __call__(self, side: str, lengthscale: np.ndarray, which: Sequence[int]
                 ) -> tuple[Kernel, tuple[Any, ...] | Exception, float]:
        """(the kernel, the ``ProblemSide`` of each fold of ``which`` or the error raised, the seconds this
        call factorised for: 0 where every one was made before)."""
        key = (side, *lengthscale.tolist())
        if key not in self.kept:
            self.kept[key] = (self.families[side].with_lengthscale(_one_or_each(lengthscale)), {}, [])
            kept = [other for other in self.kept if other[0] == side]
            for other in kept[:-SEARCH_KEPT_FACTORS]:
                del self.kept[other]
        self.kept.move_to_end(key)
        kernel, sides, failed = self.kept[key]
        missing = [k for k in which if k not in sides]
        seconds = 0.0
        if missing and not failed:
            made, seconds = self.factorisers[side](kernel, which=missing)
            if isinstance(made, Exception):
                failed.append(made)
            else:
                sides.update(zip(missing, made))
        return kernel, failed[0] if failed else tuple(sides[k] for k in which), seconds


class _FeatureSearch:
    """The state of one ``search_lengthscales`` on ``folds`` (those the moves are scored on): the current
    lengthscales of each side (one per feature), the best score so far and its folds' scores
    (``reference``: None where not known), and the rows of every candidate scored (``rows``), each
    setting scored once, with the higher rank of its two factorisations (``ranks``). ``subsample``:
    the training rows of each fold where they are a subsample (recorded on the rows), else None.
    ``carried``: the search this one carries on from its current setting (``on_screen``), whose origin
    it keeps and whose rows hold that setting's."""

    def __init__(self, folds: Sequence[Fold], base: JDL, factorisation: Factorisation, kernel_x: Kernel,
                 kernel_y: Kernel, start: dict[str, Any], score: Callable,
                 progress: Callable[[str], None] | None, subsample: int | None,
                 carried: "_FeatureSearch | None" = None):
        self.folds, self.base, self.score, self.progress, self.subsample = folds, base, score, progress, subsample
        self.factorisation, self.kernels = factorisation, {"x": kernel_x, "y": kernel_y}
        self.params = screening_params(base)
        factorisers = {side: _factoriser([fold[k] for fold in folds], factorisation) for k, side in enumerate("xy")}
        self.budgets = factorisers["x"][1]
        self.factor = _FactorCache(self.kernels, {side: factorise for side, (factorise, _) in factorisers.items()})
        self.widths = {"x": folds[0][0].shape[1], "y": folds[0][1].shape[1]}
        self.current = {side: np.broadcast_to(np.asarray(start[f"lengthscale_{side}"], dtype=np.float64),
                                              (self.widths[side],)).copy() for side in ("x", "y")}
        self.reg = float(start["reg"])
        # where a feature left out comes back
        self.origin = ({side: value.copy() for side, value in self.current.items()} if carried is None
                       else carried.origin)
        self.rows: list[dict[str, Any]] = []
        self.scored: dict[tuple, float] = {}
        self.ranks: dict[tuple, int] = {}
        self.fold_scores: dict[tuple, list[float]] = {}  # of the settings scored on every fold
        if carried is None:  # the start is the grid's best row, already scored (the same kernels, factorisations and solve)
            self.rows.append({**start, "lengthscale_x": _plain(_one_or_each(self.current["x"])),
                              "lengthscale_y": _plain(_one_or_each(self.current["y"])), "step": "start"})
        key = self.point(self.current["x"], self.current["y"])
        self.reference: list[float] | None = None
        if subsample is not None:  # scored again on the subsample, where the moves are compared
            self.best = self.evaluate(self.current["x"], self.current["y"], "start")
        else:
            self.best = self.scored[key] = start["score"] if np.isfinite(start["score"]) else np.inf
            self.ranks[key] = max(int(start.get("rank_x", 0)), int(start.get("rank_y", 0)))
            if len(start.get("fold_scores", ())) == len(folds):
                self.fold_scores[key] = list(start["fold_scores"])
        self.reference = self.fold_scores.get(key) if np.isfinite(self.best) else None

    def features(self) -> list[tuple[str, int]]:
        """Every feature (side, index), x's then y's: the order of a sweep."""
        return [(side, k) for side in ("x", "y") for k in range(self.widths[side])]

    def problem_of(self, lx: np.ndarray, ly: np.ndarray, which: Sequence[int] | None = None
                   ) -> tuple[Any, Exception | None, Kernel, Kernel, float]:
        """(the problems at lengthscales lx, ly of each fold of ``which`` (None: every one), or None; why
        none; the kernels; the seconds spent on them here)."""
        which = range(len(self.folds)) if which is None else which
        (kx, fx, tx), (ky, fy, ty) = self.factor("x", lx, which), self.factor("y", ly, which)
        started = time.perf_counter()
        problem, failed = _pair_problem(fx, fy, kx, ky, [self.folds[k] for k in which], self.base,
                                        [self.budgets[k] for k in which], None)
        return problem, failed, kx, ky, tx + ty + time.perf_counter() - started

    @staticmethod
    def point(lx: np.ndarray, ly: np.ndarray) -> tuple:
        """The key of a setting in ``scored``."""
        return (*lx.tolist(), "|", *ly.tolist())

    def evaluate(self, lx: np.ndarray, ly: np.ndarray, step: str) -> float:
        """The score of lengthscales lx, ly at the start's reg (+inf where not finite, and where left
        after the first ``RACE_FOLDS`` folds: ``raced``), its row recorded with ``step`` the first time
        it is scored."""
        key = self.point(lx, ly)
        if key not in self.scored:
            row = self.raced(lx, ly)
            on = {} if self.subsample is None else {"subsample": self.subsample}
            self.rows.append({**row, "step": step, **on})
            on_every_fold = "folds_scored" not in row and "error" not in row
            self.scored[key] = row["score"] if on_every_fold and np.isfinite(row["score"]) else np.inf
            self.ranks[key] = max(int(row["rank_x"]), int(row["rank_y"]))
            if on_every_fold:
                self.fold_scores[key] = row["fold_scores"]
        return self.scored[key]

    def raced(self, lx: np.ndarray, ly: np.ndarray) -> dict[str, Any]:
        """The row of lengthscales lx, ly: scored on every fold, or, where the best setting's fold scores
        are known and there are more than ``RACE_FOLDS`` folds, on the first ``RACE_FOLDS`` of them and
        on the others only where it is not ``behind`` there; else its row is that of those folds, with
        ``folds_scored`` (their number), and it is not kept (``evaluate``). Every move keeps a candidate
        only where it scores within ``SEARCH_TOLERANCE`` of the best or better, so one more than
        ``RACE_MARGIN`` behind on two folds is rejected all but always (docs/tuning.md)."""
        every_fold = list(range(len(self.folds)))
        stages = ([every_fold[:RACE_FOLDS], every_fold[RACE_FOLDS:]]
                  if self.reference is not None and len(every_fold) > RACE_FOLDS else [every_fold])
        values: list[float] = []
        problems: list[Any] = []
        seconds = 0.0
        for stage in stages:
            problem, failed, kx, ky, spent = self.problem_of(lx, ly, stage)
            seconds += spent
            if problem is None:
                return _failed(kx, ky, self.reg, failed, seconds, problems)
            problems += problem
            started = time.perf_counter()
            try:
                values += fold_scores(problem, self.params, kx, ky, self.reg, [self.folds[k] for k in stage],
                                      self.score)
            except _CANDIDATE_ERRORS as error:
                return _failed(kx, ky, self.reg, error, seconds + time.perf_counter() - started, problems)
            seconds += time.perf_counter() - started
            if len(values) < len(every_fold) and self.behind(values):
                row = scored_row(kx, ky, self.reg, values, self.folds[:len(values)], problems, seconds)
                return {**row, "folds_scored": len(values)}
        return scored_row(kx, ky, self.reg, values, self.folds, problems, seconds)

    def behind(self, values: Sequence[float]) -> bool:
        """Whether fold scores ``values`` of the first folds are, in their mean weighted by the folds'
        validation rows, above the best setting's on the same folds (``reference``) by more than
        ``RACE_MARGIN`` of it."""
        weights = validation_weights(self.folds[:len(values)])
        best = float(weights @ np.asarray(self.reference[:len(values)]))
        return best != 0 and float(weights @ np.asarray(values)) - best > RACE_MARGIN * abs(best)

    def keep(self, side: str, value: np.ndarray, result: float) -> None:
        """``value`` the side's lengthscales, scored ``result``: the best (and its fold scores the
        reference) where it is below the best."""
        self.current[side] = value
        if result < self.best:
            self.best = result
            self.reference = self.fold_scores.get(self.point(self.current["x"], self.current["y"]))

    def at_cap(self, cap: int) -> bool:
        """Whether a factorisation of the current lengthscales reached the rank ``cap`` (either side)."""
        return self.ranks.get(self.point(self.current["x"], self.current["y"]), 0) >= cap

    def on_screen(self, folds: Sequence[Fold], rows: int) -> "_FeatureSearch":
        """This search carried on on ``folds``, a screen of ``rows`` training rows of each fold: from the
        current lengthscales and reg, scored again there, with the same origin."""
        here = {f"lengthscale_{side}": value for side, value in self.current.items()}
        return _FeatureSearch(folds, self.base, self.factorisation, self.kernels["x"], self.kernels["y"],
                              {**here, "reg": self.reg}, self.score, self.progress, rows, carried=self)

    def scored_with(self, side: str, value: np.ndarray, step: str) -> float:
        """The score with ``value`` the lengthscales of ``side``, the other side's current."""
        other = {**self.current, side: value}
        return self.evaluate(other["x"], other["y"], step)

    def trial(self, side: str, k: int, lengthscale: float) -> tuple[np.ndarray, float]:
        """(the side's lengthscales with feature k's at ``lengthscale``, at most ``SEARCH_LONGEST``; their score)."""
        value = self.current[side].copy()
        value[k] = min(lengthscale, SEARCH_LONGEST)
        return value, self.scored_with(side, value, f"{side}:{k}")

    def move(self, side: str, k: int, factor_step: float, until: Callable[[], bool] | None = None) -> bool:
        """One move of feature k of ``side`` by ``factor_step``. Longer: the feature left out (the longest),
        else one step; the first within ``SEARCH_TOLERANCE`` of the best score before them is kept (so the
        step is not scored where leaving the feature out is kept). An only feature of its side stays in,
        and moves longer only where that lowers the score by more than the tolerance. A feature that is
        out (here or before) is tried back at its start lengthscale, kept where that lowers the score by
        more than the tolerance. Unless a longer one was kept, the lengthscale is then made shorter as
        long as that lowers the score by more than the tolerance. Returns True where it stopped early:
        ``until()`` held once a lengthscale brought back or made shorter was kept (the move unfinished)."""
        current = self.current
        kept = False
        longer, slack = ((np.inf, factor_step), SEARCH_TOLERANCE) if self.widths[side] > 1 else (
            (factor_step,), -SEARCH_TOLERANCE)
        for multiplier in longer if current[side][k] < SEARCH_LONGEST else ():
            value, result = self.trial(side, k, current[side][k] * multiplier)
            if result <= self.best + slack * abs(self.best):
                self.keep(side, value, result)
                kept = True
                break
        if current[side][k] >= SEARCH_LONGEST > self.origin[side][k]:  # left out (so not kept): back at its start
            value, result = self.trial(side, k, self.origin[side][k])
            if result < self.best - SEARCH_TOLERANCE * abs(self.best):
                self.keep(side, value, result)
                if until is not None and until():
                    return True
        while not kept:  # shorter, as long as that helps by more than the tolerance
            value, result = self.trial(side, k, current[side][k] / factor_step)
            if not result < self.best - SEARCH_TOLERANCE * abs(self.best):
                break
            self.keep(side, value, result)
            if until is not None and until():
                return True
        return False

    def sweep(self, factor_step: float, features: list[tuple[str, int]], until: Callable[[], bool] | None = None
              ) -> tuple[list[tuple[str, int]], list[tuple[str, int]] | None]:
        """The moves of each of ``features`` (side, index) in turn by ``factor_step``, stopped as soon as
        ``until()`` holds after a lengthscale was kept (``move``). Returns (those that none of the moves
        changed; where it stopped early, the features whose moves are to be made still, the one in
        progress first where it was stopped within its move, else None)."""
        stalled = []
        for position, (side, k) in enumerate(features):
            before = self.current[side][k]
            unfinished = self.move(side, k, factor_step, until)
            if self.current[side][k] == before:
                stalled.append((side, k))
            if self.progress is not None:
                self.progress(f"searched {side} feature {k}: lengthscale {self.current[side][k]:.4g}")
            if unfinished or (until is not None and until()):
                return stalled, features[position + (0 if unfinished else 1):]
        return stalled, None

    def shear(self, features: list[tuple[str, int]], factor_step: float) -> bool:
        """The shear of each of ``features`` that is in, with m > 0 other features of its side in: it
        ``factor_step`` times shorter, each of the others ``factor_step ** (1 / m)`` times longer (at most
        ``SEARCH_LONGEST``), so the product of the side's lengthscales (the volume of the kernel's
        neighbourhood) is kept; kept where that lowers the score by more than ``SEARCH_TOLERANCE``.
        Returns whether one was kept."""
        current = self.current
        kept = False
        for side, k in features:
            others = [j for j in range(self.widths[side]) if j != k and current[side][j] < SEARCH_LONGEST]
            if current[side][k] >= SEARCH_LONGEST or not others:
                continue
            value = current[side].copy()
            value[k] /= factor_step
            value[others] = np.minimum(value[others] * factor_step ** (1 / len(others)), SEARCH_LONGEST)
            result = self.scored_with(side, value, f"{side}:{k}:shear")
            if result < self.best - SEARCH_TOLERANCE * abs(self.best):
                self.keep(side, value, result)
                kept = True
        return kept

    def regs_here(self, regs: Regs) -> list[dict[str, Any]]:
        """The rows of ``regs`` (a walk from the start's reg) at the current lengthscales, on ``folds``,
        with step "reg"."""
        problem, failed, kx, ky, seconds = self.problem_of(self.current["x"], self.current["y"])
        final, _ = _pair_rows(problem, failed, self.params, kx, ky, regs, self.reg, self.folds, self.score, seconds)
        return [{**row, "step": "reg"} for row in final]


def search_lengthscales(
    folds: Sequence[Fold], base: JDL, kernel_x: Kernel, kernel_y: Kernel, regs: Regs | Sequence[float],
    start: dict[str, Any], score: Callable,
    progress: Callable[[str], None] | None = None, max_rows: int | None = SEARCH_ROWS, shear: bool = True,
) -> list[dict[str, Any]]:
    """A coordinate search for one lengthscale per feature of x and of y, from the grid's best row
    ``start`` (its lengthscales on every feature, its reg), each candidate scored on ``folds`` (each
    X_train, Y_train, X_val, Y_val) as ``score_grid`` scores them; ``kernel_x``, ``kernel_y``: the
    grid's kernels (their families and scalings).

    A sweep per step of ``SEARCH_STEPS`` (4, then 2) moves each feature in turn, x's then y's: tried
    left out (``SEARCH_LONGEST``) or one step longer, kept there within ``SEARCH_TOLERANCE`` (relative)
    of the best score, else made shorter while that lowers the score by more than the tolerance
    (``_FeatureSearch.move``; the only feature of a side is not left out). With ``shear`` (the
    default; never on a subsample), the features the last sweep left unchanged are then moved again
    where another moved after them, and sheared at a constant product of their side's lengthscales
    (``_FeatureSearch.shear``); after a shear is kept every feature is swept again by the last step.
    Last, the regs of ``regs`` (``as_regs``; a walk from the start's reg) are scored at the lengthscales
    found.

    Where the folds have more than ``max_rows`` training rows (None: no limit) and a factorisation of
    the start reached its rank cap (the default rank budget, or ``base``'s max_rank), the moves are
    made on a seeded subsample of ``max_rows`` of each fold's (the start scored again there; those rows
    carry ``subsample``, their row count), and the regs are scored on all the training rows. Where the
    start is below the cap and the moves take the current lengthscales' factorisation to it, the moves
    after that one go on on that subsample in the same way (the setting reached scored again there;
    no shears): on all the rows each candidate would cost a factorisation at the cap, O(n cap^2), for a
    model that the cap, not the rows, limits (``jdlcore.tuning.screen``). (On a table of 15,000 rows
    the search on the boosted summaries alone moved the median's lengthscale to 0.07, where each
    candidate on the 12,000 training rows took 2-4 s.)

    With cross-validation, a candidate more than ``RACE_MARGIN`` behind the best setting on the first
    ``RACE_FOLDS`` folds is not scored on the others (``_FeatureSearch.raced``; docs/tuning.md).

    Returns the rows of every candidate scored (``score_grid``'s columns, lengthscales as lists, plus
    ``step``: "x:k" / "y:k" for the feature moved, "x:k:shear" / "y:k:shear", "start", or "reg"; and
    ``folds_scored`` where a candidate was left after the first folds: its score and ``fold_scores``
    are those folds'); the best is ``search_best`` of them (the start is among them), which reads
    only the rows scored on every fold (``scored_on_every_fold``).
    """
    regs = as_regs(regs)
    factorisation = Factorisation.of(base)
    train_rows = min(len(fold[0]) for fold in folds)
    cap = _rank_cap(train_rows, factorisation)
    screenable = max_rows is not None and train_rows > max_rows
    subsample = screenable and max(start.get("rank_x", 0), start.get("rank_y", 0)) >= cap

    def on_subsample() -> list[Fold]:
        return screened(folds, _fold_subsamples(folds, max_rows, base.seed))

    search = _FeatureSearch(on_subsample() if subsample else folds, base, factorisation, kernel_x, kernel_y, start,
                            score, progress, max_rows if subsample else None)
    rows: list[dict[str, Any]] = []
    everyone = search.features()
    for factor_step in SEARCH_STEPS:
        watched = screenable and search.subsample is None  # on all the rows, which a subsample may replace
        stalled, rest = search.sweep(factor_step, everyone, partial(search.at_cap, cap) if watched else None)
        if rest is not None:  # the cap reached on all the training rows: the moves go on on the subsample
            if progress is not None:
                progress(f"the search reached the rank cap on {train_rows:,} training rows: its moves go on on "
                         f"{max_rows:,} of them")
            rows, search = search.rows, search.on_screen(on_subsample(), max_rows)
            stalled, _ = search.sweep(factor_step, rest)
    if shear and search.subsample is None:
        if len(stalled) < len(everyone):  # their moves again (new candidates only where others moved after them)
            stalled, _ = search.sweep(SEARCH_STEPS[-1], stalled)
        if search.shear(stalled, SEARCH_STEPS[-1]):
            search.sweep(SEARCH_STEPS[-1], everyone)  # the single moves again, from where the shears left them
    rows += search.rows
    if search.subsample is not None:  # the lengthscales found, on all the training rows
        kernels = kernels_at(kernel_x, kernel_y, {f"lengthscale_{side}": search.current[side] for side in ("x", "y")})
        return rows + score_regs(folds, base, *kernels, regs, score, start=search.reg)
    return rows + search.regs_here(regs)


def search_best(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The best row of ``search_lengthscales`` among those scored on all the training rows of every fold
    (the grid's best, the start, among them)."""
    return best_row([row for row in scored_on_every_fold(rows) if "subsample" not in row])


def scored_on_every_fold(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of ``search_lengthscales`` scored on every fold: not those left after ``RACE_FOLDS``
    (``folds_scored``), whose score is the mean of those folds'."""
    return [row for row in rows if "folds_scored" not in row]
