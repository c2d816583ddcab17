"""Start-up and small-job timings of the ``jdl`` command, as a user runs it: each command in a fresh
process, in-process (the default: no Prefect API configured, no server) and with ``--prefect`` (a
temporary local Prefect API started by the command, with a fresh PREFECT_HOME).

    python bench/cli.py [--repeats 5]

Jobs: ``jdl --help``; staging a 20,000-row CSV (2 x columns); fitting those rows with
``--constraints positivity`` (lengthscales 1.0 and 0.5, reg 1e-6, tol 1e-3); and fitting 2,000 rows
of 20-D x at lengthscale 1, where the factorisation stops at its rank budget and says so. Prints the
median and all wall times per job and mode, and writes bench/results/cli.json.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from _common import write_json


def tables(root: Path) -> dict[str, tuple[Path, str]]:
    """The two CSV tables and their x columns."""
    rng = np.random.default_rng(0)
    x = rng.uniform(-3, 3, (20_000, 2))
    small = root / "rows20k.csv"
    pd.DataFrame({"a": x[:, 0], "b": x[:, 1], "y": np.sin(x[:, 0]) + 0.3 * x[:, 1]
                  + 0.2 * rng.standard_normal(20_000)}).to_csv(small, index=False)
    wide = rng.standard_normal((2_000, 20))
    names = [f"x{k}" for k in range(20)]
    frame = pd.DataFrame(wide, columns=names)
    frame["y"] = wide[:, 0] + 0.5 * rng.standard_normal(2_000)
    frame.to_csv(root / "wide.csv", index=False)
    return {"rows20k": (small, "a,b"), "wide": (root / "wide.csv", ",".join(names))}


def timed(command: list[str], env: dict) -> float:
    started = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({result.returncode}): {result.stderr.strip()[-2000:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    jdl = shutil.which("jdl", path=os.path.dirname(sys.executable)) or shutil.which("jdl")
    if jdl is None:
        raise SystemExit("the jdl command is not installed (pip install -e '.[flows]')")
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    results: dict[str, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory(prefix="jdl-cli-bench-") as work:
        root = Path(work)
        sources = tables(root)
        fit_small = ["--lengthscale-x", "1.0", "--lengthscale-y", "0.5", "--reg", "1e-6", "--tol", "1e-3",
                     "--constraints", "positivity"]
        fit_wide = ["--lengthscale-x", "1", "--lengthscale-y", "1", "--reg", "1e-6"]
        for mode, flag in (("in-process", []), ("--prefect", ["--prefect"])):
            for repeat in range(args.repeats):
                run = root / f"{mode.strip('-')}-{repeat}"
                run.mkdir()
                env = {**base_env, "PREFECT_HOME": str(run / "prefect-home"),
                       "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
                jobs = {
                    "jdl --help": [jdl, "--help"],
                    "stage 20,000-row CSV": [jdl, "stage", str(sources["rows20k"][0]), "--x", sources["rows20k"][1],
                                             "--y", "y", "--out", str(run / "d.zarr"), *flag],
                    "fit 20,000 rows, 2-D x, --constraints positivity": [
                        jdl, "fit", str(run / "d.zarr"), "--out", str(run / "m.zarr"), *fit_small, *flag],
                    "stage 2,000 rows of 20-D x": [jdl, "stage", str(sources["wide"][0]), "--x", sources["wide"][1],
                                                   "--y", "y", "--out", str(run / "w.zarr"), *flag],
                    "fit 2,000 rows of 20-D x (stops at the rank budget)": [
                        jdl, "fit", str(run / "w.zarr"), "--out", str(run / "wm.zarr"), *fit_wide, *flag],
                }
                for name, command in jobs.items():
                    if name == "jdl --help" and flag:
                        continue  # --help starts nothing either way
                    results.setdefault(mode, {}).setdefault(name, []).append(timed(command, env))
    for mode, jobs in results.items():
        print(f"{mode}:")
        for name, seconds in jobs.items():
            print(f"  {name:<55} median {statistics.median(seconds):6.2f} s  "
                  f"({', '.join(f'{s:.2f}' for s in seconds)})")
    print("wrote", write_json("cli", {"seconds": results, "medians": {
        mode: {name: statistics.median(s) for name, s in jobs.items()} for mode, jobs in results.items()},
        "args": vars(args)}))


if __name__ == "__main__":
    main()
