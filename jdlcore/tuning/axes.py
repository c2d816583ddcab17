"""The lengthscale axes of a tuning grid: each kernel standardised to its columns (``scaling``), its
lengthscales given or ``LENGTHSCALE_FACTORS`` times the median heuristic, and every axis (the regs'
too) checked."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..kernels import Kernel, median_heuristic
from .constants import LENGTHSCALE_FACTORS

__all__ = ["default_lengthscales", "standardised_grid", "check_grid"]



def default_lengthscales(samples: np.ndarray, seed: int = 0, kernel: Kernel | None = None) -> list[float]:
    """``LENGTHSCALE_FACTORS`` times the median pairwise distance of ``samples`` (rows, features), as
    ``kernel`` sees them (standardised by its scaling, if it has one; a categorical mismatch counts 1),
    over the pairs of distinct rows where half the pairs or more are tied (``median_heuristic``'s
    ``ties``: one binary column, or a y mostly 0, would otherwise have no lengthscale)."""
    median = median_heuristic(samples, seed=seed, kernel=kernel, ties="distinct")
    return [float(f * median) for f in LENGTHSCALE_FACTORS]


def standardised_grid(Z: np.ndarray, kernel: Kernel, scaling: str, given: Sequence[float] | None, seed: int,
                      name: str, names: Sequence[str] | None = None, role: str = "x") -> tuple[Kernel, list[float]]:
    """(``kernel`` standardised to the columns of ``Z`` by ``scaling`` (``Kernel.scaled``), the grid of its
    lengthscales: ``given``, else ``default_lengthscales`` as that kernel sees Z), the grid checked
    (``check_grid``, errors naming ``name``)."""
    kernel = kernel.scaled(Z, scaling, None if names is None else list(names), role)
    return kernel, check_grid(default_lengthscales(Z, seed, kernel) if given is None else given, name)


def check_grid(values: Sequence[float], name: str) -> list[float]:
    """One axis of the grid, sorted: at least one value, all finite, > 0 and distinct."""
    values = [float(v) for v in values]
    if not values or not all(np.isfinite(v) and v > 0 for v in values):
        raise ValueError(f"{name}: needs at least one value, all finite and > 0 (got {values})")
    if len(set(values)) != len(values):
        raise ValueError(f"{name}: values must be distinct (got {values})")
    return sorted(values)
