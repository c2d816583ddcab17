"""The tuning store's record: its variables (the grid's validation loss, the search's candidates, the
maps the kernels read) and attributes (the search and the summaries), written by ``pipeline.tuning``
and read back (``load_tuning``) by the fit, the reports and the flows, following
``data_schemas.tuning``."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from data_schemas.tuning import SUMMARIES_VARIABLE, validate_tuning_dataset
from jdlcore.tuning import Fold, Regs

from .damage import settle_reads
from jdlcore.features.summaries import BoostedSummaries

from .summaries import summaries_variable

__all__ = ["load_tuning", "scored_candidates", "tuned_scaling", "tuned_summaries", "grid_dataset", "search_dataset",
           "add_maps", "search_record", "summaries_record"]


def summaries_record(kept: BoostedSummaries | None, rule: str, seconds: float, gain: float | None) -> dict[str, Any]:
    """The tuning store's attributes on the summaries: the ``rule`` asked for, the summaries in use of the
    map ``kept`` (None: the columns alone), whether the x kernel reads them alone, whether y is read
    standardised by them, their fitting's seconds and their gain."""
    return {"summaries": rule, "x_summaries": json.dumps(list(kept.in_use) if kept else []),
            "summaries_alone": bool(kept is not None and not kept.columns),
            "summaries_standardise_y": bool(kept is not None and kept.standardises), "summaries_seconds": seconds,
            "summaries_gain": gain}


def add_maps(ds: xr.Dataset, summaries: BoostedSummaries | None, kernel_x: Any, kernel_y: Any) -> None:
    """The tuning store's record of what the kernels read: the summaries' map, and the robust scaling
    (where the kernels have one) in the features' order, x's summaries after its columns."""
    if summaries is not None:
        ds[SUMMARIES_VARIABLE] = summaries_variable(summaries)
    for role, kernel in (("x", kernel_x), ("y", kernel_y)):
        if kernel.scale is not None:
            ds[f"{role}_location"] = xr.DataArray(kernel.location, dims=f"{role}_feature")
            ds[f"{role}_scale"] = xr.DataArray(kernel.scale, dims=f"{role}_feature")


def search_record(folds: list[Fold], table: list[dict[str, Any]], searched: list[dict[str, Any]],
                  best: dict[str, Any], screen: Any) -> dict[str, Any]:
    """The tuning store's attributes that record the search: folds, validated rows, the best setting, the
    candidates that failed, the search's steps and the rows the grid ran on."""
    return {
        "folds": len(folds), "validation_rows": sum(len(fold[2]) for fold in folds),
        "best": json.dumps({k: best[k] for k in ("lengthscale_x", "lengthscale_y", "reg", "score", "rank_x", "rank_y")}),
        "failures": json.dumps([{k: row[k] for k in ("lengthscale_x", "lengthscale_y", "reg", "error")}
                                for row in table + searched if "error" in row]),
        "search_steps": json.dumps([row["step"] for row in searched]),
        "grid_rows": int(len(folds[0][0]) if screen.rows is None else screen.size),
    }


def tuned_scaling(table: xr.Dataset) -> tuple[str, dict[str, tuple[np.ndarray, np.ndarray]]]:
    """(the tuning store's scaling, its (location, scale) by role): ("none", {}) for a store tuned on
    the raw columns (and for stores written before scalings were recorded)."""
    scaling = str(table.attrs.get("scaling", "none"))
    if scaling == "none":
        return scaling, {}
    return scaling, {role: (np.asarray(table[f"{role}_location"].values, dtype=np.float64),
                            np.asarray(table[f"{role}_scale"].values, dtype=np.float64)) for role in ("x", "y")}


def tuned_summaries(table: xr.Dataset) -> list[str]:
    """The names of the boosted summaries a tuning store kept (empty for the columns alone, and for
    stores written before the summaries)."""
    return json.loads(table.attrs.get("x_summaries", "[]"))


