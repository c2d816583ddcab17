"""Staging: a source table -> a validated zarr v3 store of x (sample, x_feature), y (sample, y_feature).

Sources are read in blocks of ``chunk_size`` rows (CSV through pandas, Parquet through pyarrow
batches, .npy memory-mapped, NetCDF and zarr through xarray), so sources larger than memory stage
in constant memory. Every block is validated (``data_schemas.data``); the store is written to a
temporary sibling and renamed into place only when the whole source passed, so bad input leaves
nothing behind.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Iterator

import numpy as np
import zarr

from data_schemas.data import SCHEMA_NAME, SCHEMA_VERSION, ColumnStats, validate_block

from .atomic import atomic_store

__all__ = ["stage", "open_staged", "combined_fingerprint", "data_fingerprint", "arrays_fingerprint",
           "create_data_arrays", "data_attrs", "FORMATS"]

FORMATS = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet", ".npy": "npy", ".npz": "npz",
           ".nc": "netcdf", ".nc4": "netcdf", ".zarr": "zarr"}


def _format(source: Path) -> str:
    fmt = FORMATS.get(source.suffix.lower())
    if fmt is None:
        raise ValueError(f"source: unknown format {source.suffix!r}; supported: {', '.join(sorted(FORMATS))}")
    return fmt


def _require(available: list[str], wanted: list[str], source: Path) -> None:
    for name in wanted:
        if name not in available:
            raise ValueError(f"column {name!r}: not in {source.name} (has {', '.join(map(str, available))})")


def _blocks(source: Path, columns: list[str], chunk_size: int) -> Iterator[np.ndarray]:
    """Yield object or numeric blocks (rows, len(columns)) in source order."""
    fmt = _format(source)
    if fmt == "csv":
        import pandas as pd

        header = list(pd.read_csv(source, nrows=0).columns)
        _require(header, columns, source)
        for frame in pd.read_csv(source, usecols=columns, chunksize=chunk_size, dtype=object):
            yield frame[columns].to_numpy()
    elif fmt == "parquet":
        import pyarrow.parquet as pq

        file = pq.ParquetFile(source)
        _require(file.schema_arrow.names, columns, source)
        for batch in file.iter_batches(batch_size=chunk_size, columns=columns):
            yield np.column_stack([batch.column(name).to_numpy(zero_copy_only=False) for name in columns])
    elif fmt == "npy":
        array = np.load(source, mmap_mode="r")
        if array.ndim != 2:
            raise ValueError(f"source: {source.name} must hold a 2-D array, got shape {array.shape}")
        try:
            index = [int(c) for c in columns]
        except ValueError:
            raise ValueError("column: .npy sources are addressed by column number (e.g. --x 0,1 --y 2)") from None
        for i in index:
            if not 0 <= i < array.shape[1]:
                raise ValueError(f"column {i}: out of range for {source.name} with {array.shape[1]} columns")
        for start in range(0, array.shape[0], chunk_size):
            yield np.asarray(array[start:start + chunk_size][:, index])
    else:
        if fmt == "npz":
            with np.load(source) as archive:
                _require(list(archive.files), columns, source)
                arrays = [archive[name] for name in columns]
        else:
            import xarray as xr

            ds = xr.open_zarr(source, consolidated=False) if fmt == "zarr" else xr.open_dataset(source)
            _require(list(ds.data_vars) + list(ds.coords), columns, source)
            arrays = [ds[name] for name in columns]
        lengths = {name: int(np.shape(a)[0]) if np.ndim(a) else 0 for name, a in zip(columns, arrays)}
        for name, a in zip(columns, arrays):
            if np.ndim(a) != 1:
                raise ValueError(f"column {name!r}: must be 1-D, got shape {np.shape(a)}")
        if len(set(lengths.values())) > 1:
            raise ValueError(f"columns: mismatched lengths {lengths}")
        n = next(iter(lengths.values()))
        for start in range(0, n, chunk_size):
            yield np.column_stack([np.asarray(a[start:start + chunk_size]) for a in arrays])


def stage(
    source: str | os.PathLike,
    out: str | os.PathLike,
    x: list[str],
    y: list[str],
    *,
    chunk_size: int = 65_536,
    overwrite: bool = False,
    run_key: str | None = None,
) -> Path:
    """Stage columns ``x`` and ``y`` of ``source`` into a zarr v3 store at ``out``; returns its path.

    The store records the data fingerprint (see ``combined_fingerprint``) and, if given, the
    ``run_key`` of the orchestration that wrote it.
    """
    source, target = Path(source), Path(out)
    if not source.exists():
        raise ValueError(f"source: {source} does not exist")
    if not x or not y:
        raise ValueError("x, y: name at least one column for each")
    overlap = set(x) & set(y)
    if overlap:
        raise ValueError(f"column {sorted(overlap)[0]!r}: is named for both x and y")
    if chunk_size < 1:
        raise ValueError(f"chunk_size: must be >= 1, got {chunk_size}")
    with atomic_store(target, overwrite=overwrite) as staging:
        group = zarr.open_group(staging, mode="w", zarr_format=3)
        arrays = create_data_arrays(group, len(x), len(y), chunk_size)
        stats = {"x": ColumnStats(list(x)), "y": ColumnStats(list(y))}
        digests = {"x": hashlib.sha256(), "y": hashlib.sha256()}
        rows = 0
        for block in _blocks(source, list(x) + list(y), chunk_size):
            parts = {"x": block[:, : len(x)], "y": block[:, len(x):]}
            for role, names in (("x", list(x)), ("y", list(y))):
                values = validate_block(parts[role], names, role, rows)
                stats[role].update(values)
                arrays[role].append(values, axis=0)
                digests[role].update(_fingerprint_bytes(values))
            rows += block.shape[0]
        if rows < 2:
            raise ValueError(f"source: {source.name} has {rows} row(s); at least 2 are needed")
        stats["x"].check_not_constant("x")
        stats["y"].check_not_constant("y")
        group.attrs.update(data_attrs(x, y, rows, source.resolve(),
                                      combined_fingerprint(digests["x"].hexdigest(), digests["y"].hexdigest()),
                                      run_key))
    return target


def create_data_arrays(group: zarr.Group, x_width: int, y_width: int, chunk_size: int,
                       rows: int = 0) -> dict[str, zarr.Array]:
    """The float64 arrays x (rows, x_width) and y (rows, y_width) of a staged store, chunked by
    ``chunk_size`` samples, with dimension names (sample, x_feature) and (sample, y_feature)."""
    return {role: group.create_array(role, shape=(rows, width), chunks=(chunk_size, width), dtype="float64",
                                     dimension_names=("sample", f"{role}_feature"))
            for role, width in (("x", x_width), ("y", y_width))}


def data_attrs(x_features: list, y_features: list, n_samples: int, source: str | os.PathLike, fingerprint: str,
               run_key: str | None = None) -> dict:
    """The group attributes of a staged store (the ``data_schemas.data`` contract)."""
    return {
        "schema": SCHEMA_NAME, "schema_version": SCHEMA_VERSION, "x_features": list(map(str, x_features)),
        "y_features": list(map(str, y_features)), "n_samples": int(n_samples), "source": str(source),
        "fingerprint": fingerprint, **({"run_key": run_key} if run_key else {}),
    }


def _fingerprint_bytes(values: np.ndarray) -> bytes:
    return np.ascontiguousarray(values, dtype=np.float64).tobytes()


def combined_fingerprint(x_digest: str, y_digest: str) -> str:
    """The data fingerprint: SHA-256 of the hex SHA-256 digests of x's and y's float64 C-order bytes."""
    return hashlib.sha256(f"{x_digest}:{y_digest}".encode()).hexdigest()


def arrays_fingerprint(X: np.ndarray, Y: np.ndarray) -> str:
    """``combined_fingerprint`` of in-memory arrays X (n, d_x), Y (n, d_y): what staging records for them."""
    return combined_fingerprint(*(hashlib.sha256(_fingerprint_bytes(values)).hexdigest() for values in (X, Y)))


def data_fingerprint(group: zarr.Group) -> str:
    """A staged store's data fingerprint (``combined_fingerprint``): recorded at staging, recomputed
    chunk by chunk (constant memory) for stores that lack it."""
    recorded = group.attrs.get("fingerprint")
    if recorded:
        return str(recorded)
    digests = []
    for role in ("x", "y"):
        digest, array = hashlib.sha256(), group[role]
        for start in range(0, array.shape[0], array.chunks[0]):
            digest.update(_fingerprint_bytes(array[start:start + array.chunks[0]]))
        digests.append(digest.hexdigest())
    return combined_fingerprint(*digests)


def open_staged(path: str | os.PathLike) -> zarr.Group:
    """Open a staged store after checking its contract; raises ``ValueError`` naming the broken rule."""
    path = Path(path)
    try:
        group = zarr.open_group(path, mode="r", zarr_format=3)
    except Exception as error:
        raise ValueError(f"data {path}: not a readable zarr v3 store ({type(error).__name__})") from None
    attrs = dict(group.attrs)
    if attrs.get("schema") != SCHEMA_NAME:
        raise ValueError(f"data {path}: not a jdl data store (schema={attrs.get('schema')!r})")
    if attrs.get("schema_version", 0) > SCHEMA_VERSION:
        raise ValueError(f"data {path}: schema_version {attrs['schema_version']} is newer than this jdl reads")
    for role in ("x", "y"):
        if role not in group or group[role].shape != (attrs["n_samples"], len(attrs[f"{role}_features"])):
            raise ValueError(f"data {path}: array {role!r} is missing or has the wrong shape")
    return group
