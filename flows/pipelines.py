"""The bodies of jdl's flows as plain functions: stage, tune, fit, score, train-and-score, compress and
reproduce.

Each validates its parameters first (``pipeline.settings``: one ``ValueError`` naming the parameter, the
rule and the value), then runs its stages through ``flows.stage_runner.run_stage``, passing store paths.
The Prefect flows of ``flows.jdl_flows`` call these functions, so a run in-process and a recorded
Prefect run do the same work. Parameters left out (or None) take the settings' defaults.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.cluster import shared_scheduler
from pipeline.settings import (
    CompressSettings, EvaluateSettings, FitSettings, ScoreSettings, StageSettings, TuneSettings, validated,
)
from pipeline.staging import data_fingerprint, open_staged
from pipeline.tuning import load_tuning

from .progress import report
from .stage_runner import run_stage
from .stages import StageResult

__all__ = ["stage", "tune", "fit", "score", "evaluate", "train_and_score", "compress", "reproduce", "given"]


def given(parameters: dict[str, Any]) -> dict[str, Any]:
    """The parameters that were given (None means "the default"), without a function's other locals."""
    return {k: v for k, v in parameters.items() if v is not None and not k.startswith("_")}


def stage(**parameters: Any) -> StageResult:
    """Validate the columns x and y of a source table into the staged zarr store ``out``."""
    return run_stage("stage", validated(StageSettings, "stage", **given(parameters)))


def tune(**parameters: Any) -> StageResult:
    """Score a hyperparameter grid on (a subsample of) the staged store ``data`` into a tuning store."""
    return run_stage("tune", validated(TuneSettings, "tune", **given(parameters)))


def fit(**parameters: Any) -> StageResult:
    """Fit a model on the staged store ``data`` into the model store ``out``; a ``tuning`` store that is
    missing or was made from other data is (re)computed first, on the default grid."""
    settings = validated(FitSettings, "fit", **given(parameters))
    if settings.explicit() is None and not _tuned_on(settings.tuning, settings.data):
        report(f"fit: tuning store {settings.tuning} is missing or from other data; tuning first")
        run_stage("tune", validated(TuneSettings, "tune", **given(dict(
            data=settings.data, out=settings.tuning, tol=settings.tol, seed=settings.seed,
            scaling=settings.scaling, kernel_x=settings.kernel_x, scheduler=settings.scheduler))))
    return run_stage("fit", settings)


def score(**parameters: Any) -> StageResult:
    """Score every row of the staged store ``data`` with the model store ``model`` into ``out``."""
    return run_stage("score", validated(ScoreSettings, "score", **given(parameters)))


def evaluate(**parameters: Any) -> StageResult:
    """Judge the model store ``model`` on the held-out rows of the staged store ``data`` into ``out``."""
    return run_stage("evaluate", validated(EvaluateSettings, "evaluate", **given(parameters)))


