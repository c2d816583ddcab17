"""Shared helpers of the benchmark scripts: timing medians and JSON output."""
from __future__ import annotations

import json
import platform
import statistics
import time
from pathlib import Path
from typing import Any, Callable

RESULTS = Path(__file__).resolve().parent / "results"


def median_time(run: Callable[[], Any], repeats: int) -> tuple[float, list[float], Any]:
    """Median wall time of ``repeats`` runs, all times, and the last result."""
    times, result = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - started)
    return statistics.median(times), times, result


def write_json(name: str, payload: dict) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    payload = {"machine": {"platform": platform.platform(), "processor": platform.processor()}, **payload}
    path.write_text(json.dumps(payload, indent=2, default=float))
    return path
