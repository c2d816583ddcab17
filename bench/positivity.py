"""How each positivity treatment changes the fit: 2,000 points of a bivariate Gaussian, rho = 0.8.

Conditional-mean RMSE against the truth E[Y | x] = rho x on 201 points of [-2, 2], the minimum of
1 + h over the training grid, the negative mass off the grid (x in [-4, 4]) and the fit time.

    python bench/positivity.py [--n 2000] [--lengthscale 0.5] [--reg 1e-4] [--tol 1e-6]
"""
from __future__ import annotations

import argparse

import numpy as np

from _common import median_time, write_json
from jdlcore import JDL, GaussianKernel

VARIANTS = [
    ("unconstrained", "none", "grid"),
    ("normalization", "normalization", "grid"),
    ("tightening (33)", "positivity", "tightening"),
    ("exact grid", "positivity", "grid"),
    ("clip at query", "positivity", "clip"),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--rho", type=float, default=0.8)
    parser.add_argument("--lengthscale", type=float, default=0.5)
    parser.add_argument("--reg", type=float, default=1e-4)
    parser.add_argument("--tol", type=float, default=1e-6)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(1)
    x = rng.standard_normal(args.n)
    y = args.rho * x + np.sqrt(1 - args.rho**2) * rng.standard_normal(args.n)
    grid = np.linspace(-2, 2, 201)[:, None]
    far = np.linspace(-4, 4, 201)[:, None]
    rows = []
    print(f"{'variant':<17}{'mean RMSE':>10}{'grid min 1+h':>14}{'neg. mass |x|<=4':>18}{'fit s':>8}")
    for label, constraints, positivity in VARIANTS:
        estimator = JDL(GaussianKernel(args.lengthscale), GaussianKernel(args.lengthscale), reg=args.reg,
                        tol=args.tol, constraints=constraints, positivity=positivity)
        seconds, _, model = median_time(lambda: estimator.fit(x, y), args.repeats)
        error = float(np.sqrt(np.mean((model.conditional_expectation(grid)[:, 0] - args.rho * grid[:, 0]) ** 2)))
        grid_min = model.grid_minimum(x[:, None])
        negative = float(model.negative_mass(far).max())
        rows.append({"variant": label, "mean_rmse": error, "grid_min": grid_min, "max_negative_mass": negative,
                     "fit_seconds": seconds, "rank_x": model.diagnostics_["rank_x"], "rank_y": model.diagnostics_["rank_y"]})
        print(f"{label:<17}{error:>10.4f}{grid_min:>14.3e}{negative:>18.3e}{seconds:>8.2f}")
    print("wrote", write_json("positivity", {"settings": vars(args), "rows": rows}))


if __name__ == "__main__":
    main()
