"""Hyperparameter selection on a staged store: the grid fanned out over Dask, the table kept in zarr.

A seeded random subsample of at most ``max_rows`` rows is split 4:1 into training and validation
rows (the tuning of the paper's experiments) and searched by ``jdlcore.tuning.score_grid``, the grid
and its defaults being jdlcore's: in this process as one search (each side factorised once per
lengthscale), or on Dask one task per pair of lengthscales. The result is
a tuning store, an xarray Dataset following ``data_schemas.tuning``: the validation loss over the
grid (lengthscale_x, lengthscale_y, reg), the ranks per pair and the best setting. The kernels
standardise their inputs (``scaling`` "robust", the default: each feature by the median and
interquartile range of the subsample), so the grid is in standard units; the store keeps the scaling
(``x_location``, ``x_scale``, ``y_location``, ``y_scale``) and a fit from it uses the same.
"""
from __future__ import annotations

import itertools
import os
import time
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import xarray as xr
import zarr

from data_schemas.tuning import SCHEMA_NAME, SCHEMA_VERSION, validate_tuning_dataset
from jdlcore import JDL, GaussianKernel
from jdlcore.pool import alongside
from jdlcore.scaling import DEFAULT_SCALING, check_scaling_choice
from jdlcore.features.missing import MissingValues
from jdlcore.tuning import (
    LENGTHSCALE_FACTORS, SEARCH_LONGEST, SEARCH_ROWS, SEARCH_TOLERANCE, VALIDATION_FRACTION, Fold, OnYScale, Regs,
    as_regs, best_row, check_grid, check_search_rows, default_lengthscales, kernels_at, make_folds, near_best,
    resolve_criterion, score_grid, search_grid, simplest_best, splits_for, standardised_grid,
)

from .atomic import atomic_store, refuse_existing
from .cluster import broadcast, dask_client, resolve_scheduler
from .staging import categorical_indices, categorical_levels, data_fingerprint, level_recoding, open_staged, read_sample, recode
from jdlcore.features.summaries import (
    DEFAULT_SUMMARIES, MAX_ROWS as SUMMARY_ROWS, BoostedSummaries, fit_summaries, summary_rule,
)
from jdlcore.features.view import XView
from .tuning_record import (
    add_maps, grid_dataset, load_tuning, scored_candidates, search_dataset, search_record, summaries_record,
    tuned_scaling, tuned_summaries,
)
from .x_view import learn_missing, missing_attrs

__all__ = ["tune_store", "load_tuning", "scored_candidates", "tuned_scaling", "tuned_summaries", "default_lengthscales",
           "subsample_rows", "LENGTHSCALE_FACTORS"]

MAX_ROWS = 20_000  # rows of the seeded subsample a tuning scores its candidates on
# the gain of the summaries over the columns at the lengthscales searched beside them, above which "auto"
# keeps them without a search of the columns alone (five times the search's tolerance: 1%): that search
# would find the columns' own lengthscales and win part of the gap back (the demo's smooth law: +0.38%
# with the summaries left out, a tie once the columns alone were searched)
CLEAR_GAIN = 5 * SEARCH_TOLERANCE
# the factors of the columns' lengthscales at which the summaries are left out before that gain is judged
# (``_SearchJob.left_out``): the demo's smooth law, at the trace tolerance 1e-5, kept its one column at 0.90
# beside the summaries, where alone it needs 0.10; left out there, the summaries seemed to gain 2.1%
LEFT_OUT_FACTORS = (1.0, 1 / 2, 1 / 4, 1 / 8)
# the largest share of the summaries' sample that one split's validation rows may be for the map to be
# trained without them and used by the fit as well (else the fit's map has every row and the split a
# refitted map of its own): 4,000 of 100,000 rows cost little, 2,000 of 10,000 cost 1-2.6% of crps_99
MAP_HOLDOUT_SHARE = 0.05
# the table's rows from which "auto" reads y standardised by the summaries (as "standardised" does), and
# the x kernel their skewness too: at 10,000 rows five of seven tables gained 0.4-2.4% of crps_99, one tied
# and one took the summaries beside y as it is (``_with_or_without``); at 5,000 rows three of seven lost
# 1.2-1.7% with y standardised, the model leaning on boosters that had seen few rows
STANDARDISE_ROWS = 10_000


