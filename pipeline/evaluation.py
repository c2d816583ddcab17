"""A model's conditional laws judged on held-out rows with a scalar y (``jdl evaluate``): the exact CRPS,
the pinball loss at chosen levels, the coverage of central intervals, the RMSE of the mean and the
probability integral transform, written as an evaluation store (``data_schemas.evaluation``) with a
calibration figure.

Every figure is read from the law the model gives each row (its weights on the support atoms, as
``jdl score`` reads it): the CRPS exactly (``jdlcore.conditional.laws.crps``), the quantiles as the
smallest atom whose cumulative weight reaches the level (``conditional_quantile``). The laws are
discrete, so the PIT is randomised: F(y-) + V (F(y) - F(y-)) with V uniform on [0, 1] (seeded), which
is uniform on [0, 1] when the laws are calibrated.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import zarr

from data_schemas.evaluation import SCHEMA_NAME, SCHEMA_VERSION, validate_evaluation_dataset
from jdlcore.conditional.row_laws import RowLaws
from jdlcore.conditional.losses import pinball_losses
from jdlcore.conditional.queries import check_levels
from jdlcore.models.protocol import SCORE_ROWS

from .atomic import atomic_store, refuse_existing
from .cluster import broadcast, dask_client, resolve_scheduler
from .damage import settle_reads
from .model_store import load_model
from .staging import open_staged, recode
from .x_view import model_recoding

__all__ = ["evaluate_store", "evaluate_chunk", "open_evaluation", "figure_path", "DEFAULT_LEVELS", "DEFAULT_COVERAGE", "PIT_BINS"]

DEFAULT_LEVELS = tuple(round(0.05 * k, 2) for k in range(1, 20))  # 0.05, 0.10, ..., 0.95
DEFAULT_COVERAGE = (0.5, 0.8, 0.9, 0.95)  # central intervals
PIT_BINS = 20


class _Totals:
    """The figures of a run of consecutive rows: the per-row CRPS and PIT, and the sums over the rows of
    the figures that are means (pinball per level, rows covered per nominal coverage, squared error of
    the mean). Runs of rows add up (``combined``), so chunks can be judged anywhere."""

    def __init__(self, n: int, levels: np.ndarray, coverage: np.ndarray):
        self.levels, self.coverage = levels, coverage
        self.crps, self.pit = np.empty(n), np.empty(n)
        self.pinball, self.covered, self.squared = np.zeros(levels.size), np.zeros(coverage.size), 0.0

    def add(self, laws: RowLaws, y: np.ndarray, rows: slice, uniform: np.ndarray) -> None:
        """The rows ``rows``: their conditional laws on y's scale and observations y (b,); ``uniform`` (b,):
        the PIT's randomisation."""
        asked = np.unique(np.concatenate([self.levels, (1 - self.coverage) / 2, (1 + self.coverage) / 2]))
        self.crps[rows] = laws.crps(y)
        quantiles = laws.quantiles(asked)  # what conditional_quantile reads from the law
        at = {float(level): k for k, level in enumerate(asked)}
        picked = quantiles[:, [at[float(level)] for level in self.levels]]
        self.pinball += pinball_losses(picked, y, self.levels).sum(axis=0)
        low = quantiles[:, [at[float(level)] for level in (1 - self.coverage) / 2]]
        high = quantiles[:, [at[float(level)] for level in (1 + self.coverage) / 2]]
        self.covered += ((y[:, None] >= low) & (y[:, None] <= high)).sum(axis=0)
        self.squared += float(np.sum((y - laws.mean()[:, 0]) ** 2))
        self.pit[rows] = laws.pit(y, uniform)

    @classmethod
    def combined(cls, parts: list["_Totals"]) -> "_Totals":
        """The totals of consecutive runs of rows, in their order."""
        whole = cls(0, parts[0].levels, parts[0].coverage)
        whole.crps = np.concatenate([part.crps for part in parts])
        whole.pit = np.concatenate([part.pit for part in parts])
        whole.pinball = sum(part.pinball for part in parts)
        whole.covered = sum(part.covered for part in parts)
        whole.squared = sum(part.squared for part in parts)
        return whole


