"""Batch scoring: stream the x of a staged store through a model store, write one variable per function.

Functions (names as given on the command line):
  mean                 E[Y | x], dims (sample, y_feature)
  second_moment        E[Y Y^T | x], dims (sample, y_feature, y_feature_2)
  cdf:t1,t2,...        Q(Y <= t | x) for scalar Y, dims (sample, threshold_k)
  quantile:l1,l2,...   conditional quantiles of scalar Y, dims (sample, level_k)
  proba                Q(Y = c | x) for each class c of a discrete scalar Y, dims (sample, class)
Models of the JDL family answer every function from their conditional law on the M support atoms
(projected, clipped or signed, as fitted): mean and second_moment come registered from the fit, cdf
and proba are registered once (their values at the support atoms), and each chunk of rows costs one
law per row and one product per function, O(M m_Y) per row whatever n is; all quantile levels are read
from the same law, in one pass over the sorted atoms. A KLR model answers ``proba`` and, when fitted
for the event Y <= q, ``cdf:q``; a CME model answers every function with its signed, unnormalized
weights on the Y pivots, as they are.
"""
from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import numpy as np
import zarr

from data_schemas.scores import SCHEMA_NAME, SCHEMA_VERSION, array_name, scores_dims, validate_scores_group
from jdlcore.conditional.queries import check_levels
from jdlcore.models.estimator import PARAMETRISED_KINDS, REQUEST_KINDS

from .atomic import atomic_store, refuse_existing
from .cluster import broadcast, dask_client, resolve_scheduler
from .damage import settle_reads
from .model_store import load_model
from .staging import open_staged, recode
from .x_view import model_recoding

__all__ = ["parse_function", "score_store", "open_scores"]


def parse_function(spec: str) -> tuple[str, np.ndarray | None]:
    """'mean' | 'second_moment' | 'cdf:...' | 'quantile:...' | 'proba' -> (kind, parameters): the
    requests of ``jdlcore.models.estimator.REQUEST_KINDS``, those of ``PARAMETRISED_KINDS`` with
    their comma-separated numbers."""
    kind, _, rest = spec.partition(":")
    if kind in REQUEST_KINDS and kind not in PARAMETRISED_KINDS and not rest:
        return kind, None
    if kind in PARAMETRISED_KINDS and rest:
        try:
            values = np.array([float(v) for v in rest.split(",")])
        except ValueError:
            raise ValueError(f"function {spec!r}: parameters must be comma-separated numbers") from None
        if not np.all(np.isfinite(values)):
            raise ValueError(f"function {spec!r}: parameters must be finite")
        if kind == "quantile":
            try:
                check_levels(values)
            except ValueError as error:
                raise ValueError(f"function {spec!r}: {error}") from None
        return kind, values
    raise ValueError(f"function {spec!r}: unknown; use mean, second_moment, cdf:t1,t2,..., quantile:l1,l2,... or proba")


