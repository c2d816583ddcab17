"""Hyperparameter selection on train/validation splits (4:1 as in the paper): the one grid search of
jdl, run in this process here and fanned out over Dask by ``pipeline.tuning``.

Candidates are scored on folds (``fold_rows``): disjoint validation blocks of a seeded permutation,
the other rows training; a candidate's score is the mean criterion over every validated row. One
split validates ``MIN_VALIDATED_ROWS`` rows or more where the rows allow, else 5-fold
cross-validation, so small tunings are not decided by the noise of a few validation rows.

The grid is lengthscales_x x lengthscales_y x regs; the regs are a ladder of decades that each pair
walks from its best neighbour on (``walk_ladder``). Each side is factorised once per lengthscale, and
each pair of factorisations gives one problem that every reg reuses. Lengthscales are in standard
units (``scaling="robust"``), by default ``LENGTHSCALE_FACTORS`` times the median heuristic. Where the
cheapest x factorisation reaches its rank cap on a screen of ``SEARCH_ROWS`` rows, the grid and the
per-feature search run on that screen.

The modules, each importing only those before it: ``constants`` (the search's stated constants),
``criteria``, ``options`` (``TuneOptions``, every option declared once), ``folds``, ``axes``,
``regs``, ``grid``, ``screen``, ``search`` (the per-feature search), ``one_view`` (the whole search
on one view of x), ``views`` (the views of x and the choice between them), ``tune`` (the tuning on
arrays) and ``tuned_model`` (``TunedModel``, the estimator that tunes before it fits). A test that
patches a constant patches the module that reads it. Why the search works as it does: docs/tuning.md.
"""
from __future__ import annotations

from .constants import (
    CACHE_MEMORY_SHARE, CLEAR_GAIN, LEFT_OUT_FACTORS, LENGTHSCALE_FACTORS, MAP_HOLDOUT_SHARE, MIN_SEARCH_ROWS,
    MIN_VALIDATED_ROWS, RACE_FOLDS, RACE_MARGIN, REG_LADDER, REG_START, SEARCH_KEPT_FACTORS, SEARCH_LONGEST,
    SEARCH_ROWS, SEARCH_STEPS, SEARCH_TOLERANCE, STANDARDISE_ROWS, TUNING_ROWS, VALIDATION_FRACTION,
)
from .axes import check_grid, default_lengthscales, standardised_grid
from .criteria import CRITERIA, OnYScale, resolve_criterion
from .folds import (
    Fold, fold_rows, make_folds, resolve_folds, split_rows, splits_for,
    subsample_rows,
)
from .grid import (
    best_row, kernels_at, near_best, score_grid, score_regs, screening_params, simplest_best,
)
from .regs import DEFAULT_REGS, Regs, as_regs, walk_ladder
from .screen import Screen, screen_rows, screened
from .search import (
    scored_on_every_fold, search_best,
    search_lengthscales,
)
from .one_view import refine, search_grid
from .options import TUNE_PARAMETERS, TuneOptions
from .tune import TuneResult, TuningPlan, tune
from .tuned_model import TunedModel

__all__ = ["TuneResult", "tune", "TuneOptions", "TUNE_PARAMETERS", "TuningPlan", "TunedModel", "Fold", "subsample_rows", "split_rows", "fold_rows", "resolve_folds", "splits_for", "make_folds",
           "MIN_VALIDATED_ROWS", "score_grid", "best_row", "near_best", "simplest_best", "resolve_criterion",
           "screening_params",
           "Regs", "as_regs", "walk_ladder", "REG_LADDER", "REG_START",
           "check_grid", "default_lengthscales", "standardised_grid", "search_lengthscales", "search_best",
           "scored_on_every_fold", "RACE_FOLDS", "RACE_MARGIN",
           "refine", "search_grid", "Screen", "screen_rows", "screened", "score_regs", "kernels_at",
           "LENGTHSCALE_FACTORS", "DEFAULT_REGS", "CRITERIA", "OnYScale", "SEARCH_ROWS", "SEARCH_TOLERANCE", "SEARCH_LONGEST",
           "SEARCH_STEPS", "SEARCH_KEPT_FACTORS", "CLEAR_GAIN", "LEFT_OUT_FACTORS", "MAP_HOLDOUT_SHARE", "STANDARDISE_ROWS",
           "TUNING_ROWS", "CACHE_MEMORY_SHARE", "MIN_SEARCH_ROWS", "VALIDATION_FRACTION"]
