"""Batch scoring: stream the x of a staged store through a model store, write one variable per function.

Functions (names as given on the command line):
  mean                 E[Y | x], dims (sample, y_feature)
  second_moment        E[Y Y^T | x], dims (sample, y_feature, y_feature_2)
  cdf:t1,t2,...        Q(Y <= t | x) for scalar Y, dims (sample, threshold_k)
  quantile:l1,l2,...   conditional quantiles of scalar Y, dims (sample, level_k)
mean, second_moment and cdf use registered test functions (cost independent of n per row);
quantiles need the weights on all n atoms.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import zarr

from .atomic import atomic_store, refuse_existing
from .model_store import load_model
from .staging import open_staged

__all__ = ["parse_function", "score_store"]


def parse_function(spec: str) -> tuple[str, np.ndarray | None]:
    """'mean' | 'second_moment' | 'cdf:...' | 'quantile:...' -> (kind, parameters)."""
    kind, _, rest = spec.partition(":")
    if kind in ("mean", "second_moment") and not rest:
        return kind, None
    if kind in ("cdf", "quantile") and rest:
        try:
            values = np.array([float(v) for v in rest.split(",")])
        except ValueError:
            raise ValueError(f"function {spec!r}: parameters must be comma-separated numbers") from None
        if not np.all(np.isfinite(values)):
            raise ValueError(f"function {spec!r}: parameters must be finite")
        if kind == "quantile" and (np.any(values <= 0) or np.any(values > 1)):
            raise ValueError(f"function {spec!r}: levels must lie in (0, 1]")
        return kind, values
    raise ValueError(f"function {spec!r}: unknown; use mean, second_moment, cdf:t1,t2,... or quantile:l1,l2,...")


def score_store(model_path: str | os.PathLike, data: str | os.PathLike, out: str | os.PathLike,
                functions: list[str], *, overwrite: bool = False) -> Path:
    """Score every row of the staged store ``data``; write a zarr store aligned on ``sample``."""
    if not functions:
        raise ValueError("function: give at least one --function")
    specs = {spec: parse_function(spec) for spec in functions}
    target = Path(out)
    refuse_existing(target, overwrite)  # before loading the model
    model = load_model(model_path)
    group = open_staged(data)

    trained = model.provenance_.get("x_features")
    if trained is not None and list(group.attrs["x_features"]) != list(trained):
        raise ValueError(f"data: x features {group.attrs['x_features']} differ from the model's {trained}")
    d_y = model.y_atoms_.shape[1]
    for spec, (kind, _) in specs.items():
        if kind in ("cdf", "quantile") and d_y != 1:
            raise ValueError(f"function {spec!r}: needs a scalar y, the model has {d_y} y features")
    functions_of = {spec: _test_function(kind, values) for spec, (kind, values) in specs.items() if kind != "quantile"}
    if not model.clips:
        for spec, f in functions_of.items():
            model.register(spec, f)
    x = group["x"]
    n, step = x.shape[0], x.chunks[0]
    with atomic_store(target, overwrite=overwrite) as staging:
        root = zarr.open_group(staging, mode="w", zarr_format=3)
        arrays = {}
        for spec, (kind, values) in specs.items():
            shape, dims = {
                "mean": ((n, d_y), ("sample", "y_feature")),
                "second_moment": ((n, d_y, d_y), ("sample", "y_feature", "y_feature_2")),
                "cdf": ((n, 0 if values is None else values.size), ("sample", "threshold")),
                "quantile": ((n, 0 if values is None else values.size), ("sample", "level")),
            }[kind]
            arrays[spec] = root.create_array(spec, shape=shape, chunks=(step,) + shape[1:], dtype="float64",
                                             dimension_names=dims)
            if values is not None:
                arrays[spec].attrs["parameters"] = values.tolist()
        for start in range(0, n, step):
            block = x[start:start + step]
            for spec, (kind, values) in specs.items():
                if kind == "quantile":
                    arrays[spec][start:start + block.shape[0]] = model.conditional_quantile(block, values)
                elif model.clips:
                    arrays[spec][start:start + block.shape[0]] = model.conditional_expectation(block, functions_of[spec])
                else:
                    arrays[spec][start:start + block.shape[0]] = model.expectation(spec, block)
        root.attrs.update({"schema": "jdl.scores", "schema_version": 1, "model": str(Path(model_path).resolve()),
                           "data": str(Path(data).resolve()), "n_samples": n, "functions": json.dumps(functions)})
    return target


def _test_function(kind: str, thresholds: np.ndarray | None):
    """The test function f(y) (n, d_y) -> (n, ...) behind 'mean', 'second_moment' and 'cdf:...'."""
    if kind == "mean":
        return lambda y: y
    if kind == "second_moment":
        return lambda y: y[:, :, None] * y[:, None, :]
    return lambda y: (y[:, :1] <= thresholds[None, :]).astype(np.float64)
