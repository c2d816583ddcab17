"""The x columns a model reads from a staged store.

A staged x row may miss values (NaN in a continuous column, ``data_schemas.data``). A model reads it
through two maps, both stored with the tuning and the model and applied again at scoring:

1. ``jdlcore.missing.MissingValues``: each missing value replaced by its column's training median, and an
   indicator column appended for each column that missed values in the training rows (a categorical
   column the x kernel compares like any other, at a lengthscale the tuning chooses);
2. the boosted summaries of those columns (``pipeline.summaries``), beside them or alone; where the map
   standardises y, the model's y is read as (y - predicted median) / predicted spread, and its answers
   are read back on y's scale (``XView.location_scale``, ``jdlcore.conditional.location_scale``).

``XView`` is the pair; ``learn_missing`` learns the first from a staged store.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import zarr

from jdlcore.conditional.location_scale import LocationScale
from jdlcore.missing import MissingValues

from .staging import categorical_indices, categorical_levels, level_recoding, read_sample
from .summaries import BoostedSummaries, kernel_categorical, kernel_features, with_summaries

__all__ = ["XView", "model_recoding", "learn_missing", "missing_attrs", "read_missing", "MISSING_ATTR"]

MISSING_ATTR = "x_missing"  # the attribute of a tuning or model store that holds the rule (JSON)


@dataclass(frozen=True)
class XView:
    """How a model reads staged x rows: ``missing`` (None: a model from before the rule, which reads rows
    without missing values only), then ``summaries`` (None: none)."""

    missing: MissingValues | None = None
    summaries: BoostedSummaries | None = None

    @classmethod
    def of(cls, model: Any) -> "XView":
        """The view a fitted or loaded model reads x through (``x_missing_``, ``x_summaries_``)."""
        return cls(getattr(model, "x_missing_", None), getattr(model, "x_summaries_", None))

    def rows(self, X: Any) -> np.ndarray:
        """Staged x rows (n, d) as the model's x kernel reads them, float64 (n, d'): see the module.
        A missing value for a model without the rule is a ``ValueError`` naming its column."""
        X = np.asarray(X, dtype=np.float64)
        if self.missing is not None:
            X = self.missing.augment(X)
        elif X.size and np.isnan(X).any():
            column = int(np.argwhere(np.isnan(X))[0][1])
            raise ValueError(f"x: column {column} (from 0) has missing values, and the model reads none (it was "
                             "fitted by a jdl without missing-value support); refit it")
        return with_summaries(self.summaries, X)

    @property
    def standardises(self) -> bool:
        """Whether the model's y is read standardised by the summaries."""
        return self.summaries is not None and self.summaries.standardises

    def location_scale(self, Z: np.ndarray) -> LocationScale | None:
        """For a model whose y is read standardised by the summaries, each row's location and scale from
        rows Z as ``rows`` returns them (``BoostedSummaries.location_scale``); None for a model of y itself."""
        return self.summaries.location_scale(Z) if self.standardises else None

    def y(self, Z: np.ndarray, Y: Any) -> np.ndarray:
        """Staged y rows (n, 1) as the model reads them, for x rows Z as ``rows`` returns them: y itself,
        or standardised, (y - location) / scale (``location_scale``)."""
        on = self.location_scale(Z)
        return np.asarray(Y, dtype=np.float64) if on is None else on.standardise(Y)

    def pair(self, X: Any, Y: Any) -> tuple[np.ndarray, np.ndarray]:
        """Staged x and y rows as the model reads them: (``rows(X)``, ``y`` of those rows and Y)."""
        Z = self.rows(X)
        return Z, self.y(Z, Y)

    def columns(self, names: Sequence[str]) -> list[str]:
        """The names of the columns ``rows`` returns, from the staged x columns' ``names``."""
        names = list(names) if self.missing is None else self.missing.features(names)
        return kernel_features(names, self.summaries)

    def categorical(self, categorical: Sequence[int]) -> list[int]:
        """The categorical columns among those ``rows`` returns, from the staged ones."""
        codes = list(categorical) if self.missing is None else self.missing.categorical(categorical)
        return kernel_categorical(codes, self.summaries)


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
