"""Where jdl's tune + fit time goes, beside LightGBM's fit, measured side by side.

    python bench/time_parts.py --tables diamonds births --sizes 5000 40000 --repeats 2 --out time_parts

For each table and training size (rows drawn as ``bench/peers.py`` draws them, seed 0), the variants
below take turns within each repeat, so that they run under the same conditions; each figure is the
median over the repeats:

  lightgbm          LightGBM's fit of its 99 quantile models, as ``bench/peers.py`` runs it
  jdl               jdl's default path: ``tune_store`` then ``fit_store``, no options; the boosters'
                    seconds (the summaries' map and the maps of the tuning's splits) are read from the
                    tuning store, where the search on the columns alone may run beside them
  jdl, one split    (below 10,000 rows, where the default cross-validates on five folds) ``folds=1``
  jdl, no columns   the search on the columns alone replaced by a stand-in whose validation score never
    alone           wins: a measuring device, not an option of jdl. It shows what that search costs; the
                    boosters then run with nothing beside them. Where the summaries beat the columns
                    alone (all four tables of ``bench/peers.py`` at 40,000 rows), the tuned model is the same.

Every jdl variant is scored (crps_99 on 10,000 held-out rows), so a variant that changes the model
shows it. The JSON goes to bench/results/NAME.json.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from contextlib import ExitStack
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable
from unittest import mock

import numpy as np
import xarray as xr

from _common import write_json
from jdlcore.tuning import MIN_VALIDATED_ROWS, VALIDATION_FRACTION
from peers import ALL_TABLES, crps_99, jdl_pipeline_laws, run_lightgbm, split

TEST_ROWS = 10_000
# below this many rows one split would validate fewer than MIN_VALIDATED_ROWS, and the default cross-validates
ONE_SPLIT_BELOW = round(MIN_VALIDATED_ROWS / VALIDATION_FRACTION)


def _never_wins(job: Any) -> SimpleNamespace:
    """A stand-in for ``ViewSearch.columns_alone``: a run whose validation score loses to any other."""
    return SimpleNamespace(best={"score": np.finfo(float).max, "rank_x": 0}, summaries=None)


def jdl_variant(train, test, target: str, work: Path, *, folds: int | None = None,
                columns_alone: bool = True) -> dict[str, Any]:
    """One jdl run (``jdl_pipeline_laws``) with the tuning's ``folds`` (None: the default) and, where not
    ``columns_alone``, the stand-in for the search on the columns alone; its seconds and crps_99."""
    import pipeline.tuning as tuning
    from jdlcore.tuning.views import ViewSearch

    with ExitStack() as patches:
        if folds is not None:
            patches.enter_context(mock.patch.object(tuning, "tune_store", partial(tuning.tune_store, folds=folds)))
        if not columns_alone:
            patches.enter_context(mock.patch.object(ViewSearch, "columns_alone", _never_wins))
        run = jdl_pipeline_laws(train, test, target, work)
    attrs = xr.open_zarr(work / "tuning.zarr", consolidated=False).attrs
    times = run["times"]
    return {"seconds": times["tune_seconds"] + times["fit_seconds"], "tune_seconds": times["tune_seconds"],
            "fit_seconds": times["fit_seconds"], "boosters_seconds": float(attrs.get("summaries_seconds", 0.0)),
            "crps_99": crps_99(run["quantiles"], test[target].to_numpy(float))}


def lightgbm(train, test, target: str, work: Path) -> dict[str, Any]:
    """LightGBM's 99 quantile models as ``bench/peers.py`` runs them: their fit's seconds and crps_99."""
    figures = run_lightgbm(train, test, target, work)
    return {"seconds": figures["fit_seconds"], "crps_99": figures["crps_99"]}


def variants(n: int) -> dict[str, Callable[..., dict[str, Any]]]:
    """The variants measured at ``n`` training rows."""
    chosen = {"lightgbm": lightgbm, "jdl": jdl_variant}
    if n < ONE_SPLIT_BELOW:
        chosen["jdl, one split"] = partial(jdl_variant, folds=1)
    chosen["jdl, no columns alone"] = partial(jdl_variant, columns_alone=False)
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", nargs="+", default=["diamonds", "births"], choices=list(ALL_TABLES))
    parser.add_argument("--sizes", type=int, nargs="+", default=[5_000, 40_000])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", default="time_parts", help="name of the JSON in bench/results/")
    args = parser.parse_args()
    results: list[dict[str, Any]] = []
    for table in args.tables:
        frame, target = ALL_TABLES[table]()
        for n in args.sizes:
            train, test = split(frame, n, TEST_ROWS, 0)
            runs: dict[str, list[dict[str, Any]]] = {}
            for _ in range(args.repeats):
                for name, variant in variants(n).items():
                    with tempfile.TemporaryDirectory(prefix="jdl-time-parts-") as work:
                        runs.setdefault(name, []).append(variant(train, test.copy(), target, Path(work)))
            base = statistics.median(run["seconds"] for run in runs["lightgbm"])
            for name, repeated in runs.items():
                row = {"table": table, "n": n, "model": name, "repeats": repeated,
                       **{key: statistics.median(run[key] for run in repeated) for key in repeated[0]}}
                row["ratio_to_lightgbm_fit"] = row["seconds"] / base
                results.append(row)
                boosters = f"  boosters {row['boosters_seconds']:5.1f}s" if "boosters_seconds" in row else ""
                print(f"{table:9s} n={n:<7,d} {name:22s} {row['seconds']:6.1f}s ({row['ratio_to_lightgbm_fit']:.2f}x "
                      f"LightGBM's fit){boosters}  crps_99 {row['crps_99']:.4g}", flush=True)
    path = write_json(args.out, {"repeats": args.repeats, "test_rows": TEST_ROWS, "results": results})
    print(f"wrote {path}")


if __name__ == "__main__":
    started = time.perf_counter()
    main()
    print(f"{time.perf_counter() - started:.0f} s")
