"""The default positive law at scale, through the CLI: accuracy, scoring throughput and fit cost.

For each n (default 1e5, 1e6, 1e7) the demo's data (``jdl.demo``, scalar y; ``--dims 3`` for the
3-D x variant) are written to Parquet and run as a user would: ``jdl stage``, ``jdl tune`` (defaults),
``jdl fit --tuning`` (default positivity: the projection) and ``jdl score``. Then:

* accuracy at 500 fresh query x: RMSE against the truth of the conditional mean and the 10/50/90 %
  quantiles, against the same fit's signed law clipped over all n training atoms (the positivity of
  earlier versions, computed here in two streamed passes over the atoms); the scored rows' weights:
  smallest weight and largest |total - 1|;
* scoring throughput (median of ``--repeats``) of the stored model over ``--queries`` rows: the mean,
  the second moment, the CDF at 9 thresholds and 99 quantile levels, in rows per second;
* fit cost at ``--fit-tol`` (default 1e-2): ``jdl fit`` with the default positivity and with
  ``--constraints normalization``, wall time and peak memory of the command and its children.

    python bench/positivity_scale.py [--n 100000 1000000 10000000] [--dims 1] [--queries 100000]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from scipy.stats import norm

from _common import PeakMemory, scoring_rates, write_json
from jdl.demo import make_data, truth
from pipeline.model_store import load_model

LEVELS = np.array([0.1, 0.5, 0.9])
JDL = str(Path(sys.executable).with_name("jdl"))


def jdl(*args: str) -> tuple[float, int]:
    """Run a jdl command; (wall seconds, peak RSS bytes of it and its children)."""
    started = time.perf_counter()
    with PeakMemory() as memory:
        result = subprocess.run([JDL, *args], capture_output=True, text=True,
                                env={**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"})
    if result.returncode != 0:
        raise RuntimeError(f"jdl {' '.join(args)} failed: {result.stderr[-2000:]}")
    print("   ", result.stdout.strip().splitlines()[-1][:160], flush=True)
    return time.perf_counter() - started, memory.peak


def write_table(path: Path, n: int, seed: int, d: int, block: int = 2_000_000) -> list[str]:
    """The demo's data as Parquet, written in blocks (seeded per block); returns the x column names."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    writer = None
    for k, start in enumerate(range(0, n, block)):
        table = pa.Table.from_pandas(make_data(min(block, n - start), seed * 1000 + k, d), preserve_index=False)
        writer = writer or pq.ParquetWriter(path, table.schema)
        writer.write_table(table)
    writer.close()
    return [name for name in table.column_names if name != "y"]


def clipped_over_all_atoms(model, Xq: np.ndarray, block: int = 1 << 16) -> tuple[np.ndarray, np.ndarray]:
    """The signed law of a JDL ``model`` (the law itself, at rows Xq as its x kernel reads them) clipped at
    0 over all n training atoms, renormalised: conditional mean (q,) and 10/50/90 % quantiles (q, 3), in
    two streamed passes over the atoms sorted by value."""
    g = model._directions(Xq)
    atoms = np.asarray(model.y_atoms_[:], dtype=np.float64)[:, 0]
    order = np.argsort(atoms, kind="stable")
    atoms = atoms[order]
    features = model.basis_y_.features
    total, first = np.zeros(len(Xq)), np.zeros(len(Xq))
    for start in range(0, atoms.size, block):
        y = atoms[start:start + block]
        w = np.maximum(1.0 + g @ features(y[:, None]).T, 0.0)
        total += w.sum(axis=1)
        first += w @ y
    targets = LEVELS[None, :] * total[:, None]
    quantiles = np.full((len(Xq), LEVELS.size), np.nan)
    running = np.zeros(len(Xq))
    for start in range(0, atoms.size, block):
        y = atoms[start:start + block]
        cumulative = running[:, None] + np.cumsum(np.maximum(1.0 + g @ features(y[:, None]).T, 0.0), axis=1)
        for k in range(LEVELS.size):
            open_rows = np.isnan(quantiles[:, k])
            reached = cumulative[open_rows] >= targets[open_rows, k:k + 1] * (1 - 1e-12)
            hit = reached.any(axis=1)
            rows = np.flatnonzero(open_rows)[hit]
            quantiles[rows, k] = y[np.argmax(reached[hit], axis=1)]
        running = cumulative[:, -1]
    return first / total, quantiles


