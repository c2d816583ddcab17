"""PSDJDL at a rank that matters: p = (m_X + 1)(m_Y + 1) of about 2,000 augmented features.

Bivariate Gaussian (rho = 0.8), ``--n`` training pairs, Gaussian kernels with lengthscale 0.25 (short,
so that the ranks are reached), ranks capped at ``--rank`` per side (p = (rank + 1)^2), reg ``--reg``.
Figures: the fourth-moment set-up and the solve in seconds, ADMM's iterations, its certified relative
duality gap, the objective and the relative second-moment loss (40) against E[Y^2 | x] on 2,000 test
points. ``--max-iter`` caps the solve (each iteration costs one eigendecomposition of a p x p matrix).

    cd bench && python psd_jdl_scale.py [--n 4000] [--rank 44] [--reg 1e-3] [--max-iter 300]
        [--out psd_jdl_scale]
"""
from __future__ import annotations

import argparse
import time
import warnings

import jdlcore  # noqa: F401  (first: it sets OpenBLAS's idle-thread wait)
import numpy as np

from _common import write_json
from jdlcore import DegeneracyWarning, GaussianKernel
from jdlcore.conditional.losses import relative_second_moment_loss, second_moment
from jdlcore.models.psd_jdl import PSDJDL


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4000)
    parser.add_argument("--rank", type=int, default=44)
    parser.add_argument("--reg", type=float, default=1e-3)
    parser.add_argument("--max-iter", type=int, default=300)
    parser.add_argument("--solver-tol", type=float, default=1e-6)
    parser.add_argument("--out", default="psd_jdl_scale", help="name of the JSON in bench/results/")
    args = parser.parse_args()
    rho = 0.8
    rng = np.random.default_rng(1)
    x = rng.standard_normal(args.n)
    y = rho * x + np.sqrt(1 - rho**2) * rng.standard_normal(args.n)
    x_test = np.random.default_rng(2).standard_normal(2000)[:, None]
    target = (rho**2 * x_test[:, 0] ** 2 + 1 - rho**2)[:, None, None]
    kernel = GaussianKernel(0.25)
    p = (args.rank + 1) ** 2
    estimator = PSDJDL(kernel, kernel, reg=args.reg, tol=1e-12, max_rank=args.rank, max_features=p,
                       max_iter=args.max_iter, solver_tol=args.solver_tol, scaling="none")
    started = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DegeneracyWarning)
        model = estimator.fit(x, y)
    seconds = time.perf_counter() - started
    info = model.diagnostics_
    loss = relative_second_moment_loss(model.conditional_expectation(x_test, second_moment), target)
    record = {"settings": vars(args), "features": info["features"], "fit_seconds": seconds,
              "solve_seconds": info["solve_seconds"], "iterations": info["iterations"], "gap": info["gap"],
              "converged": info["converged"], "objective": info["objective"], "second_moment_loss": loss,
              "min_eigenvalue": info["min_eigenvalue"], "normalization_defect": info["normalization_defect"],
              "warnings": [str(w.message) for w in caught]}
    state = "converged" if info["converged"] else "NOT converged"
    print(f"p = {info['features']:,} ({info['rank_x']} x {info['rank_y']} ranks): fit {seconds:.0f} s, ADMM "
          f"{info['iterations']:,} iterations, gap {info['gap']:.1e} ({state}), second-moment loss {loss:.4f}")
    print("wrote", write_json(args.out, record))


if __name__ == "__main__":
    main()
