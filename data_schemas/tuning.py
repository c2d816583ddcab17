"""Contract of a tuning store (``jdl tune``): an xarray Dataset in zarr v3.

| variable | dims | meaning |
|---|---|---|
| validation_loss | (lengthscale_x, lengthscale_y, reg) | the criterion on the validation rows (NaN: failed, or not scored) |
| seconds | (lengthscale_x, lengthscale_y, reg) | wall time per candidate (factorisations shared out) |
| rank_x, rank_y | (lengthscale_x, lengthscale_y) | pivoted-Cholesky ranks on the training rows (NaN: not scored) |

Coordinates lengthscale_x, lengthscale_y, reg: strictly increasing, positive. Attributes: ``schema`` =
"jdl.tuning", ``schema_version``, ``data``, ``data_fingerprint``, ``criterion``, ``tol``,
``constraints``, ``rows_used``, ``n_samples``, ``validation_fraction``, ``seed``, ``best`` (JSON:
lengthscale_x, lengthscale_y, reg, score, rank_x, rank_y), ``seconds``; optional ``failures`` (JSON: the
candidates that raised, with lengthscale_x, lengthscale_y, reg and the error's message), ``folds`` (the
train/validation splits each candidate was scored on, its loss their mean over every validated row:
``jdlcore.tuning.fold_rows``; absent: 1) and ``validation_rows`` (the validated rows, over all folds).

Scaling (version 2): attribute ``scaling`` ("robust" or "none"; absent: "none"). With "robust" the
lengthscales are in standard units and the store holds the scaling: ``x_location``, ``x_scale``
(x_feature) and ``y_location``, ``y_scale`` (y_feature), finite, scales > 0.

Per-feature search (version 2, optional): the candidates of ``jdlcore.tuning.search_lengthscales`` in
order along ``search_candidate``: ``search_lengthscale_x`` (search_candidate, x_feature),
``search_lengthscale_y`` (search_candidate, y_feature), ``search_reg``, ``search_loss``,
``search_rank_x``, ``search_rank_y``, ``search_seconds`` (what the candidate cost: the factorisations
it made, not those it shared with an earlier one, its problems, solves and scores) and (optional)
``search_rows`` (the training
rows each candidate was fitted on: the search moves on a subsample of large tuning sets) and
``search_folds`` (the folds each candidate was scored on, its loss their mean: fewer than ``folds``
where it fell behind the best on the first ``jdlcore.tuning.RACE_FOLDS``; absent: every fold); attribute
``search_steps`` (JSON: the feature each candidate moved, "x:k" or "y:k"; "x:k:shear" or "y:k:shear"
where feature k moved shorter and the side's other features in longer; "start"; "reg"). ``best`` is
then the search's best among the candidates fitted on all the training rows, with a list of
lengthscales.

Screen (optional attribute ``grid_rows``): the training rows the grid was fitted on. Fewer than the
training rows where the grid's longest x lengthscale reached the rank cap on that many of them
(``jdlcore.tuning.screen_rows``); the search then moved on the same rows, and ``best`` is the best reg at
its lengthscales fitted on all the training rows. Optional attribute ``search_rows``: the most training
rows the screen and the search were judged on (``jdl tune --search-rows``; absent: 4,000).

Boosted summaries (version 3, optional): ``x_summaries`` (summaries_byte), uint8, the JSON record of
``pipeline.summaries.BoostedSummaries`` (LightGBM text models), and attribute ``x_summaries`` (JSON: the
summaries' names, appended to the x features in this order: the lengthscales, the scaling and the
search's x_feature have that many more entries than the data's x features); attribute ``summaries``:
the rule asked for ("auto", "boosted" or "none"). Optional attribute ``summaries_alone`` (bool, absent:
false): the x kernel reads the summaries alone, without the data's x columns (the lengthscales, the
scaling and x_feature then have one entry per summary); ``summaries_standardise_y`` (bool, absent: false):
the model's y is read standardised by the summaries, (y - predicted median) / predicted spread (the
record's ``standardises``; the y lengthscales and scaling are in those units). A store of version 2 has none.
A model fitted from a tuning store carries the table as ``tuning_validation_loss``, ``tuning_rank_x``
and ``tuning_rank_y`` over the dims ``tuning_lengthscale_x``, ``tuning_lengthscale_y``, ``tuning_reg``
(see ``data_schemas.model.TUNING_DIMS``).
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
