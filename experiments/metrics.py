"""The paper's evaluation metrics (Sec. 5), for any fitted jdlcore estimator.

- second moments: ``jdlcore.conditional.losses.conditional_second_moments`` (from the sums of ``TEST_FUNCTIONS``
  registered on the problem).
- ``normalization_error``: max over queries of |E[1 | x] - 1|. JDL-type laws are normalized by
  construction (their expectation divides by the conditional mass); the CME's weights are not.
- ``psd_failure``: share of second-moment matrices with an eigenvalue below -1e-12 max(1, ||M||).
- ``negative_share``: share of negative Radon-Nikodym values 1 + h(x_q, y_j) over queries and
  training atoms (JDL, JPDL), or of negative weights on the y pivots (CME), below -1e-12.
- ``negative_probability_share``: share of queries whose event probability is below -1e-12.
Values above -1e-12 are rounding: the solvers meet their constraints to about 1e-14.
"""
from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

from jdlcore.conditional.losses import second_moment

__all__ = ["TOL", "TEST_FUNCTIONS", "timed", "ones", "total_mass", "normalization_error", "psd_failure",
           "negative_share", "negative_probability_share"]

TOL = 1e-12


def ones(y: np.ndarray) -> np.ndarray:
    """f(y) = 1 for atoms y (n, d) -> (n, 1): E[1 | x] is the conditional law's total mass."""
    return np.ones((y.shape[0], 1))


# Summed once per problem (build_problem) for the losses and the second moments. Not E[1 | x]: summed
# the same way as the model's own mass it would be 1 by construction, so ``total_mass`` recomputes
# the atoms' basis values from the kernel instead (an independent path to the same numbers).
TEST_FUNCTIONS = {"second_moment": second_moment}


def total_mass(model: Any, X: np.ndarray) -> np.ndarray:
    """E[1 | x_q], shape (q,): the CME reports its summed weights; JDL-type laws measure it by a pass
    over the atoms, never from registered sums (``Estimator.total_mass``)."""
    return model.total_mass(X)


def normalization_error(model: Any, X: np.ndarray) -> float:
    return float(np.max(np.abs(total_mass(model, X) - 1.0)))


def psd_failure(moments: np.ndarray) -> float:
    """Share of symmetric matrices moments (q, d, d) that are not positive semi-definite."""
    symmetric = 0.5 * (moments + np.swapaxes(moments, 1, 2))
    eigenvalues = np.linalg.eigvalsh(symmetric)
    scale = np.maximum(1.0, np.abs(eigenvalues).max(axis=1))
    return float(np.mean(eigenvalues[:, 0] < -TOL * scale))


def negative_share(model: Any, X: np.ndarray) -> float:
    """Share of negative Radon-Nikodym values (JDL, JPDL) or CME weights at the queries X (q, d_x)."""
    return float(np.mean(model.negative_share(X, tol=TOL)))


def negative_probability_share(probabilities: np.ndarray) -> float:
    return float(np.mean(np.asarray(probabilities) < -TOL))


def timed(run: Callable[[], Any]) -> tuple[Any, float]:
    """``run()``'s result and its wall time in seconds."""
    started = time.perf_counter()
    result = run()
    return result, time.perf_counter() - started
