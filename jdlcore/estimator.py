"""What every jdlcore estimator shares: scikit-learn-style parameters and the checks of its factorisations.

An estimator lists its kernels in ``_KERNELS`` and its other constructor parameters in ``_PARAMS``
(the latter are what ``state()`` stores as JSON); ``get_params`` / ``set_params`` follow from them.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .cholesky import PIVOTING_RULES
from .kernels import Kernel
from .validation import as_samples, check_choice, check_paired

__all__ = ["Estimator", "paired_samples"]


class Estimator:
    """Mixin: ``get_params`` / ``set_params`` over ``_KERNELS + _PARAMS``, and the pivoted-Cholesky checks."""

    _KERNELS: tuple[str, ...] = ("kernel_x", "kernel_y")
    _PARAMS: tuple[str, ...] = ()

    def get_params(self) -> dict[str, Any]:
        """The constructor parameters by name."""
        return {name: getattr(self, name) for name in self._KERNELS + self._PARAMS}

    def set_params(self, **params: Any) -> Any:
        """Set constructor parameters by name; ``ValueError`` for a name the estimator does not have."""
        known = self.get_params()
        for name, value in params.items():
            if name not in known:
                raise ValueError(f"{name}: not a parameter of {type(self).__name__}")
            setattr(self, name, value)
        return self

    def _check_factorisation(self) -> None:
        """tol (finite, >= 0), pivoting, max_rank (>= 1 or None) and the kernels (jdlcore Kernels or None)."""
        tol = float(self.tol)
        if not np.isfinite(tol) or tol < 0:
            raise ValueError(f"tol: must be finite and >= 0, got {self.tol!r}")
        check_choice(self.pivoting, "pivoting", PIVOTING_RULES)
        for name in self._KERNELS:
            kernel = getattr(self, name)
            if kernel is not None and not isinstance(kernel, Kernel):
                raise ValueError(f"{name}: must be a jdlcore Kernel, got {type(kernel).__name__}")
        if self.max_rank is not None and int(self.max_rank) < 1:
            raise ValueError(f"max_rank: must be >= 1, got {self.max_rank!r}")

    def _kernel_problem(self, X: Any, Y: Any) -> tuple[Any, np.ndarray, np.ndarray]:
        """Validate the pairs, then pivoted Cholesky of K_X and K_Y, the bases and the reductions
        (``jdlcore.jdl.build_problem`` with this estimator's options); returns (problem, X, Y)."""
        from .jdl import build_problem  # jdl imports this module

        X, Y = paired_samples(X, Y)
        extra = {name: getattr(self, name) for name in ("support_size", "grid_points") if hasattr(self, name)}
        if extra.get("support_size") is not None and extra["support_size"] > X.shape[0]:
            raise ValueError(f"support_size: {extra['support_size']} is more than the {X.shape[0]} training rows")
        problem = build_problem(X, Y, _default_kernel(self.kernel_x), _default_kernel(self.kernel_y),
                                tol=float(self.tol), max_rank=self.max_rank, pivoting=self.pivoting,
                                seed=self.seed, block_size=self.block_size, **extra)
        return problem, X, Y


def _default_kernel(kernel: Kernel | None) -> Kernel:
    from .kernels import GaussianKernel

    return kernel if kernel is not None else GaussianKernel(1.0)


def paired_samples(X: Any, Y: Any, x_name: str = "X", y_name: str = "Y") -> tuple[np.ndarray, np.ndarray]:
    """X (n, d_X) and Y (n, d_Y) as validated float64 arrays with at least 2 rows each and equal n."""
    X = as_samples(X, x_name, min_rows=2)
    Y = as_samples(Y, y_name, min_rows=2)
    check_paired(X, Y, x_name, y_name)
    return X, Y
