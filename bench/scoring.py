"""Scoring throughput of a stored model with a vector y: rows per second, by training size.

Data: correlated Gaussian (x, y) in R^(3+3) (``end_to_end.write_source``), n training rows staged
and fitted through the pipeline (Gaussian kernels of lengthscale 1, ``--tol``, the default positivity:
each conditional law projected onto probability vectors that keep its mass, mean and 3 x 3 second
moment). The stored models then score ``--queries`` fresh rows in this process: the conditional
mean (3), the second-moment matrix (3 x 3), the joint CDF at 9 threshold vectors and 99 quantile
levels of the first y component; median of ``--repeats`` runs, the models taking turns within each
run. Every query reads the law on the model's M support atoms, so the rate should not depend on n.

    python bench/scoring.py [--n 100000 1000000 10000000] [--queries 100000] [--repeats 5]
"""
from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import numpy as np

from _common import scoring_rates, write_json
from end_to_end import write_source
from pipeline.fitting import fit_store
from pipeline.model_store import load_model
from pipeline.staging import stage


def rates(models: dict[int, object], Xq: np.ndarray, repeats: int) -> dict[int, dict[str, float]]:
    """Rows per second of each model (by n) for each query (``_common.scoring_rates``); the CDF at 9
    threshold vectors on the diagonal of R^3."""
    return scoring_rates(models, Xq, np.repeat(np.linspace(-2, 2, 9)[:, None], 3, axis=1), repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, nargs="+", default=[100_000, 1_000_000, 10_000_000])
    parser.add_argument("--queries", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--tol", type=float, default=1e-2)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="jdl-scoring-"))
    rng = np.random.default_rng(5)
    Xq = rng.standard_normal((args.queries, 3))
    models = {}
    try:
        for n in args.n:
            write_source(root / "source.npy", n, 0)
            data = stage(root / "source.npy", root / f"data-{n}.zarr", ["0", "1", "2"], ["3", "4", "5"],
                         chunk_size=131_072)
            path, _ = fit_store(data, root / f"model-{n}.zarr", lengthscale_x=1.0, lengthscale_y=1.0, reg=1e-6,
                                tol=args.tol)
            models[n] = load_model(path)
            print(f"fitted n = {n:,}", flush=True)
            shutil.rmtree(data)
        by_n = rates(models, Xq, args.repeats)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    rows = []
    for n, model in models.items():
        row = {"n": n, "rank_x": model.diagnostics_["rank_x"], "rank_y": model.diagnostics_["rank_y"],
               "support": model.support_.size, "rows_per_second": by_n[n]}
        rows.append(row)
        print(f"n = {n:>10,}: m_X = {row['rank_x']}, m_Y = {row['rank_y']}, M = {row['support']}; "
              + ", ".join(f"{name} {rate:,.0f}/s" for name, rate in row["rows_per_second"].items()), flush=True)
    first, last = rows[0]["rows_per_second"], rows[-1]["rows_per_second"]
    print("ratio largest / smallest n: " + ", ".join(f"{k} {last[k] / first[k]:.2f}" for k in first))
    print("wrote", write_json("scoring", {"rows": rows, "args": vars(args)}))


if __name__ == "__main__":
    main()
