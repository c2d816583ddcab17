"""The Prefect flows of jdl: stage, tune, fit, score, train-and-score chaining them, compress and
reproduce.

Each flow is the function of the same name in ``flows.pipelines`` run as a recorded Prefect flow
run, its stages as Prefect tasks (retried on transient failures). Flows validate their parameters
first (``pipeline.settings``: one ``ValueError`` naming the parameter, the rule and the value). Each
stage reuses its output when that store already holds the result of the same data and parameters
(``flows.resume``), so a re-run after a crash resumes where the crashed run stopped.
``scheduler`` (or ``JDL_SCHEDULER``) sends the Dask work to ``auto`` | ``memory`` | ``local`` |
``tcp://HOST:PORT``; within ``train_and_score_flow`` "local" is one embedded cluster shared by all
stages.

Each flow's parameters, their defaults and its deployment schema are its settings' fields
(``pipeline.settings``, ``flows.signatures``).

This module is the deployments' entrypoint (deploy/prefect.yaml): ``flows/jdl_flows.py:fit_flow``.
"""
from __future__ import annotations

from typing import Any

from prefect import flow

from jdlcore.models.registry import FIT_OPTIONS
from pipeline.settings import (
    CompressSettings, EvaluateSettings, FitSettings, ScoreSettings, StageSettings, TuneSettings,
)

from . import pipelines
from .pipelines import given
from .signatures import settings_signature
from .stages import StageResult

__all__ = ["stage_flow", "tune_flow", "fit_flow", "score_flow", "evaluate_flow", "train_and_score_flow",
           "reproduce_flow", "compress_flow"]


@flow(name="jdl-stage", validate_parameters=False)
@settings_signature(StageSettings)
def stage_flow(**parameters: Any) -> StageResult:
    """Validate the columns ``x`` and ``y`` of a source table into the staged zarr store ``out``;
    ``categorical``: x columns to store as category codes (text columns are detected)."""
    return pipelines.stage(**given(parameters))


@flow(name="jdl-tune", validate_parameters=False)
@settings_signature(TuneSettings)
def tune_flow(**parameters: Any) -> StageResult:
    """Score a hyperparameter grid on (a subsample of) the staged store ``data`` into a tuning store."""
    return pipelines.tune(**given(parameters))


@flow(name="jdl-fit", validate_parameters=False)
@settings_signature(FitSettings, keyword_only=tuple(FIT_OPTIONS))
def fit_flow(**parameters: Any) -> StageResult:
    """Fit a model (``method``, a name of ``jdlcore.METHODS``) on the staged store ``data`` and write
    the model store ``out``.

    Hyperparameters: all of lengthscale_x, lengthscale_y and reg, or a ``tuning`` store. A tuning
    store that is missing or was made from other data is (re)computed first, on the default grid.
    ``scaling``: "robust" or "none" (``jdlcore.scaling``); default the tuning store's, else "robust".
    The method's fit options are keyword parameters of this flow
    (``jdlcore.models.registry.FIT_OPTIONS``: tol, max_rank, pivoting, seed, constraints, positivity,
    support_size, degree, threshold); None is the method's default. The model is published as a new
    version of ``out``; ``keep_versions`` (default 3) are kept (``pipeline.versions``).
    """
    return pipelines.fit(**given(parameters))


@flow(name="jdl-score", validate_parameters=False)
@settings_signature(ScoreSettings)
def score_flow(**parameters: Any) -> StageResult:
    """Score every row of the staged store ``data`` with the model store ``model`` into ``out``;
    ``unseen``: "refuse" (default) or "other", for a categorical level the model was not fitted on."""
    return pipelines.score(**given(parameters))


@flow(name="jdl-evaluate", validate_parameters=False)
@settings_signature(EvaluateSettings)
def evaluate_flow(**parameters: Any) -> StageResult:
    """Judge the model store ``model`` on the held-out rows of the staged store ``data`` (a scalar y): the
    exact CRPS, pinball loss at ``levels``, coverage of central intervals at ``coverage``, RMSE of the
    mean and the PIT, into the evaluation store ``out`` and its calibration figure beside it."""
    return pipelines.evaluate(**given(parameters))


# stage -> tune -> fit -> score in one work directory (its docstring: ``flows.pipelines.train_and_score``)
train_and_score_flow = flow(name="jdl-train-and-score", validate_parameters=False)(pipelines.train_and_score)


@flow(name="jdl-compress", validate_parameters=False)
@settings_signature(CompressSettings)
def compress_flow(**parameters: Any) -> StageResult:
    """Compress the staged store ``data`` to ``m`` points (``method``: ackip, ackh, jkip, jkh or random)
    into the compressed set ``out``, a staged store that ``fit_flow`` takes as its data."""
    return pipelines.compress(**given(parameters))


# the paper's experiments (its docstring: ``flows.pipelines.reproduce``)
reproduce_flow = flow(name="jdl-reproduce", validate_parameters=False)(pipelines.reproduce)
