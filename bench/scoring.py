"""Scoring throughput: conditional expectations of registered test functions, m_X = m_Y = 100.

Baseline (REFERENCES.md): FMCA's low-rank CME evaluates 1e4 conditional expectations in 0.17 s.
Target: at least 1e6 queries per second on 2 cores.

    python bench/scoring.py [--queries 1000000] [--repeats 5]
"""
from __future__ import annotations

import argparse

import numpy as np

from _common import median_time, write_json
from jdlcore import JDL, GaussianKernel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--queries", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--train", type=int, default=20_000)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    X = rng.standard_normal((args.train, 3))
    Y = X @ rng.standard_normal((3, 3)) * 0.5 + rng.standard_normal((args.train, 3))
    model = JDL(GaussianKernel(1.0), GaussianKernel(1.5), reg=1e-4, tol=0.0, max_rank=100,
                constraints="normalization").fit(X, Y)
    m_x, m_y = model.diagnostics_["rank_x"], model.diagnostics_["rank_y"]
    model.register("mean", lambda y: y)
    model.register("second_moment", lambda y: y[:, :, None] * y[:, None, :])
    Xq = rng.standard_normal((args.queries, 3))
    rows = []
    for name in ("mean", "second_moment"):
        seconds, times, out = median_time(lambda: model.expectation(name, Xq), args.repeats)
        rate = args.queries / seconds
        rows.append({"function": name, "queries": args.queries, "seconds": seconds, "times": times,
                     "queries_per_second": rate, "fmca_cme_queries_per_second": 1e4 / 0.17})
        print(f"{name:<14} m_X={m_x} m_Y={m_y} output {out.shape[1:]}: {args.queries:,} queries in {seconds:.3f}s "
              f"(median of {args.repeats}) = {rate:,.0f} queries/s; FMCA CME {1e4 / 0.17:,.0f}/s -> {rate / (1e4 / 0.17):.1f}x")
    print("wrote", write_json("scoring", {"m_x": m_x, "m_y": m_y, "rows": rows}))


if __name__ == "__main__":
    main()