def train_and_score(
    source: str, workdir: str, x: list[str], y: list[str], categorical: list[str] | None = None,
    score_source: str | None = None,
    functions: list[str] | None = None, lengthscales_x: list[float] | None = None,
    lengthscales_y: list[float] | None = None, regs: list[float] | None = None,
    tune_rows: int = TuneSettings.model_fields["max_rows"].default, tol: float | None = None, positivity: str = "auto",
    chunk_size: int = StageSettings.model_fields["chunk_size"].default, seed: int = 0,
    scheduler: str | None = None,
) -> dict[str, StageResult]:
    """stage -> tune -> fit -> score in ``workdir`` (data.zarr, tuning.zarr, model.zarr, scores.zarr;
    with ``score_source``, that table is staged as batch.zarr and scored instead of the training data;
    ``categorical``: x columns staged as category codes, as ``stage``).
    Every stage is validated before the first runs; "local" is one embedded Dask cluster for all.

    Returns each stage's result; a re-run reuses every stage whose inputs did not change.
    """
    root = Path(workdir)
    paths = {name: str(root / f"{name}.zarr") for name in ("data", "tuning", "model", "scores", "batch")}
    stage_settings = validated(StageSettings, "stage", source=source, out=paths["data"], x=x, y=y,
                               categorical=categorical or [], chunk_size=chunk_size)
    batch_settings = None if score_source is None else validated(
        StageSettings, "stage", source=score_source, out=paths["batch"], x=x, y=y, categorical=categorical or [],
        chunk_size=chunk_size)
    tune_settings = validated(TuneSettings, "tune", **given(dict(
        data=paths["data"], out=paths["tuning"], lengthscales_x=lengthscales_x, lengthscales_y=lengthscales_y,
        regs=regs, tol=tol, max_rows=tune_rows, seed=seed, scheduler=scheduler)))
    fit_settings = validated(FitSettings, "fit", **given(dict(
        data=paths["data"], out=paths["model"], tuning=paths["tuning"], tol=tol, positivity=positivity, seed=seed,
        scheduler=scheduler)))
    score_settings = validated(ScoreSettings, "score", **given(dict(
        model=paths["model"], data=paths["batch" if score_source else "data"], out=paths["scores"],
        functions=functions, scheduler=scheduler)))
    root.mkdir(parents=True, exist_ok=True)
    results: dict[str, StageResult] = {}
    with shared_scheduler(fit_settings.scheduler) as address:
        where = {} if address == fit_settings.scheduler else {"scheduler": address}
        results["stage"] = run_stage("stage", stage_settings)
        if batch_settings is not None:
            results["stage_batch"] = run_stage("stage", batch_settings)
        results["tune"] = run_stage("tune", tune_settings.model_copy(update=where))
        results["fit"] = run_stage("fit", fit_settings.model_copy(update=where))
        results["score"] = run_stage("score", score_settings.model_copy(update=where))
    return results


def compress(**parameters: Any) -> StageResult:
    """Compress the staged store ``data`` to ``m`` points into the compressed set ``out``."""
    return run_stage("compress", validated(CompressSettings, "compress", **given(parameters)))


def reproduce(kind: str, out: str, quick: bool = False, report: str | None = None, max_n: int = 1_000_000,
              min_n: int = 0, parts: list[str] | None = None, resume: bool = False) -> dict:
    """Run the paper's experiment ``kind`` ("moments" or "classification"; ``quick``: the smoke run),
    write its result Datasets to ``out`` (zarr, dims method, n, d, replicate) and regenerate the report
    (default ``out``/results.md) from every result in ``out``. ``max_n``, ``min_n``: run only the cells
    with n in [min_n, max_n] (results already in ``out`` for other cells are kept); ``parts``: only
    these cases (moments) or event levels (classification); ``resume``: skip the cells whose results
    are already in ``out`` (each cell is saved as soon as it finishes, so a stopped run resumes)."""
    from experiments.report import write_report  # the reproduce extra: loaded when the experiments run
    from experiments.runner import load, pending, plan, save, to_datasets

    cells = plan(kind, quick, max_n, min_n, parts)
    if resume:
        cells = pending(cells, out)
    paths: set[str] = set()
    for cell in cells:  # saved cell by cell: a stopped run keeps what it finished
        result = run_stage("reproduce_cell", cell.kind, cell.part, cell.d, cell.n, cell.replicate, cell.quick)
        paths.update(str(path) for path in save(to_datasets([(cell, result)]), out))
    command = (f"jdl reproduce {kind}{' --quick' if quick else ''} --out {out}" + (f" --report {report}" if report else "")
               + (f" --max-n {max_n}" if max_n != 1_000_000 else "") + (f" --min-n {min_n}" if min_n else "")
               + "".join(f" --part {part}" for part in parts or ()) + (" --resume" if resume else ""))
    written = write_report(load(out), Path(report) if report else Path(out) / "results.md", command=command)
    return {"datasets": sorted(paths), "report": str(written), "cells": len(cells)}


def _tuned_on(tuning: str, data: str) -> bool:
    """Whether ``tuning`` is a valid tuning store made from the data now in ``data``."""
    try:
        table = load_tuning(tuning)
    except ValueError:
        return False
    return table.attrs["data_fingerprint"] == data_fingerprint(open_staged(data))
