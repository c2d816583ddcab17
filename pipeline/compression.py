"""Compress a staged data store to m points whose conditional mean embedding matches the data's
(``jdlcore.compression``), and write the compressed set as a staged data store of its own.

The n samples are read into this process (``ArraySource``) or stay on Dask workers as row chunks
(``DaskSource``); either way the compression only asks for chunked sums, a few rows and the class
labels, so nothing n-sized reaches this process on Dask. The written store is a valid staged data
store (``jdl fit SET.zarr`` works on it unchanged) with, in addition, the array ``objective_trace``
(step) and the attribute ``compression``: how it was made and how close it is to the data, as the
AMCMD of its KCME to the data's (the project's low-rank CME) and that of a random subsample of the
same size, for comparison.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

import numpy as np
import zarr

from jdlcore.compression import LEARNING_RATE, N_INIT, ArraySource, CompressionResult, SampleSource, run_compression
from jdlcore.compression.amcmd import LinearEmbedding, amcmd_between, cme_embedding, data_cme, kcme_embedding
from jdlcore.lowrank.cholesky import DEFAULT_TOL, Factorisation
from jdlcore.compression.compress import check_settings
from jdlcore.compression.sources import Partial, add_partials, chunk_rows_for, reduce_rows
from jdlcore.kernels import DeltaKernel, GaussianKernel, Kernel, kernel_from_dict
from jdlcore.validation import check_choice, check_positive

from .atomic import atomic_store, refuse_existing
from .cluster import broadcast, dask_client, resolve_scheduler
from .fitting import store_chunks
from .staging import (
    arrays_fingerprint, categorical_levels, create_data_arrays, data_attrs, data_fingerprint, open_staged,
    write_feature_coordinates,
)

__all__ = ["DaskSource", "compress_store", "open_compressed", "KERNELS_Y"]

KERNELS_Y = ("gaussian", "delta")


# -- the samples on Dask ----------------------------------------------------------------------------
def _reduce_chunk(function: Callable[..., Partial], X: np.ndarray, Y: np.ndarray, args: tuple,
                  rows_hint: int) -> Partial:
    """Sum of ``function(X_slab, Y_slab, *args)`` over slabs of one chunk X (n_c, d_x), Y (n_c, d_y),
    each slab small enough that an (rows_hint, slab) kernel block stays near 16 MB (a Dask task)."""
    return reduce_rows(function, X, Y, args, chunk_rows_for(rows_hint, X.shape[0]))


def _take(chunk: np.ndarray, local: np.ndarray) -> np.ndarray:
    """Rows ``local`` (k,) of a chunk (n_c, d) (a Dask task)."""
    return chunk[local]


def _column_sums(X: np.ndarray, Y: np.ndarray, mean_x: np.ndarray, mean_y: np.ndarray) -> Partial:
    """Rows, and sums of (X - mean_x) and of its squares per column (likewise for Y), of one chunk."""
    dx, dy = X - mean_x, Y - mean_y
    return {"rows": float(X.shape[0]), "x": dx.sum(axis=0), "y": dy.sum(axis=0),
            "xx": (dx * dx).sum(axis=0), "yy": (dy * dy).sum(axis=0)}


def _unique_labels(Y: np.ndarray) -> np.ndarray:
    """The distinct values (c,) of the first column of a chunk Y (n_c, 1) (a Dask task)."""
    return np.unique(Y[:, 0])


class DaskSource:
    """A ``SampleSource`` over row chunks on Dask: x_chunks and y_chunks are futures of (n_c, d_x) and
    (n_c, d_y) arrays paired row for row, n rows in all, in order. The futures are held (so the
    chunks stay in the workers' memory) for as long as the source lives."""

    def __init__(self, client: Any, x_chunks: list, y_chunks: list, n: int, x_width: int, y_width: int):
        if len(x_chunks) != len(y_chunks) or not x_chunks:
            raise ValueError(f"chunks: need as many x chunks as y chunks (>= 1), got {len(x_chunks)} and "
                             f"{len(y_chunks)}")
        self.client, self.x_chunks, self.y_chunks = client, list(x_chunks), list(y_chunks)
        self.n, self.x_width, self.y_width = int(n), int(x_width), int(y_width)
        sizes = np.array(client.gather(client.map(len, self.x_chunks, pure=False)), dtype=np.int64)
        if sizes.sum() != self.n:
            raise ValueError(f"chunks: hold {int(sizes.sum())} rows, n is {self.n}")
        self.starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])

    @classmethod
    def from_store(cls, client: Any, data: str | os.PathLike, group: zarr.Group | None = None) -> "DaskSource":
        """The samples of a staged store, one chunk future per stored chunk of rows (``store_chunks``)."""
        group = open_staged(data, needs_y="compress") if group is None else group
        chunks = store_chunks(client, data, group)
        return cls(client, chunks["x"], chunks["y"], int(group.attrs["n_samples"]), group["x"].shape[1],
                   group["y"].shape[1])

    def reduce(self, function: Callable[..., Partial], *args: Any, rows_hint: int = 1) -> Partial:
        """Sum over all chunks of ``function(X_chunk, Y_chunk, *args)``: one task per chunk (the small
        arguments sent once), the partials summed here in chunk order (deterministic)."""
        [shared] = broadcast(self.client, [args])
        parts = [self.client.submit(_reduce_chunk, function, x, y, shared, rows_hint, pure=False)
                 for x, y in zip(self.x_chunks, self.y_chunks)]
        total = None
        for part in self.client.gather(parts):
            total = add_partials(total, part)
        return total

    def rows(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The samples at ``indices`` (k,), as (X (k, d_x), Y (k, d_y)), in that order."""
        indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        if indices.size and (indices.min() < 0 or indices.max() >= self.n):
            raise ValueError(f"indices: must lie in [0, {self.n}), got {indices.min()}..{indices.max()}")
        chunk_of = np.searchsorted(self.starts, indices, side="right") - 1
        X, Y = np.empty((indices.size, self.x_width)), np.empty((indices.size, self.y_width))
        wanted = np.unique(chunk_of)
        futures = [(self.client.submit(_take, self.x_chunks[c], indices[chunk_of == c] - self.starts[c], pure=False),
                    self.client.submit(_take, self.y_chunks[c], indices[chunk_of == c] - self.starts[c], pure=False))
                   for c in wanted]
        for c, (x, y) in zip(wanted, self.client.gather(futures)):
            X[chunk_of == c], Y[chunk_of == c] = x, y
        return X, Y

    def column_scale(self) -> tuple[np.ndarray, np.ndarray]:
        """Population standard deviation (as ``np.std``) of every x and y column, (d_x,) and (d_y,),
        in two passes (the means, then the centred squares) for accuracy."""
        zero = (np.zeros(self.x_width), np.zeros(self.y_width))
        sums = self.reduce(_column_sums, *zero)
        means = (sums["x"] / self.n, sums["y"] / self.n)
        centred = self.reduce(_column_sums, *means)
        return (np.sqrt((centred["xx"] - centred["x"] ** 2 / self.n) / self.n),
                np.sqrt((centred["yy"] - centred["y"] ** 2 / self.n) / self.n))

    def classes(self) -> np.ndarray:
        """The distinct y values (c,) of a one-column y, sorted."""
        if self.y_width != 1:
            raise ValueError(f"Y: a class label must be one column, got {self.y_width}")
        parts = self.client.gather([self.client.submit(_unique_labels, y, pure=False) for y in self.y_chunks])
        return np.unique(np.concatenate(parts))


# -- compressing a store ----------------------------------------------------------------------------
def _kernels(lengthscale_x: float | None, lengthscale_y: float | None,
             kernel_y: str) -> tuple[Kernel | None, Kernel | None]:
    """Gaussian kernels of the given lengthscales (None: the median heuristic of ``run_compression``);
    a "delta" kernel_y for a class label y."""
    check_choice(kernel_y, "kernel_y", KERNELS_Y)
    for name, value in (("lengthscale_x", lengthscale_x), ("lengthscale_y", lengthscale_y)):
        if value is not None:
            check_positive(value, name)
    if kernel_y == "delta" and lengthscale_y is not None:
        raise ValueError("lengthscale_y: the delta kernel of a class label has no lengthscale")
    k_x = None if lengthscale_x is None else GaussianKernel(float(lengthscale_x))
    if kernel_y == "delta":
        return k_x, DeltaKernel()
    return k_x, None if lengthscale_y is None else GaussianKernel(float(lengthscale_y))


def _check(options: dict, amcmd_tol: float, n: int) -> None:
    """The settings' checks, before any cluster starts (``run_compression`` repeats them)."""
    check_settings(options["m"], options["method"], options["optimizer"], options["reg"], options["steps"],
                   options["learning_rate"], options["n_init"], n)
    check_positive(amcmd_tol, "amcmd_tol")
    if amcmd_tol >= 1:
        raise ValueError(f"amcmd_tol: must be < 1, got {amcmd_tol!r}")


def _data_embedding(source: SampleSource, kernel_x: Kernel, kernel_y: Kernel, reg: float, tol: float,
                    seed: int | None) -> LinearEmbedding:
    """The full data's KCME with the paper's lambda ``reg``: the project's low-rank CME with reg / n
    (pivoted Cholesky to relative trace error ``tol``), fitted in memory or from chunked reductions."""
    cme = data_cme(kernel_x, kernel_y, reg, source.n, tol, seed)
    if isinstance(source, DaskSource):
        from .chunked_fit import chunked_problem

        problem = chunked_problem(source.client, source.x_chunks, source.y_chunks, kernel_x, kernel_y,
                                  Factorisation.of(cme), extremes=False)
        return cme_embedding(cme.fit_problem(problem))
    return cme_embedding(cme.fit(source.X, source.Y))


def _amcmd(data: LinearEmbedding, X: np.ndarray, Y: np.ndarray, source: SampleSource, kernel_x: Kernel,
           kernel_y: Kernel, reg: float) -> float:
    """AMCMD between the data's KCME and that of the set X (m, d_x), Y (m, d_y) (lambda ``reg``),
    averaged over the data's x; the squared estimate clipped at 0 before the square root."""
    value = amcmd_between(data, kcme_embedding(X, Y, kernel_x, kernel_y, reg, "Xc"), source)
    return float(np.sqrt(max(value, 0.0)))


def _assess(source: SampleSource, result: CompressionResult, amcmd_tol: float,
            seed: int | None) -> tuple[float, float]:
    """(AMCMD of the compressed set, AMCMD of a random subsample of the same size drawn with ``seed``),
    both against the full data's KCME."""
    kernel_x, kernel_y = (kernel_from_dict(result.settings[name]) for name in ("kernel_x", "kernel_y"))
    reg, m = result.settings["reg"], result.X.shape[0]
    data = _data_embedding(source, kernel_x, kernel_y, reg, amcmd_tol, seed)
    X_random, Y_random = source.rows(np.sort(np.random.default_rng(seed).choice(source.n, m, replace=False)))
    return (_amcmd(data, result.X, result.Y, source, kernel_x, kernel_y, reg),
            _amcmd(data, X_random, Y_random, source, kernel_x, kernel_y, reg))


def _write(target: Path, data: Path, group: zarr.Group, result: CompressionResult, summary: dict,
           run_key: str | None) -> None:
    """The compressed set at ``target`` (a temporary path): a staged data store plus its trace and summary."""
    out = zarr.open_group(target, mode="w", zarr_format=3)
    m = result.X.shape[0]
    arrays = create_data_arrays(out, result.X.shape[1], result.Y.shape[1], max(m, 1), rows=m)
    arrays["x"][:], arrays["y"][:] = result.X, result.Y
    write_feature_coordinates(out, group.attrs["x_features"], group.attrs["y_features"])
    trace = np.asarray(result.trace, dtype=np.float64)
    out.create_array("objective_trace", shape=trace.shape, chunks=(max(trace.size, 1),), dtype="float64",
                     dimension_names=("step",))[:] = trace
    out.attrs.update({**data_attrs(group.attrs["x_features"], group.attrs["y_features"], m, data.resolve(),
                                   arrays_fingerprint(result.X, result.Y), run_key),
                      "compression": summary})


def compress_store(
    data: str | os.PathLike,
    out: str | os.PathLike,
    *,
    m: int,
    method: str = "ackip",
    lengthscale_x: float | None = None,
    lengthscale_y: float | None = None,
    kernel_y: str = "gaussian",
    reg: float | None = None,
    seed: int | None = 0,
    steps: int | None = None,
    optimizer: str = "adam",
    learning_rate: float = LEARNING_RATE,
    n_init: int = N_INIT,
    amcmd_tol: float = DEFAULT_TOL,
    scheduler: str | None = None,
    overwrite: bool = False,
    run_key: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Compress the staged store ``data`` (n rows) to m points and write them as the staged store ``out``.

    method, reg (the compressed KCME's lambda, no factor m; None: chosen by validation), seed, steps, optimizer, learning_rate,
    n_init: as ``jdlcore.compression.run_compression``. lengthscale_x, lengthscale_y: Gaussian kernel
    lengthscales (None: the paper's median heuristic); kernel_y "delta" treats a one-column y as a
    class label. amcmd_tol: the relative pivoted-Cholesky tolerance of the data's low-rank KCME in the
    reported AMCMD. scheduler: as ``pipeline.cluster`` (None/"auto": Dask above ``AUTO_ROWS`` rows).
    ``progress`` receives a line per finished stage; ``run_key`` is recorded for the orchestration.
    Raises ``ValueError`` (and leaves nothing at ``out``) for bad input. Returns the path of ``out``.
    """
    target, data = Path(out), Path(data)
    refuse_existing(target, overwrite)  # before the work, not after it
    if target.resolve() == data.resolve():
        raise ValueError(f"out: {target} is the data store itself")
    group = open_staged(data, needs_y="compress")
    if categorical_levels(group):
        raise ValueError(f"data: {data} has categorical x columns ({', '.join(categorical_levels(group))}); compression "
                         "moves points continuously and takes numeric columns only")
    if group.attrs.get("missing_x"):
        raise ValueError(f"data: {data} has missing x values (in {', '.join(group.attrs['missing_x'])}); compression "
                         "moves points continuously and takes complete rows only")
    n = int(group.attrs["n_samples"])
    kernel_x, kernel_y_ = _kernels(lengthscale_x, lengthscale_y, kernel_y)
    options = dict(m=m, method=method, kernel_x=kernel_x, kernel_y=kernel_y_, reg=reg, seed=seed, steps=steps,
                   optimizer=optimizer, learning_rate=learning_rate, n_init=n_init)
    _check(options, amcmd_tol, n)
    scheduler = resolve_scheduler(scheduler, n)
    say = progress or (lambda line: None)
    with atomic_store(target, overwrite=overwrite) as staging:
        if scheduler is None:
            source = ArraySource(group["x"][:], group["y"][:])
            result, (amcmd, amcmd_random) = _compress(source, options, amcmd_tol, seed, say)
        else:
            with dask_client(scheduler) as client:
                source = DaskSource.from_store(client, data, group)
                result, (amcmd, amcmd_random) = _compress(source, options, amcmd_tol, seed, say)
        settings = result.settings
        summary = {
            "method": method, "m": int(m), "n_data": n, "objective": result.objective, "value": result.value,
            "initial_value": result.initial_value, "seconds": result.seconds, "amcmd": amcmd,
            "amcmd_random": amcmd_random, "data_fingerprint": data_fingerprint(group), "amcmd_tol": float(amcmd_tol),
            **{k: settings[k] for k in ("reg", "reg_from", "seed", "steps", "optimizer", "learning_rate", "n_init", "kernel_x",
                                         "kernel_y")},
        }
        _write(staging, data, group, result, _jsonable(summary), run_key)
    return target


def _compress(source: SampleSource, options: dict, amcmd_tol: float, seed: int | None,
              say: Callable[[str], None]) -> tuple[CompressionResult, tuple[float, float]]:
    """Run the compression on ``source`` and assess it (``_assess``), reporting both stages."""
    say(f"compressing {source.n:,} rows to {options['m']} points ({options['method']})")
    result = run_compression(source, **options)
    say(f"compressed: {result.objective} objective {result.initial_value:.6g} -> {result.value:.6g} "
        f"in {result.seconds:.1f} s")
    amcmds = _assess(source, result, amcmd_tol, seed)
    say(f"AMCMD {amcmds[0]:.4g} (random subsample {amcmds[1]:.4g})")
    return result, amcmds


def _jsonable(value: Any) -> Any:
    """``value`` with NumPy scalars and arrays turned into Python numbers and lists (for zarr attrs)."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def open_compressed(path: str | os.PathLike) -> zarr.Group:
    """Open a compressed set (a staged store written by ``compress_store``) after checking its contract;
    raises ``ValueError`` naming the broken rule."""
    group = open_staged(path)
    summary = group.attrs.get("compression")
    if not isinstance(summary, dict):
        raise ValueError(f"data {path}: not a compressed set (no 'compression' attribute)")
    required = ("method", "m", "n_data", "amcmd", "amcmd_random", "kernel_x", "kernel_y")
    missing = [k for k in required if k not in summary]
    if missing:
        raise ValueError(f"data {path}: attribute 'compression' lacks {missing[0]!r}")
    if summary["m"] != group.attrs["n_samples"]:
        raise ValueError(f"data {path}: compression m = {summary['m']} but the store has "
                         f"{group.attrs['n_samples']} rows")
    if "objective_trace" not in group or len(group["objective_trace"].shape) != 1:
        raise ValueError(f"data {path}: array 'objective_trace' is missing or not 1-D")
    return group
