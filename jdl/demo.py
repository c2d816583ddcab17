"""``jdl demo``: stage -> tune -> fit -> score on a nonlinear heteroscedastic data set.

Data: x ~ U(-3, 3), y = sin(x) + x/3 + (0.15 + 0.25 |x|) e, e ~ N(0, 1). The conditional mean is
sin(x) + x/3 and the conditional standard deviation 0.15 + 0.25 |x|, so the report can compare the
scored conditional mean, standard deviation and quantiles with the truth. The train-and-score flow
runs in this process (or, with ``prefect``, as a recorded Prefect flow run) on an embedded Dask
cluster; the stores stay in ``workdir``, and a second run reuses every stage whose inputs did not
change.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import zarr
from scipy.stats import norm

from .reports import numbers

LEVELS = (0.1, 0.5, 0.9)
BATCH_ROWS = 2_000


@dataclass
class DemoReport:
    n: int
    workdir: Path
    best: dict
    criterion: str
    candidates: int
    tune_rows: int
    rank_x: int
    rank_y: int
    positivity: str
    negative_mass_max: float
    mean_rmse: float
    sd_rmse: float
    quantile_rmse: dict
    reused: dict
    seconds: float
    stores: dict = field(default_factory=dict)
    summaries: list = field(default_factory=list)  # the boosted summaries the x kernel reads after x

    def _x_names(self) -> str:
        return f" (x, {', '.join(self.summaries)})" if self.summaries else ""

    def lines(self) -> list[str]:
        b = self.best
        reused = [name for name, flag in self.reused.items() if flag]
        return [
            f"data        n = {self.n:,} rows of y = sin(x) + x/3 + (0.15 + 0.25|x|) e; "
            f"scored a new batch of {BATCH_ROWS:,} rows",
            f"tuned       lengthscale_x = {numbers(b['lengthscale_x'])}{self._x_names()}, "
            f"lengthscale_y = {numbers(b['lengthscale_y'])}, "
            f"reg = {b['reg']:.0e}: validation {self.criterion} {b['score']:.4f}, best of {self.candidates} "
            f"on {self.tune_rows:,} rows",
            f"fitted      m_X = {self.rank_x}, m_Y = {self.rank_y}, positivity {self.positivity}: the signed law's "
            f"largest negative mass at the first 16 x rows, {self.negative_mass_max:.1e}, projected away keeping "
            "its mass, mean and second moment",
            f"accuracy    RMSE vs truth: conditional mean {self.mean_rmse:.4f}, conditional sd {self.sd_rmse:.4f}, "
            + ", ".join(f"q{int(round(100 * k))} {v:.4f}" for k, v in self.quantile_rmse.items()),
            "stores      " + ", ".join(f"{k} {v}" for k, v in self.stores.items()),
            f"time        {self.seconds:.1f} s for the four flows' stages"
            + (f" (reused: {', '.join(reused)})" if reused else ""),
        ]


def make_data(n: int, seed: int, d: int = 1) -> pd.DataFrame:
    """n rows of the demo's data: x ~ U(-3, 3)^d (d = 1, or 3 for the variant below), y given x Gaussian
    with the mean and standard deviation of ``truth``; columns x (or x1, x2, x3) and y."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-3, 3, (n, d))
    mean, sd = truth(x)
    y = mean + sd * rng.standard_normal(n)
    names = ["x"] if d == 1 else [f"x{k + 1}" for k in range(d)]
    return pd.DataFrame({**{name: x[:, k] for k, name in enumerate(names)}, "y": y})


