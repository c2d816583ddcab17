"""The tuning as a whole: the screen, the grid, the per-feature search that refines its best
(``search_grid``, ``refine``), and ``tune``, which refits the best setting on all the data."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from ..kernels import Kernel
from ..models.jdl import JDL
from ..validation import as_samples, check_paired
from .axes import standardised_grid
from .criteria import resolve_criterion
from .folds import VALIDATION_FRACTION, Fold, make_folds, splits_for
from .grid import best_row, kernels_at, score_grid, score_regs
from .regs import Regs, as_regs
from .screen import SEARCH_ROWS, Screen, check_search_rows, screen_rows, screened
from .search import scored_on_every_fold, search_best, search_lengthscales

__all__ = ["TuneResult", "tune", "refine", "search_grid"]


@dataclass
class TuneResult:
    """table: one dict per candidate of the grid (``score_grid``'s rows); search: the rows of the
    per-feature search that followed it (``search_lengthscales``; empty without one; a row with
    ``folds_scored`` was scored on the first folds only, ``scored_on_every_fold``); best: the
    winning row; model: the best setting refitted on all data; folds: how many train/validation
    splits each candidate was scored on (``fold_rows``)."""

    table: list[dict[str, Any]]
    best: dict[str, Any]
    model: JDL
    search: list[dict[str, Any]] = field(default_factory=list)
    folds: int = 1

    def scores(self) -> np.ndarray:
        return np.array([row["score"] for row in self.table])


def refine(folds: Sequence[Fold], base: JDL, kernel_x: Kernel, kernel_y: Kernel, regs: Regs | Sequence[float],
           best: dict[str, Any], score: Callable, search: bool = True,
           progress: Callable[[str], None] | None = None, screen: Screen | None = None,
           search_rows: int = SEARCH_ROWS) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(the rows that refined the grid, the best row). ``folds``: each X_train, Y_train, X_val, Y_val;
    ``screen``: where the grid was scored (``screen_rows``; None: on all the training rows);
    ``search_rows``: the most training rows the search moves on where its factorisations reach the
    rank cap (``search_lengthscales``' ``max_rows``).

    With ``search`` and several features in x or y, ``search_lengthscales`` from the grid's ``best`` on
    the same training rows. On all of them the best is its ``search_best``; without a search it is
    ``best`` itself, and there are no rows. On a screen the regs (all, or a walk's from the screen's
    best reg) are then scored, fitted on all the training rows, at the best lengthscales the search
    found there (step "reg"; without a search the grid's), and the best of those is the result. (The
    grid's best is not scored on all the rows: on a screen it is at or near the rank cap, a model the
    screen is there to avoid; docs/tuning.md.) The rows scored on the screen carry ``subsample`` (its
    row count)."""
    searching = search and max(folds[0][0].shape[1], folds[0][1].shape[1]) > 1
    screen = screen or Screen(None)
    if screen.rows is None:
        if not searching:
            return [], best
        searched = search_lengthscales(folds, base, kernel_x, kernel_y, regs, best, score, progress,
                                       max_rows=search_rows)
        return searched, search_best(searched)
    if not searching:
        final = score_regs(folds, base, *kernels_at(kernel_x, kernel_y, best), regs, score, start=best["reg"])
        return final, best_row(final)
    searched = [{**row, "subsample": screen.size} for row in
                search_lengthscales(screened(folds, screen.rows), base, kernel_x, kernel_y, regs, best, score,
                                    progress, shear=False)]
    result = best_row(scored_on_every_fold(searched))
    final = score_regs(folds, base, *kernels_at(kernel_x, kernel_y, result), regs, score, start=result["reg"])
    return searched + final, best_row(final)


def search_grid(
    folds: Sequence[Fold], base: JDL, kernel_x: Kernel, kernel_y: Kernel, grid_x: Sequence[float],
    grid_y: Sequence[float], regs: Regs | Sequence[float], score: Callable, *, search: bool = True,
    stop_early: bool = False,
    progress: Callable[[str], None] | None = None, grid: Callable | None = None, search_rows: int = SEARCH_ROWS,
    start: Callable[[list[dict[str, Any]]], dict[str, Any]] = best_row,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any], Screen]:
    """The whole tuning search on ``folds`` (each X_train, Y_train, X_val, Y_val): the screen
    (``screen_rows`` at the grid's longest x lengthscale), the grid grid_x x grid_y x regs of ``kernel_x``,
    ``kernel_y`` scored on it (``score_grid`` with ``stop_early``; or ``grid(folds, kernels_x, kernels_y, score)`` ->
    its rows, e.g. fanned out over Dask), then ``refine`` from the grid's ``start`` row (its ``best_row``, or ``simplest_best``
    where a flat grid is expected). ``search_rows``: the screen's rows (``screen_rows``'
    ``max_rows``) and the most the search moves on. Returns (the grid's rows, rows scored on a
    screen carrying ``subsample``; the refining rows; the best row; the screen)."""
    kernels_x, kernels_y = [kernel_x.with_lengthscale(v) for v in grid_x], [kernel_y.with_lengthscale(v) for v in grid_y]
    screen = screen_rows(folds, base, kernels_x[-1], max_rows=search_rows)
    if screen.rows is not None and progress is not None:
        progress(f"the grid's longest x lengthscale reaches the rank cap on {screen.size:,} of the "
                 f"{len(folds[0][0]):,} training rows: the grid and the search run on those, the result on all")
    grid_folds = screened(folds, screen.rows)
    factors_x = [None] * (len(kernels_x) - 1) + [[screen.factor_x] + [None] * (len(folds) - 1)]
    table = (score_grid(grid_folds, base, kernels_x, kernels_y, regs, score, progress, factors_x=factors_x,
                        stop_early=stop_early)
             if grid is None else grid(grid_folds, kernels_x, kernels_y, score))
    if screen.rows is not None:
        table = [{**row, "subsample": screen.size} for row in table]
    searched, best = refine(folds, base, kernel_x, kernel_y, regs, start(table), score, search, progress, screen,
                            search_rows)
    return table, searched, best, screen


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
    validation_fraction: float = VALIDATION_FRACTION,
    folds: int | str = "auto",
    seed: int = 0,
    scaling: str | None = None,
    search: bool = True,
    search_rows: int = SEARCH_ROWS,
    refit: bool = True,
) -> TuneResult:
    """Grid search over kernel lengthscales and ``reg`` for a JDL ``estimator`` (its kernel families,
    factorisation settings and constraints are kept; lengthscales and reg are replaced). ``scaling``
    (None, the default: the estimator's own, "robust" unless it was given another):
    "robust" standardises the kernels' inputs by the median and interquartile range of
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
    of ``search_rows`` training rows (default ``SEARCH_ROWS``; ``screen_rows``), the grid and the search
    are scored on that screen, and the lengthscales found there are scored with the regs on all the
    training rows, which choose the best (``refine``). A larger ``search_rows`` judges the candidates on
    more rows, so an effect too weak to show on the screen can be kept, at the cost of factorisations
    at the rank cap on those rows (docs/tuning.md)."""
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
    scaling = base.scaling if scaling is None else scaling
    base = base.with_params(scaling=scaling)  # the candidates' kernels are standardised once, here
    base.check_params()
    kernel_x, grid_x = standardised_grid(X, base._kernel("kernel_x"), scaling, lengthscales_x, seed, "lengthscales_x",
                                         role="X")
    kernel_y, grid_y = standardised_grid(Y, base._kernel("kernel_y"), scaling, lengthscales_y, seed, "lengthscales_y",
                                         role="Y")
    folds_scored = [(X, Y, X_val, Y_val)] if splits is None else make_folds(X, Y, splits)
    table, searched, best, _ = search_grid(folds_scored, base, kernel_x, kernel_y, grid_x, grid_y, regs, score,
                                           search=search, stop_early=lengthscales_x is None,
                                           search_rows=check_search_rows(search_rows))
    params = {
        **base.get_params(deep=False),
        "kernel_x": kernel_x.with_lengthscale(np.asarray(best["lengthscale_x"])),
        "kernel_y": kernel_y.with_lengthscale(np.asarray(best["lengthscale_y"])),
        "reg": best["reg"],
    }
    model = JDL(**params).fit(X, Y) if refit else JDL(**params)
    return TuneResult(table=table, best=best, model=model, search=searched, folds=len(folds_scored))
