"""The model store: a fitted JDL model as one xarray Dataset in zarr v3 (no pickles).

``model_to_dataset`` / ``model_from_dataset`` map ``JDL.state()`` to the contract of
``data_schemas.model``; ``save_model`` writes atomically (a temporary sibling directory renamed into
place, so a crash never leaves a partial store at the target) and ``load_model`` validates before
rebuilding. The sample-sized variables (y_atoms, A_y) are chunked along ``sample``.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

import jdlcore
from data_schemas.model import SCHEMA_NAME, SCHEMA_VERSION, VARIABLE_DIMS, validate_model_dataset
from jdlcore import JDL

from .atomic import atomic_store, refuse_existing

__all__ = ["model_to_dataset", "model_from_dataset", "save_model", "load_model"]

SAMPLE_CHUNK = 65_536


def model_to_dataset(model: JDL, provenance: dict[str, Any] | None = None) -> xr.Dataset:
    """The fitted model as a Dataset following ``data_schemas.model``."""
    state = model.state()
    variables = {name: (dims, np.asarray(state["arrays"][name], dtype=np.float64)) for name, dims in VARIABLE_DIMS.items()}
    ds = xr.Dataset(variables)
    ds.attrs.update({
        "schema": SCHEMA_NAME,
        "schema_version": SCHEMA_VERSION,
        "jdl_version": jdlcore.__version__,
        "method": "jdl",
        "kernel_x": json.dumps(state["kernel_x"]),
        "kernel_y": json.dumps(state["kernel_y"]),
        "params": json.dumps(state["params"]),
        "diagnostics": json.dumps(state["diagnostics"], default=float),
        "provenance": json.dumps(provenance or {}),
        "n_samples": state["n_samples"],
    })
    ds.attrs["checksums"] = json.dumps({name: _checksum(ds[name].values) for name in VARIABLE_DIMS})
    validate_model_dataset(ds)
    return ds


def _checksum(values: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(values, dtype=np.float64).tobytes()).hexdigest()


def _verify_checksums(ds: xr.Dataset, where: str) -> None:
    """Missing chunk files read back as fill values; the recorded checksums catch that."""
    try:
        recorded = json.loads(ds.attrs["checksums"])
    except (KeyError, json.JSONDecodeError, TypeError):
        raise ValueError(f"{where}: attribute 'checksums' is missing or unreadable") from None
    for name in VARIABLE_DIMS:
        if recorded.get(name) != _checksum(ds[name].values):
            raise ValueError(f"{where}: variable {name!r} does not match its checksum (truncated or modified store)")


def model_from_dataset(ds: xr.Dataset, where: str = "model") -> JDL:
    """Validate a Dataset against the contract and rebuild the model."""
    validate_model_dataset(ds, where)
    _verify_checksums(ds, where)
    try:
        state = {
            "arrays": {name: ds[name].values for name in VARIABLE_DIMS},
            "kernel_x": json.loads(ds.attrs["kernel_x"]),
            "kernel_y": json.loads(ds.attrs["kernel_y"]),
            "params": json.loads(ds.attrs["params"]),
            "diagnostics": json.loads(ds.attrs["diagnostics"]),
            "n_samples": int(ds.attrs["n_samples"]),
        }
        provenance = json.loads(ds.attrs["provenance"])
    except (json.JSONDecodeError, TypeError) as error:
        raise ValueError(f"{where}: unreadable attribute ({error})") from None
    try:
        model = JDL.from_state(state)
    except ValueError as error:
        raise ValueError(f"{where}: {error}") from None
    model.provenance_ = provenance
    return model


def save_model(model: JDL, path: str | os.PathLike, *, overwrite: bool = False,
               provenance: dict[str, Any] | None = None) -> Path:
    """Write the model store at ``path`` atomically; refuses to replace an existing path unless ``overwrite``."""
    target = Path(path)
    refuse_existing(target, overwrite)  # before the checksums over every variable
    ds = model_to_dataset(model, provenance)
    encoding = {name: {"chunks": tuple(min(SAMPLE_CHUNK, size) if dim == "sample" else size
                                       for dim, size in zip(ds[name].dims, ds[name].shape))}
                for name in ds.data_vars}
    with atomic_store(target, overwrite=overwrite) as staging:
        ds.to_zarr(staging, mode="w", zarr_format=3, consolidated=False, encoding=encoding)
    return target


def load_model(path: str | os.PathLike) -> JDL:
    """Open a model store and return a model with the full query API; foreign, truncated or newer
    stores raise ``ValueError`` naming the store and the broken rule."""
    source = Path(path)
    if not source.exists():
        raise ValueError(f"model: {source} does not exist")
    try:
        ds = xr.open_zarr(source, consolidated=False, zarr_format=3)
    except Exception as error:  # zarr raises many types for foreign or damaged directories
        raise ValueError(f"model {source}: not a readable zarr v3 store ({type(error).__name__}: {error})") from None
    with ds:
        try:
            ds = ds.load()
        except Exception as error:
            raise ValueError(f"model {source}: damaged data ({type(error).__name__}: {error})") from None
        return model_from_dataset(ds, where=f"model {source}")
