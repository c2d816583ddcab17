"""The view of x a tuning searches on, and the rule that chooses between views.

A scalar y's tuning may read x's columns alone, or the boosted summaries of x
(``jdlcore.features.summaries``) beside the columns or alone, with y as it is or standardised by the
summaries' median and spread. ``ViewSearch`` holds one tuning's inputs (the subsample as the
missing-value rule reads it, its splits, the search's settings); ``ViewSearch.run`` searches one view
(``search_grid``); ``choose_view`` is the rule that picks the view from the runs' validation scores;
``tuned_view`` fits the summaries the rule asks for (``fitted_summaries``) and makes the choice. Which
runs are made is fixed by the rule, the table's size and the scores, never by timing; runs that read
nothing of each other go side by side on jdl's pool, with BLAS at one thread, so a tuning is the same
function of its inputs for a given thread count.
"""
from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

import numpy as np

from ..features.missing import MissingValues
from ..features.summaries import SUMMARY_ROWS, BoostedSummaries, fit_summaries, summary_rule
from ..features.view import XView
from ..kernels import Kernel
from ..models.jdl import JDL
from ..pool import alongside
from .axes import standardised_grid
from .constants import (
    CLEAR_GAIN, LEFT_OUT_FACTORS, MAP_HOLDOUT_SHARE, SEARCH_LONGEST, SEARCH_TOLERANCE, STANDARDISE_ROWS,
)
from .criteria import OnYScale
from .folds import Fold, make_folds, subsample_rows
from .grid import best_row, kernels_at, near_best, score_grid, simplest_best
from .one_view import search_grid
from .options import TuneOptions
from .regs import Regs, as_regs

__all__ = ["ViewSearch", "SearchRun", "fitted_summaries", "choose_view", "tuned_view", "relative_gain"]



