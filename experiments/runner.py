"""Run the paper's experiments cell by cell and gather the results as xarray Datasets.

``plan(kind, quick)`` lists the cells of one experiment; ``run_cells`` runs them (in this process,
or mapped by the ``jdl-reproduce`` flow); ``to_datasets`` turns the cell results into one Dataset
per case (moments: gaussian, uniform, cauchy) or event level (classification: 1 %, 5 %), each with
dims (method, n, d, replicate) and one variable per metric, NaN where a cell was not run or a
metric does not apply. ``save`` writes them as zarr stores ``DIR/{kind}-{part}.zarr``.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from .classification import CLASS_METHODS, CLASS_METRICS, ClassificationSettings, classification_cell
from .moments import GRID_METRICS, METRICS, MOMENT_METHODS, MomentSettings, moments_cell, moments_cell_chunked

__all__ = ["KINDS", "Cell", "settings", "plan", "replicates", "pending", "run_cell", "run_cells", "to_datasets", "save", "load"]

KINDS = ("moments", "classification")
CELL_META = {"cell_time": "cell_seconds", "rank_x": "rank_x", "rank_y": "rank_y",  # variable -> _meta key;
             "factor_error": "factor_error"}  # per cell (n, d, replicate), NaN where a cell does not record it
CAUCHY_RANK_BUDGET = 1_000  # pivots per factorisation (MomentSettings.max_rank)
FACTOR_MEMORY = 10 * 2**30  # bytes: the n x rank factors of one in-memory cell
CHUNKED_ROWS = 1_000_000  # cells above run through the chunked pipeline (stage, fit_store on Dask)


@dataclass(frozen=True)
class Cell:
    """One experiment cell: ``part`` is the case (moments) or the event level (classification);
    ``quick`` selects the smoke run's lighter settings (``settings``)."""

    kind: str
    part: str
    d: int
    n: int
    replicate: int
    quick: bool = False

    @property
    def settings(self) -> Any:
        return settings(self.kind, self.part, self.quick, self.n)


def settings(kind: str, part: str, quick: bool, n: int = 0) -> Any:
    """The settings of the cells of an experiment part with n samples."""
    if kind == "classification":
        if quick:
            return ClassificationSettings(lengthscale_factors=(1.0,), regs=(1e-6, 1e-4), klr_regs=(1e-3, 1e-1),
                                          test_points=2000)
        return ClassificationSettings()
    base = MomentSettings(lengthscale_factors=(0.5, 1.0), regs=(1e-7, 1e-5, 1e-3), grid_rows=400,
                          test_points=2000) if quick else MomentSettings(grid_rows=400)
    # The grid QP (active set over n^2 pairs) took over 3 minutes per fit at n = 1e3, d = 2 and the
    # validated reg, and stalls on heavy tails: at most 400 training rows, none for Cauchy.
    if part != "cauchy":
        return base
    # Heavy tails leave many far-out points that each need a pivot of their own: at the median-heuristic
    # lengthscale the pivoted Cholesky of 8e4 Cauchy rows (d = 3) passes 3,000 pivots before the
    # tolerance 1e-3. Wider lengthscales and a rank budget keep the cells at n >= 1e5 feasible.
    wide = base.lengthscale_factors if quick else (1.0, 2.0, 4.0, 8.0)
    return replace(base, grid_rows=0, lengthscale_factors=wide, max_rank=cauchy_rank_budget(n))


