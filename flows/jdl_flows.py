"""The Prefect flows of jdl: stage, tune, fit, score, train-and-score chaining them, compress and
reproduce.

Each flow is the function of the same name in ``flows.pipelines`` run as a recorded Prefect flow
run, its stages as Prefect tasks (retried on transient failures). Flows validate their parameters
first (``flows.settings``: one ``ValueError`` naming the parameter, the rule and the value). Each
stage reuses its output when that store already holds the result of the same data and parameters
(``flows.resume``), so a re-run after a crash resumes where the crashed run stopped.
``scheduler`` (or ``JDL_SCHEDULER``) sends the Dask work to ``auto`` | ``memory`` | ``local`` |
``tcp://HOST:PORT``; within ``train_and_score_flow`` "local" is one embedded cluster shared by all
stages.

This module is the deployments' entrypoint (deploy/prefect.yaml): ``flows/jdl_flows.py:fit_flow``.
"""
from __future__ import annotations

from typing import Any

from prefect import flow

from . import pipelines
from .pipelines import given
from .settings import with_fit_options
from .stages import StageResult

__all__ = ["stage_flow", "tune_flow", "fit_flow", "score_flow", "train_and_score_flow", "reproduce_flow", "compress_flow"]


@flow(name="jdl-stage", validate_parameters=False)
def stage_flow(source: str, out: str, x: list[str], y: list[str], categorical: list[str] | None = None,
               chunk_size: int = 65_536) -> StageResult:
    """Validate the columns ``x`` and ``y`` of a source table into the staged zarr store ``out``;
    ``categorical``: x columns to store as category codes (text columns are detected)."""
    return pipelines.stage(**given(locals()))


@flow(name="jdl-tune", validate_parameters=False)
def tune_flow(
    data: str, out: str, lengthscales_x: list[float] | None = None, lengthscales_y: list[float] | None = None,
    regs: list[float] | None = None, tol: float | None = None, constraints: str | None = None,
    criterion: str | None = None, validation: str | None = None, max_rows: int = 20_000,
    validation_fraction: float = 0.2, folds: int | str | None = None, seed: int = 0, scaling: str | None = None,
    search: bool | None = None, scheduler: str | None = None,
) -> StageResult:
    """Score a hyperparameter grid on (a subsample of) the staged store ``data`` into a tuning store."""
    return pipelines.tune(**given(locals()))


@flow(name="jdl-fit", validate_parameters=False)
@with_fit_options
def fit_flow(
    data: str, out: str, tuning: str | None = None, lengthscale_x: float | list[float] | None = None,
    lengthscale_y: float | list[float] | None = None, reg: float | None = None, method: str = "jdl",
    scaling: str | None = None, keep_versions: int | None = None, scheduler: str | None = None, **options: Any,
) -> StageResult:
    """Fit a model (``method``, a name of ``jdlcore.METHODS``) on the staged store ``data`` and write
    the model store ``out``.

    Hyperparameters: all of lengthscale_x, lengthscale_y and reg, or a ``tuning`` store. A tuning
    store that is missing or was made from other data is (re)computed first, on the default grid.
    ``scaling``: "robust" or "none" (``jdlcore.scaling``); default the tuning store's, else "robust".
    ``options``: the method's fit options, each a keyword parameter of this flow
    (``jdlcore.models.registry.FIT_OPTIONS``: tol, max_rank, pivoting, seed, constraints, positivity,
    support_size, degree, threshold); None is the method's default. The model is published as a new
    version of ``out``; ``keep_versions`` (default 3) are kept (``pipeline.versions``).
    """
    return pipelines.fit(**given(dict(data=data, out=out, tuning=tuning, lengthscale_x=lengthscale_x,
                                      lengthscale_y=lengthscale_y, reg=reg, method=method, scaling=scaling,
                                      keep_versions=keep_versions, scheduler=scheduler)),
                         **given(options))


@flow(name="jdl-score", validate_parameters=False)
def score_flow(model: str, data: str, out: str, functions: list[str] | None = None, unseen: str | None = None,
               scheduler: str | None = None) -> StageResult:
    """Score every row of the staged store ``data`` with the model store ``model`` into ``out``;
    ``unseen``: "refuse" (default) or "other", for a categorical level the model was not fitted on."""
    return pipelines.score(**given(locals()))


# stage -> tune -> fit -> score in one work directory (its docstring: ``flows.pipelines.train_and_score``)
train_and_score_flow = flow(name="jdl-train-and-score", validate_parameters=False)(pipelines.train_and_score)


@flow(name="jdl-compress", validate_parameters=False)
def compress_flow(
    data: str, out: str, m: int = 100, method: str = "ackip", lengthscale_x: float | None = None,
    lengthscale_y: float | None = None, kernel_y: str = "gaussian", reg: float | None = None, seed: int = 0,
    steps: int | None = None, optimizer: str = "adam", learning_rate: float = 0.01, n_init: int = 10,
    amcmd_tol: float = 1e-3, scheduler: str | None = None,
) -> StageResult:
    """Compress the staged store ``data`` to ``m`` points (``method``: ackip, ackh, jkip, jkh or random)
    into the compressed set ``out``, a staged store that ``fit_flow`` takes as its data."""
    return pipelines.compress(**given(locals()))


# the paper's experiments (its docstring: ``flows.pipelines.reproduce``)
reproduce_flow = flow(name="jdl-reproduce", validate_parameters=False)(pipelines.reproduce)
