"""Hyperparameter selection on a train/validation split (4:1 as in the paper).

For each pair of lengthscales the pivoted Cholesky factors, bases and reductions are computed once
on the training part and reused for every ``reg``; each candidate is scored on the validation part
by a criterion (model, X_val, Y_val) -> float. The best setting is refitted on all the data.
"""
from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from .jdl import JDL, build_problem
from .kernels import GaussianKernel
from .losses import ClippedLogisticLoss, SecondMomentLoss
from .validation import as_samples, check_paired

__all__ = ["TuneResult", "tune"]


@dataclass
class TuneResult:
    """table: one dict per candidate (lengthscale_x, lengthscale_y, reg, score, rank_x, rank_y, seconds);
    best: the winning row; model: the best setting refitted on all data."""

    table: list[dict[str, Any]]
    best: dict[str, Any]
    model: JDL

    def scores(self) -> np.ndarray:
        return np.array([row["score"] for row in self.table])


def _criterion(criterion: str | Callable, threshold: float | None) -> Callable:
    if callable(criterion):
        return criterion
    if criterion == "second_moment":
        return SecondMomentLoss()
    if criterion == "logistic":
        if threshold is None:
            raise ValueError("threshold: the logistic criterion needs the event threshold (Y <= threshold)")
        return ClippedLogisticLoss(threshold)
    raise ValueError(f"criterion: unknown value {criterion!r}; choose 'second_moment', 'logistic' or a callable")


def tune(
    X: Any,
    Y: Any,
    *,
    estimator: JDL | None = None,
    lengthscales_x: Sequence[float] = (0.5, 1.0, 2.0),
    lengthscales_y: Sequence[float] = (0.5, 1.0, 2.0),
    regs: Sequence[float] = (1e-5, 1e-4, 1e-3, 1e-2),
    criterion: str | Callable = "second_moment",
    threshold: float | None = None,
    validation_fraction: float = 0.2,
    seed: int = 0,
    refit: bool = True,
) -> TuneResult:
    """Grid search over kernel lengthscales and ``reg`` for a JDL ``estimator`` (its kernel families,
    tolerance and constraints are kept; lengthscales and reg are replaced)."""
    X = as_samples(X, "X", min_rows=5)
    Y = as_samples(Y, "Y", min_rows=5)
    check_paired(X, Y)
    if not 0 < validation_fraction < 1:
        raise ValueError(f"validation_fraction: must be in (0, 1), got {validation_fraction}")
    for name, values in (("lengthscales_x", lengthscales_x), ("lengthscales_y", lengthscales_y), ("regs", regs)):
        if len(values) == 0:
            raise ValueError(f"{name}: needs at least one value")
    score = _criterion(criterion, threshold)
    base = estimator if estimator is not None else JDL()
    base._check_params()
    kernel_x = base.kernel_x or GaussianKernel(1.0)
    kernel_y = base.kernel_y or GaussianKernel(1.0)
    order = np.random.default_rng(seed).permutation(X.shape[0])
    n_val = max(1, int(round(validation_fraction * X.shape[0])))
    val, train = order[:n_val], order[n_val:]
    table: list[dict[str, Any]] = []
    for lx, ly in itertools.product(lengthscales_x, lengthscales_y):
        started = time.perf_counter()
        kx, ky = kernel_x.with_lengthscale(lx), kernel_y.with_lengthscale(ly)
        problem = build_problem(
            X[train], Y[train], kx, ky, tol=float(base.tol), max_rank=base.max_rank,
            pivoting=base.pivoting, seed=base.seed, block_size=base.block_size,
        )
        factor_seconds = time.perf_counter() - started
        for reg in regs:
            started = time.perf_counter()
            model = JDL(**{**base.get_params(), "kernel_x": kx, "kernel_y": ky, "reg": reg})
            model.fit_problem(problem, Y[train])
            value = float(score(model, X[val], Y[val]))
            table.append({
                "lengthscale_x": lx, "lengthscale_y": ly, "reg": float(reg), "score": value,
                "rank_x": problem.factors["rank_x"], "rank_y": problem.factors["rank_y"],
                "seconds": factor_seconds / len(regs) + time.perf_counter() - started,
            })
    finite = [row for row in table if np.isfinite(row["score"])]
    if not finite:
        raise RuntimeError("tune: every candidate scored NaN or inf")
    best = min(finite, key=lambda row: row["score"])
    params = {
        **base.get_params(),
        "kernel_x": kernel_x.with_lengthscale(best["lengthscale_x"]),
        "kernel_y": kernel_y.with_lengthscale(best["lengthscale_y"]),
        "reg": best["reg"],
    }
    model = JDL(**params).fit(X, Y) if refit else JDL(**params)
    return TuneResult(table=table, best=best, model=model)