def rmse(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.sqrt(np.mean((a - b) ** 2)))


def accuracy(model, Xq: np.ndarray) -> dict:
    mean, sd = truth(Xq)
    targets = mean[:, None] + sd[:, None] * norm.ppf(LEVELS)[None, :]
    ours_mean, ours_q = model.conditional_expectation(Xq)[:, 0], model.conditional_quantile(Xq, LEVELS)
    started = time.perf_counter()
    if model.standardises:
        raise ValueError("model: reads y standardised by its summaries; the clipped reference is of a law of y itself "
                         "(tune with --summaries boosted or none)")
    clip_mean, clip_q = clipped_over_all_atoms(model.law_, model.rows(Xq))
    reference_seconds = time.perf_counter() - started
    weights = model.conditional_weights(Xq)
    out = {"reference_seconds": reference_seconds, "min_weight": float(weights.min()),
           "total_weight_error": float(np.abs(weights.sum(axis=1) - 1).max())}
    for name, a, b in [("mean", ours_mean, clip_mean)] + [
            (f"q{int(100 * level)}", ours_q[:, k], clip_q[:, k]) for k, level in enumerate(LEVELS)]:
        target = mean if name == "mean" else targets[:, list(LEVELS).index(int(name[1:]) / 100)]
        out[f"{name}_rmse"], out[f"{name}_rmse_clip_all_atoms"] = rmse(a, target), rmse(b, target)
        out[f"{name}_ratio"] = out[f"{name}_rmse"] / out[f"{name}_rmse_clip_all_atoms"]
    return out


