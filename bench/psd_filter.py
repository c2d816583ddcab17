"""The cost of one step of the PSD filter (``jdlcore.PSDFilter``), by the size of its models.

A one-dimensional state and observation: a transition tau(x', x) on n centres near x' = 0.7 x, an
observation omega(y, x) on m centres near y = x, a prior on 3; each a random Gaussian PSD model
(lengthscales 0.6-0.8). The belief has n m centres from the second step on, and a step costs
O(n^2 (n m)^2) in its prediction. Figures: the median seconds of a step over ``--steps`` steps after the
first, exact and with the belief compressed onto 50 fixed centres (``compress_to``), and how far the
compressed filter's means are from the exact ones.

    python bench/psd_filter.py [--sizes 10 20 30] [--steps 10] [--out psd_filter]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import jdlcore  # noqa: F401  (first: it sets OpenBLAS's idle-thread wait)
import numpy as np

from _common import write_json
from jdlcore import GaussianPSDModel, PSDFilter

COMPRESSED_CENTRES = 50


def models(size: int, seed: int = 0) -> tuple[GaussianPSDModel, GaussianPSDModel, GaussianPSDModel]:
    rng = np.random.default_rng(seed)

    def random_model(centres: np.ndarray, lengthscale) -> GaussianPSDModel:
        G = rng.standard_normal((centres.shape[0], centres.shape[0]))
        return GaussianPSDModel(G @ G.T, centres, lengthscale)

    x, z = rng.uniform(-3, 3, size), rng.uniform(-3, 3, size)
    return (random_model(np.column_stack([0.7 * x + 0.1 * rng.standard_normal(size), x]), [0.6, 0.8]),
            random_model(np.column_stack([z + 0.2 * rng.standard_normal(size), z]), [0.6, 0.7]),
            random_model(rng.uniform(-1, 1, (3, 1)), 0.8))


def run(ffilter: PSDFilter, steps: int, seed: int = 1) -> tuple[float, np.ndarray]:
    """(the median seconds of a step after the first, the filtered means (steps,))."""
    ys = np.random.default_rng(seed).uniform(-1.5, 1.5, steps + 1)
    belief, _ = ffilter.step(ffilter.prior.normalized(), ys[0])
    times, means = [], []
    for y in ys[1:]:
        started = time.perf_counter()
        belief, _ = ffilter.step(belief, y)
        times.append(time.perf_counter() - started)
        means.append(float(belief.mean()[0]))
    return statistics.median(times), np.array(means)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 20, 30])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--out", default="psd_filter", help="name of the JSON in bench/results/")
    args = parser.parse_args(argv)
    rows = []
    for size in args.sizes:
        tau, omega, prior = models(size)
        exact, means = run(PSDFilter(tau, omega, prior), args.steps)
        fixed = np.linspace(-4, 4, COMPRESSED_CENTRES)[:, None]
        compressed, compressed_means = run(PSDFilter(tau, omega, prior, compress_to=fixed), args.steps)
        difference = float(np.max(np.abs(compressed_means - means)))
        rows.append({"n": size, "m": size, "belief_centres": size * size, "step_seconds": exact,
                     "compressed_step_seconds": compressed, "compressed_mean_difference": difference})
        print(f"n = m = {size}: belief on {size * size} centres, a step {exact:.3g} s; compressed onto "
              f"{COMPRESSED_CENTRES} centres {compressed:.3g} s (filtered means within {difference:.1e})", flush=True)
    print(f"-> {write_json(args.out, {'steps': args.steps, 'rows': rows})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
