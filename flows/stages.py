"""The stages of a jdl run as plain functions: stage, tune, fit, score, compress (and one cell of
the paper's experiments). Each takes its validated settings whole (``pipeline.settings``) and writes
one store, passing its path on (never arrays).

Every stage computes its run key and reuses, writes or replaces its output store (``flows.resume``).
Transient failures (lost connections, timeouts, a killed Dask worker) are worth a retry, bad input
is not (``is_transient``, ``RETRY_DELAYS``): ``flows.tasks`` wraps the stages as Prefect tasks with
that rule, and ``flows.runner`` applies it in-process. Nothing here imports Prefect. A stage
returns a ``StageResult``: the store's path, whether it was reused, and its run key.
"""
from __future__ import annotations

import json
import os
from typing import Any, TypedDict

import zarr
from pydantic import BaseModel

from data_schemas.data import SCHEMA_NAME as DATA_SCHEMA
from data_schemas.evaluation import SCHEMA_NAME as EVALUATION_SCHEMA
from data_schemas.model import SCHEMA_NAME as MODEL_SCHEMA
from data_schemas.scores import SCHEMA_NAME as SCORES_SCHEMA
from data_schemas.tuning import SCHEMA_NAME as TUNING_SCHEMA
from jdlcore.tuning import SEARCH_ROWS
from pipeline.compression import compress_store, open_compressed
from pipeline.damage import naming_damage
from pipeline.evaluation import evaluate_store, open_evaluation
from pipeline.fitting import fit_store, run_parameters
from pipeline.locks import LockTimeout, store_lock
from pipeline.model_store import lease_model, load_model
from pipeline.scoring import open_scores, score_store
from pipeline.settings import (
    CompressSettings, EvaluateSettings, FitSettings, ScoreSettings, StageSettings, TuneSettings,
)
from pipeline.staging import data_fingerprint, open_staged, stage as stage_table
from pipeline.tuning import load_tuning, staged_estimator, tune_store

from .artifacts import publish_fit
from .progress import report
from .resume import Decision, decide, run_key, source_fingerprint

__all__ = ["StageResult", "STAGES", "RETRY_DELAYS", "stage", "tune", "fit", "score", "compress", "reproduce_cell",
           "is_transient", "fit_hyperparameters"]

RETRY_DELAYS = (2.0, 10.0)  # seconds before the first and the second retry of a transient failure

_NOT_TRANSIENT = (FileNotFoundError, FileExistsError, PermissionError, IsADirectoryError, NotADirectoryError,
                  LockTimeout)  # a lock timeout has waited its whole time already


class StageResult(TypedDict):
    path: str
    reused: bool
    key: str


def is_transient(error: BaseException | None) -> bool:
    """Worth a retry: connection and timeout errors, a Dask worker lost mid-task; not bad input."""
    if error is None or isinstance(error, (ValueError, TypeError, KeyError) + _NOT_TRANSIENT):
        return False
    if isinstance(error, (OSError, TimeoutError, ConnectionError)):
        return True
    return type(error).__name__ in ("KilledWorker", "CommClosedError", "FutureCancelledError")


def _run(stage_name: str, out: str, schema: str, key: str, validate, write,
         reads: dict[str, Any] | None = None) -> StageResult:
    """Under the lock of ``out`` (``pipeline.locks``: runs writing one store take turns), reuse it if
    it holds this key's result, else ``write(overwrite)`` it; log which. A run that waited for another
    finds that run's store, and reuses it when its inputs were the same. ``reads``: the stores the write
    reads ({kind: path}), named with the array and chunk where one cannot be read (``naming_damage``)."""
    with store_lock(out, progress=lambda line: report(f"{stage_name}: {line}")):
        action = decide(out, schema, key, validate)
        if action == Decision.REUSE:
            report(f"{stage_name}: {out} is up to date (run key {key[:12]}), reused")
        else:
            report(f"{stage_name}: {'replacing' if action == Decision.REPLACE else 'writing'} {out} "
                   f"(run key {key[:12]})")
            with naming_damage({kind: path for kind, path in (reads or {}).items() if path is not None}):
                write(action == Decision.REPLACE)
    return StageResult(path=str(out), reused=action == Decision.REUSE, key=key)


