"""What each positivity option costs in accuracy, each at its own validated hyperparameters.

Data: the demo's y = sin(x) + x/3 + (0.15 + 0.25|x|) e, x ~ U(-3, 3), and its 3-D variant
(``jdl.demo.truth``), at n training rows, a separate validation draw and 500 fresh query x.
For every option the lengthscales and reg are chosen by the mean CRPS on the validation rows
(exact for the weighted support atoms) over the same grid: lengthscales 1/16, 1/8, 1/4, 1/2 times
the median pairwise distance of each side (x: 1/4, 1/2, 1 in 3-D), reg 1e-7 ... 1e-4. Each pair
of lengthscales is factorised once; the options share it. Reported at the queries: the RMSE
against the truth of the conditional mean and of the 10, 50 and 90 % quantiles, the ratio to the
normalization-only JDL (a signed law), the negative weight left (none for the positive laws) and
the fit and query times.

    python bench/positivity.py [--n 20000 100000] [--dims 1 3] [--grid]
"""
from __future__ import annotations

import argparse
import itertools
import time
import warnings

import numpy as np
from scipy.stats import norm

from _common import write_json
from jdl.demo import make_data, truth
from jdlcore import JDL, Factorisation, GaussianKernel, build_problem, median_heuristic

LEVELS = np.array([0.1, 0.5, 0.9])
REGS = (1e-7, 1e-6, 1e-5, 1e-4)
OPTIONS = {  # label -> JDL parameters
    "normalization (signed)": dict(constraints="normalization"),
    "project (default)": dict(positivity="project"),
    "clip": dict(positivity="clip"),
    "tightening (33)": dict(positivity="tightening"),
}


def draw(n: int, seed: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    table = make_data(n, seed, d)
    return table.drop(columns="y").to_numpy(), table[["y"]].to_numpy()


def errors(model: JDL, Xq: np.ndarray) -> dict[str, float]:
    mean, sd = truth(Xq)
    predicted = model.conditional_expectation(Xq)[:, 0]
    quantiles = model.conditional_quantile(Xq, LEVELS)
    weights = model.conditional_weights(Xq)
    out = {"mean_rmse": float(np.sqrt(np.mean((predicted - mean) ** 2)))}
    for k, level in enumerate(LEVELS):
        target = mean + sd * norm.ppf(level)
        out[f"q{int(100 * level)}_rmse"] = float(np.sqrt(np.mean((quantiles[:, k] - target) ** 2)))
    out["negative_weight"] = float(-np.minimum(weights, 0).sum(axis=1).max())
    out["total_weight_error"] = float(np.abs(weights.sum(axis=1) - 1).max())
    return out


def run(n: int, d: int, options: dict, seed: int = 0) -> list[dict]:
    X, Y = draw(n, seed, d)
    Xv, Yv = draw(5000, seed + 1, d)
    Xq, _ = draw(500, seed + 2, d)
    mx, my = median_heuristic(X, seed=seed), median_heuristic(Y, seed=seed)
    factors_x = (1 / 16, 1 / 8, 1 / 4, 1 / 2) if d == 1 else (1 / 4, 1 / 2, 1)
    best: dict[str, tuple] = {}
    factor_seconds = 0.0
    for fx, fy in itertools.product(factors_x, (1 / 16, 1 / 8, 1 / 4)):
        kx, ky = GaussianKernel(fx * mx), GaussianKernel(fy * my)
        started = time.perf_counter()
        problem = build_problem(X, Y, kx, ky, Factorisation(tol=1e-3))
        factor_seconds += time.perf_counter() - started
        for label, params in options.items():
            for reg in REGS:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # grid budget warnings: the fallback is scored as it is
                    model = JDL(kx, ky, reg=reg, tol=1e-3, **params).fit_problem(problem, Y)
                score = float(np.mean(model.crps(Xv, Yv)))
                if label not in best or score < best[label][0]:
                    best[label] = (score, kx, ky, reg)
    rows = []
    for label, params in options.items():
        score, kx, ky, reg = best[label]
        started = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = JDL(kx, ky, reg=reg, tol=1e-3, scaling="none", **params).fit(X, Y)  # as the problem's kernels
        fit_seconds = time.perf_counter() - started
        started = time.perf_counter()
        row = {"n": n, "d": d, "option": label, "validation_crps": score, "lengthscale_x": kx.lengthscale,
               "lengthscale_y": ky.lengthscale, "reg": reg, "rank_x": model.diagnostics_["rank_x"],
               "rank_y": model.diagnostics_["rank_y"], "support": model.support_.size, **errors(model, Xq),
               "fit_seconds": fit_seconds}
        row["query_seconds"] = time.perf_counter() - started
        rows.append(row)
    reference = rows[0]
    for row in rows:
        for key in ("mean_rmse", "q10_rmse", "q50_rmse", "q90_rmse"):
            row[f"{key}_ratio"] = row[key] / reference[key]
    print(f"\nn = {n:,}, d_x = {d} (tuning: {factor_seconds:.0f} s of factorisations)")
    print(f"{'option':<24}{'mean':>8}{'q10':>8}{'q50':>8}{'q90':>8}   ratios to signed          "
          f"{'neg.':>8}{'lx':>7}{'ly':>7}{'reg':>8}{'fit s':>7}")
    for row in rows:
        ratios = " ".join(f"{row[f'{k}_rmse_ratio']:.2f}" for k in ("mean", "q10", "q50", "q90"))
        print(f"{row['option']:<24}{row['mean_rmse']:>8.4f}{row['q10_rmse']:>8.4f}{row['q50_rmse']:>8.4f}"
              f"{row['q90_rmse']:>8.4f}   {ratios:<26}{row['negative_weight']:>8.1e}{row['lengthscale_x']:>7.3f}"
              f"{row['lengthscale_y']:>7.3f}{row['reg']:>8.0e}{row['fit_seconds']:>7.2f}")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, nargs="+", default=[20_000, 100_000])
    parser.add_argument("--dims", type=int, nargs="+", default=[1, 3])
    parser.add_argument("--grid", action="store_true", help="also the budgeted grid positivity (slow)")
    args = parser.parse_args()
    options = dict(OPTIONS)
    if args.grid:
        options["grid (budgeted)"] = dict(positivity="grid", grid_seconds=30.0)
    rows = [row for n in args.n for d in args.dims for row in run(n, d, options)]
    print("wrote", write_json("positivity", {"rows": rows, "regs": REGS, "levels": LEVELS.tolist()}))


if __name__ == "__main__":
    main()