def evaluate_chunk(model: Any, data: str, tables: dict[int, np.ndarray], levels: np.ndarray, coverage: np.ndarray,
                   seed: int, start: int, stop: int) -> _Totals:
    """The figures of rows [start, stop) of the staged store ``data``, read in blocks of ``SCORE_ROWS``
    (each block's laws from ``model.conditional_law``; ``tables``: the recoding of its category codes to
    the model's). The PIT's uniforms are seeded by (``seed``, ``start``), so a chunk's figures do not
    depend on where, or after which other chunk, it runs."""
    group = zarr.open_group(data, mode="r", zarr_format=3)
    totals = _Totals(stop - start, levels, coverage)
    rng = np.random.default_rng([seed, start])
    for a in range(start, stop, SCORE_ROWS):
        b = min(a + SCORE_ROWS, stop)
        laws = model.conditional_law(recode(group["x"][a:b], tables))
        y = np.asarray(group["y"][a:b][:, 0], dtype=np.float64)
        totals.add(laws, y, slice(a - start, b - start), rng.uniform(size=b - a))
    return totals


def evaluate_store(model_path: str | os.PathLike, data: str | os.PathLike, out: str | os.PathLike, *,
                   levels: Sequence[float] = DEFAULT_LEVELS, coverage: Sequence[float] = DEFAULT_COVERAGE,
                   unseen: str = "refuse", seed: int = 0, scheduler: str | None = None, overwrite: bool = False,
                   run_key: str | None = None, progress: Callable[[str], None] | None = None) -> Path:
    """Judge the model store ``model_path`` on every row of the staged store ``data`` (a scalar y) and
    write the evaluation store ``out`` atomically, with its calibration figure (the PIT histogram, and
    the coverage of the central intervals against nominal) beside it (``figure_path``: report.zarr ->
    report.png); returns the store's path.

    ``levels``: the pinball loss's levels, in (0, 1); ``coverage``: the central intervals' nominal
    coverages, in (0, 1); ``unseen``: a categorical level the model was not fitted on, as in ``jdl score``;
    ``seed``: the PIT's randomisation; ``scheduler``: where the store's chunks are judged, as for
    ``jdl score`` (``pipeline.cluster``). ``ValueError`` naming the rule for a model without a law on
    atoms (KLR), a vector y, or x features other than the model's.
    """
    levels, nominal = check_levels(levels), _check_coverage(coverage)
    target = Path(out)
    refuse_existing(target, overwrite)
    model = load_model(model_path)
    group = open_staged(data, needs_y="evaluate")
    if not model.answers("conditional_weights") or not model.answers("conditional_quantile"):
        raise ValueError(f"model: a {model.method} model has no law on atoms to evaluate; evaluate a jdl, jpdl, cme, "
                         "greedy or psd model")
    y_features = list(group.attrs["y_features"])
    if len(y_features) != 1 or model.y_width_ != 1:
        raise ValueError(f"data: evaluate needs a scalar y; the data have y {y_features}, the model "
                         f"{model.y_width_} y feature(s)")
    tables = model_recoding(model, group, data, unseen)
    n, step = int(group.attrs["n_samples"]), group["x"].chunks[0]
    bounds = [(start, min(start + step, n)) for start in range(0, n, step)]
    job = (str(Path(data).resolve()), tables, levels, nominal, seed)
    where = resolve_scheduler(scheduler, n)
    if where is None:
        parts = []
        for done, (a, b) in enumerate(bounds, 1):
            parts.append(evaluate_chunk(model, *job, a, b))
            _report(progress, done, len(bounds))
    else:
        from distributed import as_completed

        with dask_client(where) as client:
            shared = broadcast(client, model)
            futures = [client.submit(evaluate_chunk, shared, *job, a, b, pure=False) for a, b in bounds]
            for done, _ in enumerate(as_completed(futures, loop=client.loop), 1):
                _report(progress, done, len(bounds))
            parts = client.gather(futures)  # in the chunks' order; raises the first failure, if any
    dataset = _dataset(_Totals.combined(parts), n, {
        "schema": SCHEMA_NAME, "schema_version": SCHEMA_VERSION, "model": str(Path(model.store_path_).resolve()),
        "model_version": model.store_version_ or "", "data": str(Path(data).resolve()), "n_samples": n,
        "y_feature": y_features[0], "figure": figure_path(target).name, **({"run_key": run_key} if run_key else {})})
    figure = figure_path(target)
    drawn = figure.with_name(f".{figure.name}.{os.getpid()}.tmp")
    try:
        _calibration_figure(dataset, drawn)  # drawn first: a failure leaves neither the store nor the figure
        with atomic_store(target, overwrite=overwrite) as staging:
            dataset.to_zarr(staging, mode="w", zarr_format=3, consolidated=False)
        os.replace(drawn, figure)
    finally:
        drawn.unlink(missing_ok=True)
    return target


