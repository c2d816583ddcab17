"""``tune``: the tuning of the default model on arrays, as ``jdl tune`` runs it on a staged store, and
the model it chooses refitted on all the rows (a ``ConditionalModel``)."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..features.missing import MissingValues
from ..features.view import XView
from ..models.conditional_model import ConditionalModel, fit_law
from ..models.jdl import JDL
from ..validation import as_samples, check_paired
from .criteria import resolve_criterion
from .folds import splits_for, subsample_rows
from .options import TuneOptions
from .views import ViewSearch, tuned_view

__all__ = ["TuneResult", "TuningPlan", "tune"]


@dataclass(frozen=True)
class TuningPlan:
    """What a tuning of ``n_rows`` rows runs with, made before any search (``of``): the options settled
    (``TuneOptions.settled``), the estimator whose families and settings every candidate keeps
    (``TuneOptions.base_estimator``), the criterion resolved for y, the seeded subsample's rows and their
    splits (None where held-out rows validate). ``tune`` and ``pipeline.tuning.tune_store`` both start from it."""

    options: TuneOptions
    base: JDL
    score: Callable
    rows: np.ndarray
    splits: list[tuple[np.ndarray, np.ndarray]] | None

    @classmethod
    def of(cls, options: TuneOptions, estimator: JDL | None, n_rows: int, y_width: int, held_out: bool
           ) -> "TuningPlan":
        score = resolve_criterion(options.criterion, options.threshold, y_width)
        base = options.base_estimator(estimator)
        rows = subsample_rows(n_rows, options.max_rows, options.seed)
        splits = splits_for(rows.size, options.validation_fraction, options.folds, options.seed, held_out=held_out)
        return cls(options.settled(base), base, score, rows, splits)


@dataclass
class TuneResult:
    """table: one dict per candidate of the grid (``score_grid``'s rows); search: the rows of the
    per-feature search that followed it (``search_lengthscales``; empty without one; a row with
    ``folds_scored`` was scored on the first folds only, ``scored_on_every_fold``); best: the
    winning row; model: the best setting refitted on all the rows, read through ``view`` (a
    ``ConditionalModel``; with ``refit=False`` the law's estimator, unfitted: fit it on
    ``view.pair(X, Y)``); view: how the chosen model reads x (the missing-value rule and the boosted
    summaries it kept); summaries_gain: the relative gain in validation score of the summaries over the
    columns alone (None where not compared); folds: how many train/validation splits each candidate
    was scored on (``fold_rows``); fit_seconds: the refit's wall seconds (0 without one); options: what the
    tuning ran with (``TuneOptions.settled``: the fields left to the estimator read from it)."""

    table: list[dict[str, Any]]
    best: dict[str, Any]
    model: ConditionalModel | JDL
    search: list[dict[str, Any]] = field(default_factory=list)
    folds: int = 1
    view: XView = field(default_factory=XView)
    summaries_gain: float | None = None
    fit_seconds: float = 0.0
    options: TuneOptions = field(default_factory=TuneOptions)

    def scores(self) -> np.ndarray:
        return np.array([row["score"] for row in self.table])


def tune(
    X: Any,
    Y: Any,
    *,
    estimator: JDL | None = None,
    options: TuneOptions | None = None,
    validation: tuple[Any, Any] | None = None,
    refit: bool = True,
    progress: Callable[[str], None] | None = None,
    **settings: Any,
) -> TuneResult:
    """Tune a JDL ``estimator`` on X (n, d) and Y (n, q) as ``jdl tune`` tunes on a staged store, and
    (``refit``) fit the chosen setting on all the rows as ``jdl fit --tuning`` does: the same rows and
    settings give the same model. ``options`` (a ``TuneOptions``), with ``settings`` (its fields as
    keywords: ``summaries="none"``, ``folds=1``, ...) replacing some, say how the tuning searches; each
    field's meaning is ``TUNE_PARAMETERS[name].help``. The estimator's kernel families, factorisation
    settings, constraints and scaling are kept where the options leave them (None), its lengthscales and
    reg replaced (``TuneOptions.base_estimator``); the x kernel's ``categorical`` columns hold category codes.

    X may miss values (NaN): the missing-value rule (``MissingValues``) is learned from the tuning's
    subsample, a seeded ``max_rows`` of the rows. ``summaries``: whether the x kernel reads the boosted
    summaries of x of a scalar y, beside the columns or alone, and y standardised by them
    (``jdlcore.tuning.views.choose_view``). Regs left out walk ``REG_LADDER`` per pair (``walk_ladder``);
    regs given are all scored. The default x lengthscales are scored from the longest down, the shorter
    ones left out once one scores worse (``score_grid``'s ``stop_early``). ``validation``: held-out rows
    (X_val, Y_val) to score on (one fold); without it the candidates are scored on ``folds``
    (``fold_rows``). ``search``: the grid's best is refined to one lengthscale per feature where x (or
    y) has several, on a seeded screen of ``search_rows`` training rows where the grid reaches the rank
    cap (docs/tuning.md). ``progress`` receives a line per stage."""
    options = TuneOptions.of(options, settings)
    X = as_samples(X, "X", min_rows=5, missing=True)
    Y = as_samples(Y, "Y", min_rows=5)
    check_paired(X, Y)
    held_out = None
    if validation is not None:
        X_val, Y_val = as_samples(validation[0], "X_val", missing=True), as_samples(validation[1], "Y_val")
        check_paired(X_val, Y_val, "X_val", "Y_val")
        for name, part, whole in (("X_val", X_val, X), ("Y_val", Y_val, Y)):
            if part.shape[1] != whole.shape[1]:
                raise ValueError(f"{name}: has {part.shape[1]} features, the training rows have {whole.shape[1]}")
        held_out = (X_val, Y_val)
    plan = TuningPlan.of(options, estimator, X.shape[0], Y.shape[1], held_out is not None)
    options, base, rows = plan.options, plan.base, plan.rows
    categorical = sorted(int(j) for j in (base._kernel("kernel_x").categorical or ()))
    missing = MissingValues.learn(X[rows], categorical)
    job = ViewSearch(missing.augment(X[rows]), Y[rows], rows, X.shape[0], plan.splits, base, plan.score, options,
                     [str(j) for j in range(X.shape[1])], [str(j) for j in range(Y.shape[1])], categorical,
                     held_out=held_out, progress=progress, missing=missing)
    run, gain, _ = tuned_view(job, options.summaries, lambda sample: (X[sample], Y[sample, 0]))
    best = run.best
    law = JDL(**{**base.get_params(deep=False), "reg": best["reg"],
                 "kernel_x": run.kernel_x.with_lengthscale(np.asarray(best["lengthscale_x"])),
                 "kernel_y": run.kernel_y.with_lengthscale(np.asarray(best["lengthscale_y"]))})
    view = XView(missing, run.summaries)
    started = time.perf_counter()
    model = ConditionalModel.of(fit_law(law, view, X, Y), view) if refit else law
    return TuneResult(table=run.table, best=best, model=model, search=run.searched, folds=len(run.folds), view=view,
                      summaries_gain=gain, fit_seconds=time.perf_counter() - started if refit else 0.0,
                      options=options)