def score_store(model_path: str | os.PathLike, data: str | os.PathLike, out: str | os.PathLike,
                functions: list[str], *, unseen: str = "refuse", overwrite: bool = False, scheduler: str | None = None,
                run_key: str | None = None, progress: Callable[[str], None] | None = None) -> Path:
    """Score every row of the staged store ``data`` with the model store ``model_path``; write a zarr
    store aligned on ``sample``. The store records
    the model version it scored (attributes ``model`` and ``model_version``): a versioned model store's
    pointer is resolved once, and that version is read to the end whatever a fit publishes meanwhile.

    Categorical x columns are read by level name (the batch's codes mapped to the model's); a level
    the model was not fitted on is refused before anything is written (``unseen`` "refuse", the
    default, naming the column and the level) or matches no level (``unseen`` "other": along that
    column the row is equally far from every training row).

    Chunks of x are scored in this process or as Dask tasks (``scheduler``, see ``pipeline.cluster``),
    each writing its own chunk-aligned region of the output (so the workers must see ``out``'s
    directory). The output appears atomically when every chunk is written. For a model whose laws are
    projected, the attribute ``projection_levels`` counts the rows at each projection level, and
    ``projection_full_level`` is the level at which every moment the rule keeps was kept (2 for a
    scalar y, 1 for a vector y).
    """
    if not functions:
        raise ValueError("function: give at least one --function")
    specs = {spec: parse_function(spec) for spec in functions}
    target = Path(out)
    refuse_existing(target, overwrite)  # before loading the model
    model = load_model(model_path)
    group = open_staged(data)

    tables = model_recoding(model, group, data, unseen)
    specs = model.prepare_requests(specs)  # checked against what the model answers; functions registered once
    d_y = model.y_width_
    x = group["x"]
    n, step = x.shape[0], x.chunks[0]
    bounds = [(start, min(start + step, n)) for start in range(0, n, step)]
    where = resolve_scheduler(scheduler, n)
    data_path = str(Path(data).resolve())
    with atomic_store(target, overwrite=overwrite) as staging:
        root = zarr.open_group(staging, mode="w", zarr_format=3)
        all_dims = scores_dims(list(specs))
        for spec, (kind, values) in specs.items():
            width = 0 if values is None else values.size
            shape = {"mean": (n, d_y), "second_moment": (n, d_y, d_y)}.get(kind, (n, width))
            dims = all_dims[spec]
            array = root.create_array(array_name(spec), shape=shape, chunks=(step,) + shape[1:], dtype="float64",
                                      dimension_names=dims)
            if values is not None:
                array.attrs["parameters"] = values.tolist()
                _coordinate(root, dims[1], values)
            elif kind in ("mean", "second_moment"):
                for dim in dims[1:]:
                    _coordinate(root, dim, _y_names(model, group, d_y))
        root.attrs.update({"schema": SCHEMA_NAME, "schema_version": SCHEMA_VERSION,
                           "model": str(Path(model.store_path_).resolve()), "model_version": model.store_version_ or "",
                           "data": data_path, "n_samples": n, "functions": json.dumps(functions),
                           "arrays": json.dumps({spec: array_name(spec) for spec in functions}),
                           **({"run_key": run_key} if run_key else {})})
        job = (data_path, str(staging), specs, tables)
        if where is None:
            counts = []
            for done, (a, b) in enumerate(bounds, 1):
                counts.append(score_chunk(model, *job, a, b))
                _report(progress, done, len(bounds))
        else:
            from distributed import as_completed

            with dask_client(where) as client:
                shared = broadcast(client, model)
                futures = [client.submit(score_chunk, shared, *job, a, b, pure=False) for a, b in bounds]
                for done, _ in enumerate(as_completed(futures, loop=client.loop), 1):
                    _report(progress, done, len(bounds))
                counts = client.gather(futures)  # raises the first failure, if any
        if model.law_rule == "project":
            levels = sum((Counter(chunk) for chunk in counts), Counter())
            ordered = dict(sorted(levels.items(), key=lambda kv: -int(kv[0])))
            root.attrs.update({"projection_levels": json.dumps(ordered), "projection_full_level": 2 if d_y == 1 else 1})
        validate_scores_group(zarr.open_group(staging, mode="r", zarr_format=3), f"scores {target}")
    return target


def _coordinate(root: zarr.Group, dim: str, values: np.ndarray) -> None:
    """The coordinate array ``dim`` (1-D, dims (dim,)) of a scores store, written once."""
    if dim not in root:
        values = np.asarray(values)
        root.create_array(dim, shape=values.shape, dtype=str if values.dtype.kind in "US" else "float64",
                          dimension_names=(dim,))[:] = values


def _y_names(model: Any, group: zarr.Group, d_y: int) -> np.ndarray:
    """The y feature names of a model (its provenance), else the scored data's, else y0, y1, ..."""
    names = (getattr(model, "provenance_", None) or {}).get("y_features") or group.attrs.get("y_features")
    names = list(names) if names and len(names) == d_y else [f"y{k}" for k in range(d_y)]
    return np.asarray(list(map(str, names)), dtype=str)


def _report(progress: Callable[[str], None] | None, done: int, total: int) -> None:
    if progress is not None and (done == total or done % max(1, total // 10) == 0):
        progress(f"scored {done}/{total} chunks")


def score_chunk(model: Any, data: str, out: str, specs: dict, tables: dict[int, np.ndarray], start: int,
                stop: int) -> dict[str, int]:
    """Score rows [start, stop) of the staged store ``data`` into the arrays of the store ``out``.

    ``model``: a ``jdlcore.ConditionalModel``; ``tables``: the recoding of its category codes to the
    model's (``level_recoding``). Every request is read from one law per row, by the model's own
    queries. Returns, for a model whose laws are projected, the number of rows at each projection level
    (level as a string -> count), else {}.
    """
    block = recode(zarr.open_group(data, mode="r", zarr_format=3)["x"][start:stop], tables)
    root = zarr.open_group(out, mode="r+", zarr_format=3)
    if model.law_rule == "project":
        kept = np.empty(stop - start, dtype=np.int8)
        results = model.answer_requests(specs, block, kept=kept)
        values, counts = np.unique(kept, return_counts=True)
        record = {str(int(v)): int(c) for v, c in zip(values, counts)}
    else:
        results, record = model.answer_requests(specs, block), {}
    for spec in specs:
        root[array_name(spec)][start:stop] = results[spec]
    return record


def open_scores(path: str | os.PathLike) -> zarr.Group:
    """Open a scores store after checking its contract; raises ``ValueError`` naming the broken rule."""
    source = Path(path)
    try:
        group = zarr.open_group(source, mode="r", zarr_format=3, use_consolidated=False)
    except Exception as error:  # zarr raises many types for foreign or damaged directories
        settle_reads()  # the members read beside the one that failed
        raise ValueError(f"scores {source}: not a readable zarr v3 store ({type(error).__name__})") from None
    validate_scores_group(group, f"scores {source}")
    return group
