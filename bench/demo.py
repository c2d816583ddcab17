"""``jdl demo`` end to end, as a user runs it: a fresh work directory and a fresh process each time
(in-process, embedded Dask cluster, stage -> tune -> fit -> score at 1e5 rows).

    python bench/demo.py [--repeats 3] [--rows 100000]

Prints the median wall time from the command to the report, the peak RSS summed over the process
tree (the CLI and the Dask workers) and the demo's own report, and
writes bench/results/demo.json. The issue's target: under 2 minutes.
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

from _common import PeakMemory, write_json


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rows", type=int, default=100_000)
    args = parser.parse_args()
    jdl = shutil.which("jdl", path=os.path.dirname(sys.executable)) or shutil.which("jdl")
    if jdl is None:
        raise SystemExit("the jdl command is not installed (pip install -e '.[flows]')")
    runs = []
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory(prefix="jdl-demo-bench-") as work:
            env = {**os.environ, "PREFECT_HOME": str(Path(work) / "prefect")}
            started = time.perf_counter()
            with PeakMemory() as memory:
                result = subprocess.run([jdl, "demo", "--rows", str(args.rows), "--workdir", str(Path(work) / "demo")],
                                        capture_output=True, text=True, env=env)
            seconds = time.perf_counter() - started
            if result.returncode != 0:
                raise SystemExit(result.stderr[-3000:])
            runs.append({"seconds": seconds, "peak_rss_gb": memory.peak / 1e9, "report": result.stdout.strip()})
            print(f"run {len(runs)}: {seconds:.1f} s, peak RSS {memory.peak / 1e9:.2f} GB", flush=True)
    median = statistics.median(run["seconds"] for run in runs)
    print(runs[-1]["report"])
    print(f"median of {len(runs)}: {median:.1f} s (target 120 s, ratio {median / 120:.2f}), "
          f"peak RSS {max(run['peak_rss_gb'] for run in runs):.2f} GB")
    path = write_json("demo", {"rows": args.rows, "median_seconds": median, "runs": runs, "target_seconds": 120})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
