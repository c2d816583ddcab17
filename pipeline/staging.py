"""Staging: a source table -> a validated zarr v3 store of x (sample, x_feature), y (sample, y_feature).

Sources are read in blocks of ``chunk_size`` rows (CSV through pandas, Parquet through pyarrow
batches, .npy memory-mapped, NetCDF and zarr through xarray), so sources larger than memory stage
in constant memory. Every block is validated (``data_schemas.data``); the store is written to a
temporary sibling and renamed into place only when the whole source passed, so bad input leaves
nothing behind.

Categorical x columns, declared (``categorical``) or detected (``jdlcore.features.levels.is_categorical`` on
the first ``DETECT_ROWS`` values: text, alone or mixed with numbers in a few distinct codes), are
stored as codes 0, 1, ... with their levels in the store's ``categorical`` attribute (order of first
appearance).
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Iterator

import numpy as np
import zarr

from data_schemas.data import (
    MISSING_LEVEL, OTHER_CODE, SCHEMA_NAME, SCHEMA_VERSION, UNSEEN_RULES, ColumnStats, LevelEncoder,
    validate_block,
)
from jdlcore.features.levels import DETECT_ROWS, is_categorical

from .atomic import atomic_store
from .damage import settle_reads

__all__ = ["stage", "open_staged", "combined_fingerprint", "data_fingerprint", "arrays_fingerprint",
           "create_data_arrays", "write_feature_coordinates", "data_attrs", "categorical_levels", "categorical_indices",
           "level_recoding", "recode", "FORMATS", "DETECT_ROWS", "UNSEEN_RULES", "OTHER_CODE", "read_sample",
           "MissingY", "MISSING_LEVEL"]

FORMATS = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet", ".npy": "npy", ".npz": "npz",
           ".nc": "netcdf", ".nc4": "netcdf", ".zarr": "zarr"}


CHUNK_SIZE = 65_536  # rows per chunk of a staged store


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
    categorical: list[str] | None = None,
    chunk_size: int = CHUNK_SIZE,
    drop_missing_y: bool = False,
    overwrite: bool = False,
    run_key: str | None = None,
) -> Path:
    """Stage columns ``x`` and ``y`` of ``source`` into a zarr v3 store at ``out``; returns its path. With
    no ``y`` the store is a batch of rows to score (``jdl score``; tune, fit and evaluate refuse it): it
    may hold a single row, and a column of one value.

    ``categorical``: x columns to store as category codes (integer-coded ones, say); text x columns,
    and those mixing text with a few distinct numbers ("K", 1, 2, 3), are detected as categorical anyway. A row with a missing y (NaN or empty) is refused, with one
    error naming how many rows miss one and the first of them, unless ``drop_missing_y``: those rows
    are then left out, and the store's ``dropped_missing_y`` attribute counts them. A missing x value is
    kept: NaN in a continuous column (the ``missing_x`` attribute counts them per column), the level
    ``MISSING_LEVEL`` in a categorical one (``jdlcore.features.missing`` says how models read them). The store records the
    data fingerprint (see ``combined_fingerprint``) and, if given, the ``run_key`` of the orchestration that
    wrote it.
    """
    source, target = Path(source), Path(out)
    if not source.exists():
        raise ValueError(f"source: {source} does not exist")
    if not x:
        raise ValueError("x: name at least one column")
    for role, names in (("x", x), ("y", y), ("categorical", categorical or [])):
        twice = sorted({name for name in names if list(names).count(name) > 1})
        if twice:
            raise ValueError(f"{role}: column {twice[0]!r} is named twice")
    overlap = set(x) & set(y)
    if overlap:
        raise ValueError(f"column {sorted(overlap)[0]!r}: is named for both x and y")
    declared = list(categorical or [])
    for name in declared:
        if name not in x:
            raise ValueError(f"categorical: column {name!r} is not an x column (x: {', '.join(x)}); only x columns can be "
                             "categorical")
    if chunk_size < 1:
        raise ValueError(f"chunk_size: must be >= 1, got {chunk_size}")
    with atomic_store(target, overwrite=overwrite) as staging:
        group = zarr.open_group(staging, mode="w", zarr_format=3)
        arrays = create_data_arrays(group, len(x), len(y), chunk_size)
        stats = {"x": ColumnStats(list(x)), "y": ColumnStats(list(y))}
        digests = {"x": hashlib.sha256(), "y": hashlib.sha256()}
        encoders: dict[int, LevelEncoder] | None = None
        rows = 0
        missing = MissingY()
        for block in _blocks(source, list(x) + list(y), chunk_size):
            block, source_rows = missing.drop(block, len(x), keep=drop_missing_y)
            if block is None or not block.shape[0]:  # None: a missing y will be refused, the rest only counted
                continue
            if encoders is None:  # decided on the first block
                text = block.dtype.kind not in "biuf"
                encoders = {j: LevelEncoder(name) for j, name in enumerate(x)
                            if name in declared or (text and is_categorical(block[:DETECT_ROWS, j]))}
            parts = {"x": _x_values(block[:, : len(x)], list(x), encoders, source_rows),
                     "y": validate_block(block[:, len(x):], list(y), "y", source_rows)}
            for role in ("x", "y"):
                stats[role].update(parts[role])
                arrays[role].append(parts[role], axis=0)
                digests[role].update(_fingerprint_bytes(parts[role]))
            rows += block.shape[0]
        missing.refuse_unless_dropped(drop_missing_y)
        least = 2 if y else 1  # a batch to score may be one row
        if rows < least:
            raise ValueError(f"source: {source.name} has {rows} row(s); at least {least} "
                             f"{'are' if least > 1 else 'is'} needed")
        if y:  # rows to learn from; a batch to score may hold one level or one value of a column
            for encoder in (encoders or {}).values():
                encoder.check_levels()
            stats["x"].check_not_constant("x")
            stats["y"].check_not_constant("y")
        write_feature_coordinates(group, list(x), list(y))
        if missing.count:
            group.attrs["dropped_missing_y"] = missing.count
        if stats["x"].missing_counts():
            group.attrs["missing_x"] = stats["x"].missing_counts()
        group.attrs.update(data_attrs(x, y, rows, source.resolve(),
                                      combined_fingerprint(digests["x"].hexdigest(), digests["y"].hexdigest()),
                                      run_key, {encoder.name: encoder.levels for encoder in (encoders or {}).values()}))
    return target


class MissingY:
    """The rows of a source whose y is missing (NaN, None or empty text), counted over every block: the
    count and the first such row (0-based, in the source's order)."""

    def __init__(self) -> None:
        self.count, self.first, self.read = 0, None, 0

    def drop(self, block: np.ndarray, x_width: int, keep: bool) -> tuple[np.ndarray | None, int | np.ndarray]:
        """(``block`` (rows, x and y columns) without its rows of missing y, their rows in the source: the
        first one's number, or each one's where some were dropped); (None, ...) once a missing y was seen
        and they are not to be dropped (``keep`` False: the stage will be refused)."""
        start = self.read
        missing = _missing(block[:, x_width:])
        self.read += block.shape[0]
        if not missing.any():
            return (None if self.count and not keep else block), start
        self.first = start + int(np.argmax(missing)) if self.first is None else self.first
        self.count += int(missing.sum())
        return (block[~missing] if keep else None), start + np.flatnonzero(~missing)

    def refuse_unless_dropped(self, dropped: bool) -> None:
        """``ValueError`` naming how many rows miss y and the first of them, unless they were dropped."""
        if self.count and not dropped:
            raise ValueError(f"y: {self.count:,} row(s) have a missing value, the first at row {self.first}; "
                             "drop them with --drop-missing-y (drop_missing_y=True)")


def _missing(values: np.ndarray) -> np.ndarray:
    """Per row of ``values`` (rows, columns): whether any entry is missing (NaN, None or empty text)."""
    if values.dtype.kind in "fc":
        return np.isnan(values).any(axis=1)
    if values.dtype.kind in "biu":
        return np.zeros(values.shape[0], dtype=bool)
    flat = values.ravel()
    empty = np.array([v is None or (isinstance(v, float) and v != v) or (isinstance(v, str) and not v.strip())
                      for v in flat], dtype=bool)
    return empty.reshape(values.shape).any(axis=1)


def _x_values(block: np.ndarray, names: list[str], encoders: dict[int, LevelEncoder],
              first_row: int | np.ndarray) -> np.ndarray:
    """A float64 x block: the continuous columns validated, the categorical ones as codes."""
    if not encoders:
        return validate_block(block, names, "x", first_row)
    values = np.empty((block.shape[0], len(names)))
    continuous = [j for j in range(len(names)) if j not in encoders]
    if continuous:
        values[:, continuous] = validate_block(block[:, continuous], [names[j] for j in continuous], "x", first_row)
    for j, encoder in encoders.items():
        values[:, j] = encoder.encode(block[:, j], first_row)
    return values


def create_data_arrays(group: zarr.Group, x_width: int, y_width: int, chunk_size: int,
                       rows: int = 0) -> dict[str, zarr.Array]:
    """The float64 arrays x (rows, x_width) and y (rows, y_width) of a staged store, chunked by
    ``chunk_size`` samples, with dimension names (sample, x_feature) and (sample, y_feature)."""
    return {role: group.create_array(role, shape=(rows, width), chunks=(chunk_size, max(width, 1)), dtype="float64",
                                     dimension_names=("sample", f"{role}_feature"))
            for role, width in (("x", x_width), ("y", y_width))}


def write_feature_coordinates(group: zarr.Group, x_features: list, y_features: list) -> None:
    """The coordinate arrays ``x_feature`` and ``y_feature`` of a staged store (schema 3): the column names,
    so that xarray selects a column by name (``ds.x.sel(x_feature="carat")``)."""
    for role, names in (("x", x_features), ("y", y_features)):
        values = np.asarray(list(map(str, names)), dtype=str)
        group.create_array(f"{role}_feature", shape=values.shape, dtype=str,
                           dimension_names=(f"{role}_feature",))[:] = values


def data_attrs(x_features: list, y_features: list, n_samples: int, source: str | os.PathLike, fingerprint: str,
               run_key: str | None = None, categorical: dict[str, list[str]] | None = None) -> dict:
    """The group attributes of a staged store (the ``data_schemas.data`` contract); ``categorical``:
    the levels of each categorical x column, by name."""
    return {
        "schema": SCHEMA_NAME, "schema_version": SCHEMA_VERSION, "x_features": list(map(str, x_features)),
        "y_features": list(map(str, y_features)), "n_samples": int(n_samples), "source": str(source),
        "fingerprint": fingerprint, **({"run_key": run_key} if run_key else {}),
        **({"categorical": {str(name): list(levels) for name, levels in categorical.items()}} if categorical else {}),
    }


def categorical_levels(group: zarr.Group) -> dict[str, list[str]]:
    """{x column name: its levels} of a staged store's categorical columns, in the x features' order."""
    recorded = dict(group.attrs.get("categorical") or {})
    return {name: list(recorded[name]) for name in group.attrs["x_features"] if name in recorded}


def categorical_indices(group: zarr.Group) -> list[int]:
    """Positions among the x features of a staged store's categorical columns."""
    recorded = group.attrs.get("categorical") or {}
    return [j for j, name in enumerate(group.attrs["x_features"]) if name in recorded]


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


def open_staged(path: str | os.PathLike, needs_y: str | None = None) -> zarr.Group:
    """Open a staged store after checking its contract; raises ``ValueError`` naming the broken rule. The
    check reads each array's own metadata, not the consolidated copy, so a damaged store is found.
    ``needs_y``: the command that reads its y (a store staged without y is then refused, naming it)."""
    path = Path(path)
    try:
        group = zarr.open_group(path, mode="r", zarr_format=3, use_consolidated=False)
    except Exception as error:
        settle_reads()  # the members read beside the one that failed
        raise ValueError(f"data {path}: not a readable zarr v3 store ({type(error).__name__})") from None
    attrs = dict(group.attrs)
    if attrs.get("schema") != SCHEMA_NAME:
        raise ValueError(f"data {path}: not a jdl data store (schema={attrs.get('schema')!r})")
    if attrs.get("schema_version", 0) > SCHEMA_VERSION:
        raise ValueError(f"data {path}: schema_version {attrs['schema_version']} is newer than this jdl reads")
    for role in ("x", "y"):
        if role not in group or group[role].shape != (attrs["n_samples"], len(attrs[f"{role}_features"])):
            raise ValueError(f"data {path}: array {role!r} is missing or has the wrong shape")
    if needs_y is not None and not attrs["y_features"]:
        raise ValueError(f"data {path}: has no y, staged as a batch to score (jdl stage without --y); {needs_y} "
                         "needs the y of each row: stage it with --y")
    if attrs.get("schema_version", 0) >= 3:  # the feature names as coordinates
        for role in ("x", "y"):
            name = f"{role}_feature"
            if name not in group or [str(v) for v in group[name][:]] != list(attrs[f"{role}_features"]):
                raise ValueError(f"data {path}: coordinate {name!r} is missing or differs from {role}_features")
    for name, levels in dict(attrs.get("categorical") or {}).items():
        if name not in attrs["x_features"] or not isinstance(levels, list) or len(levels) < 2:
            raise ValueError(f"data {path}: categorical column {name!r} is not an x feature with at least 2 levels")
    for name, count in dict(attrs.get("missing_x") or {}).items():
        continuous = name in attrs["x_features"] and name not in (attrs.get("categorical") or {})
        if not continuous or not 0 < count <= attrs["n_samples"]:
            raise ValueError(f"data {path}: missing_x names {name!r}, not a continuous x feature with 1 to n_samples "
                             "missing values")
    return group



def level_recoding(levels: dict[str, list[str]], reference: dict[str, list[str]], x_features: list[str],
                   unseen: str = "refuse", where: str = "data") -> dict[int, np.ndarray]:
    """How to read a store's category codes in a reference's (the model's, or the training data's):
    {x column position: table}, table[code] the reference's code of that level, ``OTHER_CODE`` for a
    level the reference lacks (``unseen`` "other"; "refuse" raises ``ValueError`` naming the column
    and the level). ``levels``, ``reference``: {column name: levels}, as ``categorical_levels``; a
    column categorical in one and not the other is refused. Columns whose codes already agree are
    left out."""
    if unseen not in UNSEEN_RULES:
        raise ValueError(f"unseen: unknown rule {unseen!r}; choose one of {', '.join(map(repr, UNSEEN_RULES))}")
    for name in x_features:
        if (name in levels) != (name in reference):
            raise ValueError(f"x column {name!r}: is categorical in {where if name in levels else 'the model'} but not "
                             f"in {'the model' if name in levels else where}")
    tables = {}
    for j, name in enumerate(x_features):
        if name not in reference:
            continue
        codes = {level: code for code, level in enumerate(reference[name])}
        table = np.array([codes.get(level, OTHER_CODE) for level in levels[name]], dtype=np.float64)
        if unseen == "refuse" and np.any(table == OTHER_CODE):
            level = levels[name][int(np.argmax(table == OTHER_CODE))]
            known = ", ".join(map(repr, reference[name][:10])) + (", ..." if len(reference[name]) > 10 else "")
            raise ValueError(f"x column {name!r}: level {level!r} in {where} was not seen when the model was fitted "
                             f"(levels {known}); pass --unseen other (unseen='other' in Python) to let it match no level")
        if not np.array_equal(table, np.arange(table.size)):
            tables[j] = table
    return tables


def recode(block: np.ndarray, tables: dict[int, np.ndarray]) -> np.ndarray:
    """An x block (rows, d_x) with its category codes read through ``level_recoding``'s tables (in place)."""
    for j, table in tables.items():
        block[:, j] = table[block[:, j].astype(np.intp)]
    return block


def read_sample(path: str | os.PathLike, role: str, rows: np.ndarray) -> np.ndarray:
    """Rows ``rows`` (ascending indices) of array ``role`` of a staged store, read chunk by chunk."""
    array = zarr.open_group(str(path), mode="r", zarr_format=3)[role]
    step = array.chunks[0]
    parts = []
    for start in range(0, array.shape[0], step):
        inside = rows[(rows >= start) & (rows < start + step)]
        if inside.size:
            parts.append(np.asarray(array[start:start + step])[inside - start])
    return np.vstack(parts).astype(np.float64) if parts else np.empty((0, array.shape[1]))
