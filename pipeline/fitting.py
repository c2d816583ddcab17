"""Fit a JDL model from a staged data store and write the model store.

In this process for small data, on Dask otherwise (see ``pipeline.cluster`` for ``scheduler``):
there the factorisations and reductions run chunk by chunk, each chunk a task that reads its own
slice of the zarr store (so it can be recomputed after a worker is lost), and nothing n-sized
reaches this process. Both paths solve the same small problem with jdlcore.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import zarr

from jdlcore import JDL, GaussianKernel, build_problem
from jdlcore.atoms import STANDARD_FUNCTIONS

from .atomic import refuse_existing
from .cluster import dask_client, resolve_scheduler
from .model_store import save_model
from .staging import data_fingerprint, open_staged

__all__ = ["fit_store", "choose_positivity", "read_rows", "GRID_ROWS", "GRID_LIMIT"]


def read_rows(path: str, role: str, start: int, stop: int) -> np.ndarray:
    """Rows [start, stop) of array ``role`` of a staged store (a Dask task)."""
    return zarr.open_group(path, mode="r", zarr_format=3)[role][start:stop]


NEGATIVE_MASS_PROBES = 16  # x pivots at which the stored model reports its negative mass
GRID_ROWS = 20_000
GRID_LIMIT = 200_000


def choose_positivity(positivity: str, constraints: str, n: int) -> str:
    """Resolve "auto" and refuse exact grid positivity where its n^2 pairs are out of reach."""
    if positivity == "auto":
        return "grid" if n <= GRID_ROWS else "tightening"
    if positivity == "grid" and constraints == "positivity" and n > GRID_LIMIT:
        raise ValueError(f"positivity: 'grid' checks all n^2 = {n * n:.2g} training pairs and is limited to "
                         f"{GRID_LIMIT:,} rows (got {n:,}); use tightening, clip, or constraints normalization")
    return positivity


def fit_store(
    data: str | os.PathLike,
    out: str | os.PathLike,
    *,
    lengthscale_x: float,
    lengthscale_y: float,
    reg: float,
    tol: float,
    constraints: str = "positivity",
    positivity: str = "auto",
    pivoting: str = "random",
    seed: int = 0,
    scheduler: str | None = None,
    overwrite: bool = False,
    tuning: str | os.PathLike | None = None,
    run_key: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> tuple[Path, JDL]:
    """Fit on a staged store and save the model store at ``out``; returns its path and the model.

    ``positivity`` "auto" is "grid" (exact on all n^2 training pairs) up to ``GRID_ROWS`` rows and
    "tightening" (the paper's sufficient condition (33), m x m cost) above; "grid" is refused above
    ``GRID_LIMIT`` rows. ``progress`` receives a line per finished stage. The model's diagnostics carry the time split
    (``pivots_seconds`` and ``reductions_seconds`` on Dask, ``solve_seconds``, ``fit_seconds``) and
    ``write_seconds`` (set after the store is written, so not stored in it). ``tuning``: the tuning
    store the hyperparameters came from; its table is kept in the model store (``tuning_*``) and its
    best setting in the provenance. ``run_key`` is recorded for the orchestration's resume check.
    """
    target = Path(out)
    refuse_existing(target, overwrite)  # before the fit, not after it
    group = open_staged(data)
    table = None
    if tuning is not None:
        from .tuning import load_tuning

        table = load_tuning(tuning)
    n = int(group.attrs["n_samples"])
    positivity = choose_positivity(positivity, constraints, n)
    started = time.perf_counter()
    estimator = JDL(GaussianKernel(lengthscale_x), GaussianKernel(lengthscale_y), reg=reg, tol=tol,
                    constraints=constraints, positivity=positivity, pivoting=pivoting, seed=seed)
    estimator._check_params()
    options = dict(tol=tol, pivoting=pivoting, seed=seed, test_functions=STANDARD_FUNCTIONS)
    scheduler = resolve_scheduler(scheduler, n)
    if scheduler is None:
        Y = group["y"][:]
        problem = build_problem(group["x"][:], Y, estimator.kernel_x, estimator.kernel_y, **options)
    else:
        from .chunked_fit import chunked_problem

        Y = group["y"]  # read lazily: the model store copies the atoms block by block
        step = group["x"].chunks[0]
        bounds = [(start, min(start + step, n)) for start in range(0, n, step)]
        path = str(Path(data).resolve())
        with dask_client(scheduler) as client:
            chunks = {role: [client.submit(read_rows, path, role, a, b, pure=False) for a, b in bounds]
                      for role in ("x", "y")}
            problem = chunked_problem(client, chunks["x"], chunks["y"], estimator.kernel_x, estimator.kernel_y,
                                      keep_values=estimator.uses_grid, extremes=estimator.uses_tightening,
                                      progress=progress, **options)
    model = estimator.fit_problem(problem, Y)
    model.diagnostics_["fit_seconds"] = time.perf_counter() - started
    mark = time.perf_counter()
    probes = model.basis_x_.pivot_points[:NEGATIVE_MASS_PROBES]
    negative = model.negative_mass(probes)  # one pass over the atoms
    model.diagnostics_.update({
        "negative_mass_max": float(negative.max()), "negative_mass_mean": float(negative.mean()),
        "negative_mass_probes": int(probes.shape[0]), "negative_mass_seconds": time.perf_counter() - mark,
    })
    if progress is not None:
        progress(f"solved: {model.diagnostics_['solve_seconds']:.2f} s")
    provenance: dict[str, Any] = {
        "data": str(Path(data).resolve()), "data_fingerprint": data_fingerprint(group),
        "x_features": group.attrs["x_features"], "y_features": group.attrs["y_features"],
        "scheduler": scheduler or "in-memory",
    }
    if table is not None:
        provenance["tuning"] = {"store": str(Path(tuning).resolve()), "best": json.loads(table.attrs["best"]),
                                "criterion": table.attrs["criterion"], "rows_used": table.attrs["rows_used"]}
    model.provenance_ = provenance
    mark = time.perf_counter()
    path = save_model(model, target, overwrite=overwrite, provenance=provenance, tuning=table, run_key=run_key)
    model.diagnostics_["write_seconds"] = time.perf_counter() - mark
    return path, model
