"""A learning curve on a table whose conditional law is known: how jdl's accuracy grows with the rows,
beside LightGBM's and the oracle's.

The table (``synthetic_table``, seeded) has six x columns:

  x1   standard normal                     sets the mean through sin(1.5 x1)
  x2   log-normal (right-skewed)           with c3 = "c", adds 0.6 log x2 to the mean (an interaction)
  x3   uniform on [-2, 2]                  sets the noise scale, 0.25 + 0.25 |x3|, doubled where c3 = "b"
  c20  20 levels, text                     shifts the mean by a fixed level effect (sd 0.5)
  c3   3 levels, text                      see x2 and x3
  x6   standard normal                     no effect

and y = mean(x) + scale(x) e, with e a standardised Gamma(2) variable (right-skewed, mean 0, sd 1).
The true quantiles are mean(x) + scale(x) q_e(level), so the oracle's scores are exact.

Each size draws its training rows afresh; the test rows (``--test-rows``) are the same for every size.
The models: jdl's default path (``stage``, ``tune``, ``fit --tuning``, ``score``, as
``bench/peers.py`` runs it) and LightGBM (one quantile model per level, as ``bench/peers.py``). Figures
per model and size: crps_99 (twice the mean pinball loss over the levels 0.01, ..., 0.99), its excess
over the oracle's, the 90% interval's coverage, tune and fit times, and the peak memory of the fit
(this process and its children: the embedded Dask cluster above 200,000 rows).

    python bench/learning_curve.py [--sizes 10000 100000] [--test-rows 10000] [--models jdl lightgbm]
        [--out bench/results/learning_curve.json]

Needs the ``peers`` extra (LightGBM): pip install -e '.[peers]'.
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
from scipy.stats import gamma

from _common import PeakMemory, write_json
from peers import LEVELS, quantile_figures, run_jdl_pipeline, run_lightgbm

TARGET = "y"
SHAPE = 2.0  # of the Gamma noise
LEVEL_EFFECTS = np.random.default_rng(12345).normal(0.0, 0.5, 20)  # c20's shifts of the mean, fixed


def law(frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(mean, scale) of y given each row's x, shapes (n,)."""
    c20 = frame["c20"].str[1:].astype(int).to_numpy()
    c3 = frame["c3"].to_numpy()
    mean = np.sin(1.5 * frame["x1"].to_numpy()) + LEVEL_EFFECTS[c20] + 0.6 * (c3 == "c") * np.log(frame["x2"].to_numpy())
    scale = 0.25 + 0.25 * np.abs(frame["x3"].to_numpy()) * (1.0 + (c3 == "b"))
    return mean, scale


def synthetic_table(n: int, seed: int) -> pd.DataFrame:
    """n rows of the table described above, seeded."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({
        "x1": rng.standard_normal(n), "x2": rng.lognormal(0.0, 0.75, n), "x3": rng.uniform(-2.0, 2.0, n),
        "c20": np.char.add("s", np.char.zfill(rng.integers(0, 20, n).astype(str), 2)),
        "c3": np.array(["a", "b", "c"])[rng.integers(0, 3, n)], "x6": rng.standard_normal(n),
    })
    for column in ("c20", "c3"):  # text columns, as a table read from a file has them (object dtype)
        frame[column] = frame[column].astype(object)
    mean, scale = law(frame)
    frame[TARGET] = mean + scale * (rng.gamma(SHAPE, 1.0, n) - SHAPE) / np.sqrt(SHAPE)
    return frame


def oracle(test: pd.DataFrame) -> dict[str, Any]:
    """The figures of the true conditional quantiles on the test rows."""
    mean, scale = law(test)
    standard = (gamma.ppf(LEVELS, SHAPE) - SHAPE) / np.sqrt(SHAPE)
    Q = mean[:, None] + scale[:, None] * standard[None, :]
    return {**quantile_figures(Q, test[TARGET].to_numpy(float), mean), "tune_seconds": 0.0, "fit_seconds": 0.0}


MODELS: dict[str, Callable[[pd.DataFrame, pd.DataFrame, str, Path], dict[str, Any]]] = {
    "jdl": run_jdl_pipeline, "lightgbm": run_lightgbm}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--test-rows", type=int, default=10_000)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="learning_curve", help="name of the JSON in bench/results/")
    args = parser.parse_args()
    test = synthetic_table(args.test_rows, args.seed + 1_000)
    best = oracle(test)
    print(f"oracle        crps_99 {best['crps_99']:.4f}  cover90 {best['coverage_90']:.3f}", flush=True)
    results: list[dict[str, Any]] = [{"model": "oracle", "n_train": 0, **best}]
    for n in args.sizes:
        train = synthetic_table(n, args.seed + n)
        for model in args.models:
            with tempfile.TemporaryDirectory(prefix="jdl-curve-") as work, PeakMemory() as memory:
                started = time.perf_counter()
                figures = MODELS[model](train, test.copy(), TARGET, Path(work))
                seconds = time.perf_counter() - started
            row = {"model": model, "n_train": n, **figures, "seconds": seconds, "peak_gb": memory.peak / 2**30,
                   "excess_over_oracle": figures["crps_99"] / best["crps_99"] - 1.0}
            results.append(row)
            print(f"{model:9s} n={n:<8,d} crps_99 {row['crps_99']:.4f} (+{100 * row['excess_over_oracle']:.1f}% over "
                  f"the oracle)  cover90 {row['coverage_90']:.3f}  tune {row['tune_seconds']:6.1f}s  fit "
                  f"{row['fit_seconds']:6.1f}s  peak {row['peak_gb']:.2f} GB"
                  + (f"  m_X {row['m_x']}" if "m_x" in row else ""), flush=True)
    path = write_json(args.out, {"levels": LEVELS.tolist(), "seed": args.seed, "test_rows": args.test_rows,
                                 "results": results})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
