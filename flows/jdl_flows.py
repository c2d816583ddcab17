"""The Prefect flows of jdl: stage, tune, fit, score, train-and-score chaining them, and compress.

Flows validate their parameters first (``flows.settings``: one ``ValueError`` naming the parameter,
the rule and the value), then run tasks that pass store paths. Each task reuses its output when
that store already holds the result of the same data and parameters (``flows.resume``), so a
re-run after a crash resumes where the crashed run stopped. ``scheduler`` (or ``JDL_SCHEDULER``)
sends the Dask work to ``auto`` | ``memory`` | ``local`` | ``tcp://HOST:PORT``; within
``train_and_score_flow`` "local" is one embedded cluster shared by all stages.

This module is the deployments' entrypoint (deploy/prefect.yaml): ``flows/jdl_flows.py:fit_flow``.
"""
from __future__ import annotations

from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from pipeline.cluster import shared_scheduler

from .settings import CompressSettings, FitSettings, ScoreSettings, StageSettings, TuneSettings, validated
from .tasks import StageResult, compress_task, fit_task, score_task, stage_task, tune_task

__all__ = ["stage_flow", "tune_flow", "fit_flow", "score_flow", "train_and_score_flow", "reproduce_flow", "compress_flow"]


@flow(name="jdl-stage", validate_parameters=False)
def stage_flow(source: str, out: str, x: list[str], y: list[str], chunk_size: int = 65_536) -> StageResult:
    """Validate the columns ``x`` and ``y`` of a source table into the staged zarr store ``out``."""
    settings = validated(StageSettings, "stage", source=source, out=out, x=x, y=y, chunk_size=chunk_size)
    return stage_task(settings.model_dump())


@flow(name="jdl-tune", validate_parameters=False)
def tune_flow(
    data: str, out: str, lengthscales_x: list[float] | None = None, lengthscales_y: list[float] | None = None,
    regs: list[float] | None = None, tol: float = 1e-3, constraints: str = "normalization", max_rows: int = 20_000,
    validation_fraction: float = 0.2, seed: int = 0, scheduler: str | None = None,
) -> StageResult:
    """Score a hyperparameter grid on (a subsample of) the staged store ``data`` into a tuning store."""
    settings = validated(TuneSettings, "tune", **_given(locals()))
    return tune_task(settings.model_dump())


@flow(name="jdl-fit", validate_parameters=False)
def fit_flow(
    data: str, out: str, tuning: str | None = None, lengthscale_x: float | None = None,
    lengthscale_y: float | None = None, reg: float | None = None, tol: float = 1e-3,
    constraints: str = "positivity", positivity: str = "auto", pivoting: str = "random", seed: int = 0,
    method: str = "jdl", degree: int = 4, threshold: float | None = None, support_size: int | None = None,
    scheduler: str | None = None,
) -> StageResult:
    """Fit a model (``method``: jdl, jpdl, cme, klr or greedy) on the staged store ``data`` and write
    the model store ``out``.

    Hyperparameters: all of lengthscale_x, lengthscale_y and reg, or a ``tuning`` store. A tuning
    store that is missing or was made from other data is (re)computed first, on the default grid.
    """
    settings = validated(FitSettings, "fit", **_given(locals()))
    if settings.explicit() is None and not _tuned_on(settings.tuning, settings.data):
        get_run_logger().info(f"fit: tuning store {settings.tuning} is missing or from other data; tuning first")
        tune_task(validated(TuneSettings, "tune", data=settings.data, out=settings.tuning, tol=settings.tol,
                            seed=settings.seed, scheduler=settings.scheduler).model_dump())
    return fit_task(settings.model_dump())


@flow(name="jdl-score", validate_parameters=False)
def score_flow(model: str, data: str, out: str, functions: list[str] | None = None,
               scheduler: str | None = None) -> StageResult:
    """Score every row of the staged store ``data`` with the model store ``model`` into ``out``."""
    settings = validated(ScoreSettings, "score", **_given(locals()))
    return score_task(settings.model_dump())