def throughput(models: dict[int, object], queries: int, repeats: int, d: int) -> dict[int, dict[str, float]]:
    """Rows per second of each model (by n) for each query (``_common.scoring_rates``), on fresh x of
    the demo's data; the CDF at 9 thresholds."""
    Xq = make_data(queries, 99, d).drop(columns="y").to_numpy()
    return scoring_rates(models, Xq, np.linspace(-2, 2, 9), repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, nargs="+", default=[100_000, 1_000_000, 10_000_000])
    parser.add_argument("--dims", type=int, default=1)
    parser.add_argument("--queries", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--fit-tol", type=float, default=1e-2)
    parser.add_argument("--keep", help="directory to keep the stores in (default: a temporary one)")
    parser.add_argument("--scoring-only", action="store_true",
                        help="only the scoring throughput of the models kept in --keep by an earlier run")
    args = parser.parse_args()
    if args.scoring_only:
        models = {n: load_model(Path(args.keep) / f"n{n}" / "model.zarr") for n in args.n}
        rates = throughput(models, args.queries, args.repeats, args.dims)
        print_rates(rates, models)
        print("wrote", write_json(f"positivity_scale_scoring_d{args.dims}", {
            "rows_per_second": {str(n): r for n, r in rates.items()}, "args": vars(args),
            "models": {str(n): {"support": m.support_.size, "rank_x": m.basis_x_.size, "rank_y": m.basis_y_.size}
                       for n, m in models.items()}}))
        return
    root = Path(args.keep or tempfile.mkdtemp(prefix="jdl-positivity-"))
    root.mkdir(parents=True, exist_ok=True)
    rows = []
    try:
        for n in args.n:
            print(f"n = {n:,}", flush=True)
            work = root / f"n{n}"
            work.mkdir(exist_ok=True)
            columns = write_table(work / "train.parquet", n, 0, args.dims)
            write_table(work / "queries.parquet", 500, 7, args.dims)
            x = ",".join(columns)
            row = {"n": n, "d": args.dims}
            row["stage_seconds"], _ = jdl("stage", str(work / "train.parquet"), "--x", x, "--y", "y", "--out",
                                          str(work / "data.zarr"))
            jdl("stage", str(work / "queries.parquet"), "--x", x, "--y", "y", "--out", str(work / "queries.zarr"))
            row["tune_seconds"], _ = jdl("tune", str(work / "data.zarr"), "--out", str(work / "tuning.zarr"))
            row["fit_seconds"], row["fit_peak_bytes"] = jdl("fit", str(work / "data.zarr"), "--out",
                                                            str(work / "model.zarr"), "--tuning",
                                                            str(work / "tuning.zarr"))
            jdl("score", str(work / "model.zarr"), str(work / "queries.zarr"), "--out", str(work / "scores.zarr"),
                "--function", "mean", "--function", "quantile:0.1,0.5,0.9")
            model = load_model(work / "model.zarr")
            Xq = make_data(500, 7000, args.dims).drop(columns="y").to_numpy()  # the rows of queries.parquet
            row.update({"rank_x": model.diagnostics_["rank_x"], "rank_y": model.diagnostics_["rank_y"],
                        "support": model.support_.size, "support_exact": model.support_.exact,
                        "hyperparameters": json.loads(json.dumps(model.provenance_.get("tuning", {}).get("best")))})
            row.update(accuracy(model, Xq))
            for label, extra in (("project", []), ("normalization", ["--constraints", "normalization"])):
                best = row["hyperparameters"]
                seconds, peak = jdl("fit", str(work / "data.zarr"), "--out", str(work / f"fit-{label}.zarr"),
                                    "--lengthscale-x", str(best["lengthscale_x"]), "--lengthscale-y",
                                    str(best["lengthscale_y"]), "--reg", str(best["reg"]), "--tol",
                                    str(args.fit_tol), *extra)
                row[f"fit_{label}_seconds"], row[f"fit_{label}_peak_bytes"] = seconds, peak
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "hyperparameters"}, default=float), flush=True)
            (work / "train.parquet").unlink()
        models = {row["n"]: load_model(root / f"n{row['n']}" / "model.zarr") for row in rows}
        for row, rates in zip(rows, throughput(models, args.queries, args.repeats, args.dims).values()):
            row["rows_per_second"] = rates
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(f"\n{'n':>10}{'mean':>8}{'q10':>8}{'q50':>8}{'q90':>8}  (ratio to clip over all n atoms)")
    for row in rows:
        print(f"{row['n']:>10,}{row['mean_ratio']:>8.3f}{row['q10_ratio']:>8.3f}{row['q50_ratio']:>8.3f}"
              f"{row['q90_ratio']:>8.3f}")
    print_rates({row["n"]: row["rows_per_second"] for row in rows}, models)
    print("wrote", write_json(f"positivity_scale_d{args.dims}", {"rows": rows, "args": vars(args)}))


def print_rates(rates: dict[int, dict[str, float]], models: dict[int, object]) -> None:
    """Rows per second by training size, and each against the smallest n's."""
    first = min(rates)
    print(f"\n{'n':>10}{'M':>6}{'m_Y':>5}{'mean/s':>10}{'2nd/s':>10}{'cdf9/s':>10}{'q99/s':>10}   ratio to n = {first:,}")
    for n, by_name in rates.items():
        model = models[n]
        print(f"{n:>10,}{model.support_.size:>6}{model.basis_y_.size:>5}" + "".join(f"{v:>10,.0f}" for v in by_name.values())
              + "   " + " ".join(f"{v / rates[first][k]:.2f}" for k, v in by_name.items()))


if __name__ == "__main__":
    main()