def stage(s: StageSettings) -> StageResult:
    """Validate a source table into a staged zarr store."""
    key = run_key("stage", source=source_fingerprint(s.source), x=s.x, y=s.y, chunk_size=s.chunk_size,
                  **({"categorical": s.categorical} if s.categorical else {}), **_unless_default(s, "drop_missing_y"))
    return _run("stage", s.out, DATA_SCHEMA, key, open_staged, lambda overwrite: stage_table(
        s.source, s.out, s.x, s.y, categorical=s.categorical, chunk_size=s.chunk_size,
        drop_missing_y=s.drop_missing_y, overwrite=overwrite, run_key=key))


# tune options added after runs were keyed, and the value those runs had: keyed only where it differs
LATER_TUNE_OPTIONS = {"search_rows": SEARCH_ROWS, "kernel_x": "gaussian", "threshold": None}


def _unless_default(s: BaseModel, *names: str) -> dict[str, Any]:
    """The fields ``names`` of the settings ``s`` whose values differ from their declared defaults. A field
    added after runs were keyed is keyed only where it is given otherwise, so the keys of those runs hold."""
    return {name: getattr(s, name) for name in names if getattr(s, name) != type(s).model_fields[name].default}


def tune_key(s: TuneSettings, fingerprint: str) -> str:
    """The tuning's run key: the data, the held-out rows and the options as the tuning will run them
    (``TuneOptions.settled``), so an option given at its default is the same run. The options added after
    runs were keyed (``LATER_TUNE_OPTIONS``) are keyed only where they differ from what those runs used."""
    options = s.options()
    settled = options.settled(options.base_estimator(staged_estimator(options))).record()
    held_out = {} if s.validation is None else {"validation": data_fingerprint(open_staged(s.validation))}
    keyed = {name: value for name, value in settled.items()
             if name not in LATER_TUNE_OPTIONS or value != LATER_TUNE_OPTIONS[name]}
    return run_key("tune", data=fingerprint, **keyed, **{"validation": s.validation, **held_out})


def tune(s: TuneSettings) -> StageResult:
    """Score the hyperparameter grid (pairs of lengthscales fanned out on Dask) into a tuning store."""
    key = tune_key(s, data_fingerprint(open_staged(s.data)))
    return _run("tune", s.out, TUNING_SCHEMA, key, load_tuning, lambda overwrite: tune_store(
        s.data, s.out, s.options(), validation=s.validation, scheduler=s.scheduler, overwrite=overwrite, run_key=key,
        progress=report), reads={"data": s.data, "validation": s.validation})


def fit_hyperparameters(s: FitSettings) -> tuple[dict[str, Any], str | None]:
    """(lengthscale_x, lengthscale_y, reg) and the tuning store's run key (None if given directly); a
    lengthscale is a float, or a list of one per feature."""
    explicit = s.explicit()
    if explicit is not None:
        return explicit, None
    table = load_tuning(s.tuning)
    best = json.loads(table.attrs["best"])
    return ({k: [float(v) for v in best[k]] if isinstance(best[k], list) else float(best[k])
             for k in ("lengthscale_x", "lengthscale_y", "reg")}, table.attrs.get("run_key"))


def fit(s: FitSettings) -> StageResult:
    """Fit a model on a staged store (hyperparameters given or from a tuning store); publish
    a summary table and a diagnostics PNG as Prefect artifacts."""
    hyper, tuning_key = fit_hyperparameters(s)
    fingerprint = data_fingerprint(open_staged(s.data))
    options = s.fit_options()
    # keyed by every parameter the estimator will have, so a default given explicitly is the same run
    params = run_parameters(s.method, hyper["reg"], options)
    key = run_key("fit", data=fingerprint, tuning=tuning_key, method=s.method, scaling=s.scaling, **hyper,
                  **{name: value for name, value in params.items() if name not in hyper},
                  **_unless_default(s, "kernel_x"))

    def write(overwrite: bool) -> None:
        path, model = fit_store(s.data, s.out, **hyper, method=s.method, scaling=s.scaling, kernel_x=s.kernel_x,
                                **options, scheduler=s.scheduler, keep_versions=s.keep_versions,
                                overwrite=overwrite,
                                tuning=s.tuning if tuning_key is not None else None, run_key=key,
                                progress=report)
        publish_fit(path, model)

    return _run("fit", s.out, MODEL_SCHEMA, key, load_model, write, reads={"data": s.data})


