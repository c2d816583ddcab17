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

The modules, each importing only those before it: ``criteria`` (the validation criteria), ``folds``
(the train/validation splits), ``axes`` (the lengthscale axes), ``regs`` (the reg axis and its walk),
``grid`` (the scoring of a grid of candidates), ``screen`` (the subsample the grid and the search run
on at the rank cap), ``search`` (the per-feature lengthscale search), ``one_view`` (the whole search on
one view of x), ``views`` (the views of x and the choice between them) and ``tune`` (the tuning on arrays).
Their constants are read where they are defined: a test that patches one patches that module (e.g.
``jdlcore.tuning.screen.SEARCH_ROWS``). Why the search works as it does: docs/tuning.md.
"""
from __future__ import annotations

from .axes import LENGTHSCALE_FACTORS, check_grid, default_lengthscales, standardised_grid
from .criteria import CRITERIA, OnYScale, resolve_criterion
from .folds import (
    MIN_VALIDATED_ROWS, VALIDATION_FRACTION, Fold, fold_rows, make_folds, resolve_folds, split_rows, splits_for,
    subsample_rows,
)
from .grid import (
    CACHE_MEMORY_SHARE, best_row, kernels_at, near_best, score_grid, score_regs, screening_params, simplest_best,
)
from .regs import DEFAULT_REGS, REG_LADDER, REG_START, SEARCH_TOLERANCE, Regs, as_regs, walk_ladder
from .screen import MIN_SEARCH_ROWS, SEARCH_ROWS, SEARCH_ROWS_PARAM, Screen, check_search_rows, screen_rows, screened
from .search import (
    RACE_FOLDS, RACE_MARGIN, SEARCH_KEPT_FACTORS, SEARCH_LONGEST, SEARCH_STEPS, scored_on_every_fold, search_best,
    search_lengthscales,
)
from .one_view import refine, search_grid
from .tune import TuneResult, tune

__all__ = ["TuneResult", "tune", "Fold", "subsample_rows", "split_rows", "fold_rows", "resolve_folds", "splits_for", "make_folds",
           "MIN_VALIDATED_ROWS", "score_grid", "best_row", "near_best", "simplest_best", "resolve_criterion",
           "screening_params",
           "Regs", "as_regs", "walk_ladder", "REG_LADDER", "REG_START",
           "check_grid", "default_lengthscales", "standardised_grid", "search_lengthscales", "search_best",
           "scored_on_every_fold", "RACE_FOLDS", "RACE_MARGIN",
           "refine", "search_grid", "Screen", "screen_rows", "screened", "score_regs", "kernels_at",
           "LENGTHSCALE_FACTORS", "DEFAULT_REGS", "CRITERIA", "OnYScale", "SEARCH_ROWS", "SEARCH_TOLERANCE", "SEARCH_LONGEST",
           "SEARCH_STEPS", "SEARCH_KEPT_FACTORS", "CACHE_MEMORY_SHARE", "MIN_SEARCH_ROWS", "SEARCH_ROWS_PARAM", "check_search_rows", "VALIDATION_FRACTION"]
