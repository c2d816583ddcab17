"""Contract of a tuning store (``jdl tune``): an xarray Dataset in zarr v3.

The validation loss, seconds and ranks of each candidate of the grid, the per-feature search's
candidates, the scaling, the screen and the boosted summaries the tuning kept. The whole format and
its versions: docs/stores.md.
"""
from __future__ import annotations

import json

import numpy as np

from jdlcore.scaling import SCALINGS

from .common import check_header, require_variables

SCHEMA_NAME = "jdl.tuning"
SCHEMA_VERSION = 3  # 2: the scaling; 3: the boosted summaries of x
SUMMARIES_VARIABLE = "x_summaries"  # the map's JSON bytes, in tuning and model stores alike
SUMMARIES_DIM = "summaries_byte"
SCALING_DIMS = {"x_location": ("x_feature",), "x_scale": ("x_feature",), "y_location": ("y_feature",),
                "y_scale": ("y_feature",)}
SEARCH_DIMS = {"search_lengthscale_x": ("search_candidate", "x_feature"),
               "search_lengthscale_y": ("search_candidate", "y_feature"),
               **{name: ("search_candidate",) for name in ("search_reg", "search_loss", "search_rank_x", "search_rank_y",
                                                           "search_seconds")}}

GRID = ("lengthscale_x", "lengthscale_y", "reg")
VARIABLE_DIMS = {"validation_loss": GRID, "seconds": GRID, "rank_x": GRID[:2], "rank_y": GRID[:2]}
REQUIRED_ATTRS = ("schema", "schema_version", "data", "data_fingerprint", "criterion", "tol", "constraints",
                  "rows_used", "n_samples", "validation_fraction", "seed", "best", "seconds")


def validate_grid(ds, names: tuple[str, ...], where: str) -> None:
    """Each coordinate in ``names`` exists, is finite, positive and strictly increasing."""
    for name in names:
        if name not in ds.coords:
            raise ValueError(f"{where}: coordinate {name!r} is missing")
        values = np.asarray(ds[name].values, dtype=float)
        if values.size == 0 or not np.all(np.isfinite(values)) or np.any(values <= 0) or np.any(np.diff(values) <= 0):
            raise ValueError(f"{where}: coordinate {name!r} must be positive and strictly increasing, got {values}")


def validate_summaries(ds, where: str) -> None:
    """``ValueError`` unless a store's optional ``SUMMARIES_VARIABLE`` is uint8 bytes along ``SUMMARIES_DIM``."""
    if SUMMARIES_VARIABLE in ds.variables:
        variable = ds[SUMMARIES_VARIABLE]
        if tuple(variable.dims) != (SUMMARIES_DIM,) or variable.dtype != np.uint8:
            raise ValueError(f"{where}: variable {SUMMARIES_VARIABLE!r} must be uint8 along ({SUMMARIES_DIM!r},), got "
                             f"{variable.dtype} along {tuple(variable.dims)}")


def validate_tuning_dataset(ds, where: str = "tuning") -> None:
    """Raise ``ValueError`` naming the first broken rule of the tuning contract."""
    check_header(ds.attrs, SCHEMA_NAME, SCHEMA_VERSION, REQUIRED_ATTRS, where, "tuning")
    validate_grid(ds, GRID, where)
    require_variables(ds, VARIABLE_DIMS, where)
    validate_summaries(ds, where)
    try:
        best = json.loads(ds.attrs["best"])
        ok = all(k in best for k in ("lengthscale_x", "lengthscale_y", "reg", "score"))
    except (TypeError, json.JSONDecodeError):
        ok = False
    if not ok:
        raise ValueError(f"{where}: attribute 'best' must be JSON with lengthscale_x, lengthscale_y, reg, score")
    scaling = ds.attrs.get("scaling", "none")
    if scaling not in SCALINGS:
        raise ValueError(f"{where}: attribute 'scaling' must be one of {', '.join(map(repr, SCALINGS))}, got {scaling!r}")
    if scaling == "robust":
        require_variables(ds, SCALING_DIMS, where)
        for name in SCALING_DIMS:
            values = np.asarray(ds[name].values, dtype=float)
            if not np.all(np.isfinite(values)) or (name.endswith("scale") and not np.all(values > 0)):
                raise ValueError(f"{where}: variable {name!r} must be finite"
                                 f"{' and > 0' if name.endswith('scale') else ''}")
    folds = ds.attrs.get("folds", 1)
    if isinstance(folds, bool) or not isinstance(folds, (int, np.integer)) or folds < 1:
        raise ValueError(f"{where}: attribute 'folds' must be an integer >= 1, got {folds!r}")
    if "search_loss" in ds.data_vars:
        require_variables(ds, SEARCH_DIMS, where)
    if not np.any(np.isfinite(ds["validation_loss"].values)):
        raise ValueError(f"{where}: no candidate has a finite validation loss")
