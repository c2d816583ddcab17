"""Sec. 5.2 of the paper: binary classification on real daily returns, one cell at a time.

A cell is (d, n, replicate) at an event level (1 % or 5 %): n random days of ``data.return_events``
(x_t = the previous day's returns of d stocks, y_t = the sum of their returns today), split 4:1 into
training and validation; the event is y <= the training y's ``level`` quantile; the test set is up to
5,000 of the remaining days. Methods estimate P(Y <= q | x): JDL (unconstrained, and with the
positivity tightening (33)) and CME (unconstrained, and with (53)+(54)) through their conditional
CDF at q, KLR directly for the event. The lengthscale of x (median heuristic times a factor) and
each method's reg are chosen by the validation loss (41); y's kernel uses its median heuristic.
Metrics: clipped logistic loss (41) with eta = 1e-12 on the test days, share of negative
probabilities, normalization error (NaN for KLR), fit and query times.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from jdlcore import CME, JDL, KLR, Factorisation, GaussianKernel, build_problem, median_heuristic
from jdlcore.conditional.losses import clipped_logistic_loss
from jdlcore.tuning import best_row, score_grid

from .data import daily_returns, return_events
from .metrics import negative_probability_share, normalization_error, timed

__all__ = ["CLASS_METHODS", "CLASS_METRICS", "LEVELS", "ClassificationSettings", "classification_cell"]

CLASS_METHODS = ("jdl", "jdl_tightening", "cme", "cme_constrained", "klr")
CLASS_METRICS = ("loss", "negative_share", "normalization_error", "fit_time", "query_time")
LEVELS = (0.01, 0.05)


@dataclass(frozen=True)
class ClassificationSettings:
    lengthscale_factors: tuple[float, ...] = (0.5, 1.0, 2.0)
    regs: tuple[float, ...] = (1e-7, 1e-6, 1e-5, 1e-4, 1e-3)
    klr_regs: tuple[float, ...] = (1e-4, 1e-3, 1e-2, 1e-1)
    tol: float = 1e-3
    test_points: int = 5_000


def _probability(model: Any, X: np.ndarray, threshold: float) -> np.ndarray:
    return model.conditional_cdf(X, [threshold])[:, 0]


def _fitters(kx: GaussianKernel, ky: GaussianKernel, problem, train: tuple, threshold: float,
             tol: float) -> dict[str, Callable[[float], Any]]:
    X, Y = train
    return {
        "jdl": lambda reg: JDL(kx, ky, reg=reg, tol=tol, constraints="none").fit_problem(problem, Y),
        "jdl_tightening": lambda reg: JDL(kx, ky, reg=reg, tol=tol, constraints="positivity",
                                          positivity="tightening").fit_problem(problem, Y),
        "cme": lambda reg: CME(kx, ky, reg=reg, tol=tol).fit_problem(problem),
        "cme_constrained": lambda reg: CME(kx, ky, reg=reg, tol=tol, constraints="positivity").fit_problem(problem),
        "klr": lambda reg: KLR(kx, reg=reg, tol=tol, threshold=threshold, scaling="none").fit(X, Y),
    }


def classification_cell(d: int, n: int, replicate: int, level: float,
                        settings: ClassificationSettings = ClassificationSettings(),
                        methods: tuple[str, ...] = CLASS_METHODS, seed: int = 0) -> dict[str, Any]:
    """Run one cell; returns {method: {metric: value}} for ``CLASS_METRICS`` and "_meta"."""
    _, returns, _ = daily_returns()
    X_all, y_all, _ = return_events(returns, d, level)
    if n >= X_all.shape[0]:
        raise ValueError(f"n: {n} days requested, the data have {X_all.shape[0]}")
    rng = np.random.default_rng([seed, d, n, replicate, int(round(level * 1e4))])
    order = rng.permutation(X_all.shape[0])
    chosen, rest = order[:n], order[n:]
    split = (4 * n) // 5
    train = (X_all[chosen[:split]], y_all[chosen[:split], None])
    validation = (X_all[chosen[split:]], y_all[chosen[split:], None])
    test = (X_all[rest[:settings.test_points]], y_all[rest[:settings.test_points], None])
    threshold = float(np.quantile(train[1], level))

    def loss_of(model: Any, data: tuple) -> float:
        return clipped_logistic_loss(_probability(model, data[0], threshold), data[1][:, 0] <= threshold)

    ky = GaussianKernel(median_heuristic(train[1]))
    kernels_x = [GaussianKernel(factor * median_heuristic(train[0])) for factor in settings.lengthscale_factors]
    table = score_grid([(*train, *validation)], JDL(tol=settings.tol, constraints="none"), kernels_x, [ky], settings.regs,
                       lambda model, X, Y: loss_of(model, (X, Y)))
    kx = GaussianKernel(best_row(table)["lengthscale_x"])
    problem, factor_time = timed(lambda: build_problem(*train, kx, ky, Factorisation(tol=settings.tol)))
    fitters = _fitters(kx, ky, problem, train, threshold, settings.tol)
    results: dict[str, Any] = {}
    regs: dict[str, float] = {}
    for method in methods:
        grid = settings.klr_regs if method == "klr" else settings.regs
        fits = {reg: timed(lambda: fitters[method](reg)) for reg in grid}
        reg = min(fits, key=lambda r: loss_of(fits[r][0], validation))
        model, seconds = fits[reg]
        regs[method] = reg
        probability, query_time = timed(lambda: _probability(model, test[0], threshold))
        results[method] = {
            "loss": clipped_logistic_loss(probability, test[1][:, 0] <= threshold),
            "negative_share": negative_probability_share(probability),
            "normalization_error": np.nan if method == "klr" else normalization_error(model, test[0]),
            "fit_time": seconds + (0.0 if method == "klr" else factor_time),
            "query_time": query_time,
        }
    results["_meta"] = {"threshold": threshold, "rank_x": problem.basis_x.size, "rank_y": problem.basis_y.size,
                        "lengthscale_x": float(kx.lengthscale), "lengthscale_y": float(ky.lengthscale),
                        "regs": regs, "test_days": int(test[0].shape[0]), "event_rate": float(np.mean(test[1] <= threshold))}
    return results
