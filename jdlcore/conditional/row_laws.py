"""The conditional laws of a batch of rows on y's scale: one probability vector per row on the law's
atoms, read through each row's location and scale where the model's y is standardised.

Every figure of a batch (the mean, quantiles, CDF, CRPS, PIT, draws) is a functional of these laws, so a
consumer that needs several of them (the evaluation reads six) computes the weights once.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .laws import crps as law_crps, quantiles as law_quantiles, randomised_pit
from .location_scale import LocationScale, cdf_per_row
from .queries import check_levels

__all__ = ["RowLaws"]


@dataclass(frozen=True)
class RowLaws:
    """q conditional laws: ``weights`` (q, N), each row summing to 1 where the law is normalised, on the
    ``atoms`` (N, d_y) of the model's y; ``on`` (scalar y only): each row's location and scale, its law of
    y the push-forward of the law on the atoms under z -> clip(location + scale z, low, high), None where
    the atoms are y itself."""

    weights: np.ndarray
    atoms: np.ndarray
    on: LocationScale | None = None
    _order: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.weights.ndim != 2 or self.atoms.ndim != 2 or self.weights.shape[1] != self.atoms.shape[0]:
            raise ValueError(f"laws: weights {self.weights.shape} do not match atoms {self.atoms.shape}")
        if self.on is not None and (self.atoms.shape[1] != 1 or len(self.on) != self.weights.shape[0]):
            raise ValueError(f"laws: a location and scale per row needs a scalar y and {self.weights.shape[0]} rows")
        object.__setattr__(self, "_order", np.argsort(self.atoms[:, 0], kind="stable"))

    def __len__(self) -> int:
        return self.weights.shape[0]

    def _scalar(self, what: str) -> np.ndarray:
        if self.atoms.shape[1] != 1:
            raise ValueError(f"{what}: needs a scalar y, the laws have {self.atoms.shape[1]} y features")
        return self.atoms[:, 0]

    def mean(self) -> np.ndarray:
        """E[y | x] per row, shape (q, d_y)."""
        if self.on is None:
            return self.weights @ self.atoms
        return self.on.moments(self.weights, self.atoms[:, 0])[0][:, None]

    def atoms_on_y(self) -> np.ndarray:
        """Each row's atoms on y's scale, shape (q, N, d_y) (the shared atoms broadcast where ``on`` is None)."""
        if self.on is None:
            return np.broadcast_to(self.atoms, (len(self),) + self.atoms.shape)
        on = self.on
        return np.clip(on.location[:, None] + on.scale[:, None] * self.atoms[None, :, 0], on.low, on.high)[..., None]

    def quantiles(self, levels: np.ndarray) -> np.ndarray:
        """The quantiles of a scalar y at ``levels`` in (0, 1], shape (q, L): the least atom whose CDF
        reaches the level."""
        values, levels = self._scalar("quantile"), check_levels(levels)
        Q = law_quantiles(self.weights, values, levels, self._order)
        return Q if self.on is None else self.on.quantiles(Q)

    def cdf(self, thresholds: np.ndarray) -> np.ndarray:
        """Q(y <= t | x) of a scalar y at the thresholds (T,), shape (q, T)."""
        values = self._scalar("cdf")
        thresholds = np.asarray(thresholds, dtype=np.float64).reshape(-1)
        if self.on is None:
            each = np.broadcast_to(thresholds, (len(self), thresholds.size))
            return cdf_per_row(self.weights, values, self._order, each)
        return self.on.cdf(self.weights, values, self._order, thresholds)

    def crps(self, y: np.ndarray) -> np.ndarray:
        """The CRPS of each row's law at its observation y (q,), shape (q,); lower is better."""
        values, y = self._scalar("crps"), np.asarray(y, dtype=np.float64).reshape(-1)
        if self.on is None:
            return law_crps(self.weights, values, y)
        return self.on.crps(self.weights, values, self._order, y)

    def pit(self, y: np.ndarray, uniform: np.ndarray) -> np.ndarray:
        """The randomised probability integral transform F(y-) + V (F(y) - F(y-)) of each row's law at its
        observation y (q,), V = ``uniform`` (q,), shape (q,)."""
        values, y = self._scalar("pit"), np.asarray(y, dtype=np.float64).reshape(-1)
        if self.on is None:
            return randomised_pit(self.weights, values, y, uniform)
        return self.on.pit(self.weights, values, y, uniform)

    def sample(self, draws: int, rng: np.random.Generator) -> np.ndarray:
        """``draws`` independent draws from each row's law, shape (q, draws, d_y): atom k of row i with
        probability weights[i, k] (a law with negative weights is refused)."""
        if np.any(self.weights < 0):
            raise ValueError("sample: the laws have negative weights; fit with positivity to draw from them")
        running = np.cumsum(self.weights, axis=1)
        uniform = rng.uniform(size=(len(self), draws)) * running[:, -1:]
        picked = np.minimum(np.array([np.searchsorted(r, u, side="right") for r, u in zip(running, uniform)]),
                            self.weights.shape[1] - 1)
        return np.take_along_axis(self.atoms_on_y(), picked[..., None], axis=1)
