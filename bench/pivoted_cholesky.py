"""Pivoted Cholesky on 3-D standard normal points, Gaussian kernel exp(-r^2/2), relative tol 1e-2.

Baseline (REFERENCES.md, FMCA C++ greedy, column by column, 2-core machine like CI's):
rank 407 in 19.6 s at n = 2e5, rank 474 in 140 s at n = 1e6. Also scikit-learn's Nystroem
(uniform landmarks) at the rank the default pivoting reached, for its residual trace.

    python bench/pivoted_cholesky.py [--sizes 200000 1000000] [--repeats 3]
"""
from __future__ import annotations

import argparse

import numpy as np

from _common import median_time, write_json
from jdlcore import GaussianKernel, pivoted_cholesky

FMCA = {200_000: (407, 19.6), 1_000_000: (474, 140.0)}


def nystroem_residual(X: np.ndarray, rank: int, seed: int) -> tuple[float, float]:
    from sklearn.kernel_approximation import Nystroem

    def run():
        features = Nystroem(kernel="rbf", gamma=0.5, n_components=rank, random_state=seed).fit_transform(X)
        return X.shape[0] - float(np.sum(features**2))  # trace(K - Phi Phi^T), trace K = n

    seconds, _, residual = median_time(run, 1)
    return seconds, residual / X.shape[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[200_000, 1_000_000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tol", type=float, default=1e-2)
    args = parser.parse_args()
    kernel = GaussianKernel(1.0)
    rows = []
    for n in args.sizes:
        X = np.random.default_rng(0).standard_normal((n, 3))
        fmca_rank, fmca_seconds = FMCA.get(n, (None, None))
        for pivoting in ("random", "greedy"):
            repeats = args.repeats if n <= 200_000 or pivoting == "random" else 1
            seconds, times, f = median_time(
                lambda: pivoted_cholesky(kernel, X, tol=args.tol, pivoting=pivoting, seed=0), repeats
            )
            row = {
                "n": n, "method": f"jdl {pivoting}", "rank": f.rank, "seconds": seconds, "times": times,
                "relative_residual_trace": f.relative_error,
                "speedup_vs_fmca": fmca_seconds / seconds if fmca_seconds else None,
                "fmca_rank": fmca_rank,
            }
            rows.append(row)
            print(f"n={n:>9,} {row['method']:<13} rank {f.rank:4d}  residual {f.relative_error:.4f}  "
                  f"median {seconds:7.2f}s over {repeats}  "
                  + (f"FMCA {fmca_seconds:.1f}s rank {fmca_rank} -> {fmca_seconds / seconds:.1f}x" if fmca_seconds else ""),
                  flush=True)
            if pivoting == "random":
                random_rank = f.rank
        try:
            seconds, residual = nystroem_residual(X, random_rank, 0)
            rows.append({"n": n, "method": "sklearn Nystroem", "rank": random_rank, "seconds": seconds,
                         "relative_residual_trace": residual})
            print(f"n={n:>9,} {'sklearn Nystroem':<13} rank {random_rank:4d}  residual {residual:.4f}  time {seconds:7.2f}s")
        except ImportError:
            print("scikit-learn not installed (pip install -e '.[bench]'): Nystroem skipped")
    print("wrote", write_json("pivoted_cholesky", {"tol": args.tol, "rows": rows}))


if __name__ == "__main__":
    main()
