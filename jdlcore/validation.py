"""Input validation shared by every estimator: one clear ``ValueError`` per rule.

Every check names the argument, the rule it broke and the offending value or count, so a user can
fix the call without reading the source.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .params import Number, ParameterError

__all__ = ["as_samples", "check_paired", "check_positive", "check_choice", "check_nonnegative", "check_tol", "check_count",
           "TOL_RULE", "TOL"]


def as_samples(values: Any, name: str, *, min_rows: int = 1, missing: bool = False) -> np.ndarray:
    """Return ``values`` as a C-contiguous float64 array of shape (n, d).

    A 1-D input of length n becomes (n, 1); an object array of numbers is read as numbers. Raises
    ``ValueError`` for None, wrong dimensionality, non-numeric or complex dtypes, NaN (unless
    ``missing``: a missing value) or inf entries and fewer than ``min_rows`` rows, and ``TypeError`` for a sparse matrix or an object array holding
    something that is not a number (the wording of each error is scikit-learn's where it has one).
    """
    if values is None:
        raise ValueError(f"{name}: requires y to be passed, but the target y is None" if name.lower().startswith("y")
                         else f"{name}: requires a value to be passed, got None")
    if hasattr(values, "tocsr") or hasattr(values, "toarray"):  # scipy's sparse matrices and arrays
        raise TypeError(f"{name}: sparse input is not supported; pass a dense array ({name}.toarray())")
    try:
        array = np.asarray(values)
    except Exception as error:  # pragma: no cover - numpy raises many types here
        raise ValueError(f"{name}: cannot be read as an array ({error})") from None
    if array.dtype.kind == "O":
        try:
            array = array.astype(np.float64)
        except (TypeError, ValueError) as error:
            raise type(error)(f"{name}: must be numeric, got dtype object ({error})") from None
    if array.dtype.kind not in "biufc":
        raise ValueError(f"{name}: must be numeric, got dtype {array.dtype}")
    if array.dtype.kind == "c":
        raise ValueError(f"{name}: must be real-valued: Complex data not supported, got dtype {array.dtype}")
    if array.ndim == 1:
        array = array[:, None]
    if array.ndim != 2:
        raise ValueError(f"{name}: must be 1-D (n,) or 2-D (n, d), got shape {array.shape}")
    if array.shape[1] == 0:
        raise ValueError(f"{name}: has 0 feature(s) (shape={array.shape}) while a minimum of 1 is required: no columns")
    if array.shape[0] < min_rows:
        raise ValueError(f"{name}: needs at least {min_rows} row(s), got {array.shape[0]} (n_samples={array.shape[0]})")
    array = np.ascontiguousarray(array, dtype=np.float64)
    finite = np.isfinite(array) | (np.isnan(array) if missing else False)
    if not finite.all():
        bad = np.argwhere(~finite)[0]
        raise ValueError(
            f"{name}: contains NaN or inf ({int((~finite).sum())} entries, first at row {bad[0]}, "
            f"column {bad[1]}: {array[bad[0], bad[1]]})"
        )
    return array


def check_paired(X: np.ndarray, Y: np.ndarray, x_name: str = "X", y_name: str = "Y") -> None:
    """Raise ``ValueError`` unless X and Y have the same number of rows."""
    if X.shape[0] != Y.shape[0]:
        raise ValueError(
            f"{x_name} and {y_name}: must have the same number of rows, got {X.shape[0]} and {Y.shape[0]}"
        )


def check_positive(value: Any, name: str) -> np.ndarray:
    """Return ``value`` as a float64 array after checking every entry is finite and > 0."""
    array = np.asarray(value, dtype=np.float64)
    if array.size == 0 or not np.all(np.isfinite(array)) or not np.all(array > 0):
        raise ValueError(f"{name}: must be finite and > 0, got {value!r}")
    return array


def check_count(value: Any, name: str, optional: bool = False) -> None:
    """Raise ``ValueError`` unless ``value`` is an integer >= 1 (or None when ``optional``)."""
    if value is None and optional:
        return
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name}: must be an integer >= 1{' or None' if optional else ''}, got {value!r}")


TOL = Number(0.0, 1.0, high_open=True)  # the one rule for ``tol`` everywhere
TOL_RULE = TOL.text


def check_tol(value: Any, name: str = "tol") -> float:
    """The relative tolerance of a pivoted Cholesky decomposition (residual trace / trace K): a number
    in [0, 1) (0: full rank up to the pivot floor), ``TOL``; returned as a float."""
    if TOL.violation(value) is not None:
        raise ParameterError(name, TOL, value)
    return float(value)


def check_nonnegative(value: Any, name: str) -> float:
    """Return ``value`` as a float after checking it is finite and >= 0."""
    number = float(value)
    if not np.isfinite(number) or number < 0:
        raise ValueError(f"{name}: must be finite and >= 0, got {value!r}")
    return number


def check_choice(value: Any, name: str, choices: tuple[str, ...]) -> str:
    """Raise ``ValueError`` unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{name}: unknown value {value!r}; choose one of {', '.join(map(repr, choices))}")
    return value
