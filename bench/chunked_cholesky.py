"""Chunked (Dask) pivoted Cholesky against the in-memory path on the same data.

Data: 3-D standard normal points generated chunk by chunk on the workers (seeded, so recomputable
and identical to the in-memory copy); Gaussian kernel, relative tol 1e-2, random pivoting.
Issue target: the chunked path at most 1.5x the in-memory time at n = 1e6.

    python bench/chunked_cholesky.py [--n 1000000] [--chunk 125000] [--workers 2]
"""
from __future__ import annotations

import argparse
import time

import numpy as np
from distributed import Client, LocalCluster

from _common import write_json
from jdlcore import GaussianKernel, pivoted_cholesky
from pipeline.chunked_fit import chunked_factor


def make_chunk(index: int, size: int) -> np.ndarray:
    return np.random.default_rng([7, index]).standard_normal((size, 3))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--chunk", type=int, default=125_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--tol", type=float, default=1e-2)
    args = parser.parse_args()
    sizes = [min(args.chunk, args.n - start) for start in range(0, args.n, args.chunk)]
    kernel = GaussianKernel(1.0)
    X = np.vstack([make_chunk(i, s) for i, s in enumerate(sizes)])
    started = time.perf_counter()
    memory = pivoted_cholesky(kernel, X, tol=args.tol, pivoting="random", seed=0)
    memory_seconds = time.perf_counter() - started
    del X
    with LocalCluster(n_workers=args.workers, threads_per_worker=1, memory_limit="8GB", dashboard_address=None) as cluster, \
            Client(cluster) as client:
        chunks = client.map(make_chunk, range(len(sizes)), sizes, pure=False)
        client.gather(chunks)  # data in place before timing, as after staging
        started = time.perf_counter()
        factor, _ = chunked_factor(client, kernel, chunks, tol=args.tol, pivoting="random", seed=0)
        chunked_seconds = time.perf_counter() - started
    same = np.array_equal(factor.pivots, memory.pivots)
    print(f"n={args.n:,} in-memory: rank {memory.rank} in {memory_seconds:.2f}s; chunked ({len(sizes)} chunks, "
          f"{args.workers} workers): rank {factor.rank} in {chunked_seconds:.2f}s -> ratio {chunked_seconds / memory_seconds:.2f}; "
          f"identical pivots: {same}")
    print("wrote", write_json("chunked_cholesky", {
        "n": args.n, "chunks": len(sizes), "workers": args.workers, "tol": args.tol,
        "memory_seconds": memory_seconds, "chunked_seconds": chunked_seconds, "rank": factor.rank,
        "identical_pivots": bool(same)}))


if __name__ == "__main__":
    main()
