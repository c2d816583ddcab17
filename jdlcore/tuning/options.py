"""``TuneOptions``: how a tuning searches, declared once. Each field has its default, its rule and its
meaning here; ``jdlcore.tune``, ``TunedModel``, ``pipeline.tuning.tune_store``, the tune settings and
flow, the ``jdl tune`` flags and their help, and the tuning store's record all read them from this
declaration. The knobs that are not options are ``jdlcore.tuning.constants``.

A value that breaks its rule raises one ``ParameterError`` ("NAME: RULE, got VALUE") when the options
are made; a rule across fields (a criterion's threshold) is checked there as well.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ..features.summaries import DEFAULT_SUMMARIES, SUMMARY_RULES
from ..kernels import LENGTHSCALE_KERNELS, kernel_family
from ..models.jdl import JDL
from ..params import AutoOr, Choice, Flag, Integer, Number, Numbers, Param, Rule
from ..scaling import DEFAULT_SCALING, SCALINGS
from .constants import (
    CLEAR_GAIN, LENGTHSCALE_FACTORS, MIN_SEARCH_ROWS, MIN_VALIDATED_ROWS, REG_LADDER, REG_START, SEARCH_ROWS,
    SEARCH_TOLERANCE,
    STANDARDISE_ROWS, TUNING_ROWS, VALIDATION_FRACTION,
)
from .criteria import resolve_criterion

__all__ = ["TuneOptions", "TUNE_PARAMETERS", "CriterionName"]


@dataclass(frozen=True)
class CriterionName(Rule):
    """A criterion's name as ``resolve_criterion`` reads it (its levels too; y's width is checked when a
    tuning starts), or in Python a criterion itself: a callable (model, X_val, Y_val) -> float."""

    kind = str

    @property
    def text(self) -> str:
        return "must be auto, crps, pinball:LEVELS, log, logistic or second_moment"

    def _meets(self, value: Any) -> bool:
        return callable(value) or isinstance(value, str) and self._error(value) is None

    def clause(self, value: Any) -> str:
        return (self._error(value) if isinstance(value, str) else None) or self.text

    @staticmethod
    def _error(value: str) -> str | None:
        try:
            resolve_criterion(value, threshold=0.0, y_width=1)
        except ValueError as error:
            return str(error).removeprefix("criterion: ")
        return None


def _option(default: Any, rule: Rule, help: str) -> Any:
    return field(default=default, metadata={"param": Param(rule, help)})


_POSITIVE = Number(low=0, low_open=True)


def _percent(share: float) -> str:
    """A relative tolerance as the help states it (0.002: "0.2%")."""
    return f"{100 * share:.2g}%"


@dataclass(frozen=True)
class TuneOptions:
    """The settings of a tuning (each field's meaning: ``TUNE_PARAMETERS[name].help``). Sequences are
    kept as tuples of floats; None in tol, constraints, scaling or kernel_x leaves it to the estimator
    tuned (``base_estimator``); ``replace`` gives the options with some fields changed, checked again."""

    lengthscales_x: tuple[float, ...] | None = _option(
        None, Numbers(_POSITIVE, optional=True),
        "the grid's x lengthscales, in the scaling's units (default: "
        f"{', '.join(f'{f:g}' for f in LENGTHSCALE_FACTORS)} times the median pairwise distance)")
    lengthscales_y: tuple[float, ...] | None = _option(
        None, Numbers(_POSITIVE, optional=True), "the grid's y lengthscales (default as for x)")
    regs: tuple[float, ...] | None = _option(
        None, Numbers(_POSITIVE, optional=True),
        f"regs, all scored (default: the decades {REG_LADDER[0]:g} to {REG_LADDER[-1]:g}, walked from "
        f"{REG_START:g} toward the lower validation loss)")
    kernel_x: str | None = _option(
        None, Choice(LENGTHSCALE_KERNELS, optional=True),
        f"the x kernel's family, one of {', '.join(LENGTHSCALE_KERNELS)} (default: the estimator's; jdl's is "
        "gaussian); the y kernel is the estimator's")
    tol: float | None = _option(None, Number(low=0, high=1, high_open=True, optional=True),
                                "relative pivoted-Cholesky tolerance of the factorisations (default: the estimator's; "
                                f"jdl's is {JDL.defaults()['tol']:g})")
    constraints: str | None = _option(
        None, Choice(JDL.parameters["constraints"].rule.choices, optional=True),
        f"{JDL.parameters['constraints'].help} (default: the estimator's; jdl's is {JDL.defaults()['constraints']})")
    criterion: str | Callable = _option(
        "auto", CriterionName(),
        "the validation score: auto (crps for a scalar y, else second_moment) | crps (the exact CRPS of the laws; "
        "scalar y) | pinball:L1,L2,... (the mean pinball loss at those levels; scalar y) | log (the negative log "
        "density of the laws smoothed by the y kernel) | logistic (the clipped logistic loss of y <= threshold) | "
        "second_moment (the paper's loss (40))")
    threshold: float | None = _option(None, Number(optional=True), "the event y <= threshold of logistic")
    max_rows: int = _option(TUNING_ROWS, Integer(low=10), "rows of the seeded subsample the candidates are scored on")
    validation_fraction: float = _option(
        VALIDATION_FRACTION, Number(low=0, high=1, low_open=True, high_open=True),
        "the share of the subsample in each fold's validation block")
    folds: int | str = _option(
        "auto", AutoOr(Integer(low=1)),
        "how many disjoint validation blocks of the subsample to score on, each candidate fitted on the other rows "
        "of each (at most 1 / validation_fraction); auto: one where it validates "
        f"{MIN_VALIDATED_ROWS:,} rows, else all of them (cross-validation)")
    seed: int | None = _option(
        0, Integer(low=0, optional=True),
        "seed of the subsample, the folds and the boosters (on a staged store, of jdl's pivoting too)")
    scaling: str | None = _option(
        None, Choice(SCALINGS, optional=True),
        "robust: standardise each feature by its median and interquartile range, so lengthscales are in standard "
        f"units; none: the raw columns (default: the estimator's; jdl's is {DEFAULT_SCALING})")
    search: bool = _option(
        True, Flag(), "refine the grid's best to one lengthscale per feature where x (or y) has several; features "
                      "that do not help end up long")
    search_rows: int = _option(
        SEARCH_ROWS, Integer(low=MIN_SEARCH_ROWS),
        "where the grid's factorisations reach their rank cap, the grid and the search are judged on this many of "
        "the subsample's training rows; more keeps effects too weak to show on fewer, at the cost of "
        "factorisations at the cap on more rows")
    summaries: str = _option(
        DEFAULT_SUMMARIES, Choice(SUMMARY_RULES),
        "boosted summaries of x for the x kernel (a scalar y): cross-fitted quantile boosters' median and log "
        "spread, beside the columns or alone (boosted); auto keeps them where they score "
        f"{_percent(SEARCH_TOLERANCE)} better, and from {STANDARDISE_ROWS:,} rows learns y as (y - median) / spread "
        f"where that scores {_percent(CLEAR_GAIN)} better; standardised: that on any table; none: the columns alone")

    def __post_init__(self) -> None:
        for name, param in TUNE_PARAMETERS.items():
            value = getattr(self, name)
            if isinstance(param.rule, Numbers) and value is not None and param.rule.violation(value) is None:
                value = tuple(float(v) for v in value)
                object.__setattr__(self, name, value)
            param.check(name, value)
        if isinstance(self.criterion, str) and self.criterion == "logistic" and self.threshold is None:
            raise ValueError("threshold: the criterion logistic scores the event y <= threshold; give threshold")

    def replace(self, **changes: Any) -> "TuneOptions":
        """These options with ``changes`` (fields of ``TuneOptions``); ``TypeError`` naming an unknown one."""
        unknown = sorted(set(changes) - set(TUNE_PARAMETERS))
        if unknown:
            raise TypeError(f"unknown tune option {unknown[0]!r}; the options are {', '.join(TUNE_PARAMETERS)}")
        return dataclasses.replace(self, **changes)

    @classmethod
    def of(cls, options: "TuneOptions | None", changes: Mapping[str, Any]) -> "TuneOptions":
        """``options`` (default ``TuneOptions()``) with ``changes``: how a function taking both reads them."""
        return (options or cls()).replace(**changes)

    def base_estimator(self, estimator: JDL | None = None) -> JDL:
        """The estimator whose kernel families, factorisation settings and constraints every candidate keeps:
        ``estimator`` (default ``JDL()``) with the options' tol, constraints, scaling and x kernel family
        where they are given (None keeps the estimator's), checked."""
        base = estimator if estimator is not None else JDL()
        given = {name: getattr(self, name) for name in ("tol", "constraints", "scaling")
                 if getattr(self, name) is not None}
        if self.kernel_x is not None:
            family = base._kernel("kernel_x")
            given["kernel_x"] = kernel_family(self.kernel_x)(family.lengthscale, location=family.location,
                                                             scale=family.scale, categorical=family.categorical)
        base = base.with_params(**given)
        base.check_params()
        return base

    def settled(self, base: JDL) -> "TuneOptions":
        """These options with the fields left to the estimator (None) read from ``base`` (``base_estimator``'s):
        what a tuning ran with, as its store records it."""
        return self.replace(tol=float(base.tol), constraints=base.constraints, scaling=base.scaling,
                            kernel_x=base._kernel("kernel_x").name)

    def record(self) -> dict[str, Any]:
        """Every field by name, sequences as lists: JSON values, as a store's attributes keep them."""
        return {name: list(value) if isinstance(value, tuple) else value for name, value in self.items()}

    def items(self) -> list[tuple[str, Any]]:
        """(name, value) of every field, in the declaration's order."""
        return [(name, getattr(self, name)) for name in TUNE_PARAMETERS]


TUNE_PARAMETERS: dict[str, Param] = {f.name: f.metadata["param"] for f in dataclasses.fields(TuneOptions)}