@flow(name="jdl-train-and-score", validate_parameters=False)
def train_and_score_flow(
    source: str, workdir: str, x: list[str], y: list[str], score_source: str | None = None,
    functions: list[str] | None = None, lengthscales_x: list[float] | None = None,
    lengthscales_y: list[float] | None = None, regs: list[float] | None = None, tune_rows: int = 20_000,
    tol: float = 1e-3, positivity: str = "auto", chunk_size: int = 65_536, seed: int = 0,
    scheduler: str | None = None,
) -> dict[str, StageResult]:
    """stage -> tune -> fit -> score in ``workdir`` (data.zarr, tuning.zarr, model.zarr, scores.zarr;
    with ``score_source``, that table is staged as batch.zarr and scored instead of the training data).

    Returns each stage's result; a re-run reuses every stage whose inputs did not change.
    """
    root = Path(workdir)
    paths = {name: str(root / f"{name}.zarr") for name in ("data", "tuning", "model", "scores", "batch")}
    stage_settings = validated(StageSettings, "stage", source=source, out=paths["data"], x=x, y=y,
                               chunk_size=chunk_size)
    batch_settings = None if score_source is None else validated(
        StageSettings, "stage", source=score_source, out=paths["batch"], x=x, y=y, chunk_size=chunk_size)
    tune_settings = validated(TuneSettings, "tune", **_given(dict(
        data=paths["data"], out=paths["tuning"], lengthscales_x=lengthscales_x, lengthscales_y=lengthscales_y,
        regs=regs, tol=tol, max_rows=tune_rows, seed=seed, scheduler=scheduler)))
    fit_settings = validated(FitSettings, "fit", data=paths["data"], out=paths["model"], tuning=paths["tuning"],
                             tol=tol, positivity=positivity, seed=seed, scheduler=scheduler)
    score_settings = validated(ScoreSettings, "score", **_given(dict(
        model=paths["model"], data=paths["batch" if score_source else "data"], out=paths["scores"],
        functions=functions, scheduler=scheduler)))
    root.mkdir(parents=True, exist_ok=True)
    results: dict[str, StageResult] = {}
    with shared_scheduler(fit_settings.scheduler) as address:
        where = {} if address == fit_settings.scheduler else {"scheduler": address}
        results["stage"] = stage_task(stage_settings.model_dump())
        if batch_settings is not None:
            results["stage_batch"] = stage_task(batch_settings.model_dump())
        results["tune"] = tune_task({**tune_settings.model_dump(), **where})
        results["fit"] = fit_task({**fit_settings.model_dump(), **where})
        results["score"] = score_task({**score_settings.model_dump(), **where})
    return results


@flow(name="jdl-compress", validate_parameters=False)
def compress_flow(
    data: str, out: str, m: int = 100, method: str = "ackip", lengthscale_x: float | None = None,
    lengthscale_y: float | None = None, kernel_y: str = "gaussian", reg: float | None = None, seed: int = 0,
    steps: int | None = None, optimizer: str = "adam", learning_rate: float = 0.01, n_init: int = 10,
    amcmd_tol: float = 1e-3, scheduler: str | None = None,
) -> StageResult:
    """Compress the staged store ``data`` to ``m`` points (``method``: ackip, ackh, jkip, jkh or random)
    into the compressed set ``out``, a staged store that ``fit_flow`` takes as its data."""
    settings = validated(CompressSettings, "compress", **_given(locals()))
    return compress_task(settings.model_dump())


@task(name="reproduce-cell", cache_policy=NO_CACHE)
def reproduce_cell_task(kind: str, part: str, d: int, n: int, replicate: int, quick: bool) -> dict:
    """One cell of the paper's experiments (``pipeline.reproduce``): its metrics per method."""
    from pipeline.reproduce.runner import Cell, run_cell

    from .progress import report

    result = run_cell(Cell(kind, part, d, n, replicate, quick))
    report(f"{kind} {part} d={d} n={n} replicate {replicate}: {result['_meta']['cell_seconds']:.1f} s")
    return result


@flow(name="jdl-reproduce", validate_parameters=False)
def reproduce_flow(kind: str, out: str, quick: bool = False, report: str | None = None,
                   max_n: int = 1_000_000, min_n: int = 0, parts: list[str] | None = None,
                   resume: bool = False) -> dict:
    """Run the paper's experiment ``kind`` ("moments" or "classification"; ``quick``: the smoke run),
    write its result Datasets to ``out`` (zarr, dims method, n, d, replicate) and regenerate the report
    (default ``out``/results.md) from every result in ``out``. ``max_n``, ``min_n``: run only the cells
    with n in [min_n, max_n] (results already in ``out`` for other cells are kept); ``parts``: only
    these cases (moments) or event levels (classification); ``resume``: skip the cells whose results
    are already in ``out`` (each cell is saved as soon as it finishes, so a stopped run resumes)."""
    from pipeline.reproduce.report import write_report
    from pipeline.reproduce.runner import load, pending, plan, save, to_datasets

    cells = plan(kind, quick, max_n, min_n, parts)
    if resume:
        cells = pending(cells, out)
    paths: set[str] = set()
    for cell in cells:  # saved cell by cell: a stopped run keeps what it finished
        result = reproduce_cell_task(cell.kind, cell.part, cell.d, cell.n, cell.replicate, cell.quick)
        paths.update(str(path) for path in save(to_datasets([(cell, result)]), out))
    command = (f"jdl reproduce {kind}{' --quick' if quick else ''} --out {out}" + (f" --report {report}" if report else "")
               + (f" --max-n {max_n}" if max_n != 1_000_000 else "") + (f" --min-n {min_n}" if min_n else "")
               + "".join(f" --part {part}" for part in parts or ()) + (" --resume" if resume else ""))
    written = write_report(load(out), Path(report) if report else Path(out) / "results.md", command=command)
    return {"datasets": sorted(paths), "report": str(written), "cells": len(cells)}


def _tuned_on(tuning: str, data: str) -> bool:
    """Whether ``tuning`` is a valid tuning store made from the data now in ``data``."""
    from pipeline.staging import data_fingerprint, open_staged
    from pipeline.tuning import load_tuning

    try:
        table = load_tuning(tuning)
    except ValueError:
        return False
    return table.attrs["data_fingerprint"] == data_fingerprint(open_staged(data))


def _given(parameters: dict) -> dict:
    """The parameters that were given (None means "the default"), without the flow's locals."""
    return {k: v for k, v in parameters.items() if v is not None and not k.startswith("_")}
