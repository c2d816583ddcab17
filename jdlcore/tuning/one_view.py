"""The whole search on one view of x: the screen, the grid and the per-feature search that refines
its best (``search_grid``, ``refine``)."""
from __future__ import annotations

from typing import Any, Callable, Sequence

from ..kernels import Kernel
from ..models.jdl import JDL
from .folds import Fold
from .grid import best_row, kernels_at, score_grid, score_regs
from .regs import Regs
from .screen import SEARCH_ROWS, Screen, screen_rows, screened
from .search import scored_on_every_fold, search_best, search_lengthscales

__all__ = ["refine", "search_grid"]


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