@dataclass
class ViewSearch:
    """The inputs of one tuning's search, shared by its runs on every view: the subsample (X (n, d): the
    table's rows ``rows`` as the missing-value rule ``missing`` reads them, None where x is complete; Y
    (n, q)) of a table of ``n_rows`` rows, whose x columns are ``x_features`` (``categorical``: the
    positions of the category-code columns) and y's ``y_features``; its splits (each (train, validation)
    positions in X; None: ``held_out`` validates, the raw x rows (codes read as the table's) and y of
    held-out rows); the search's settings (``options``; ``base``: the estimator whose kernel families,
    factorisation settings, constraints and scaling the candidates keep, ``TuneOptions.base_estimator``;
    ``score``: the criterion resolved for y; ``grid``: a fan-out of the grid, e.g. over Dask, None to
    score it here); the summaries' map of each split, fitted without its
    validation rows (``fold_maps``; None: the tuning's own map summarises every split) and the boosters'
    quantiles at X made once (``quantiles``, by ``summarised``)."""

    X: np.ndarray
    Y: np.ndarray
    rows: np.ndarray
    n_rows: int
    splits: Any
    base: JDL
    score: Callable
    options: TuneOptions
    x_features: Sequence[str]
    y_features: Sequence[str]
    categorical: Sequence[int] = ()
    grid: Callable | None = None
    held_out: tuple[np.ndarray, np.ndarray] | None = None
    progress: Callable[[str], None] | None = None
    missing: MissingValues | None = None
    fold_maps: list[BoostedSummaries] | None = None
    quantiles: tuple[tuple[BoostedSummaries, np.ndarray], ...] = ()

    @property
    def regs(self) -> Regs:
        """The reg axis of the options (``as_regs``)."""
        return as_regs(self.options.regs)

    def summarised(self, maps: Sequence[BoostedSummaries]) -> "ViewSearch":
        """This search, with each of ``maps``' boosters' quantiles at the subsample's rows X made once here
        (``predictions``), for every run that reads them (beside the columns, alone, y standardised or
        not: copies of a map that read its boosters another way) and every split."""
        return replace(self, quantiles=self.quantiles + tuple((m, m.predictions(self.X)) for m in maps))

    def augmented(self, summaries: BoostedSummaries | None) -> np.ndarray:
        """The subsample's rows X as ``summaries`` has the x kernel read them (``with_summaries``), from the
        quantiles ``summarised`` made where they are of its boosters."""
        if summaries is None:
            return self.X
        made = next((Q for m, Q in self.quantiles if m.boosters is summaries.boosters), None)
        return summaries.augment(self.X, made)

    def x_kernel(self, view: XView) -> Kernel:
        """The x kernel family of ``base``, comparing the columns ``view`` reads as categories as such."""
        family = self.base._kernel("kernel_x")
        return type(family)(1.0, location=family.location, scale=family.scale,
                            categorical=view.categorical(self.categorical))

    def run(self, summaries: BoostedSummaries | None) -> "SearchRun":
        """The grid and the search on the columns as ``summaries`` has the x kernel read them (the columns
        alone where None); each split's rows summarised by its own map where there are ``fold_maps``."""
        view = XView(self.missing, summaries)
        X = self.augmented(summaries)
        options, scaling = self.options, self.base.scaling
        kernel_x, grid_x = standardised_grid(X, self.x_kernel(view), scaling, options.lengthscales_x, options.seed,
                                             "lengthscales_x", view.columns(self.x_features), "x")
        kernel_y, grid_y = standardised_grid(view.y(X, self.Y), self.base._kernel("kernel_y"), scaling,
                                             options.lengthscales_y, options.seed, "lengthscales_y", self.y_features,
                                             "y")
        if self.splits is None:
            folds, reads = [(X, self.Y, view.rows(self.held_out[0]), self.held_out[1])], [view]
        elif summaries is None or self.fold_maps is None:
            folds, reads = make_folds(X, self.Y, self.splits), [view] * len(self.splits)
        else:  # each split read through its own map, as ``summaries`` reads (beside the columns or alone)
            reads = [XView(None, replace(m, columns=summaries.columns, standardises=summaries.standardises,
                                         kept=summaries.kept))
                     for m in self.fold_maps]
            rows = [(self.augmented(read.summaries), train, val) for read, (train, val) in zip(reads, self.splits)]
            folds = [(Z[train], self.Y[train], Z[val], self.Y[val]) for Z, train, val in rows]
        score = self.score
        # y standardised: each split's y by its own map, scored on y's scale; the grid is flat where x
        # adds little to the law of r, so the search starts from its simplest pair within the tolerance
        if view.standardises:
            folds = [(Xt, read.y(Xt, Yt), Xv, read.y(Xv, Yv)) for read, (Xt, Yt, Xv, Yv) in zip(reads, folds)]
            score = OnYScale(self.score, summaries.location_scale)
        found = search_grid(folds, self.base, kernel_x, kernel_y, grid_x, grid_y, self.regs, score,
                            search=options.search, stop_early=options.lengthscales_x is None,
                            progress=self.progress, grid=self.grid, search_rows=options.search_rows,
                            start=simplest_best if view.standardises else best_row)
        return SearchRun(summaries, kernel_x, grid_x, kernel_y, grid_y, folds, *found)

    def beside_and_alone(self, read: BoostedSummaries) -> tuple["SearchRun", "SearchRun"]:
        """(``run`` with the summaries ``read`` beside x's columns, ``run`` on them alone), side by side:
        the run alone on a thread of jdl's pool (``alongside``, BLAS at one thread), its progress lines
        marked "summaries alone". Either run by itself keeps two cores busy only part of the time (one
        split, or five folds on two threads), and each reads what the other does not."""
        with alongside(lambda: self.marked("summaries alone").run(read.alone())) as alone:
            beside = self.run(read)
        return beside, alone.result()

    def columns_alone(self) -> "SearchRun":
        """``run`` on the columns alone, its progress lines marked as such."""
        return self.marked("columns alone").run(None)

    def marked(self, label: str) -> "ViewSearch":
        """This search, its progress lines marked with ``label``."""
        progress = self.progress
        return replace(self, progress=progress and (lambda line: progress(f"{label}: {line}")))

    def left_out(self, run: "SearchRun") -> float:
        """The validation score of ``run``'s best setting (a run that reads the summaries beside the
        columns) with every summary left out (``SEARCH_LONGEST``, as the search leaves a feature out), on
        its folds; its own score where the search already left them all out. The columns' lengthscales
        (those kept) are also scored at ``LEFT_OUT_FACTORS`` times them, from the longest down until one
        scores worse (``score_grid``'s early stop), and the best score counts."""
        best, kept = run.best, len(run.summaries.in_use)
        lengthscales = np.array(np.broadcast_to(best["lengthscale_x"], (run.folds[0][0].shape[1],)), dtype=np.float64)
        if np.all(lengthscales[-kept:] >= SEARCH_LONGEST):
            return float(best["score"])
        lengthscales[-kept:] = SEARCH_LONGEST
        columns = np.flatnonzero(lengthscales[:-kept] < SEARCH_LONGEST)
        trials = []
        for factor in LEFT_OUT_FACTORS if columns.size else LEFT_OUT_FACTORS[:1]:
            trials.append(lengthscales.copy())
            trials[-1][columns] *= factor
        # the grid's early stop walks them from the longest down, y factorised once
        kernels = [kernels_at(run.kernel_x, run.kernel_y, {**best, "lengthscale_x": trial}) for trial in trials[::-1]]
        rows = score_grid(run.folds, self.base, [kx for kx, _ in kernels], [kernels[0][1]], [best["reg"]], self.score,
                          stop_early=True)
        return min((float(row["score"]) for row in rows if np.isfinite(row["score"])), default=np.inf)


