"""Shared helpers of the benchmark scripts: timing medians and JSON output."""
from __future__ import annotations

import json
import platform
import statistics
import threading
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import psutil

RESULTS = Path(__file__).resolve().parent / "results"


def median_time(run: Callable[[], Any], repeats: int) -> tuple[float, list[float], Any]:
    """Median wall time of ``repeats`` runs, all times, and the last result."""
    times, result = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - started)
    return statistics.median(times), times, result


def scoring_rates(models: dict[Any, Any], Xq: Any, thresholds: Any, repeats: int) -> dict[Any, dict[str, float]]:
    """Rows per second of each model (by key) scoring the queries Xq (q, d_x): the mean, the second
    moment, the CDF at ``thresholds`` and 99 quantile levels, median of ``repeats``; the models take
    turns within each repeat, so that they are measured side by side under the same conditions."""
    levels = np.linspace(0.01, 0.99, 99)
    named = {"mean": ("mean", None), "second_moment": ("second_moment", None)}
    for model in models.values():
        model.prepare_requests(named)  # the named functions kept at the atoms, once
    work = {"mean": lambda m: m.answer_requests({"mean": named["mean"]}, Xq),
            "second moment": lambda m: m.answer_requests({"second_moment": named["second_moment"]}, Xq),
            f"cdf ({len(thresholds)} thresholds)": lambda m: m.conditional_cdf(Xq, thresholds),
            "quantiles (99 levels)": lambda m: m.conditional_quantile(Xq, levels)}
    for model in models.values():
        model.conditional_quantile(Xq[:10], levels)  # the compiled kernels, loaded once
    return side_by_side_rates(models, work, len(Xq), repeats)


def side_by_side_rates(models: dict[Any, Any], work: dict[str, Callable[[Any], Any]], rows: int,
                       repeats: int) -> dict[Any, dict[str, float]]:
    """Rows per second of each model (by key) for each job ``work[name](model)`` over ``rows`` rows,
    median of ``repeats``; the models take turns within each repeat."""
    times: dict[Any, dict[str, list[float]]] = {key: {name: [] for name in work} for key in models}
    for _ in range(repeats):
        for key, model in models.items():
            for name, run in work.items():
                times[key][name].append(median_time(lambda: run(model), 1)[0])
    return {key: {name: rows / statistics.median(t) for name, t in by_name.items()} for key, by_name in times.items()}


def write_json(name: str, payload: dict) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    payload = {"machine": {"platform": platform.platform(), "processor": platform.processor()}, **payload}
    path.write_text(json.dumps(payload, indent=2, default=float))
    return path


class PeakMemory:
    """Largest sum of RSS over this process and its descendants, sampled in a thread."""

    def __init__(self, interval: float = 0.1):
        self.interval, self.peak, self._stop = interval, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> int:
        me = psutil.Process()
        total = 0
        for process in [me, *me.children(recursive=True)]:
            try:
                total += process.memory_info().rss
            except psutil.Error:
                pass
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._sample())
            time.sleep(self.interval)

    def __enter__(self) -> "PeakMemory":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._sample())
