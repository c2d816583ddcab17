"""Robust per-feature location and scale: the standardisation a kernel applies to its inputs.

Real tables mix units (carats next to millimetres next to dollars), so one lengthscale on the raw
columns weighs them arbitrarily. A kernel with a scaling (``Kernel.location``, ``Kernel.scale``)
measures distances on (z - location) / scale, and its lengthscale is in those standard units. The
estimates are robust, so a few extreme rows do not set the scale of a heavy-tailed column:

* location: the median of the column;
* scale: the interquartile range over 1.349 (the standard deviation of a normal column). Where over
  half the values are tied (a binary or zero-inflated column) the interquartile range is 0 and the
  standard deviation is used instead.

A column whose values are all equal has no scale and is refused, naming the column. Categorical
columns (category codes) are not standardised: location 0 and scale 1; one with a single level is
refused too.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .validation import as_samples

__all__ = ["robust_scaling", "check_scaling", "check_scaling_choice", "NORMAL_IQR", "SCALING_ROWS", "SCALINGS", "DEFAULT_SCALING"]

NORMAL_IQR = 1.3489795003921634  # interquartile range of the standard normal: 2 * Phi^{-1}(0.75)
SCALINGS = ("robust", "none")  # how a fit or tuning standardises its kernels' inputs
DEFAULT_SCALING = "robust"
CONSTANT_COLUMNS = ("refuse", "unit")  # what a scaling does with a constant column
SCALING_ROWS = 100_000  # rows of a large table the pipeline estimates the scaling from (a seeded sample)


def robust_scaling(Z: Any, names: Sequence[str] | None = None, role: str = "x",
                   categorical: Sequence[int] = (), constant: str = "refuse") -> tuple[np.ndarray, np.ndarray]:
    """(location, scale) of the columns of ``Z`` (n, d), each of shape (d,): the median, and the
    interquartile range / ``NORMAL_IQR`` (the standard deviation where that is 0); 0 and 1 for the
    ``categorical`` columns (indices). ``names``: the column names for errors (default: their
    numbers). ``constant``: "refuse" (``ValueError`` naming the first constant column, a categorical
    one: a single level) or "unit" (scale 1: every pair of rows is at distance 0 along it whatever the
    scale; an estimator's cross-validation fold may hold one level of a rare column).
    """
    Z = as_samples(Z, role, min_rows=1)
    names = [str(k) for k in range(Z.shape[1])] if names is None else [str(name) for name in names]
    if len(names) != Z.shape[1]:
        raise ValueError(f"{role}: {len(names)} column names for {Z.shape[1]} columns")
    if constant not in CONSTANT_COLUMNS:
        raise ValueError(f"constant: unknown value {constant!r}; choose one of {', '.join(map(repr, CONSTANT_COLUMNS))}")
    refuse = constant == "refuse"
    codes = [int(k) for k in categorical]
    for k in codes if refuse else ():
        if np.all(Z[:, k] == Z[0, k]):
            raise ValueError(f"{role} column {names[k]!r}: is categorical with a single level (code {Z[0, k]:g}); a "
                             "constant feature carries no information")
    low, location, high = np.percentile(Z, [25.0, 50.0, 75.0], axis=0)
    scale = (high - low) / NORMAL_IQR
    location[codes], scale[codes] = 0.0, 1.0
    tied = scale <= 0
    if np.any(tied):
        scale[tied] = Z[:, tied].std(axis=0)
    flat = np.flatnonzero(~(scale > 0))
    if flat.size and not refuse:
        scale[flat] = 1.0
    elif flat.size:
        k = int(flat[0])
        raise ValueError(f"{role} column {names[k]!r}: is constant ({float(Z[0, k])!r}); a constant feature carries no "
                         "information")
    return location, scale


def check_scaling(location: Any, scale: Any) -> tuple[np.ndarray, np.ndarray]:
    """A scaling as two float64 vectors of one length: location finite, scale finite and > 0.
    ``ValueError`` naming the part and the rule."""
    location = np.atleast_1d(np.asarray(location, dtype=np.float64))
    scale = np.atleast_1d(np.asarray(scale, dtype=np.float64))
    if location.ndim != 1 or not np.all(np.isfinite(location)):
        raise ValueError(f"location: must be a finite scalar or 1-D array, got {location!r}")
    if scale.ndim != 1 or not np.all(np.isfinite(scale)) or not np.all(scale > 0):
        raise ValueError(f"scale: must be finite and > 0 (a scalar or 1-D array), got {scale!r}")
    if location.shape != scale.shape:
        raise ValueError(f"scale: has {scale.size} entries but location has {location.size}")
    return location.copy(), scale.copy()


def check_scaling_choice(scaling: Any, name: str = "scaling") -> str:
    """``scaling`` when it is one of ``SCALINGS`` ("robust": standardise each feature by its median
    and interquartile range; "none": the raw columns); ``ValueError`` naming the choices."""
    if scaling not in SCALINGS:
        raise ValueError(f"{name}: unknown value {scaling!r}; choose one of {', '.join(map(repr, SCALINGS))}")
    return scaling
