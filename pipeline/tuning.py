"""Hyperparameter selection on a staged store: the grid fanned out over Dask, the table kept in zarr.

A seeded random subsample of at most ``max_rows`` rows is split 4:1 into training and validation
rows (the tuning of the paper's experiments) and searched by ``jdlcore.tuning.score_grid``, the grid
and its defaults being jdlcore's: in this process as one search (each side factorised once per
lengthscale), or on Dask one task per pair of lengthscales. The result is
a tuning store, an xarray Dataset following ``data_schemas.tuning``: the validation loss over the
grid (lengthscale_x, lengthscale_y, reg), the ranks per pair and the best setting. The kernels
standardise their inputs (``scaling`` "robust", the default: each feature by the median and
interquartile range of the subsample), so the grid is in standard units; the store keeps the scaling
(``x_location``, ``x_scale``, ``y_location``, ``y_scale``) and a fit from it uses the same.
"""
from __future__ import annotations

import itertools
import os
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import xarray as xr
import zarr

from data_schemas.tuning import SCHEMA_NAME, SCHEMA_VERSION, validate_tuning_dataset
from jdlcore import JDL
from jdlcore.tuning import (
    LENGTHSCALE_FACTORS, STANDARDISE_ROWS, Fold, Regs, TuneOptions, TuningPlan, as_regs, default_lengthscales,
    score_grid, subsample_rows,
)
from jdlcore.tuning.views import SearchRun, ViewSearch, tuned_view

from .atomic import atomic_store, refuse_existing
from .cluster import broadcast, dask_client, resolve_scheduler
from .staging import categorical_indices, categorical_levels, data_fingerprint, level_recoding, open_staged, read_sample, recode
from .tuning_record import (
    add_maps, grid_dataset, load_tuning, scored_candidates, search_dataset, search_record, summaries_record,
    tuned_scaling, tuned_summaries,
)
from .x_view import learn_missing, missing_attrs

__all__ = ["tune_store", "load_tuning", "scored_candidates", "tuned_scaling", "tuned_summaries", "default_lengthscales",
           "subsample_rows", "staged_estimator", "LENGTHSCALE_FACTORS", "STANDARDISE_ROWS"]


def tune_store(
    data: str | os.PathLike,
    out: str | os.PathLike,
    options: TuneOptions | None = None,
    *,
    validation: str | os.PathLike | None = None,
    scheduler: str | None = None,
    overwrite: bool = False,
    run_key: str | None = None,
    progress: Callable[[str], None] | None = None,
    **settings: Any,
) -> Path:
    """Tune jdl on the staged store ``data`` as ``jdlcore.tune`` tunes on arrays and write the tuning
    store ``out`` atomically; returns its path.

    ``options`` (a ``jdlcore.tuning.TuneOptions``), with ``settings`` (its fields as keywords) replacing
    some, say how the tuning searches (each field's meaning: ``TUNE_PARAMETERS[name].help``); the store
    records them as the tuning ran (``TuneOptions.settled``: tol, constraints, scaling and the x kernel's
    family as jdl's defaults where left out), the criterion and the folds as they resolved.
    ``validation``: a staged store of held-out rows (the same features) to score on, the candidates
    training on the subsample of ``data`` (one fold). ``scheduler`` (see ``pipeline.cluster``; "auto"
    means this process, the subsample being small) decides where the grid's pairs of lengthscales run:
    in this process the default x lengthscales are scored from the longest down and the shorter ones
    left out (NaN) once one scores worse (``score_grid``'s ``stop_early``); on Dask all at once.
    """
    target = Path(out)
    refuse_existing(target, overwrite)
    options = TuneOptions.of(options, settings)
    group = open_staged(data, needs_y="tune")
    held_out = None if validation is None else _validation_group(validation, group)
    n = int(group.attrs["n_samples"])
    plan = TuningPlan.of(options, staged_estimator(options), n, group["y"].shape[1], held_out is not None)
    options, base, rows, score, regs = plan.options, plan.base, plan.rows, plan.score, as_regs(plan.options.regs)
    missing = learn_missing(data, group, rows)
    started = time.perf_counter()
    where = resolve_scheduler(scheduler, rows.size)
    job = ViewSearch(
        missing.augment(group["x"].get_orthogonal_selection((rows, slice(None)))),
        group["y"].get_orthogonal_selection((rows, slice(None))), rows, n, plan.splits, base, score, options,
        list(group.attrs["x_features"]), list(group.attrs["y_features"]), categorical_indices(group),
        grid=None if where is None else _fan_out(where, base, regs, progress),
        held_out=None if held_out is None else _held_out_rows(group, held_out, validation, options.max_rows,
                                                              options.seed),
        progress=progress, missing=missing)
    run, gain, summaries_seconds = tuned_view(job, options.summaries, lambda sample: (
        read_sample(data, "x", sample), read_sample(data, "y", sample)[:, 0]))
    ds = _run_dataset(run, regs)
    ds.attrs.update({
        **options.record(), **missing_attrs(missing),
        "schema": SCHEMA_NAME, "schema_version": SCHEMA_VERSION, "data": str(Path(data).resolve()),
        "data_fingerprint": data_fingerprint(group), "criterion": getattr(score, "name", str(options.criterion)),
        "rows_used": int(rows.size), "n_samples": n,
        "validation": "" if held_out is None else str(Path(validation).resolve()),
        **summaries_record(run.summaries, options.summaries, summaries_seconds, gain),
        **search_record(run.folds, run.table, run.searched, run.best, run.screen),
        "seconds": time.perf_counter() - started, **({"run_key": run_key} if run_key else {}),
    })
    validate_tuning_dataset(ds, f"tuning {target}")
    with atomic_store(target, overwrite=overwrite) as staging:
        ds.to_zarr(staging, mode="w", zarr_format=3, consolidated=False)
    return target


