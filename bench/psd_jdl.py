"""PSDJDL (1 + h a PSD form, non-negative everywhere) against the JDL positivity treatments.

Bivariate Gaussian, rho = 0.8, n = 2000 training pairs, Gaussian kernels with lengthscale 0.5,
pivoted-Cholesky tol 1e-2 (small ranks). For each reg in a small grid and each method: the
conditional-mean RMSE against rho x on 201 points of [-2, 2], the relative second-moment loss (40)
against E[Y^2 | x] = rho^2 x^2 + 1 - rho^2 on 2000 test points, the minimum of 1 + h on the far grid
[-6, 6]^2 (121 x 121; density_ratio for PSDJDL, 1 + Psi_Y(y) H Psi_X(x)^T for JDL), the largest
negative mass of Q(Y | x) over x in [-6, 6] (before clipping for "clip") and the fit time.
A second table shows each method at its own reg, chosen on 1000 fresh validation pairs by the
pooled relative second-moment loss against the observed y^2 (reg means different things for JDL
and PSDJDL, so equal values are not like for like).

    cd bench && python psd_jdl.py [--n 2000] [--regs 1e-4 1e-3 1e-2]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from _common import write_json
from jdlcore import JDL, GaussianKernel
from jdlcore.conditional.losses import relative_second_moment_loss, second_moment
from jdlcore.models.psd_jdl import PSDJDL

METHODS = [
    ("JDL normalization", dict(constraints="normalization")),
    ("JDL grid positivity", dict(constraints="positivity", positivity="grid")),
    ("JDL clip", dict(constraints="positivity", positivity="clip")),
    ("PSDJDL", None),
]


def far_minimum(model, far: np.ndarray) -> float:
    """The smallest 1 + h(x, y) over the grid far x far."""
    gx, gy = np.meshgrid(far, far, indexing="ij")
    return float(model.density_ratio(gx.reshape(-1, 1), gy.reshape(-1, 1)).min())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--n-test", type=int, default=2000)
    parser.add_argument("--rho", type=float, default=0.8)
    parser.add_argument("--lengthscale", type=float, default=0.5)
    parser.add_argument("--tol", type=float, default=1e-2)
    parser.add_argument("--regs", type=float, nargs="+", default=[1e-4, 1e-3, 1e-2])
    parser.add_argument("--max-iter", type=int, default=10_000)
    args = parser.parse_args()
    rng = np.random.default_rng(1)
    x = rng.standard_normal(args.n)
    y = args.rho * x + np.sqrt(1 - args.rho**2) * rng.standard_normal(args.n)
    x_test = np.random.default_rng(2).standard_normal(args.n_test)[:, None]
    validation = np.random.default_rng(3).standard_normal(1000)
    x_val = validation[:, None]
    y_val = args.rho * validation + np.sqrt(1 - args.rho**2) * np.random.default_rng(4).standard_normal(1000)
    target = (args.rho**2 * x_test[:, 0] ** 2 + 1 - args.rho**2)[:, None, None]
    grid = np.linspace(-2, 2, 201)[:, None]
    far = np.linspace(-6, 6, 121)
    kernel = GaussianKernel(args.lengthscale)
    rows = []
    JDL(kernel, kernel, reg=args.regs[0], tol=args.tol, scaling="none").fit(x, y)  # warm-up: imports, BLAS threads
    header = ("| method | reg | ranks | mean RMSE | rel. 2nd-moment loss | min 1+h on [-6,6]^2 | max neg. mass, x in [-6,6] "
              "| fit s | solver |")
    print(header)
    print("|---" * (header.count("|") - 1) + "|")
    for reg in args.regs:
        for label, options in METHODS:
            if options is None:
                estimator = PSDJDL(kernel, kernel, reg=reg, tol=args.tol, max_iter=args.max_iter, scaling="none")
            else:
                estimator = JDL(kernel, kernel, reg=reg, tol=args.tol, scaling="none", **options)
            started = time.perf_counter()
            model = estimator.fit(x, y)
            seconds = time.perf_counter() - started
            rmse = float(np.sqrt(np.mean((model.conditional_expectation(grid)[:, 0] - args.rho * grid[:, 0]) ** 2)))
            loss = relative_second_moment_loss(model.conditional_expectation(x_test, second_moment), target)
            minimum = far_minimum(model, far)
            negative = float(model.negative_mass(far[:, None]).max()) + 0.0  # no -0.0
            info = model.diagnostics_
            if options is None:
                solver = (f"ADMM {info['iterations']} it, gap {info['gap']:.1e}, "
                          f"{'converged' if info['converged'] else 'NOT converged'}")
            elif "rounds" in info:
                solver = f"cutting planes, {info['rounds']} rounds"
            else:
                solver = "closed form"
            validation_loss = relative_second_moment_loss(model.conditional_expectation(x_val, second_moment),
                                                          (y_val**2)[:, None, None], pooled=True)
            row = {"method": label, "reg": reg, "validation_loss": validation_loss,
                   "rank_x": info["rank_x"], "rank_y": info["rank_y"], "mean_rmse": rmse,
                   "second_moment_loss": loss, "far_min": minimum, "max_negative_mass": negative,
                   "fit_seconds": seconds, "solver": solver}
            if options is None:
                row.update({k: info[k] for k in ("iterations", "converged", "gap", "objective", "min_eigenvalue",
                                                 "normalization_defect", "features")})
            rows.append(row)
            print(f"| {label} | {reg:.0e} | {info['rank_x']}x{info['rank_y']} | {rmse:.4f} | {loss:.4f} | "
                  f"{minimum:.3e} | {negative:.3e} | {seconds:.2f} | {solver} |", flush=True)
    print("\nEach method at the reg of its smallest validation loss:\n")
    print("| method | chosen reg | mean RMSE | rel. 2nd-moment loss | min 1+h on [-6,6]^2 | fit s |")
    print("|---|---|---|---|---|---|")
    chosen = []
    for label, _ in METHODS:
        best = min((row for row in rows if row["method"] == label), key=lambda row: row["validation_loss"])
        chosen.append(best)
        print(f"| {label} | {best['reg']:.0e} | {best['mean_rmse']:.4f} | {best['second_moment_loss']:.4f} | "
              f"{best['far_min']:.3e} | {best['fit_seconds']:.2f} |")
    print("wrote", write_json("psd_jdl", {"settings": vars(args), "rows": rows, "chosen": chosen}))


if __name__ == "__main__":
    main()
