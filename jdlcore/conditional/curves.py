"""Smoothed conditional densities and CDFs on a grid of y values, for model cards and plots.

The density smooths the model's own conditional law (weights w_k(x) on its atoms z_k: projected,
clipped or signed, as the model answers) with a Gaussian of bandwidth h:

    p(y | x) = sum_k w_k(x) N(y; z_k, h^2) = E[N(y; Y, h^2) | x],

one ``conditional_expectation``; h defaults to the y basis's ``smoothing_scale`` (half the kernel
lengthscale, a fifth of the standard deviation for a polynomial basis). Models without positivity
may have negative weights, and then negative density.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..validation import as_samples

__all__ = ["GRID_POINTS", "CENTRAL_SHARE", "central_grid", "query_points", "conditional_curves", "conditional_density",
           "default_grid", "default_x_values", "density_bandwidth"]

GRID_POINTS = 256
CENTRAL_SHARE = 0.98  # of the y marginal that figures show: from its 1st to its 99th percentile


def density_bandwidth(model: Any, component: int = 0) -> float:
    """The smoothing bandwidth h of y feature ``component``, in units of y (``Basis.smoothing_scale``)."""
    return model.basis_y_.smoothing_scale(component)


def default_x_values(model: Any, n_slices: int = 5) -> np.ndarray:
    """Query points (k, d_X) spanning the training x (``Basis.slice_points``): the first feature at
    quantiles 0.1..0.9, the others at their medians; every class of a class basis."""
    if n_slices < 1:
        raise ValueError(f"n_slices: must be >= 1, got {n_slices}")
    return model.basis_x_.slice_points(n_slices)


def default_grid(model: Any, component: int = 0, points: int = GRID_POINTS) -> np.ndarray:
    """``points`` y values spanning the model's atoms of feature ``component`` plus 4 bandwidths each side."""
    column = np.asarray(model.law_atoms_[:, component], dtype=np.float64)
    pad = 4 * density_bandwidth(model, component)
    return np.linspace(float(column.min()) - pad, float(column.max()) + pad, points)


def central_grid(model: Any, component: int = 0, share: float = CENTRAL_SHARE,
                 points: int = GRID_POINTS) -> tuple[np.ndarray, bool]:
    """(``points`` y values over the central ``share`` of the y marginal of feature ``component`` (its
    (1 - share) / 2 and (1 + share) / 2 quantiles under the support weights, equal weights where the model
    has none) plus 4 bandwidths each side, within ``default_grid``'s span; whether that cut the span).
    A heavy-tailed y drawn on its full range makes every conditional density one spike: this is the
    range a figure shows."""
    column = np.asarray(model.law_atoms_[:, component], dtype=np.float64)
    support = getattr(model, "support_", None)
    weights = (np.full(column.size, 1.0 / column.size) if support is None
               else np.asarray(support.weights, dtype=np.float64))
    order = np.argsort(column, kind="stable")
    cumulative = np.cumsum(weights[order]) / weights.sum()
    low = column[order][min(np.searchsorted(cumulative, (1 - share) / 2), column.size - 1)]
    high = column[order][min(np.searchsorted(cumulative, (1 + share) / 2), column.size - 1)]
    pad = 4 * density_bandwidth(model, component)
    full = default_grid(model, component, points)
    start, stop = max(float(low) - pad, float(full[0])), min(float(high) + pad, float(full[-1]))
    return np.linspace(start, stop, points), bool(start > full[0] or stop < full[-1])


def query_points(model: Any, x_values: Any) -> np.ndarray:
    """x_values as (k, d_X); a 1-D array is one query when d_X > 1, k queries when d_X = 1."""
    width = model.basis_x_.width
    x = np.asarray(x_values, dtype=np.float64)
    if x.ndim == 1 and width > 1:
        x = x[None, :]
    x = as_samples(x, "x_values")
    if x.shape[1] != width:
        raise ValueError(f"x_values: have {x.shape[1]} features, the model was fitted on {width}")
    return x


def conditional_curves(model: Any, x_values: Any, y_grid: Any, *, component: int = 0,
                       bandwidth: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Smoothed conditional density and conditional CDF of y feature ``component`` on ``y_grid``.

    x_values: (k, d_X) queries (a 1-D array is k queries for d_X = 1); y_grid: (g,) in units of y.
    Returns (density (k, g) in 1 / units of y, cdf (k, g)): the conditional expectations of
    N(t; y_c, h^2) and of [y_c <= t] for t on the grid, h = ``bandwidth`` (default
    ``density_bandwidth``), in one ``model.conditional_expectation``. For scalar y the cdf equals
    ``model.conditional_cdf(x_values, y_grid)``.
    """
    x = query_points(model, x_values)
    grid = np.asarray(y_grid, dtype=np.float64).ravel()
    width = model.basis_y_.width
    if not 0 <= component < width:
        raise ValueError(f"component: must be in [0, {width}), got {component}")
    h = density_bandwidth(model, component) if bandwidth is None else float(bandwidth)

    def kernel_and_indicator(y: np.ndarray) -> np.ndarray:  # (b, 2g)
        atoms = y[:, component, None]
        z = (grid[None, :] - atoms) / h
        return np.hstack([np.exp(-0.5 * z * z) / (h * math.sqrt(2 * math.pi)), (atoms <= grid[None, :]) * 1.0])

    curves = model.conditional_expectation(x, kernel_and_indicator)
    return curves[:, :grid.size], curves[:, grid.size:]


def conditional_density(model: Any, x_values: Any, y_grid: Any, *, component: int = 0,
                        bandwidth: float | None = None) -> np.ndarray:
    """The smoothed conditional density (k, g) of ``conditional_curves``, in 1 / units of y."""
    return conditional_curves(model, x_values, y_grid, component=component, bandwidth=bandwidth)[0]
