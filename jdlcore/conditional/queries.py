"""Query helpers shared by every model whose conditional laws are weights on atoms (JDL, CME, ...).

A conditional law given x is a weight vector w(x) over atoms y_1..y_N (the training atoms for JDL,
the Y pivots for low-rank CME). CDFs are expectations of indicators; quantiles invert the cumulative
weights over the atoms sorted by value.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

__all__ = ["below_thresholds", "check_levels", "quantiles_from_weights", "class_indicator"]


def below_thresholds(thresholds: Any, d_y: int) -> Callable[[np.ndarray], np.ndarray]:
    """The test function y -> [1{y <= t_k}]_k (b, T) for thresholds (T,) (scalar Y) or (T, d_y) (joint CDF).

    Raises ``ValueError`` naming the expected shape for thresholds of the wrong shape or non-finite ones.
    """
    t = np.asarray(thresholds, dtype=np.float64)
    if t.ndim == 0:
        t = t[None]
    if t.ndim == 1:
        if d_y != 1:
            raise ValueError(f"thresholds: Y has {d_y} components, give thresholds of shape (T, {d_y})")
        t = t[:, None]
    if t.ndim != 2 or t.shape[1] != d_y or not np.all(np.isfinite(t)):
        raise ValueError(f"thresholds: need finite values of shape (T,) or (T, {d_y}), got {np.shape(thresholds)}")
    return lambda y: np.all(y[:, None, :] <= t[None, :, :], axis=2).astype(np.float64)


def class_indicator(classes: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """The test function y -> [1{y = c}]_c (b, C) of a scalar discrete Y."""
    return lambda y: (y[:, :1] == classes[None, :]).astype(np.float64)


def check_levels(levels: Any) -> np.ndarray:
    """Quantile levels as a 1-D float array in (0, 1]; ``ValueError`` otherwise."""
    levels = np.atleast_1d(np.asarray(levels, dtype=np.float64))
    if levels.ndim != 1 or np.any(~np.isfinite(levels)) or np.any(levels <= 0) or np.any(levels > 1):
        raise ValueError(f"levels: need values in (0, 1], got {levels}")
    return levels


def quantiles_from_weights(weights: np.ndarray, sorted_atoms: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """Generalised inverse of the cumulative weights: the smallest atom whose running CDF reaches each level.

    weights: (q, N) weights of the atoms in ascending order of ``sorted_atoms`` (N,). The running CDF
    is made non-decreasing (running maximum), so signed weights still give a well-defined answer;
    a level the CDF never reaches (an unnormalized law with mass below it) gives NaN. Shape (q, L).
    """
    cdf = np.cumsum(weights, axis=1)
    np.maximum.accumulate(cdf, axis=1, out=cdf)
    out = np.empty((weights.shape[0], levels.size))
    for k, level in enumerate(levels):
        reached = cdf >= level * (1 - 1e-12)
        index = np.argmax(reached, axis=1)
        out[:, k] = np.where(reached[np.arange(cdf.shape[0]), index], sorted_atoms[index], np.nan)
    return out