def staged_estimator(options: TuneOptions) -> JDL:
    """The estimator a tuning of a staged store tunes: jdl at its defaults, its pivoting seeded by the
    options' seed (what ``TuneOptions.base_estimator`` then changes)."""
    return JDL(seed=options.seed)


def _run_dataset(run: SearchRun, regs: Regs) -> xr.Dataset:
    """The tuning store's variables from the ``run`` kept: the grid's table, the search's candidates and
    the maps its kernels read (``add_maps``)."""
    ds = grid_dataset(run.table, run.grid_x, run.grid_y, regs)
    if run.searched:
        X, Y = run.folds[0][:2]  # a fold's training rows: the columns the kernels read
        ds = ds.merge(search_dataset(run.searched, X.shape[1], Y.shape[1], len(X), len(run.folds)))
    add_maps(ds, run.summaries, run.kernel_x, run.kernel_y)
    return ds


def _held_out_rows(group: zarr.Group, held_out: zarr.Group, validation: Any, max_rows: int, seed: int
                   ) -> tuple[np.ndarray, np.ndarray]:
    """The raw x rows and y of a seeded subsample of at most ``max_rows`` rows of the staged store
    ``held_out``, its category codes read as the training data's (a level the training data lacks
    matches none): the rows that validate a tuning with a validation store."""
    val = subsample_rows(int(held_out.attrs["n_samples"]), max_rows, seed)
    recoding = level_recoding(categorical_levels(held_out), categorical_levels(group),
                              list(group.attrs["x_features"]), "other", f"validation {validation}")
    X_held = recode(held_out["x"].get_orthogonal_selection((val, slice(None))), recoding)
    return X_held, held_out["y"].get_orthogonal_selection((val, slice(None)))


def _fan_out(where: str, base: JDL, regs: Regs, progress: Callable[[str], None] | None) -> Callable:
    """A grid (folds, kernels_x, kernels_y, score) -> rows scored on the Dask scheduler ``where``, one task
    per pair of lengthscales (``score_grid`` on each), the folds' rows scattered once to every worker."""
    def grid(folds: list[Fold], kernels_x: list, kernels_y: list, score: Callable) -> list[dict[str, Any]]:
        from distributed import as_completed

        pairs = list(itertools.product(kernels_x, kernels_y))
        with dask_client(where) as client:
            shared = [[broadcast(client, part) for part in fold] for fold in folds]
            futures = [client.submit(score_grid, shared, base, [kx], [ky], regs, score, pure=False) for kx, ky in pairs]
            for k, _ in enumerate(as_completed(futures, loop=client.loop), 1):
                if progress is not None:
                    progress(f"tuned {k}/{len(pairs)} lengthscale pairs")
            return [row for rows_of_pair in client.gather(futures) for row in rows_of_pair]

    return grid


def _validation_group(validation: str | os.PathLike, group: zarr.Group) -> zarr.Group:
    """The staged validation store, refused unless its x and y features are the training data's."""
    held_out = open_staged(validation, needs_y="tune --validation")
    for role in ("x", "y"):
        if list(held_out.attrs[f"{role}_features"]) != list(group.attrs[f"{role}_features"]):
            raise ValueError(f"validation: its {role} features {list(held_out.attrs[f'{role}_features'])} are not "
                             f"the data's {list(group.attrs[f'{role}_features'])}")
    return held_out