def score(s: ScoreSettings) -> StageResult:
    """Score a staged store with a model store into a scores store. A versioned model store's pointer
    is resolved once: that version keys the run and is read to the end (``pipeline.versions``)."""
    lease = lease_model(s.model)
    try:
        key = run_key("score", model=_model_identity(lease.path), data=data_fingerprint(open_staged(s.data)),
                      functions=s.functions, **_unless_default(s, "unseen"))
        return _run("score", s.out, SCORES_SCHEMA, key, open_scores, lambda overwrite: score_store(
            lease.path, s.data, s.out, s.functions, unseen=s.unseen, overwrite=overwrite, scheduler=s.scheduler,
            run_key=key, progress=report), reads={"data": s.data, "model": lease.path})
    finally:
        lease.release()


def evaluate(s: EvaluateSettings) -> StageResult:
    """Judge a model store's laws on the held-out rows of a staged store (a scalar y) into an evaluation
    store and its calibration figure; the model version is resolved and leased as for ``score``."""
    lease = lease_model(s.model)
    try:
        key = run_key("evaluate", model=_model_identity(lease.path), data=data_fingerprint(open_staged(s.data)),
                      levels=s.levels, coverage=s.coverage, **_unless_default(s, "unseen"))
        return _run("evaluate", s.out, EVALUATION_SCHEMA, key, open_evaluation, lambda overwrite: evaluate_store(
            lease.path, s.data, s.out, levels=s.levels, coverage=s.coverage, unseen=s.unseen, scheduler=s.scheduler,
            overwrite=overwrite, run_key=key, progress=report), reads={"data": s.data, "model": lease.path})
    finally:
        lease.release()


def _model_identity(path: str | os.PathLike) -> str:
    """The model store's recorded checksums (every variable, atoms included): its content identity."""
    try:
        return str(zarr.open_group(path, mode="r", zarr_format=3).attrs["checksums"])
    except Exception:  # absent, foreign or damaged: let the loader name the reason
        load_model(path)
        raise ValueError(f"model {path}: attribute 'checksums' is missing") from None


def compress(s: CompressSettings) -> StageResult:
    """Compress a staged store to m points (ACKIP and friends) into a compressed set, itself a staged store."""
    key = run_key("compress", data=data_fingerprint(open_staged(s.data)),
                  **s.model_dump(exclude={"data", "out", "scheduler"}))
    _refuse_plain_data(s.out)
    options = s.model_dump(exclude={"data", "out"})
    return _run("compress", s.out, DATA_SCHEMA, key, open_compressed, lambda overwrite: compress_store(
        s.data, s.out, **options, overwrite=overwrite, run_key=key, progress=report), reads={"data": s.data})


def _refuse_plain_data(path: str) -> None:
    """A staged data store that is not a compressed set (the data itself, say) is never replaced."""
    try:
        attrs = dict(zarr.open_group(path, mode="r", zarr_format=3).attrs)
    except Exception:  # absent or not zarr: ``decide`` handles it
        return
    if attrs.get("schema") == DATA_SCHEMA and "compression" not in attrs:
        raise ValueError(f"out: {path} is a staged data store, not a compressed set; refusing to replace it")


def reproduce_cell(kind: str, part: str, d: int, n: int, replicate: int, quick: bool) -> dict:
    """One cell of the paper's experiments (``experiments``): its metrics per method."""
    from experiments.runner import Cell, run_cell  # the reproduce extra: loaded when the experiments run

    result = run_cell(Cell(kind, part, d, n, replicate, quick))
    report(f"{kind} {part} d={d} n={n} replicate {replicate}: {result['_meta']['cell_seconds']:.1f} s")
    return result


STAGES = {"stage": stage, "tune": tune, "fit": fit, "score": score, "evaluate": evaluate, "compress": compress,
          "reproduce_cell": reproduce_cell}