def truth(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Conditional mean and standard deviation of the demo's y given x: (n,) or (n, 1) x gives
    sin(x) + x/3 and 0.15 + 0.25 |x|; (n, 3) x gives the 3-D variant, where x1 acts as in 1-D, x2
    bends the mean and x3 shifts it and widens the spread:
    sin(x1) + x1/3 + 0.5 sin(x2) + 0.2 x3 and 0.15 + 0.2 |x1| + 0.1 |x3|."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 2 and x.shape[1] == 3:
        x1, x2, x3 = x.T
        return np.sin(x1) + x1 / 3 + 0.5 * np.sin(x2) + 0.2 * x3, 0.15 + 0.2 * np.abs(x1) + 0.1 * np.abs(x3)
    x = x.reshape(-1) if x.ndim == 2 else x
    return np.sin(x) + x / 3, 0.15 + 0.25 * np.abs(x)


def run_demo(n: int = 100_000, workdir: str | Path = "jdl-demo", seed: int = 0, scheduler: str = "local",
             tune_rows: int | None = None, prefect: bool = False) -> DemoReport:
    """Write the data as Parquet to ``workdir``, run the train-and-score flow on it and report;
    ``tune_rows``: the tuning's subsample (None: the tuning's default, ``TuneSettings.max_rows``);
    ``prefect``: as a recorded Prefect flow run."""
    from pipeline.model_store import load_model
    from pipeline.tuning import load_tuning, scored_candidates, tuned_summaries

    from flows.runner import execute

    if n < 100:
        raise ValueError(f"rows: the demo needs at least 100 rows, got {n}")
    root = Path(workdir).resolve()
    root.mkdir(parents=True, exist_ok=True)
    sources = {"train": root / "train.parquet", "batch": root / "batch.parquet"}
    for name, rows, offset in (("train", n, 0), ("batch", BATCH_ROWS, 1)):
        table = make_data(rows, seed + offset)
        if not _same_table(sources[name], table):  # keep the bytes, so a re-run is recognised
            table.to_parquet(sources[name], index=False)
    started = time.perf_counter()
    results = execute(
        "train_and_score", prefect=prefect, source=str(sources["train"]), workdir=str(root), x=["x"], y=["y"],
        score_source=str(sources["batch"]),
        functions=["mean", "second_moment", "quantile:" + ",".join(map(str, LEVELS))], tune_rows=tune_rows,
        seed=seed, scheduler=scheduler,
    )
    seconds = time.perf_counter() - started
    tuning = load_tuning(results["tune"]["path"])
    model = load_model(results["fit"]["path"])
    scores = zarr.open_group(results["score"]["path"], mode="r", zarr_format=3)
    x_batch = zarr.open_group(results["stage_batch"]["path"], mode="r", zarr_format=3)["x"][:, 0]
    mean_true, sd_true = truth(x_batch)
    mean = scores["mean"][:, 0]
    sd = np.sqrt(np.maximum(scores["second_moment"][:, 0, 0] - mean**2, 0.0))
    quantiles = scores["quantile:" + ",".join(map(str, LEVELS))][:]
    d = model.diagnostics_
    return DemoReport(
        n=n, workdir=root, best=json.loads(tuning.attrs["best"]), criterion=tuning.attrs["criterion"],
        summaries=tuned_summaries(tuning),
        candidates=scored_candidates(tuning),
        tune_rows=int(tuning.attrs["rows_used"]), rank_x=d["rank_x"], rank_y=d["rank_y"], positivity=model.positivity,
        negative_mass_max=float(d.get("negative_mass_max", np.nan)),
        mean_rmse=_rmse(mean, mean_true), sd_rmse=_rmse(sd, sd_true),
        quantile_rmse={level: _rmse(quantiles[:, k], mean_true + sd_true * norm.ppf(level))
                       for k, level in enumerate(LEVELS)},
        reused={name: result["reused"] for name, result in results.items()}, seconds=seconds,
        stores={name: Path(result["path"]).name for name, result in results.items()} | {"in": str(root)},
    )


def _rmse(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.sqrt(np.mean((a - b) ** 2)))


def _same_table(path: Path, table: pd.DataFrame) -> bool:
    try:
        return pd.read_parquet(path).equals(table)
    except Exception:  # absent or unreadable: write it
        return False
