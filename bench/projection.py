"""Throughput of the projection onto probability vectors, this checkout against another one.

Three models, fitted alike in every run (fixed seeds and hyperparameters, in this process):

* ``demo``: the demo's y = sin(x) + x/3 + (0.15 + 0.25|x|) e on 20,000 rows, at the lengthscales its
  tuning picks (0.0992, 0.203) and reg 1e-6;
* ``narrow``: y = sin(x) + 0.02 e on 3,000 rows, x ~ U(-3, 3), lengthscales 0.05 / 0.05, reg 1e-8: narrow
  conditional laws, where most rows have negative signed weight and many sit near the boundary of
  the moment set;
* ``vector``: correlated Gaussian (x, y) in R^(3+3) on 100,000 rows, lengthscales 1, tol 1e-2, reg
  1e-6 (the 3-D y model of ``bench/scoring.py``).

Each scores ``--queries`` fresh x drawn like the training x: 99 quantile levels (of the first y
component for ``vector``), rows per second as the median of ``--repeats`` timings in one process.
With ``--baseline ROOT`` the script runs itself ``--runs`` times under each checkout, alternating
(this one, then ROOT, ...), and reports the median rate of each and their ratio.

    python bench/projection.py [--baseline /path/to/other/checkout] [--runs 5] [--queries 100000]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
MODELS = ("demo", "narrow", "vector")


def fit(name: str):
    """The named model and its query x (100,000 fresh rows, seed fixed)."""
    from jdlcore import JDL, GaussianKernel

    rng = np.random.default_rng(11)
    if name == "demo":
        from jdl.demo import make_data

        table = make_data(20_000, 0, 1)
        X, Y = table[["x"]].to_numpy(), table[["y"]].to_numpy()
        model = JDL(GaussianKernel(0.0992), GaussianKernel(0.203), reg=1e-6, scaling="none").fit(X, Y)
        return model, rng.uniform(-3, 3, (100_000, 1))
    if name == "narrow":
        X = rng.uniform(-3, 3, (3_000, 1))
        Y = np.sin(X) + 0.02 * rng.standard_normal((3_000, 1))
        model = JDL(GaussianKernel(0.05), GaussianKernel(0.05), reg=1e-8, scaling="none").fit(X, Y)
        return model, rng.uniform(-3, 3, (100_000, 1))
    sys.path.insert(0, str(HERE))
    from end_to_end import correlation

    factor = np.linalg.cholesky(correlation(6, 0))
    data = rng.standard_normal((100_000, 6)) @ factor.T
    model = JDL(GaussianKernel(1.0), GaussianKernel(1.0), reg=1e-6, tol=1e-2,
                scaling="none").fit(data[:, :3], data[:, 3:])
    return model, (rng.standard_normal((100_000, 6)) @ factor.T)[:, :3]


def measure(names: list[str], queries: int, repeats: int) -> dict[str, dict[str, float]]:
    """Rows per second of 99 quantiles for each model (median of ``repeats``) and its level shares."""
    levels = np.linspace(0.01, 0.99, 99)
    out = {}
    for name in names:
        model, Xq = fit(name)
        Xq = Xq[:queries]
        model.conditional_quantile(Xq[:10], levels)  # the compiled kernels, loaded once
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            model.conditional_quantile(Xq, levels)
            times.append(time.perf_counter() - started)
        kept = model.law_levels(Xq[:20_000])
        shares = {str(int(v)): float(np.mean(kept == v)) for v in np.unique(kept)}
        out[name] = {"rows_per_second": queries / statistics.median(times), "level_shares": shares}
    return out


def run_child(root: Path, names: list[str], queries: int, repeats: int) -> dict:
    """``measure`` in a fresh interpreter importing the code under ``root``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(root / "bench")])}
    command = [sys.executable, str(HERE / "projection.py"), "--child", "--models", *names,
               "--queries", str(queries), "--repeats", str(repeats)]
    done = subprocess.run(command, env=env, cwd=root, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"the run under {root} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", type=Path, default=None, help="another checkout to compare with")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--queries", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.models, args.queries, args.repeats)))
        return
    roots = {"this": HERE.parent} | ({"baseline": args.baseline.resolve()} if args.baseline else {})
    for root in roots.values():  # compile and cache each checkout's kernels before timing
        run_child(root, args.models, 1_000, 1)
    runs: dict[str, list[dict]] = {label: [] for label in roots}
    for i in range(args.runs):
        for label, root in roots.items():
            runs[label].append(run_child(root, args.models, args.queries, args.repeats))
            print(f"run {i + 1} {label}: " + ", ".join(f"{m} {runs[label][-1][m]['rows_per_second']:,.0f}/s"
                                                      for m in args.models), flush=True)
    summary = {}
    for name in args.models:
        rates = {label: statistics.median(r[name]["rows_per_second"] for r in runs[label]) for label in roots}
        shares = {label: runs[label][-1][name]["level_shares"] for label in roots}
        summary[name] = {"rows_per_second": rates, "level_shares": shares}
        line = f"{name}: " + ", ".join(f"{label} {rate:,.0f} rows/s" for label, rate in rates.items())
        if "baseline" in rates:
            summary[name]["ratio"] = rates["this"] / rates["baseline"]
            line += f", ratio {summary[name]['ratio']:.3f}"
        print(line + f"; levels {summary[name]['level_shares']}")
    sys.path.insert(0, str(HERE))
    from _common import write_json

    print("wrote", write_json("projection", {"summary": summary, "runs": runs, "args": {
        k: str(v) for k, v in vars(args).items()}}))


if __name__ == "__main__":
    main()
