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

from .cholesky import Factorisation
from .jdl import JDL, build_problem
from .kernels import GaussianKernel, Kernel
from .losses import ClippedLogisticLoss, SecondMomentLoss
from .validation import as_samples, check_paired

__all__ = ["TuneResult", "tune", "split_rows", "score_pair", "best_row", "resolve_criterion", "screening_params"]


@dataclass
class TuneResult:
    """table: one dict per candidate (lengthscale_x, lengthscale_y, reg, score, rank_x, rank_y, seconds);
    best: the winning row; model: the best setting refitted on all data."""

    table: list[dict[str, Any]]
    best: dict[str, Any]
    model: JDL

    def scores(self) -> np.ndarray:
        return np.array([row["score"] for row in self.table])


def resolve_criterion(criterion: str | Callable, threshold: float | None = None) -> Callable:
    """A validation criterion (model, X_val, Y_val) -> float from its name ("second_moment" is the
    paper's loss (40), "logistic" the clipped logistic loss of the event Y <= threshold) or a callable."""
    if callable(criterion):
        return criterion
    if criterion == "second_moment":
        return SecondMomentLoss()
    if criterion == "logistic":
        if threshold is None:
            raise ValueError("threshold: the logistic criterion needs the event threshold (Y <= threshold)")
        return ClippedLogisticLoss(threshold)
    raise ValueError(f"criterion: unknown value {criterion!r}; choose 'second_moment', 'logistic' or a callable")


def split_rows(n: int, validation_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, validation) row indices of a seeded random split; the validation part has
    round(validation_fraction * n) >= 1 rows."""
    if not 0 < validation_fraction < 1:
        raise ValueError(f"validation_fraction: must be in (0, 1), got {validation_fraction}")
    order = np.random.default_rng(seed).permutation(n)
    n_val = max(1, int(round(validation_fraction * n)))
    return order[n_val:], order[:n_val]


def screening_params(base: JDL) -> dict[str, Any]:
    """The estimator's parameters as a tuning candidate scores them: its own, except that grid
    positivity (a cutting-plane solve per candidate) is screened through the projection, the law
    it falls back to; the winner is then fitted with the estimator's own rule."""
    params = base.get_params()
    if params.get("constraints") == "positivity" and params.get("positivity") == "grid":
        params["positivity"] = "project"
    return params


def score_pair(
    X_train: np.ndarray, Y_train: np.ndarray, X_val: np.ndarray, Y_val: np.ndarray, base: JDL,
    kernel_x: Kernel, kernel_y: Kernel, regs: Sequence[float], score: Callable,
) -> list[dict[str, Any]]:
    """Validation scores of every ``reg`` for one pair of kernels: the factorisations, bases, reductions
    and support are computed once on the training rows and reused for each ``reg``.

    Returns one row per reg: lengthscale_x, lengthscale_y, reg, score, rank_x, rank_y, seconds
    (the factorisation time shared out over the regs plus the candidate's own solve and scoring), and
    ``error`` (the message) for a candidate that failed, whose score is NaN: the search goes on.
    """
    started = time.perf_counter()
    params = screening_params(base)
    rows = []
    try:
        problem = build_problem(X_train, Y_train, kernel_x, kernel_y, Factorisation.of(base),
                                support_size=base.support_size, grid_points=base.grid_points)
    except (ValueError, RuntimeError, np.linalg.LinAlgError, MemoryError) as error:
        seconds = (time.perf_counter() - started) / len(regs)
        return [_failed(kernel_x, kernel_y, reg, error, seconds) for reg in regs]
    factor_seconds = time.perf_counter() - started
    for reg in regs:
        started = time.perf_counter()
        try:
            model = JDL(**{**params, "kernel_x": kernel_x, "kernel_y": kernel_y, "reg": float(reg)})
            model.fit_problem(problem, Y_train)
            value = float(score(model, X_val, Y_val))
        except (ValueError, RuntimeError, np.linalg.LinAlgError, FloatingPointError) as error:
            rows.append(_failed(kernel_x, kernel_y, reg, error, factor_seconds / len(regs) + time.perf_counter() - started,
                                problem.factors))
            continue
        rows.append({
            "lengthscale_x": kernel_x.lengthscale, "lengthscale_y": kernel_y.lengthscale,
            "reg": float(reg), "score": value,
            "rank_x": int(problem.factors["rank_x"]), "rank_y": int(problem.factors["rank_y"]),
            "seconds": factor_seconds / len(regs) + time.perf_counter() - started,
        })
    return rows


def _failed(kernel_x: Kernel, kernel_y: Kernel, reg: float, error: Exception, seconds: float,
            factors: dict | None = None) -> dict[str, Any]:
    """The table row of a candidate that raised: score NaN, the error's message kept."""
    return {"lengthscale_x": kernel_x.lengthscale, "lengthscale_y": kernel_y.lengthscale, "reg": float(reg),
            "score": float("nan"), "rank_x": int((factors or {}).get("rank_x", 0)),
            "rank_y": int((factors or {}).get("rank_y", 0)), "seconds": seconds,
            "error": f"{type(error).__name__}: {error}"}


def best_row(table: list[dict[str, Any]]) -> dict[str, Any]:
    """The row with the smallest finite score; ``RuntimeError`` if none is finite."""
    finite = [row for row in table if np.isfinite(row["score"])]
    if not finite:
        errors = sorted({row["error"] for row in table if "error" in row})
        raise RuntimeError("tune: every candidate scored NaN or inf" + (f" (errors: {'; '.join(errors)[:500]})"
                                                                         if errors else ""))
    return min(finite, key=lambda row: row["score"])


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
    for name, values in (("lengthscales_x", lengthscales_x), ("lengthscales_y", lengthscales_y), ("regs", regs)):
        if len(values) == 0:
            raise ValueError(f"{name}: needs at least one value")
    score = resolve_criterion(criterion, threshold)
    base = estimator if estimator is not None else JDL()
    base._check_params()
    kernel_x = base.kernel_x or GaussianKernel(1.0)
    kernel_y = base.kernel_y or GaussianKernel(1.0)
    train, val = split_rows(X.shape[0], validation_fraction, seed)
    table: list[dict[str, Any]] = []
    for lx, ly in itertools.product(lengthscales_x, lengthscales_y):
        table += score_pair(X[train], Y[train], X[val], Y[val], base, kernel_x.with_lengthscale(lx),
                            kernel_y.with_lengthscale(ly), regs, score)
    best = best_row(table)
    params = {
        **base.get_params(),
        "kernel_x": kernel_x.with_lengthscale(best["lengthscale_x"]),
        "kernel_y": kernel_y.with_lengthscale(best["lengthscale_y"]),
        "reg": best["reg"],
    }
    model = JDL(**params).fit(X, Y) if refit else JDL(**params)
    return TuneResult(table=table, best=best, model=model)