def grid_dataset(table: list[dict[str, Any]], grid_x: list[float], grid_y: list[float], regs: Regs) -> xr.Dataset:
    """The grid's candidates (``score_grid``'s rows) on the axes grid_x x grid_y x the regs: validation loss
    and seconds per candidate, ranks per pair of lengthscales; NaN where not scored (the early stop of
    the x lengthscales, the reg walk's rungs not visited)."""
    values = list(regs.values)
    shape = (len(grid_x), len(grid_y), len(values))
    loss, seconds = np.full(shape, np.nan), np.full(shape, np.nan)
    rank_x, rank_y = np.full(shape[:2], np.nan), np.full(shape[:2], np.nan)  # NaN: a pair not scored
    for row in table:
        i, j, k = grid_x.index(row["lengthscale_x"]), grid_y.index(row["lengthscale_y"]), values.index(row["reg"])
        loss[i, j, k], seconds[i, j, k] = row["score"], row["seconds"]
        rank_x[i, j], rank_y[i, j] = row["rank_x"], row["rank_y"]
    grid = ("lengthscale_x", "lengthscale_y", "reg")
    return xr.Dataset(
        {"validation_loss": (grid, loss), "seconds": (grid, seconds),
         "rank_x": (grid[:2], rank_x), "rank_y": (grid[:2], rank_y)},
        coords={"lengthscale_x": grid_x, "lengthscale_y": grid_y, "reg": values},
    )


def search_dataset(rows: list[dict[str, Any]], x_width: int, y_width: int, train_rows: int, folds: int) -> xr.Dataset:
    """The per-feature search's candidates in order (dim search_candidate): lengthscales per feature,
    reg, validation loss (NaN: failed; the mean over the folds it was scored on), ranks, seconds, the
    training rows it was fitted on (the search's subsample, or all ``train_rows``) and the folds it
    was scored on (fewer than ``folds`` where it fell behind on the first: ``folds_scored``)."""
    def column(name: str, width: int | None = None) -> np.ndarray:
        if width is None:
            return np.array([float(row[name]) for row in rows])
        return np.array([np.broadcast_to(np.asarray(row[name], dtype=np.float64), (width,)) for row in rows])

    candidate = "search_candidate"
    return xr.Dataset({
        "search_lengthscale_x": ((candidate, "x_feature"), column("lengthscale_x", x_width)),
        "search_lengthscale_y": ((candidate, "y_feature"), column("lengthscale_y", y_width)),
        "search_reg": (candidate, column("reg")), "search_loss": (candidate, column("score")),
        "search_rank_x": (candidate, column("rank_x")), "search_rank_y": (candidate, column("rank_y")),
        "search_seconds": (candidate, column("seconds")),
        "search_rows": (candidate, np.array([int(row.get("subsample", train_rows)) for row in rows])),
        "search_folds": (candidate, np.array([int(row.get("folds_scored", folds)) for row in rows])),
    })


def load_tuning(path: str | os.PathLike) -> xr.Dataset:
    """Open and validate a tuning store (loaded into memory: it is small); ``ValueError`` if foreign."""
    source = Path(path)
    if not source.exists():
        raise ValueError(f"tuning: {source} does not exist")
    where = f"tuning {source}"
    try:
        with xr.open_zarr(source, consolidated=False, zarr_format=3) as ds:
            ds = ds.load()
    except Exception as error:  # zarr raises many types for foreign or damaged directories
        settle_reads()  # the members read beside the one that failed
        raise ValueError(f"{where}: not a readable zarr v3 store ({type(error).__name__}: {error})") from None
    validate_tuning_dataset(ds, where)
    return ds


def scored_candidates(tuning: xr.Dataset) -> int:
    """How many of a tuning store's grid candidates were scored (the early stop of the x lengthscales
    and the reg walk leave the others NaN)."""
    return int(np.isfinite(tuning["seconds"].values).sum())
