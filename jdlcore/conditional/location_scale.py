"""A conditional law of y read through a location and a scale per row: y = location + scale * r.

A model of the standardised response r = (y - location(x)) / scale(x), where location and scale are
known functions of x (for jdl in the pipeline: the boosted summaries of x), gives the law of y at x as
the push-forward of the law of r under z -> location + scale z. With scale > 0 that map is affine
and increasing, so a law on atoms z_k with weights p_k becomes the law on the atoms
location + scale z_k with the same weights: non-negative and of mass 1 wherever the law of r is.
Every answer follows from the law of r at the same x:

    E[y]     = location + scale E[r]
    E[y^2]   = location^2 + 2 location scale E[r] + scale^2 E[r^2]
    F_y(t)   = F_r((t - location) / scale)
    Q_y(a)   = location + scale Q_r(a)
    CRPS_y(y) = scale CRPS_r((y - location) / scale)        (the CRPS is homogeneous of degree 1)

The probability integral transform and the coverage of a quantile interval are the same on both scales.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["LocationScale", "cdf_per_row", "own_law_crps"]


@dataclass(frozen=True)
class LocationScale:
    """Per-row location (q,) and scale (q,) of y = location + scale * r; every scale finite and > 0."""

    location: np.ndarray
    scale: np.ndarray

    @classmethod
    def of(cls, location: Any, scale: Any, where: str = "location_scale") -> "LocationScale":
        """Validated float64 copies: equal lengths, finite locations, finite positive scales;
        ``ValueError`` naming ``where``, the rule and the first row that breaks it."""
        location = np.asarray(location, dtype=np.float64).reshape(-1)
        scale = np.asarray(scale, dtype=np.float64).reshape(-1)
        if location.shape != scale.shape:
            raise ValueError(f"{where}: {location.size} locations for {scale.size} scales")
        for name, values, bad in (("location", location, ~np.isfinite(location)),
                                  ("scale", scale, ~(np.isfinite(scale) & (scale > 0)))):
            if bad.any():
                row = int(np.flatnonzero(bad)[0])
                rule = "finite" if name == "location" else "finite and > 0"
                raise ValueError(f"{where}: every {name} must be {rule}; row {row} has {float(values[row])!r}")
        return cls(location, scale)

    def __len__(self) -> int:
        return self.location.size

    def rows(self, rows: slice) -> "LocationScale":
        """The same rows' location and scale (no copy)."""
        return LocationScale(self.location[rows], self.scale[rows])

    def standardise(self, y: Any) -> np.ndarray:
        """r = (y - location) / scale for y (q,) or (q, 1), shape (q, 1)."""
        y = np.asarray(y, dtype=np.float64).reshape(-1)
        if y.size != self.location.size:
            raise ValueError(f"y: has {y.size} rows, the location and scale {self.location.size}")
        return ((y - self.location) / self.scale)[:, None]

    def mean(self, mean_r: np.ndarray) -> np.ndarray:
        """E[y] (q,) from E[r] (q,)."""
        return self.location + self.scale * np.asarray(mean_r).reshape(-1)

    def second_moment(self, mean_r: np.ndarray, second_r: np.ndarray) -> np.ndarray:
        """E[y^2] (q,) from E[r] and E[r^2] (q,)."""
        mean_r, second_r = np.asarray(mean_r).reshape(-1), np.asarray(second_r).reshape(-1)
        return self.location**2 + 2 * self.location * self.scale * mean_r + self.scale**2 * second_r

    def quantiles(self, quantiles_r: np.ndarray) -> np.ndarray:
        """Q_y (q, L) from Q_r (q, L) (an increasing map keeps the levels' order)."""
        return self.location[:, None] + self.scale[:, None] * quantiles_r

    def thresholds(self, thresholds: np.ndarray) -> np.ndarray:
        """Thresholds t (T,) on y's scale as each row's thresholds on r's, (q, T)."""
        return (np.asarray(thresholds, dtype=np.float64)[None, :] - self.location[:, None]) / self.scale[:, None]

    def crps(self, crps_r: np.ndarray) -> np.ndarray:
        """CRPS on y's scale (q,) from the CRPS of the standardised observation (q,)."""
        return self.scale * np.asarray(crps_r).reshape(-1)


def cdf_per_row(P: np.ndarray, values: np.ndarray, order: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """sum_k P_ik 1{values_k <= thresholds_it}, shape (q, T), for laws P (q, M) on scalar atoms ``values``
    (M,) sorted by ``order``, at thresholds of their own per row (q, T): the expectation of the
    indicators, as ``conditional_cdf`` reads a law (signed weights summed as they are)."""
    ascending = values[order]
    running = np.zeros((P.shape[0], P.shape[1] + 1))
    np.cumsum(P[:, order], axis=1, out=running[:, 1:])
    below = np.searchsorted(ascending, thresholds.reshape(-1), side="right").reshape(thresholds.shape)
    return np.take_along_axis(running, below, axis=1)


def own_law_crps(y: np.ndarray) -> np.ndarray:
    """The CRPS of each of the values y (q,) under their own empirical law (each value 1 / q), (q,):
    mean_j |y_j - y_i| - mean_jk |y_j - y_k| / 2, from the sorted values' running sums in O(q log q)."""
    y = np.asarray(y, dtype=np.float64).reshape(-1)
    q = y.size
    ascending = np.sort(y)
    running = np.concatenate([[0.0], np.cumsum(ascending)])
    below = np.searchsorted(ascending, y, side="right")  # values <= y_i
    to_each = (below * y - running[below] + (running[-1] - running[below]) - (q - below) * y) / q
    spread = 2.0 * np.sum((2.0 * np.arange(1, q + 1) - q - 1) * ascending) / q**2  # mean_jk |y_j - y_k|
    return to_each - spread / 2.0
