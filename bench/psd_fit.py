"""The PSD density fit (estimator (12) of Rudi & Ciliberto) to a certified duality gap.

Samples of a 2-D standard normal (n = 2,000), Gaussian kernel of lengthscale 0.5, reg 1e-6, the centres
the fit's default (greedy pivoted-Cholesky pivots). ``pgd`` (FISTA with adaptive restart and an exact
projection) stops where its Frank-Wolfe duality gap, an upper bound on J(A) - J* relative to
max(1, |J(A)|), is at most ``--gap-tol``. For m small enough for cvxpy (Clarabel) the objectives are
compared. Figures: iterations, restarts, the certified gap, the seconds, and the objective's relative
distance to cvxpy's.

    python bench/psd_fit.py [--centres 20 40 100] [--gap-tol 1e-6] [--out psd_fit]
"""
from __future__ import annotations

import argparse
import sys
import time
import warnings

import jdlcore  # noqa: F401  (first: it sets OpenBLAS's idle-thread wait)
import numpy as np

from _common import write_json
from jdlcore.psd.fit import fit_psd_density

CVXPY_MAX_CENTRES = 40


def run(m: int, gap_tol: float, X: np.ndarray) -> dict:
    options = dict(m=m, lengthscale=0.5, reg=1e-6)
    started = time.perf_counter()
    info = fit_psd_density(X, solver="pgd", gap_tol=gap_tol, max_iter=100_000, **options).fit_info_
    row = {"m": m, "seconds": time.perf_counter() - started,
           **{key: info[key] for key in ("iterations", "restarts", "converged", "gap", "objective", "cond_K")}}
    if m <= CVXPY_MAX_CENTRES:
        started = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            reference = fit_psd_density(X, solver="cvxpy", **options).fit_info_
        row.update(cvxpy_objective=reference["objective"], cvxpy_seconds=time.perf_counter() - started,
                   cvxpy_status=reference.get("status"),
                   relative_difference=abs(info["objective"] - reference["objective"]) / abs(reference["objective"]))
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--centres", type=int, nargs="+", default=[20, 40, 100])
    parser.add_argument("--gap-tol", type=float, default=1e-6)
    parser.add_argument("--out", default="psd_fit", help="name of the JSON in bench/results/")
    args = parser.parse_args(argv)
    X = np.random.default_rng(0).normal(size=(2000, 2))
    rows = []
    for m in args.centres:
        rows.append(run(m, args.gap_tol, X))
        r = rows[-1]
        versus = (f", cvxpy {r['cvxpy_objective']:.10g} in {r['cvxpy_seconds']:.1f} s (relative difference "
                  f"{r['relative_difference']:.1e})" if "cvxpy_objective" in r else "")
        print(f"m = {m}: {r['iterations']:,} iterations ({r['restarts']} restarts), gap {r['gap']:.2e} "
              f"({'converged' if r['converged'] else 'NOT converged'}), objective {r['objective']:.10g} in "
              f"{r['seconds']:.1f} s{versus}", flush=True)
    print(f"-> {write_json(args.out, {'gap_tol': args.gap_tol, 'rows': rows})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
