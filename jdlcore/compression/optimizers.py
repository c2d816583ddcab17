"""First- and quasi-second-order minimisers for the compression objectives.

Both work on one flat parameter vector with a per-coordinate ``scale`` (the data's column standard
deviations), so the paper's learning rate 0.01 "on standardised data" means the same here for data
in any units: Adam moves coordinate k by at most about ``learning_rate * scale[k]`` per step.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
from scipy.optimize import minimize

__all__ = ["Adam", "minimise_lbfgs"]

ValueAndGradient = Callable[[np.ndarray], tuple[float, np.ndarray]]


class Adam:
    """Adam (Kingma & Ba 2015) with bias correction; ``step`` returns the updated parameters."""

    def __init__(self, size: int, learning_rate: float, scale: np.ndarray, beta1: float = 0.9,
                 beta2: float = 0.999, eps: float = 1e-8):
        self.learning_rate, self.scale = learning_rate, np.broadcast_to(scale, (size,)).astype(np.float64)
        self.beta1, self.beta2, self.eps = beta1, beta2, eps
        self.first, self.second, self.count = np.zeros(size), np.zeros(size), 0

    def step(self, params: np.ndarray, gradient: np.ndarray) -> np.ndarray:
        # Adam on the standardised coordinates u = params / scale, whose gradient is gradient * scale.
        g = gradient * self.scale
        self.count += 1
        self.first = self.beta1 * self.first + (1 - self.beta1) * g
        self.second = self.beta2 * self.second + (1 - self.beta2) * g * g
        first = self.first / (1 - self.beta1**self.count)
        second = self.second / (1 - self.beta2**self.count)
        return params - self.learning_rate * self.scale * first / (np.sqrt(second) + self.eps)


def minimise_lbfgs(fun: ValueAndGradient, params: np.ndarray, scale: np.ndarray, max_iter: int) -> np.ndarray:
    """L-BFGS-B (scipy) on the standardised coordinates params / scale, at most ``max_iter``
    iterations; returns the final parameters. ``fun`` gives the value and gradient."""
    scale = np.broadcast_to(scale, params.shape).astype(np.float64)

    def standardised(u: np.ndarray) -> tuple[float, np.ndarray]:
        value, gradient = fun(u * scale)
        return value, gradient * scale

    result = minimize(standardised, params / scale, jac=True, method="L-BFGS-B",
                      options={"maxiter": int(max_iter), "gtol": 1e-12, "ftol": 1e-15})
    return result.x * scale