def cauchy_rank_budget(n: int) -> int:
    """Pivots per factorisation for a Cauchy cell of n samples: ``CAUCHY_RANK_BUDGET``, or fewer where
    the four (4n/5, rank) float64 arrays of a cell (L and A on both sides) would pass ``FACTOR_MEMORY``."""
    return max(1, min(CAUCHY_RANK_BUDGET, FACTOR_MEMORY // (4 * 8 * max(1, (4 * int(n)) // 5))))


MOMENT_LAYOUT = {  # case -> (d values, n values); quick, then full
    True: {"gaussian": ((1, 2, 3), (250, 1000)), "uniform": ((1, 2, 3), (10, 50)), "cauchy": ((1, 2, 3), (1000,))},
    False: {"gaussian": ((1, 2, 3), (1_000, 10_000, 100_000, 1_000_000, 10_000_000)),
            "uniform": ((1, 2, 3), (10, 20, 50, 100)), "cauchy": ((1, 2, 3), (1_000, 10_000, 100_000, 1_000_000))},
}
QUICK_REPLICATES = {"gaussian": 1, "uniform": 2, "cauchy": 1, "classification": 1}
PARTS = {"moments": tuple(MOMENT_LAYOUT[False]), "classification": ("0.01", "0.05")}
CLASSIFICATION_LAYOUT = {True: ((1, 5), (500,)), False: ((1, 5, 10, 20), (1_000, 3_000))}  # (d values, n values)


def replicates(n: int, kind: str = "moments") -> int:
    """Replicates of a full-run cell with n samples (the paper: 100 throughout). Moments: 100 up to
    n = 1e3, 50 up to 1e4, 5 up to 1e5, 2 up to 1e6, 1 above; classification: 100 at n <= 1,000, 20
    above (a cell at n = 3,000 takes 5-15 s, mostly KLR's Newton solves)."""
    if kind == "classification":
        return 100 if n <= 1_000 else 20
    return 100 if n <= 1_000 else 50 if n <= 10_000 else 5 if n <= 100_000 else 2 if n <= CHUNKED_ROWS else 1


def plan(kind: str, quick: bool = False, max_n: int = 1_000_000, min_n: int = 0,
         parts: Iterable[str] | None = None) -> list[Cell]:
    """The cells of experiment ``kind`` ("moments" or "classification"); ``quick``: a few-minute smoke
    run; ``max_n``, ``min_n``: leave out larger and smaller n (the 1e7 point is opt-in: ``max_n``
    1e7; it runs through the chunked pipeline); ``parts``: only these cases (moments: gaussian,
    uniform, cauchy) or event levels (classification: 0.01, 0.05), default all. Replicates:
    ``replicates(n)`` (``QUICK_REPLICATES`` in the smoke run)."""
    if kind not in KINDS:
        raise ValueError(f"kind: unknown {kind!r}; choose one of {', '.join(KINDS)}")
    known = PARTS[kind]
    parts = known if parts is None else tuple(parts)
    if unknown := [part for part in parts if part not in known]:
        raise ValueError(f"parts: unknown {', '.join(map(repr, unknown))} for {kind}; choose from {', '.join(known)}")
    cells = []
    if kind == "moments":
        for case, (ds, ns) in MOMENT_LAYOUT[quick].items():
            for n in (n for n in ns if min_n <= n <= max_n):
                count = QUICK_REPLICATES[case] if quick else replicates(n)
                cells += [Cell(kind, case, d, n, r, quick) for d in ds for r in range(count)]
        cells = [cell for cell in cells if cell.part in parts]
        cells.sort(key=lambda cell: cell.n)  # every case at small n first: the long cells come last
    else:
        ds, ns = CLASSIFICATION_LAYOUT[quick]
        cells = [Cell(kind, level, d, n, r, quick) for level in parts for n in ns if min_n <= n <= max_n
                 for d in ds for r in range(QUICK_REPLICATES[kind] if quick else replicates(n, kind))]
    return cells


def pending(cells: Iterable[Cell], out: str | Path) -> list[Cell]:
    """The cells of ``cells`` whose results are not yet in the datasets in ``out`` (a finished cell has
    a finite ``cell_time``): what a resumed run still has to do."""
    cells = list(cells)
    datasets = load(out, keys={(cell.kind, cell.part) for cell in cells}) if Path(out).exists() else {}

    def done(cell: Cell) -> bool:
        dataset = datasets.get((cell.kind, cell.part))
        if dataset is None or any(getattr(cell, dim) not in dataset[dim].values for dim in ("n", "d", "replicate")):
            return False
        return bool(np.isfinite(dataset["cell_time"].sel(n=cell.n, d=cell.d, replicate=cell.replicate)))

    return [cell for cell in cells if not done(cell)]


def run_cell(cell: Cell) -> dict[str, Any]:
    """The metrics of one cell (``moments_cell`` or ``classification_cell``) with its wall time."""
    started = time.perf_counter()
    if cell.kind == "moments" and cell.n > CHUNKED_ROWS:
        result = moments_cell_chunked(cell.part, cell.d, cell.n, cell.replicate, cell.settings)
    elif cell.kind == "moments":
        result = moments_cell(cell.part, cell.d, cell.n, cell.replicate, cell.settings)
    else:
        result = classification_cell(cell.d, cell.n, cell.replicate, float(cell.part), cell.settings)
    result["_meta"]["cell_seconds"] = time.perf_counter() - started
    return result


def run_cells(cells: Iterable[Cell], progress: Callable[[str], None] | None = None,
              out: str | Path | None = None) -> list[tuple[Cell, dict]]:
    """Run ``cells`` in order; with ``out``, each cell's result is merged into the datasets there as
    soon as it is done (``save``), so a stopped run keeps every finished cell."""
    cells = list(cells)
    results = []
    for index, cell in enumerate(cells, 1):
        result = run_cell(cell)
        results.append((cell, result))
        if out is not None:
            save(to_datasets([(cell, result)]), out)
        if progress:
            progress(f"[{index}/{len(cells)}] {cell.kind} {cell.part} d={cell.d} n={cell.n} "
                     f"rep={cell.replicate}: {result['_meta']['cell_seconds']:.1f} s")
    return results


def _layout(kind: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    return ((MOMENT_METHODS, METRICS + GRID_METRICS) if kind == "moments" else (CLASS_METHODS, CLASS_METRICS))


def to_datasets(results: list[tuple[Cell, dict]]) -> dict[tuple[str, str], Any]:
    """{(kind, part): xarray.Dataset (method, n, d, replicate)} from cell results."""
    import xarray as xr

    datasets = {}
    for kind, part in sorted({(c.kind, c.part) for c, _ in results}):
        chosen = [(c, r) for c, r in results if (c.kind, c.part) == (kind, part)]
        methods, metrics = _layout(kind)
        coords = {"method": np.array(methods, dtype=object),  # variable-length strings: zarr v3 has a spec
                  "n": sorted({c.n for c, _ in chosen}), "d": sorted({c.d for c, _ in chosen}),
                  "replicate": sorted({c.replicate for c, _ in chosen})}
        shape = tuple(len(v) for v in coords.values())
        values = {metric: np.full(shape, np.nan) for metric in metrics}
        per_cell = {name: np.full(shape[1:], np.nan) for name in CELL_META}
        for cell, result in chosen:
            at = (coords["n"].index(cell.n), coords["d"].index(cell.d), coords["replicate"].index(cell.replicate))
            for name, key in CELL_META.items():
                per_cell[name][at] = result["_meta"].get(key, np.nan)
            for i, method in enumerate(methods):
                for metric in metrics:
                    values[metric][(i,) + at] = result.get(method, {}).get(metric, np.nan)
        data = {metric: (tuple(coords), array) for metric, array in values.items()}
        data.update({name: (("n", "d", "replicate"), array) for name, array in per_cell.items()})
        datasets[(kind, part)] = xr.Dataset(data, coords=coords, attrs={"kind": kind, "part": part,
                                                                        "schema": "jdl.reproduce", "schema_version": 1})
    return datasets


def save(datasets: dict[tuple[str, str], Any], out: str | Path) -> list[Path]:
    """Write each Dataset to ``out/{kind}-{part}.zarr`` and, as a small file to keep with the report,
    ``out/{kind}-{part}.nc`` (NetCDF 3). A dataset already there is merged: the new cells replace
    the same cells of the earlier run, the others are kept. Both files are written beside their
    targets and then moved into place, so an interrupted save leaves the earlier results intact.
    Returns the zarr paths."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    earlier = load(out, keys=datasets)  # only the parts written here: runs of other parts may share out
    paths = []
    for key, dataset in datasets.items():
        if key in earlier:
            dataset = dataset.combine_first(earlier[key])
            dataset.attrs.update(earlier[key].attrs)
        path = out / f"{key[0]}-{key[1]}.zarr"
        _replace_together({path: lambda target: dataset.to_zarr(target, mode="w", consolidated=False),
                           path.with_suffix(".nc"): lambda target: dataset.to_netcdf(target, engine="scipy")})
        paths.append(path)
    return paths


def _replace_together(writers: dict[Path, Callable[[Path], Any]]) -> None:
    """Write each path through its writer to a temporary sibling, then swap them all in: a failure
    while writing leaves every old copy as it was."""
    import os

    partial = {path: path.with_name(f".{path.name}.partial") for path in writers}
    previous = {path: path.with_name(f".{path.name}.previous") for path in writers}
    for path in writers:
        _remove(partial[path])
        _remove(previous[path])
    try:
        for path, write in writers.items():
            write(partial[path])
    except BaseException:
        for path in writers:
            _remove(partial[path])
        raise
    for path in writers:
        if path.exists():
            os.replace(path, previous[path])
        os.replace(partial[path], path)
        _remove(previous[path])


def _remove(path: Path) -> None:
    import shutil

    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def load(out: str | Path, keys: Iterable[tuple[str, str]] | None = None) -> dict[tuple[str, str], Any]:
    """The result Datasets found in ``out``: the zarr stores, else their NetCDF copies (a clean
    checkout keeps only those); ``keys``: only these (kind, part)."""
    import xarray as xr

    wanted = None if keys is None else {f"{kind}-{part}" for kind, part in keys}
    datasets = {}
    paths = sorted(Path(out).glob("*.zarr")) + sorted(Path(out).glob("*.nc"))
    for path in paths:
        if (wanted is not None and path.stem not in wanted) or (
                path.suffix == ".nc" and path.with_suffix(".zarr").exists()):
            continue
        if path.suffix == ".zarr":
            dataset = xr.open_zarr(path, consolidated=False).load()
        else:
            with xr.open_dataset(path, engine="scipy") as opened:
                dataset = opened.load()
        if dataset.attrs.get("schema") == "jdl.reproduce":
            datasets[(dataset.attrs["kind"], dataset.attrs["part"])] = dataset
    return datasets