@dataclass
class SearchRun:
    """One run of the search: the summaries it read (None: the columns alone), its kernels and grids,
    its folds and what ``search_grid`` found (the grid's table, the search's candidates, the best and
    the screen)."""

    summaries: BoostedSummaries | None
    kernel_x: Kernel
    grid_x: list[float]
    kernel_y: Kernel
    grid_y: list[float]
    folds: list[Fold]
    table: list[dict[str, Any]]
    searched: list[dict[str, Any]]
    best: dict[str, Any]
    screen: Any


def tuned_view(job: ViewSearch, rule: str, read: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]
               ) -> tuple[SearchRun, float | None, float]:
    """(the run that decides the tuning, the summaries' gain (``choose_view``), the boosters' seconds),
    with the boosted summaries the ``rule`` asks for fitted on the table's rows that ``read`` returns
    (``fitted_summaries``).

    Where the rule reads y standardised (``standardises``) it searches the columns alone whatever the
    summaries score, and that search reads none of the boosters' output: it runs beside the boosters
    and the searches that read them, on a thread of jdl's pool (``alongside``, BLAS at one thread until
    all are done), and the rule reads its result when it needs it. Which runs are made never depends on
    which finishes first."""
    with alongside(job.columns_alone) if standardises(job, rule) else nullcontext() as plain:
        fitted, fold_maps, seconds = fitted_summaries(job, rule, read)
        columns_alone = plain.result if plain is not None else None
        return (*choose_view(_summarised(job, fitted, fold_maps), fitted, rule, columns_alone), seconds)


def _summarised(job: ViewSearch, fitted: BoostedSummaries | None, fold_maps: list[BoostedSummaries] | None
                ) -> ViewSearch:
    """``job`` with the splits' maps, and every map's quantiles at the subsample made once."""
    maps = [m for m in [fitted, *(fold_maps or [])] if m is not None]
    return replace(job, fold_maps=fold_maps).summarised(maps)


