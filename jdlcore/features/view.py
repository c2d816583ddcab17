"""How a model reads x rows: the missing-value rule, then the boosted summaries, and the map of y.

A row of x as the user has it (category codes, NaN for a missing value) is read through two maps,
both fitted with the model and applied again at every query:

1. ``MissingValues`` (``jdlcore.features.missing``): each missing value replaced by its column's
   training median, and an indicator column appended for each column that missed values in the
   training rows;
2. the boosted summaries of those columns (``jdlcore.features.summaries``), beside them or alone;
   where the map standardises y, the law is of (y - predicted median) / predicted spread, read back
   on y's scale (``XView.location_scale``, ``jdlcore.conditional.location_scale``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..conditional.location_scale import LocationScale
from .missing import MissingValues
from .summaries import BoostedSummaries, kernel_categorical, kernel_features, with_summaries

__all__ = ["XView"]


@dataclass(frozen=True)
class XView:
    """How a model reads staged x rows: ``missing`` (None: a model from before the rule, which reads rows
    without missing values only), then ``summaries`` (None: none)."""

    missing: MissingValues | None = None
    summaries: BoostedSummaries | None = None

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
