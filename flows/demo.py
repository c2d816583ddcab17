"""``jdl demo``: fit a JDL model to a nonlinear heteroscedastic data set and report on it.

Data: x ~ U(-3, 3), y = sin(x) + x/3 + (0.15 + 0.25 |x|) e, e ~ N(0, 1): the conditional mean is
sin(x) + x/3 and the conditional standard deviation 0.15 + 0.25 |x|, so the quantiles are known
in closed form and the report can show the model's error against the truth.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from scipy.stats import norm

from jdlcore import JDL, GaussianKernel, median_heuristic, tune


@dataclass
class DemoReport:
    n: int
    best: dict
    candidates: int
    rank_x: int
    rank_y: int
    negative_mass: float
    grid_subsample: int
    grid_min: float
    grid_mean_rmse: float
    mean_rmse: float
    quantile_rmse: dict
    max_normalization_error: float
    seconds: dict

    def lines(self) -> list[str]:
        b = self.best
        return [
            f"data        n = {self.n:,} rows of y = sin(x) + x/3 + (0.15 + 0.25|x|) e",
            f"tuned       lengthscale_x = {b['lengthscale_x']:.3g}, lengthscale_y = {b['lengthscale_y']:.3g}, "
            f"reg = {b['reg']:.0e} (validation loss (40) {b['score']:.4f}, best of {self.candidates})",
            f"ranks       m_X = {self.rank_x}, m_Y = {self.rank_y}",
            f"normalized  max |sum of conditional weights - 1| = {self.max_normalization_error:.1e}",
            f"positivity  clipped at query time; mean negative mass removed = {self.negative_mass:.2e}",
            f"            exact grid positivity on {self.grid_subsample:,} rows: min of 1 + h on the grid = "
            f"{self.grid_min:.2e}, conditional-mean RMSE {self.grid_mean_rmse:.4f}",
            f"accuracy    conditional mean RMSE vs truth = {self.mean_rmse:.4f}",
            "            quantile RMSE vs truth: "
            + ", ".join(f"q{int(round(100 * k))} {v:.4f}" for k, v in self.quantile_rmse.items()),
            "time        " + ", ".join(f"{k} {v:.1f}s" for k, v in self.seconds.items()),
        ]


def make_data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.uniform(-3, 3, n)
    y = np.sin(x) + x / 3 + (0.15 + 0.25 * np.abs(x)) * rng.standard_normal(n)
    return x[:, None], y[:, None]


def _truth(grid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return np.sin(grid) + grid / 3, 0.15 + 0.25 * np.abs(grid)


def run_demo(n: int = 20_000, seed: int = 0, grid_subsample: int = 2_000) -> DemoReport:
    """Tune on a 4:1 split, fit on all rows (clipped positivity), and fit exact grid positivity
    on a subsample; compare both with the known conditional distribution."""
    if n < 100:
        raise ValueError(f"rows: the demo needs at least 100 rows, got {n}")
    X, Y = make_data(n, seed)
    times = {}
    started = time.perf_counter()
    lx, ly = median_heuristic(X, seed=seed), median_heuristic(Y, seed=seed)
    result = tune(
        X, Y,
        estimator=JDL(tol=1e-3, constraints="normalization", seed=seed),
        lengthscales_x=[lx / 8, lx / 4], lengthscales_y=[ly / 8, ly / 4], regs=[1e-6, 1e-5, 1e-4],
        seed=seed, refit=False,
    )
    times["tune"] = time.perf_counter() - started
    best = result.best
    params = dict(
        kernel_x=GaussianKernel(best["lengthscale_x"]), kernel_y=GaussianKernel(best["lengthscale_y"]),
        reg=best["reg"], tol=1e-3, constraints="positivity", seed=seed,
    )
    started = time.perf_counter()
    model = JDL(**params, positivity="clip").fit(X, Y)
    times["fit"] = time.perf_counter() - started
    grid = np.linspace(-2.5, 2.5, 101)[:, None]
    truth_mean, sd = _truth(grid[:, 0])
    started = time.perf_counter()
    mean = model.conditional_expectation(grid)[:, 0]
    levels = [0.1, 0.5, 0.9]
    quantiles = model.conditional_quantile(grid, levels)
    weights = model.conditional_weights(grid)
    negative = float(model.negative_mass(grid).mean())
    times["queries"] = time.perf_counter() - started
    started = time.perf_counter()
    m = min(grid_subsample, n)
    sub = np.random.default_rng(seed).choice(n, m, replace=False)
    exact = JDL(**{**params, "reg": max(best["reg"], 1e-4)}, positivity="grid").fit(X[sub], Y[sub])
    times[f"grid positivity fit ({m:,} rows)"] = time.perf_counter() - started
    exact_mean = exact.conditional_expectation(grid)[:, 0]
    return DemoReport(
        n=n, best=best, candidates=len(result.table),
        rank_x=model.diagnostics_["rank_x"], rank_y=model.diagnostics_["rank_y"],
        negative_mass=negative, grid_subsample=m, grid_min=float(exact.diagnostics_["grid_min"]),
        grid_mean_rmse=float(np.sqrt(np.mean((exact_mean - truth_mean) ** 2))),
        mean_rmse=float(np.sqrt(np.mean((mean - truth_mean) ** 2))),
        quantile_rmse={
            level: float(np.sqrt(np.mean((quantiles[:, k] - (truth_mean + sd * norm.ppf(level))) ** 2)))
            for k, level in enumerate(levels)
        },
        max_normalization_error=float(np.abs(weights.sum(axis=1) - 1).max()),
        seconds=times,
    )