def fitted_summaries(job: ViewSearch, rule: str, read: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]
                     ) -> tuple[BoostedSummaries | None, list[BoostedSummaries] | None, float]:
    """The boosted summaries of x the ``rule`` asks for (``summary_rule``; None where it asks for none),
    fitted on a seeded sample of at most ``SUMMARY_ROWS`` rows of the table (``read(indices)`` -> their
    raw x rows (m, d) and y (m,); x read through the missing-value rule, its indicators categorical); the
    map of each of the job's splits (None where the tuning's own map summarises every split); the
    seconds they took.

    With one split whose validation rows are at most ``MAP_HOLDOUT_SHARE`` of the sample (large
    tables), the map's sample leaves them out, and the map that judges the split is the one the fit
    uses: it never saw those rows' y, and no second map is trained. Otherwise the map has every row of
    its sample, and each split a map of its own, refitted at its rounds without the split's validation
    rows: summarised by it, neither a split's training rows nor its validation rows carry the
    validation rows' y, which would let a model that leans on the summaries score better on validation
    than on new rows. Each split's map keeps the map's summaries, scale floor and y's range (so that the
    criterion, read through the map's ``location_scale``, is each split's law of y)."""
    if not summary_rule(rule, job.Y.shape[1]):
        return None, None, 0.0
    sample = subsample_rows(job.n_rows, SUMMARY_ROWS, job.options.seed)
    splits = job.splits
    one_map = splits is not None and len(splits) == 1 and splits[0][1].size <= MAP_HOLDOUT_SHARE * sample.size
    if one_map:
        sample = np.setdiff1d(sample, job.rows[splits[0][1]], assume_unique=True)
    started = time.perf_counter()
    view = XView(job.missing)
    X_read, y = read(sample)
    X = view.rows(X_read)
    categorical = view.categorical(job.categorical)
    fitted = fit_summaries(X, y, categorical, seed=job.options.seed)
    fold_maps = None if fitted is None or splits is None or one_map else [
        fit_summaries(X[keep], y[keep], categorical, seed=job.options.seed, rounds=fitted.rounds, like=fitted)
        for keep in (~np.isin(sample, job.rows[val]) for _, val in splits)]
    seconds = time.perf_counter() - started
    if job.progress is not None:
        kept = ", ".join(fitted.kept) if fitted else "none (no summary varies)"
        rounds = f" ({', '.join(map(str, fitted.rounds))} rounds)" if fitted else ""
        job.progress(f"summaries: {kept} from boosters on {sample.size:,} rows{rounds} in {seconds:.1f} s")
    return fitted, fold_maps, seconds


def standardises(job: ViewSearch, rule: str) -> bool:
    """Whether ``rule`` (``summary_rule``: a ``ValueError`` for a y it cannot take) reads y standardised by
    the summaries, where the map can: "standardised", or "auto" on ``STANDARDISE_ROWS`` rows or more, with
    a criterion read on y's scale by a factor per row (``OnYScale``)."""
    return (summary_rule(rule, job.Y.shape[1]) and (rule == "standardised" or rule == "auto" and _large(job))
            and OnYScale.applies(job.score))


def _large(job: ViewSearch) -> bool:
    """Whether the job's table has ``STANDARDISE_ROWS`` rows or more (for y standardised, and the skewness)."""
    return job.n_rows >= STANDARDISE_ROWS