def _report(progress: Callable[[str], None] | None, done: int, total: int) -> None:
    if progress is not None:
        progress(f"evaluated {done}/{total} chunks")


def figure_path(store: str | os.PathLike) -> Path:
    """The calibration figure of the evaluation store ``store``: beside it, ``.zarr`` replaced by ``.png``."""
    store = Path(store)
    return store.with_suffix(".png") if store.suffix == ".zarr" else store.with_name(store.name + ".png")


def _check_coverage(coverage: Sequence[float]) -> np.ndarray:
    values = np.unique(np.asarray(coverage, dtype=np.float64))
    if values.size == 0 or not np.all((values > 0) & (values < 1)):
        raise ValueError(f"coverage: needs nominal coverages in (0, 1), got {list(coverage)}")
    return values


def _dataset(totals: _Totals, n: int, attrs: dict[str, Any]) -> Any:
    import xarray as xr

    edges = np.linspace(0.0, 1.0, PIT_BINS + 1)
    counts, _ = np.histogram(totals.pit, bins=edges)
    return xr.Dataset(
        {"crps": ("sample", totals.crps), "pit": ("sample", totals.pit),
         "pinball": ("level", totals.pinball / n), "coverage": ("nominal", totals.covered / n),
         "pit_density": ("pit_bin", counts / n * PIT_BINS),
         "crps_mean": ((), float(totals.crps.mean())), "rmse": ((), float(np.sqrt(totals.squared / n)))},
        coords={"level": totals.levels, "nominal": totals.coverage, "pit_bin": (edges[:-1] + edges[1:]) / 2},
        attrs=attrs)


def _calibration_figure(dataset: Any, path: Path) -> None:
    """The PIT histogram (a density: 1 for calibrated laws) and observed against nominal coverage."""
    from .model_card import _figure, _save

    figure, (pit, cover) = _figure(2, 10, 4)
    width = 1.0 / dataset.sizes["pit_bin"]
    pit.bar(dataset["pit_bin"].values, dataset["pit_density"].values, width=width, color="tab:blue", alpha=0.8)
    pit.axhline(1.0, color="black", linestyle="--", linewidth=1, label="calibrated")
    pit.set(xlim=(0, 1), xlabel="PIT: F(y) of each row's law (randomised)", ylabel="density",
            title=f"PIT histogram, {dataset.attrs['n_samples']:,} rows")
    pit.legend(loc="upper center")
    nominal, observed = dataset["nominal"].values, dataset["coverage"].values
    cover.plot([0, 1], [0, 1], color="black", linestyle="--", linewidth=1, label="calibrated")
    cover.plot(nominal, observed, marker="o", color="tab:orange", label="central intervals")
    cover.set(xlim=(0, 1), ylim=(0, 1), xlabel="nominal coverage", ylabel="observed coverage",
              title=f"CRPS {float(dataset['crps_mean']):.4g}, RMSE {float(dataset['rmse']):.4g}")
    cover.legend(loc="upper left")
    _save(figure, path)


def open_evaluation(path: str | os.PathLike) -> Any:
    """Open an evaluation store after checking its contract (read from each array's own metadata, so a
    damaged store is found); ``ValueError`` naming the broken rule."""
    import xarray as xr

    source = Path(path)
    try:
        dataset = xr.open_zarr(source, zarr_format=3, consolidated=False)  # the files, not the consolidated copy
    except Exception as error:
        settle_reads()  # the members read beside the one that failed
        raise ValueError(f"evaluation {source}: not a readable zarr v3 store ({type(error).__name__})") from None
    validate_evaluation_dataset(dataset, f"evaluation {source}")
    return dataset