def subsample_rows(n: int, max_rows: int, seed: int) -> np.ndarray:
    """Sorted indices of a seeded random subset of min(n, max_rows) of n rows."""
    if max_rows < 10:
        raise ValueError(f"max_rows: must be at least 10, got {max_rows}")
    if n <= max_rows:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, max_rows, replace=False))


def tune_store(
    data: str | os.PathLike,
    out: str | os.PathLike,
    *,
    lengthscales_x: Sequence[float] | None = None,
    lengthscales_y: Sequence[float] | None = None,
    regs: Sequence[float] | None = None,
    tol: float = JDL.defaults()["tol"],
    constraints: str = JDL.defaults()["constraints"],
    criterion: str = "auto",
    threshold: float | None = None,
    validation: str | os.PathLike | None = None,
    max_rows: int = MAX_ROWS,
    validation_fraction: float = VALIDATION_FRACTION,
    folds: int | str = "auto",
    seed: int = 0,
    scaling: str = DEFAULT_SCALING,
    search: bool = True,
    search_rows: int = SEARCH_ROWS,
    summaries: str = DEFAULT_SUMMARIES,
    scheduler: str | None = None,
    overwrite: bool = False,
    run_key: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Score the grid lengthscales_x x lengthscales_y x regs on the staged store ``data`` and write
    the tuning store ``out`` atomically; returns its path.

    ``scaling``: "robust" (the default) standardises the kernels' inputs by the median and interquartile
    range of each feature of the subsample, "none" leaves the columns as they are; the lengthscales are
    in the resulting units. Lengthscales default to ``LENGTHSCALE_FACTORS`` times the median heuristic
    of the (standardised) subsample. ``regs`` given are all scored; None (the default) walks
    ``jdlcore.tuning.REG_LADDER`` per pair of lengthscales (``jdlcore.tuning.walk_ladder``), the rungs
    not visited left NaN in the store. ``search`` (the default) refines the grid's best to one lengthscale
    per feature (``jdlcore.tuning.search_lengthscales``, in this process); the store keeps its candidates
    (``search_*``) and its best is the store's. Where the grid reaches the rank cap on ``search_rows``
    training rows, the grid and the search are judged on those (``jdlcore.tuning.screen_rows``; the
    store's ``grid_rows``) and their best on all of them.
    ``summaries``: "boosted": the x kernel reads the boosted summaries of x of a scalar y (beside the
    columns or alone); "auto" (the default): where they beat the columns alone, y standardised by them
    from ``STANDARDISE_ROWS`` rows; "standardised": that on any table; "none" never (``_with_or_without``).
    ``criterion``: "auto" (crps for a scalar y, else second_moment), "second_moment", "crps",
    "pinball:LEVELS" or "logistic" (``jdlcore.tuning.resolve_criterion``); the store records the one used.
    ``validation``: a staged store of held-out rows (the same features) to score on, the candidates
    training on the subsample of ``data`` (one fold); without it the candidates are scored on ``folds`` of
    the subsample (``jdlcore.tuning.fold_rows``), each holding out a seeded ``validation_fraction`` of it:
    "auto" (the default) is one where that validates ``jdlcore.tuning.MIN_VALIDATED_ROWS`` rows (from
    10,000 rows of subsample on), else cross-validation (5 folds). ``scheduler`` (see
    ``pipeline.cluster``; "auto" means this process, the subsample being small) decides where the
    pairs run. In this process the default x lengthscales are scored from the longest down and the
    shorter ones left out (NaN) once one scores worse (``score_grid``'s ``stop_early``); on Dask all at once.
    """
    target = Path(out)
    refuse_existing(target, overwrite)
    check_scaling_choice(scaling)
    group = open_staged(data, needs_y="tune")
    score = resolve_criterion(criterion, threshold, group["y"].shape[1])
    held_out = None if validation is None else _validation_group(validation, group)
    regs = as_regs(regs)
    for name, values in (("lengthscales_x", lengthscales_x), ("lengthscales_y", lengthscales_y)):
        if values is not None:
            check_grid(values, name)
    search_rows = check_search_rows(search_rows)
    base = JDL(tol=tol, constraints=constraints, seed=seed, scaling=scaling)
    base.check_params()
    n = int(group.attrs["n_samples"])
    rows = subsample_rows(n, max_rows, seed)
    splits = splits_for(rows.size, validation_fraction, folds, seed, held_out=held_out is not None)
    missing = learn_missing(data, group, rows)
    started = time.perf_counter()
    where = resolve_scheduler(scheduler, rows.size)
    job = _SearchJob(group, missing.augment(group["x"].get_orthogonal_selection((rows, slice(None)))),
                     group["y"].get_orthogonal_selection((rows, slice(None))), splits, base, regs, score, scaling,
                     lengthscales_x, lengthscales_y, seed, search, search_rows,
                     None if where is None else _fan_out(where, base, regs, progress),
                     held_out, validation, max_rows, progress, missing)
    run, gain, summaries_seconds = _decided(job, data, summaries, rows)
    ds = _run_dataset(run, regs)
    ds.attrs.update({
        "scaling": scaling, **missing_attrs(missing),
        "schema": SCHEMA_NAME, "schema_version": SCHEMA_VERSION, "data": str(Path(data).resolve()),
        "data_fingerprint": data_fingerprint(group), "criterion": getattr(score, "name", str(criterion)), "tol": float(tol),
        "constraints": constraints, "rows_used": int(rows.size), "n_samples": n,
        "validation_fraction": float(validation_fraction), "seed": int(seed),
        "validation": "" if held_out is None else str(Path(validation).resolve()), "search_rows": search_rows,
        **summaries_record(run.summaries, summaries, summaries_seconds, gain),
        **search_record(run.folds, run.table, run.searched, run.best, run.screen),
        "seconds": time.perf_counter() - started, **({"run_key": run_key} if run_key else {}),
    })
    validate_tuning_dataset(ds, f"tuning {target}")
    with atomic_store(target, overwrite=overwrite) as staging:
        ds.to_zarr(staging, mode="w", zarr_format=3, consolidated=False)
    return target


@dataclass
class _SearchJob:
    """The inputs of one tuning's search, shared by its runs with and without the summaries of x: the
    subsample (X, Y: the staged columns, x's read through the missing-value rule ``missing``, None where
    they are complete), its splits (None: the held-out store validates), the search's
    settings, and the summaries' map of each split, fitted without its validation rows (None: the
    tuning's own map summarises every fold; ``_fold_maps``)."""

    group: zarr.Group
    X: np.ndarray
    Y: np.ndarray
    splits: Any
    base: JDL
    regs: Regs
    score: Callable
    scaling: str
    lengthscales_x: Sequence[float] | None
    lengthscales_y: Sequence[float] | None
    seed: int
    search: bool
    search_rows: int
    grid: Callable | None
    held_out: zarr.Group | None
    validation: Any
    max_rows: int
    progress: Callable[[str], None] | None
    missing: MissingValues | None = None
    fold_maps: list[BoostedSummaries] | None = None
    quantiles: tuple[tuple[BoostedSummaries, np.ndarray], ...] = ()

    def summarised(self, maps: Sequence[BoostedSummaries]) -> "_SearchJob":
        """This job, with each of ``maps``' boosters' quantiles at the subsample's rows X made once here
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

    def run(self, summaries: BoostedSummaries | None) -> "_SearchRun":
        """The grid and the search on the columns as ``summaries`` has the x kernel read them (the columns
        alone where None); each split's rows summarised by its own map where there are ``fold_maps``."""
        view = XView(self.missing, summaries)
        X = self.augmented(summaries)
        (kernel_x, grid_x), (kernel_y, grid_y) = _kernels(X, view.y(X, self.Y), self.group, view, self.scaling,
                                                          self.lengthscales_x, self.lengthscales_y, self.seed)
        if self.splits is None:
            folds = _held_out_fold(X, self.Y, self.group, self.held_out, self.validation, self.max_rows, self.seed,
                                   view)
            reads = [view]
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
                            search=self.search, stop_early=not self.lengthscales_x, progress=self.progress,
                            grid=self.grid, search_rows=self.search_rows,
                            start=simplest_best if view.standardises else best_row)
        return _SearchRun(summaries, kernel_x, grid_x, kernel_y, grid_y, folds, *found)

    def columns_alone(self) -> "_SearchRun":
        """``run`` on the columns alone, its progress lines marked as such (it may run beside the boosters)."""
        return self.marked("columns alone").run(None)

    def marked(self, label: str) -> "_SearchJob":
        """This job, its progress lines marked with ``label`` (for a run beside another)."""
        progress = self.progress
        return replace(self, progress=progress and (lambda line: progress(f"{label}: {line}")))

    def left_out(self, run: "_SearchRun") -> float:
        """The validation score of ``run``'s best setting (a run that reads the summaries beside the
        columns) with every summary left out (``SEARCH_LONGEST``, as the search leaves a feature out), on
        its folds; its own score where the search already left them all out. Beside the summaries the
        search can leave a column longer than the column alone needs (the summaries carry what it says),
        so the columns' lengthscales (those kept) are also scored at ``LEFT_OUT_FACTORS`` times them, from
        the longest down until one scores worse (``score_grid``'s early stop), and the best score counts."""
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
class _SearchRun:
    """One run of the search: the summaries it read (None: the columns alone), its kernels and grids,
    its folds and what ``search_grid`` found (the grid's table, the search's candidates, the best and
    the screen)."""

    summaries: BoostedSummaries | None
    kernel_x: Any
    grid_x: list[float]
    kernel_y: Any
    grid_y: list[float]
    folds: list[Fold]
    table: list[dict[str, Any]]
    searched: list[dict[str, Any]]
    best: dict[str, Any]
    screen: Any


def _decided(job: _SearchJob, data: str | os.PathLike, rule: str,
             rows: np.ndarray) -> tuple[_SearchRun, float | None, float]:
    """The search that decides the tuning and the summaries' gain (``_with_or_without``), with the boosted
    summaries the ``rule`` asks for fitted on the store ``data`` (``_fitted_summaries``; ``rows``: the
    subsample's), and the boosters' seconds. Where the columns alone are searched whatever the boosters
    give (``_standardises``), they are searched beside the boosters, and beside the searches with the
    summaries as long as that lasts: those then run one after the other with BLAS at one thread
    (``alongside``), the last bits of their scores as they fall; otherwise they run side by side
    (``_beside_and_alone``)."""
    with alongside(job.columns_alone) if _standardises(job, rule) else nullcontext() as columns_alone:
        fitted, fold_maps, seconds = _fitted_summaries(data, job.group, rule, job.seed, rows, job.splits,
                                                       job.progress, job.missing)
        maps = [m for m in [fitted, *(fold_maps or [])] if m is not None]
        job = replace(job, fold_maps=fold_maps).summarised(maps)
        if columns_alone is not None and not columns_alone.done():
            return (*_with_or_without(job, fitted, rule, columns_alone.result), seconds)
    return (*_with_or_without(job, fitted, rule, columns_alone and columns_alone.result, side_by_side=True), seconds)


def _standardises(job: _SearchJob, rule: str) -> bool:
    """Whether ``rule`` (``summary_rule``: a ``ValueError`` for a y it cannot take) reads y standardised by
    the summaries, where the map can: "standardised", or "auto" on ``STANDARDISE_ROWS`` rows or more, with
    a criterion read on y's scale by a factor per row (``OnYScale``); the columns alone then always count."""
    return (summary_rule(rule, job.Y.shape[1]) and (rule == "standardised" or rule == "auto" and _large(job))
            and OnYScale.applies(job.score))


def _large(job: _SearchJob) -> bool:
    """Whether ``job``'s table has ``STANDARDISE_ROWS`` rows or more (for y standardised, and the skewness)."""
    return int(job.group.attrs["n_samples"]) >= STANDARDISE_ROWS


def _with_or_without(job: _SearchJob, summaries: BoostedSummaries | None, rule: str,
                     columns_alone: Callable[[], _SearchRun] | None = None,
                     standardise: bool | None = None, side_by_side: bool = False) -> tuple[_SearchRun, float | None]:
    """The search that decides the tuning, and the summaries' gain (None where not compared).
    ``columns_alone``: the result of ``job.columns_alone`` where it was searched already (``alongside``
    the boosters, where ``_standardises``), else None; ``standardise``: False to read y as it is whatever
    the rule (None: as ``_standardises`` decides); ``side_by_side``: the runs with the summaries beside
    the columns and alone side by side (``_beside_and_alone``; not while the columns alone still run
    beside them), else one after the other.

    With the rule "standardised" (or "auto" on a table of ``STANDARDISE_ROWS`` rows or more), the median
    and the spread kept and a criterion read on y's scale by a factor per row (crps, pinball:
    ``OnYScale``), every run that reads the summaries learns the law of r = (y - predicted median) /
    predicted spread given x and the summaries (their skewness too on ``STANDARDISE_ROWS`` rows or
    more), and answers on y's scale (``jdlcore.conditional.location_scale``).

    The search runs on x's columns with the summaries beside them and on the summaries alone. With y as
    it is, the summaries alone are kept only where they score better by more than ``SEARCH_TOLERANCE``
    (a search that starts with every feature at one lengthscale can leave the summaries too long); with
    y standardised, of the two within that tolerance of the better, the smaller x basis
    (``_cheapest_near_best``). "boosted" keeps that run.

    "auto" and "standardised" keep it only where it beats the columns alone (a smooth law of few
    columns needs no summaries, and their noise costs). With y as it is, by more than the tolerance:
    where the columns alone were not searched yet, first the columns at the beside run's lengthscales
    with the summaries left out (``_SearchJob.left_out``: one candidate), and only where that shows no
    gain above ``CLEAR_GAIN`` the columns alone, searched. With y standardised every row leans on the
    boosters' median and spread, even where the kernel leaves the summaries out: the columns alone are
    always searched, and the summaries must beat them by more than ``CLEAR_GAIN`` (on a smooth law of
    one column a gain of 0.46% on 600 validation rows was 0.18% worse on 20,000 new rows). Where they do
    not, "auto" tries them beside y as it is (those two runs side by side: the columns alone are done by
    then): on 10,000 rows of a table of wages they lost to the columns alone with y standardised and beat
    them with y as it is (crps_99 7,759 against 7,568)."""
    searched_already = columns_alone is not None
    columns_alone = columns_alone or job.columns_alone
    if summaries is None:
        return columns_alone(), None
    standardise = (_standardises(job, rule) if standardise is None else standardise) and summaries.can_standardise
    read = summaries.standardised(skew=_large(job)) if standardise else summaries
    beside, alone = _beside_and_alone(job, read, side_by_side)
    summarised = (_cheapest_near_best(beside, alone) if standardise
                  else alone if _gain(beside.best["score"], alone.best["score"]) > SEARCH_TOLERANCE else beside)
    if job.progress is not None:
        job.progress(f"summaries: validation {beside.best['score']:.6g} beside x's columns, "
                     f"{alone.best['score']:.6g} alone{', y standardised' if standardise else ''}")
    if rule == "boosted":
        return summarised, None
    if not standardise and not searched_already:
        without = job.left_out(beside)
        gain = _gain(without, summarised.best["score"])
        if gain > CLEAR_GAIN:
            if job.progress is not None:
                job.progress(f"summaries: validation {without:.6g} with them left out ({100 * gain:+.2f}% with them)")
            return summarised, gain
    plain = columns_alone()
    gain = _gain(plain.best["score"], summarised.best["score"])
    needed = CLEAR_GAIN if standardise else SEARCH_TOLERANCE
    if job.progress is not None:
        job.progress(f"summaries: validation {plain.best['score']:.6g} without, {summarised.best['score']:.6g} "
                     f"with ({100 * gain:+.2f}%)")
    if standardise and rule == "auto" and gain <= needed:
        return _with_or_without(job, summaries, rule, lambda: plain, standardise=False, side_by_side=True)
    return (summarised if gain > needed else plain), gain


def _beside_and_alone(job: _SearchJob, read: BoostedSummaries, side_by_side: bool) -> tuple[_SearchRun, _SearchRun]:
    """(the run with the summaries ``read`` beside x's columns, the run on them alone). ``side_by_side``:
    the run alone on a thread of the kernel pool while the other runs in this one, with BLAS at one
    thread (``alongside``: the last bits of their scores as they fall); its progress lines marked
    "summaries alone". Either run by itself keeps the two cores busy only part of the time (one fold,
    or five folds on two threads)."""
    if not side_by_side:
        return job.run(read), job.run(read.alone())
    with alongside(lambda: job.marked("summaries alone").run(read.alone())) as alone:
        beside = job.run(read)
    return beside, alone.result()


def _cheapest_near_best(*runs: "_SearchRun") -> "_SearchRun":
    """Of ``runs``, those whose best validation score is within ``SEARCH_TOLERANCE`` (relative) of the
    lowest, the one whose x basis is smallest (its best's ``rank_x`` on the training rows; then the
    lower score). On a standardised y the law of r often hardly depends on x, the runs tie, and a tie
    taken by the run at the rank cap makes a fit on more rows meet the rank budget: the known law at
    1,000,000 rows kept the columns beside the summaries at rank 2,000 (validation 0.30970, alone
    0.30963), and its fit had not finished after 7 minutes."""
    near = {id(row) for row in near_best([run.best for run in runs])}
    return min((run for run in runs if id(run.best) in near),
               key=lambda run: (run.best.get("rank_x", 0), run.best["score"]))


def _gain(before: float, after: float) -> float:
    """The relative fall of a validation score from ``before`` to ``after`` (0 where ``before`` is 0 or not
    finite)."""
    return (before - after) / abs(before) if np.isfinite(before) and before != 0 else 0.0


def _run_dataset(run: _SearchRun, regs: Regs) -> xr.Dataset:
    """The tuning store's variables from the ``run`` kept: the grid's table, the search's candidates and
    the maps its kernels read (``add_maps``)."""
    ds = grid_dataset(run.table, run.grid_x, run.grid_y, regs)
    if run.searched:
        X, Y = run.folds[0][:2]  # a fold's training rows: the columns the kernels read
        ds = ds.merge(search_dataset(run.searched, X.shape[1], Y.shape[1], len(X), len(run.folds)))
    add_maps(ds, run.summaries, run.kernel_x, run.kernel_y)
    return ds


def _kernels(X: np.ndarray, Y: np.ndarray, group: zarr.Group, view: XView, scaling: str,
             lengthscales_x: Sequence[float] | None, lengthscales_y: Sequence[float] | None,
             seed: int) -> tuple[tuple[Any, list[float]], tuple[Any, list[float]]]:
    """The (kernel, lengthscale grid) of x and of y on the subsample (``standardised_grid``); x's features
    are the store's as ``view`` reads them (``XView.columns``)."""
    categorical = view.categorical(categorical_indices(group))
    return (standardised_grid(X, GaussianKernel(1.0, categorical=categorical), scaling,
                              lengthscales_x or None, seed, "lengthscales_x",
                              view.columns(group.attrs["x_features"]), "x"),
            standardised_grid(Y, GaussianKernel(1.0), scaling, lengthscales_y or None, seed, "lengthscales_y",
                              group.attrs["y_features"], "y"))


def _fitted_summaries(data: str | os.PathLike, group: zarr.Group, rule: str, seed: int, rows: np.ndarray,
                      splits: Any, progress: Callable[[str], None] | None, missing: MissingValues | None = None
                      ) -> tuple[BoostedSummaries | None, list[BoostedSummaries] | None, float]:
    """The boosted summaries of x the ``rule`` asks for (``summary_rule``; None where it asks for none),
    fitted on a seeded sample of at most ``SUMMARY_ROWS`` rows of the store (x read through the
    missing-value rule ``missing``, its indicators categorical; None: x as staged); the map of each of the
    ``splits`` of the tuning's subsample ``rows`` (``_fold_maps``; None where the tuning's own map
    summarises every split); the seconds they took.

    With one split whose validation rows are at most ``MAP_HOLDOUT_SHARE`` of the sample (large
    tables), the map's sample leaves them out, and the map that judges the split is the one the fit
    uses: it never saw those rows' y, and no second map is trained. Otherwise (cross-validation on small
    tables, or one split on a table of fewer than about 80,000 rows) the map has every row of its
    sample, and each split a map of its own."""
    if not summary_rule(rule, group["y"].shape[1]):
        return None, None, 0.0
    sample = subsample_rows(int(group.attrs["n_samples"]), SUMMARY_ROWS, seed)
    one_map = splits is not None and len(splits) == 1 and splits[0][1].size <= MAP_HOLDOUT_SHARE * sample.size
    if one_map:
        sample = np.setdiff1d(sample, rows[splits[0][1]], assume_unique=True)
    started = time.perf_counter()
    view = XView(missing)
    X, y = view.rows(read_sample(data, "x", sample)), read_sample(data, "y", sample)[:, 0]
    categorical = view.categorical(categorical_indices(group))
    fitted = fit_summaries(X, y, categorical, seed=seed)
    fold_maps = None if fitted is None or splits is None or one_map else _fold_maps(
        fitted, X, y, categorical, sample, rows, splits, seed)
    seconds = time.perf_counter() - started
    if progress is not None:
        kept = ", ".join(fitted.kept) if fitted else "none (no summary varies)"
        rounds = f" ({', '.join(map(str, fitted.rounds))} rounds)" if fitted else ""
        progress(f"summaries: {kept} from boosters on {sample.size:,} rows{rounds} in {seconds:.1f} s")
    return fitted, fold_maps, seconds


def _fold_maps(fitted: BoostedSummaries, X: np.ndarray, y: np.ndarray, categorical: list[int], sample: np.ndarray,
               rows: np.ndarray, splits: Any, seed: int) -> list[BoostedSummaries]:
    """For each (train, validation) split of the tuning's subsample ``rows`` (store indices), the map
    ``fitted`` refitted, at its rounds, on its sample's rows (``sample``: store indices; X, y their
    columns) less the split's validation rows. Summarised by it, neither a split's training rows nor its
    validation rows carry the validation rows' y: the tuning's own map, trained on every row, would
    let a model that leans on the summaries score better on validation than on new rows. Each keeps
    ``fitted``'s summaries, scale floor and y's range (so that the criterion, read through ``fitted``'s
    ``location_scale``, is each split's law of y)."""
    return [fit_summaries(X[keep], y[keep], categorical, seed=seed, rounds=fitted.rounds, like=fitted)
            for keep in (~np.isin(sample, rows[val]) for _, val in splits)]


def _held_out_fold(X: np.ndarray, Y: np.ndarray, group: zarr.Group, held_out: zarr.Group, validation: Any,
                   max_rows: int, seed: int, view: XView) -> list[Fold]:
    """One fold: the subsample (X, Y) trains, a seeded subsample of at most ``max_rows`` rows of the staged
    store ``held_out`` validates, its category codes read as the training data's (a level the training
    data lacks matches none) and its x read through the training's ``view``."""
    val = subsample_rows(int(held_out.attrs["n_samples"]), max_rows, seed)
    recoding = level_recoding(categorical_levels(held_out), categorical_levels(group),
                              list(group.attrs["x_features"]), "other", f"validation {validation}")
    X_held = recode(held_out["x"].get_orthogonal_selection((val, slice(None))), recoding)
    return [(X, Y, view.rows(X_held),
             held_out["y"].get_orthogonal_selection((val, slice(None))))]


def _fan_out(where: str, base: JDL, regs: Regs, progress: Callable[[str], None] | None) -> Callable:
    """A grid (folds, kernels_x, kernels_y, score) -> rows scored on the Dask scheduler ``where``, one task
    per pair of lengthscales (``score_grid`` on each), the folds' rows scattered once to every worker."""
    def grid(folds: list[Fold], kernels_x: list, kernels_y: list, score: Callable) -> list[dict[str, Any]]:
        from distributed import as_completed

        pairs = list(itertools.product(kernels_x, kernels_y))
        with dask_client(where) as client:
            shared = [[broadcast(client, part) for part in fold] for fold in folds]
            futures = [client.submit(score_grid, shared, base, [kx], [ky], regs, score, pure=False) for kx, ky in pairs]
            for k, _ in enumerate(as_completed(futures, loop=client.loop), 1):
                if progress is not None:
                    progress(f"tuned {k}/{len(pairs)} lengthscale pairs")
            return [row for rows_of_pair in client.gather(futures) for row in rows_of_pair]

    return grid


def _validation_group(validation: str | os.PathLike, group: zarr.Group) -> zarr.Group:
    """The staged validation store, refused unless its x and y features are the training data's."""
    held_out = open_staged(validation, needs_y="tune --validation")
    for role in ("x", "y"):
        if list(held_out.attrs[f"{role}_features"]) != list(group.attrs[f"{role}_features"]):
            raise ValueError(f"validation: its {role} features {list(held_out.attrs[f'{role}_features'])} are not "
                             f"the data's {list(group.attrs[f'{role}_features'])}")
    return held_out
