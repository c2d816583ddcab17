"""End to end at scale: stage a table from a file on disk, fit, persist, score; times and peak memory.

Data: n rows of a correlated Gaussian (x, y) in R^(3+3) with a fixed random correlation matrix,
zero mean and unit variances, written to an .npy file first (not timed). Gaussian kernels with
lengthscale 1 on both sides (exp(-r^2/2), the setting of REFERENCES.md), random pivoting,
relative tolerance ``--tol`` (the paper uses 1e-1 at n = 1e7 and 1e-2 at n = 1e6).

Peak memory is the largest sum of resident set sizes of this process and all its children
(the Dask workers), sampled every 0.1 s.

Issue targets (2 cores, 24 GB): n = 1e7, tol 1e-1: stage + fit + persist <= 90 s with peak <= 4 GB;
tol 1e-2: <= 10 min with peak <= 8 GB; scoring 1e7 rows (mean, second_moment) <= 2 min;
n = 1e6: the Dask fit at most 1.5x the in-memory fit (``--scheduler memory`` vs ``local``).

    python bench/end_to_end.py --rows 10000000 --tol 0.1 [--scheduler local] [--score]
"""
from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from _common import PeakMemory, write_json
from pipeline.fitting import fit_store
from pipeline.scoring import score_store
from pipeline.staging import stage


def correlation(d: int, seed: int) -> np.ndarray:
    A = np.random.default_rng(seed).standard_normal((d, d + 2))
    C = A @ A.T
    scale = 1 / np.sqrt(np.diag(C))
    return C * scale[:, None] * scale[None, :]


def write_source(path: Path, rows: int, seed: int, block: int = 1_000_000) -> None:
    """rows x 6 correlated Gaussian values as an .npy file, written block by block."""
    factor = np.linalg.cholesky(correlation(6, seed))
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float64, shape=(rows, 6))
    rng = np.random.default_rng(seed + 1)
    for start in range(0, rows, block):
        stop = min(start + block, rows)
        out[start:stop] = rng.standard_normal((stop - start, 6)) @ factor.T
    out.flush()
    del out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--tol", type=float, default=1e-1)
    parser.add_argument("--reg", type=float, default=1e-6)
    parser.add_argument("--lengthscale", type=float, default=1.0)
    parser.add_argument("--constraints", default="normalization")
    parser.add_argument("--positivity", default="tightening")
    parser.add_argument("--scheduler", default="local", help="memory | local | tcp://HOST:PORT")
    parser.add_argument("--chunk-size", type=int, default=131_072)
    parser.add_argument("--score", action="store_true", help="also score every row (mean, second_moment)")
    parser.add_argument("--workdir", default=None, help="where the stores go (default: a temporary directory)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="jdl-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    source, data, model, scores = (workdir / name for name in ("source.npy", "data.zarr", "model.zarr", "scores.zarr"))
    for path in (data, model, scores):
        shutil.rmtree(path, ignore_errors=True)
    if not source.exists() or np.load(source, mmap_mode="r").shape[0] != args.rows:
        write_source(source, args.rows, args.seed)
    result: dict = {"rows": args.rows, "tol": args.tol, "reg": args.reg, "scheduler": args.scheduler,
                    "constraints": args.constraints, "chunk_size": args.chunk_size}

    def say(line: str) -> None:
        print(f"  [{time.perf_counter() - t0:7.1f}s] {line}", flush=True)

    t0 = time.perf_counter()
    with PeakMemory() as memory:
        stage(source, data, ["0", "1", "2"], ["3", "4", "5"], chunk_size=args.chunk_size)
        result["stage_seconds"] = time.perf_counter() - t0
        say(f"staged {args.rows:,} rows")
        _, fitted = fit_store(data, model, lengthscale_x=args.lengthscale, lengthscale_y=args.lengthscale,
                              reg=args.reg, tol=args.tol, constraints=args.constraints,
                              positivity=args.positivity, scheduler=args.scheduler, progress=say)
        result["end_to_end_seconds"] = time.perf_counter() - t0
    d = fitted.diagnostics_
    result.update({
        "peak_rss_gb": memory.peak / 1e9, "rank_x": d["rank_x"], "rank_y": d["rank_y"],
        "relative_error_x": d["relative_error_x"], "relative_error_y": d["relative_error_y"],
        "fit_seconds": d["fit_seconds"], "write_seconds": d["write_seconds"], "solve_seconds": d["solve_seconds"],
        "cholesky_seconds": d.get("cholesky_seconds", d.get("factor_seconds")),
        "reductions_seconds": d.get("reductions_seconds"), "factor_kept": d.get("factor_kept"),
    })
    print(f"n={args.rows:,} tol={args.tol:g} on {args.scheduler}: stage {result['stage_seconds']:.1f}s, "
          f"fit {d['fit_seconds']:.1f}s (cholesky {result['cholesky_seconds']:.1f}s, reductions "
          f"{result['reductions_seconds'] or 0:.1f}s, solve {d['solve_seconds']:.2f}s), write {d['write_seconds']:.1f}s; "
          f"end to end {result['end_to_end_seconds']:.1f}s; ranks {d['rank_x']}/{d['rank_y']}; "
          f"peak RSS {memory.peak / 1e9:.2f} GB")
    if args.score:
        t1 = time.perf_counter()
        with PeakMemory() as memory:
            score_store(model, data, scores, ["mean", "second_moment"], scheduler=args.scheduler, progress=say)
        result["score_seconds"] = time.perf_counter() - t1
        result["score_peak_rss_gb"] = memory.peak / 1e9
        print(f"scored {args.rows:,} rows (mean, second_moment) in {result['score_seconds']:.1f}s, "
              f"peak RSS {memory.peak / 1e9:.2f} GB")
    print("wrote", write_json(f"end_to_end_{args.rows}_{args.tol:g}_{args.scheduler.replace('://', '_')}", result))
    if args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
