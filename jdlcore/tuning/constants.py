"""The stated constants of a tuning's search, in one place: the knobs that are not options
(``TuneOptions`` holds those), each with the reason for its value. The modules of the search read
them from here; docs/tuning.md explains how they act together. Relative tolerances are shares of a
validation score; rows are table rows; lengthscales are in standard units (``scaling="robust"``)."""
from __future__ import annotations

__all__ = ["TUNING_ROWS", "VALIDATION_FRACTION", "MIN_VALIDATED_ROWS", "LENGTHSCALE_FACTORS", "REG_LADDER",
           "REG_START", "SEARCH_TOLERANCE", "CACHE_MEMORY_SHARE", "SEARCH_ROWS", "MIN_SEARCH_ROWS", "SEARCH_STEPS",
           "SEARCH_LONGEST", "SEARCH_KEPT_FACTORS", "RACE_FOLDS", "RACE_MARGIN", "CLEAR_GAIN", "LEFT_OUT_FACTORS",
           "MAP_HOLDOUT_SHARE", "STANDARDISE_ROWS"]

# rows of the seeded subsample a tuning scores its candidates on (the default of ``max_rows``)
TUNING_ROWS = 20_000
# of the rows in each fold's validation block: 4:1 splits, as in the paper (five blocks cover every row)
VALIDATION_FRACTION = 0.2
# the validation rows of one split below which ``folds="auto"`` cross-validates: fewer make the choice noise
MIN_VALIDATED_ROWS = 2_000
# the default lengthscales, times the median heuristic of the standardised rows
LENGTHSCALE_FACTORS = (1 / 8, 1 / 4, 1 / 2)
# the default regs: a ladder of decades that each pair of lengthscales walks from REG_START (from the previous
# pair's best after the first) instead of scoring every rung; regs a caller lists are all scored
REG_LADDER = (1e-10, 1e-9, 1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3)
REG_START = 1e-6
# the relative score tolerance of the walk along the regs and of the per-feature search: a bump smaller than
# the validation noise neither stops a walk nor moves a lengthscale
SEARCH_TOLERANCE = 2e-3
# of physical memory: the y factorisations kept between pairs of lengthscales (else recomputed)
CACHE_MEMORY_SHARE = 0.125
# the training rows of the screen and of the search's subsample, used where the grid's longest factorisation
# reaches its rank cap (each candidate on all the rows would then cost O(n cap^2) at least); the default of
# ``search_rows``, which may not go below MIN_SEARCH_ROWS
SEARCH_ROWS = 4_000
MIN_SEARCH_ROWS = 100
# the per-feature search's steps (one sweep per step) and its longest lengthscale (the kernel then hardly
# varies along the feature, which is left out in effect)
SEARCH_STEPS = (4.0, 2.0)
SEARCH_LONGEST = 100.0
# factorisations the search keeps per side, the current lengthscales' among them (each move pairs them)
SEARCH_KEPT_FACTORS = 3
# on more folds than RACE_FOLDS, a move's candidate is scored on that many first, and on the others only where
# it is not worse there than the best setting by more than RACE_MARGIN (relative)
RACE_FOLDS = 2
RACE_MARGIN = 5 * SEARCH_TOLERANCE
# the gain of the summaries over the columns, at the lengthscales searched beside them, above which the
# summaries are kept without a search of the columns alone: that search would find the columns' own
# lengthscales and win part of the gap back, so only a clear gain (five times the search's tolerance) skips it
CLEAR_GAIN = 5 * SEARCH_TOLERANCE
# the factors of the columns' lengthscales at which the summaries are left out before that gain is judged:
# beside the summaries the search can leave a column longer than it needs alone
LEFT_OUT_FACTORS = (1.0, 1 / 2, 1 / 4, 1 / 8)
# the largest share of the summaries' sample that one split's validation rows may be for the map to be
# trained without them and used by the fit as well (else each split has a map refitted without its rows)
MAP_HOLDOUT_SHARE = 0.05
# the table's rows from which "auto" reads y standardised by the summaries (and the x kernel their skewness
# too): on fewer rows the boosters' median and spread, which every row then leans on, are noisy
STANDARDISE_ROWS = 10_000