def choose_view(job: ViewSearch, summaries: BoostedSummaries | None, rule: str,
                columns_alone: Callable[[], SearchRun] | None = None,
                standardise: bool | None = None) -> tuple[SearchRun, float | None]:
    """The run that decides the tuning, and the summaries' gain (None where not compared).
    ``columns_alone``: the result of ``job.columns_alone`` where it was searched already (or is being
    searched beside), else None; ``standardise``: False to read y as it is whatever the rule (None: as
    ``standardises`` decides).

    With the rule "standardised" (or "auto" on a table of ``STANDARDISE_ROWS`` rows or more), the median
    and the spread kept and a criterion read on y's scale (``OnYScale``), every run that reads the
    summaries learns the law of r = (y - predicted median) / predicted spread given x and the summaries
    (their skewness too on ``STANDARDISE_ROWS`` rows or more), and answers on y's scale.

    The summaries are searched beside x's columns, then alone. With y as it is, the summaries alone are
    kept only where they score better by more than ``SEARCH_TOLERANCE`` (a search that starts with every
    feature at one lengthscale can leave the summaries too long); with y standardised, of the two within
    that tolerance of the better, the smaller x basis (``_cheapest_near_best``). "boosted" keeps that run.

    "auto" and "standardised" keep it only where it beats the columns alone (a smooth law of few columns
    needs no summaries, and their noise costs). With y as it is, by more than the tolerance: first the
    columns at the beside run's lengthscales with the summaries left out (``ViewSearch.left_out``: one
    candidate), and only where that shows no gain above ``CLEAR_GAIN`` the columns alone, searched. With
    y standardised every row leans on the boosters' median and spread, even where the kernel leaves the
    summaries out: the columns alone are always searched, and the summaries must beat them by more than
    ``CLEAR_GAIN``. Where they do not, "auto" tries them beside y as it is, judged as above against the
    columns alone already searched."""
    searched_already = columns_alone is not None
    columns_alone = columns_alone or job.columns_alone
    if summaries is None:
        return columns_alone(), None
    standardise = (standardises(job, rule) if standardise is None else standardise) and summaries.can_standardise
    read = summaries.standardised(skew=_large(job)) if standardise else summaries
    beside, alone = job.beside_and_alone(read)
    summarised = (_cheapest_near_best(beside, alone) if standardise
                  else alone if relative_gain(beside.best["score"], alone.best["score"]) > SEARCH_TOLERANCE
                  else beside)
    if job.progress is not None:
        job.progress(f"summaries: validation {beside.best['score']:.6g} beside x's columns, "
                     f"{alone.best['score']:.6g} alone{', y standardised' if standardise else ''}")
    if rule == "boosted":
        return summarised, None
    if not standardise and not searched_already:
        without = job.left_out(beside)
        gain = relative_gain(without, summarised.best["score"])
        if gain > CLEAR_GAIN:
            if job.progress is not None:
                job.progress(f"summaries: validation {without:.6g} with them left out ({100 * gain:+.2f}% with them)")
            return summarised, gain
    plain = columns_alone()
    gain = relative_gain(plain.best["score"], summarised.best["score"])
    needed = CLEAR_GAIN if standardise else SEARCH_TOLERANCE
    if job.progress is not None:
        job.progress(f"summaries: validation {plain.best['score']:.6g} without, {summarised.best['score']:.6g} "
                     f"with ({100 * gain:+.2f}%)")
    if standardise and rule == "auto" and gain <= needed:
        return choose_view(job, summaries, rule, lambda: plain, standardise=False)
    return (summarised if gain > needed else plain), gain


def _cheapest_near_best(*runs: SearchRun) -> SearchRun:
    """Of ``runs``, those whose best validation score is within ``SEARCH_TOLERANCE`` (relative) of the
    lowest, the one whose x basis is smallest (its best's ``rank_x`` on the training rows; then the
    lower score). On a standardised y the law of r often hardly depends on x and the runs tie; a tie
    taken by the run at the rank cap would make a fit on more rows meet the rank budget."""
    near = {id(row) for row in near_best([run.best for run in runs])}
    return min((run for run in runs if id(run.best) in near),
               key=lambda run: (run.best.get("rank_x", 0), run.best["score"]))


def relative_gain(before: float, after: float) -> float:
    """The relative fall of a validation score from ``before`` to ``after`` (0 where ``before`` is 0 or not
    finite)."""
    return (before - after) / abs(before) if np.isfinite(before) and before != 0 else 0.0
