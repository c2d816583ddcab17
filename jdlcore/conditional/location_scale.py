"""A conditional law of y read through a location and a scale per row: y = location + scale * r,
clipped to y's range [low, high].

A model of the standardised response r = (y - location(x)) / scale(x), where location and scale are
known functions of x (for jdl in the pipeline: the boosted summaries of x), gives the law of y at x as
the push-forward of the law of r under z -> clip(location + scale z, low, high). With scale > 0 that map
is non-decreasing, so a law on atoms z_k with weights p_k becomes the law on the atoms
clip(location + scale z_k, low, high) with the same weights: non-negative and of mass 1 wherever the
law of r is. [low, high] is the range of y on the training rows (unbounded by default): a row whose
scale is large would otherwise put its outer atoms where y never was (a price below 0). The plain law
keeps its atoms inside that range by construction (``jdlcore.conditional.support``); this keeps the
standardised one there too. On r's scale each row's atoms are clipped to its own bounds
a = (low - location) / scale, b = (high - location) / scale, and every answer is read from that law:

    E[y]     = location + scale E[c(r)]                  c(z) = clip(z, a, b), per row
    E[y^2]   = location^2 + 2 location scale E[c(r)] + scale^2 E[c(r)^2]
    F_y(t)   = 0 (t < low), F_r((t - location) / scale) (low <= t < high), 1 (t >= high)
    Q_y(a)   = clip(location + scale Q_r(a), low, high)  (a non-decreasing map keeps the quantiles)
    CRPS_y(y) = scale CRPS_{c(r)}((y - location) / scale) (the CRPS is homogeneous of degree 1)

Without bounds c is the identity and these are the affine formulas. The probability integral transform
and the coverage of a quantile interval are the same on both scales.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .laws import crps as law_crps, randomised_pit

__all__ = ["LocationScale", "cdf_per_row", "crps_per_row", "own_law_crps"]


@dataclass(frozen=True)
class LocationScale:
    """Per-row location (q,) and scale (q,) of y = clip(location + scale * r, low, high); every scale finite
    and > 0; low < high, either infinite."""

    location: np.ndarray
    scale: np.ndarray
    low: float = -np.inf
    high: float = np.inf

    @classmethod
    def of(cls, location: Any, scale: Any, where: str = "location_scale", low: float = -np.inf,
           high: float = np.inf) -> "LocationScale":
        """Validated float64 copies: equal lengths, finite locations, finite positive scales, low < high
        (not NaN); ``ValueError`` naming ``where``, the rule and the first row that breaks it."""
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
        low, high = float(low), float(high)
        if not low < high:
            raise ValueError(f"{where}: y's range must have low < high, got [{low!r}, {high!r}]")
        return cls(location, scale, low, high)

    def __len__(self) -> int:
        return self.location.size

    def rows(self, rows: slice | np.ndarray) -> "LocationScale":
        """The rows ``rows`` (a slice: no copy; or a mask or indices) with the same range."""
        return LocationScale(self.location[rows], self.scale[rows], self.low, self.high)

    def standardise(self, y: Any) -> np.ndarray:
        """r = (y - location) / scale for y (q,) or (q, 1), shape (q, 1)."""
        y = np.asarray(y, dtype=np.float64).reshape(-1)
        if y.size != self.location.size:
            raise ValueError(f"y: has {y.size} rows, the location and scale {self.location.size}")
        return ((y - self.location) / self.scale)[:, None]

    def atoms(self, values: np.ndarray) -> np.ndarray:
        """The atoms ``values`` (M,) of the law of r as each row's law of y has them on r's scale, clipped
        to its bounds (low - location) / scale and (high - location) / scale: shape (q, M)."""
        low, high = self._bounds()
        return np.clip(np.asarray(values, dtype=np.float64)[None, :], low[:, None], high[:, None])

    def cut(self, values: np.ndarray) -> np.ndarray:
        """The rows (q,) bool whose range cuts the atoms ``values`` (M,): some atom lies outside its bounds
        on r's scale. At the other rows the clip leaves every atom as it is."""
        low, high = self._bounds()
        return (low > values.min()) | (high < values.max())

    def moments(self, P: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(E[y], E[y^2]), each (q,), of the laws P (q, M) of r on the atoms ``values`` (M,): from E[r] and
        E[r^2] where the range cuts no atom, else from the row's atoms of y (a law held at 0 has second
        moment 0, not a rounding residue of the affine form)."""
        mean_r, second_r = P @ values, P @ (values * values)
        mean = self.location + self.scale * mean_r
        second = self.location**2 + 2 * self.location * self.scale * mean_r + self.scale**2 * second_r
        cut = self.cut(values)
        if cut.any():
            on_y = np.clip(self.location[cut, None] + self.scale[cut, None] * values[None, :], self.low, self.high)
            mean[cut] = np.einsum("ij,ij->i", P[cut], on_y)
            second[cut] = np.einsum("ij,ij->i", P[cut], on_y * on_y)
        return mean, second

    def quantiles(self, quantiles_r: np.ndarray) -> np.ndarray:
        """Q_y (q, L) from Q_r (q, L) (a non-decreasing map keeps the levels' order and the quantiles)."""
        return np.clip(self.location[:, None] + self.scale[:, None] * quantiles_r, self.low, self.high)

    def cdf(self, P: np.ndarray, values: np.ndarray, order: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
        """F_y at the thresholds (T,) on y's scale, (q, T), of the laws P (q, M) of r on the atoms ``values``
        (M,) sorted by ``order``: 0 below low, 1 from high on, else F_r at each row's threshold on r's scale."""
        thresholds = np.asarray(thresholds, dtype=np.float64)
        on_r = (thresholds[None, :] - self.location[:, None]) / self.scale[:, None]
        inside = cdf_per_row(P, values, order, on_r)
        return np.where(thresholds < self.low, 0.0, np.where(thresholds >= self.high, 1.0, inside))

    def crps(self, P: np.ndarray, values: np.ndarray, order: np.ndarray, observed: np.ndarray) -> np.ndarray:
        """The CRPS (q,) on y's scale of the laws P (q, M) of r on the atoms ``values`` (M,) sorted by
        ``order``, at the observations y (q,): the scale times the CRPS of each row's clipped law of r at
        its standardised observation (``crps_per_row`` at a row the range cuts: a clip keeps the atoms'
        order; ``laws.crps`` elsewhere)."""
        r = self.standardise(observed)[:, 0]
        out = law_crps(P, values, r)
        cut = self.cut(values)
        if cut.any():
            clipped = self.rows(cut).atoms(np.asarray(values, dtype=np.float64)[order])
            out[cut] = crps_per_row(P[cut][:, order], clipped, r[cut])
        return self.scale * out

    def pit(self, P: np.ndarray, values: np.ndarray, observed: np.ndarray, uniform: np.ndarray) -> np.ndarray:
        """The randomised probability integral transform (q,) of the laws P (q, M) of r on the atoms
        ``values`` (M,) at the observations y (q,): F(y-) + V (F(y) - F(y-)) of each row's clipped law,
        V = ``uniform`` (q,), clipped to [0, 1] (``laws.randomised_pit`` where the range cuts no atom)."""
        r = self.standardise(observed)
        out = randomised_pit(P, values, r[:, 0], uniform)
        cut = self.cut(values)
        if cut.any():
            clipped = self.rows(cut).atoms(values)
            below = np.einsum("ij,ij->i", P[cut], clipped < r[cut])
            at = np.einsum("ij,ij->i", P[cut], clipped == r[cut])
            out[cut] = np.clip(below + uniform[cut] * at, 0.0, 1.0)
        return out

    def _bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """Each row's range on r's scale: (low - location) / scale and (high - location) / scale, (q,) each."""
        return (self.low - self.location) / self.scale, (self.high - self.location) / self.scale


def cdf_per_row(P: np.ndarray, values: np.ndarray, order: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """sum_k P_ik 1{values_k <= thresholds_it}, shape (q, T), for laws P (q, M) on scalar atoms ``values``
    (M,) sorted by ``order``, at thresholds of their own per row (q, T): the expectation of the
    indicators, as ``conditional_cdf`` reads a law (signed weights summed as they are)."""
    ascending = values[order]
    running = np.zeros((P.shape[0], P.shape[1] + 1))
    np.cumsum(P[:, order], axis=1, out=running[:, 1:])
    below = np.searchsorted(ascending, thresholds.reshape(-1), side="right").reshape(thresholds.shape)
    return np.take_along_axis(running, below, axis=1)


def crps_per_row(P: np.ndarray, ascending: np.ndarray, observed: np.ndarray) -> np.ndarray:
    """The CRPS (q,) of laws P (q, M) on atoms of their own per row, ``ascending`` (q, M) (non-decreasing
    along each row; ties allowed), at the observations (q,): sum_k p_k |z_k - y| - sum_k p_k z_k
    (2 F_{k-1} + p_k - 1), as ``laws.crps`` sums it on shared atoms, each row taken relative to its middle
    atom (for a law of mass 1 the second sum is then unchanged, and y loses no digits to an offset)."""
    centre = ascending[:, [ascending.shape[1] // 2]]
    z, y = ascending - centre, np.asarray(observed, dtype=np.float64)[:, None] - centre
    before = np.cumsum(P, axis=1) - P  # F_{k-1}
    return np.einsum("ij,ij->i", P, np.abs(z - y)) - np.einsum("ij,ij->i", P, z * (2 * before + P - 1))


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
