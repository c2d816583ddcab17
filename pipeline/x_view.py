"""The view of x (``jdlcore.features.view.XView``) as staged stores hold it: the missing-value rule
learned from a staged sample (``learn_missing``) and kept as a store attribute (``missing_attrs``,
``read_missing``), and a batch's category codes read as a model's (``model_recoding``).
"""
from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
import zarr

from jdlcore.features.missing import MissingValues

from .staging import categorical_indices, categorical_levels, level_recoding, read_sample

__all__ = ["model_recoding", "learn_missing", "missing_attrs", "read_missing", "MISSING_ATTR"]

MISSING_ATTR = "x_missing"  # the attribute of a tuning or model store that holds the rule (JSON)


def model_recoding(model: Any, group: zarr.Group, data: str | os.PathLike, unseen: str) -> dict[int, np.ndarray]:
    """How a staged batch's x is read by a fitted model: ``ValueError`` unless its x features are the
    model's, then the recoding of its category codes to the model's levels (``level_recoding``, with the
    ``unseen`` rule)."""
    trained = model.provenance_.get("x_features")
    if trained is not None and list(group.attrs["x_features"]) != list(trained):
        raise ValueError(f"data: x features {group.attrs['x_features']} differ from the model's {trained}")
    return level_recoding(categorical_levels(group), model.provenance_.get("x_levels") or {},
                          list(group.attrs["x_features"]), unseen, f"data {data}")


def learn_missing(data: str | os.PathLike, group: zarr.Group, rows: np.ndarray) -> MissingValues:
    """The missing-value rule of a staged store, learned from its rows ``rows`` (a seeded sample,
    ascending, that the tuning or the fit also reads): fill values, and an indicator for each continuous
    column that misses values there (where a column misses so few that the sample holds none, an
    indicator could not be learned; those values are read at the median)."""
    return MissingValues.learn(read_sample(data, "x", rows), categorical_indices(group))


def missing_attrs(missing: MissingValues | None) -> dict[str, str]:
    """The store attributes that record ``missing`` (none for None)."""
    return {} if missing is None else {MISSING_ATTR: json.dumps(missing.to_dict())}


def read_missing(attrs: dict[str, Any], where: str) -> MissingValues | None:
    """The rule a tuning or model store records (None for a store written before it), ``ValueError``
    naming ``where`` for a damaged record."""
    if MISSING_ATTR not in attrs:
        return None
    try:
        spec = json.loads(attrs[MISSING_ATTR])
    except (TypeError, ValueError):
        raise ValueError(f"{where}: attribute {MISSING_ATTR!r} is not JSON") from None
    return MissingValues.from_dict(spec, f"{where}: {MISSING_ATTR}")
