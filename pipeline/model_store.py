"""The model store: a fitted model (any method of ``ESTIMATORS``) as one xarray Dataset in zarr v3 (no pickles).

``model_to_dataset`` / ``model_from_dataset`` map ``JDL.state()`` to the contract of
``data_schemas.model``; ``save_model`` publishes each model as a new immutable version behind an
atomic pointer (``pipeline.versions``: a crash never leaves a partial store, and readers of the
previous version read it whole) and ``load_model`` validates before rebuilding. The atoms (y_atoms,
the only sample-sized variable) are chunked along ``sample``, copied in and checksummed block by
block, and read lazily after loading.
"""
from __future__ import annotations

import hashlib
import json
import os
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr
import zarr

import jdlcore
from data_schemas.model import (
    ATOM_STORES, METHOD_VARIABLES, SCHEMA_NAME, SCHEMA_VERSION, model_variables, validate_model_dataset,
)
from data_schemas.tuning import SUMMARIES_VARIABLE
from jdlcore.models.registry import METHODS, method_of
from jdlcore.features.view import XView
from jdlcore.models.conditional_model import ConditionalModel

from .atomic import refuse_existing
from .damage import settle_reads
from .staging import CHUNK_SIZE
from .summaries import read_summaries, summaries_variable
from .x_view import missing_attrs, read_missing
from .versions import DEFAULT_KEEP_VERSIONS, Lease, open_version, publish

__all__ = ["model_to_dataset", "model_from_dataset", "save_model", "load_model", "lease_model", "ESTIMATORS",
           "method_of"]

SAMPLE_CHUNK = CHUNK_SIZE  # rows per chunk of the atoms, as of a staged store
ATOMS = "y_atoms"
ESTIMATORS = METHODS  # the registry: a store's ``method`` attribute names its class


def model_to_dataset(model: Any, provenance: dict[str, Any] | None = None) -> xr.Dataset:
    """The fitted model (a ``ConditionalModel``, or a bare law read as rows are) as an in-memory Dataset
    following ``data_schemas.model`` (atoms loaded)."""
    law, view, provenance = _parts(model, provenance)
    method = method_of(law)
    state = law.state()
    ds = _with_view(_dataset(state, provenance, method), view)
    atoms = None
    if method in ATOM_STORES:
        atoms = np.asarray(state["arrays"][ATOMS], dtype=np.float64)
        ds[ATOMS] = (METHOD_VARIABLES[method][ATOMS], atoms)
    _record_checksums(ds, None if atoms is None else _atoms_checksum(atoms))
    validate_model_dataset(ds)
    return ds


def _parts(model: Any, provenance: dict[str, Any] | None) -> tuple[Any, XView, dict[str, Any]]:
    """(the law, the view of x, the provenance: ``provenance`` where given, else the model's)."""
    if isinstance(model, ConditionalModel):
        return model.law_, model.view_, provenance if provenance is not None else model.provenance_
    return model, XView(), provenance if provenance is not None else getattr(model, "provenance_", {})


def _with_view(ds: xr.Dataset, view: XView) -> xr.Dataset:
    """``ds`` with the view of x the model reads: its boosted summaries as the variable ``x_summaries``
    and its missing-value rule as the attribute ``x_missing``."""
    if view.summaries is not None:
        ds[SUMMARIES_VARIABLE] = summaries_variable(view.summaries)
    ds.attrs.update(missing_attrs(view.missing))
    return ds


def _dataset(state: dict[str, Any], provenance: dict[str, Any] | None, method: str) -> xr.Dataset:
    """Every variable but the atoms, with the attributes (checksums still to be recorded)."""
    registered = state.get("registered", [])
    dims = model_variables(registered, method)
    ds = xr.Dataset({name: (dims[name], np.asarray(state["arrays"][name], dtype=np.float64))
                     for name in dims if name != ATOMS})
    ds.attrs.update({
        "schema": SCHEMA_NAME,
        "schema_version": SCHEMA_VERSION,
        "jdl_version": jdlcore.__version__,
        "method": method,
        "kernel_x": json.dumps(state.get("kernel_x")),
        "kernel_y": json.dumps(state.get("kernel_y")),
        "params": json.dumps(state["params"]),
        "diagnostics": json.dumps(state["diagnostics"], default=float),
        "provenance": json.dumps(provenance or {}),
        "registered": json.dumps(registered),
        "n_samples": state["n_samples"],
    })
    if "support" in state:
        ds.attrs["support"] = json.dumps(state["support"])
    return ds


def tuning_variables(tuning: xr.Dataset) -> xr.Dataset:
    """A tuning table renamed to the model store's optional ``tuning_*`` variables and dims."""
    names = {"validation_loss": "tuning_validation_loss", "rank_x": "tuning_rank_x", "rank_y": "tuning_rank_y",
             "lengthscale_x": "tuning_lengthscale_x", "lengthscale_y": "tuning_lengthscale_y", "reg": "tuning_reg"}
    table = tuning[["validation_loss", "rank_x", "rank_y"]].rename(names)
    table.attrs = {}
    return table.astype(np.float64)


def _checksum(values: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(values, dtype=np.float64).tobytes()).hexdigest()


def _atoms_checksum(atoms: Any, copy_to: Any = None) -> str:
    """SHA-256 of the atoms' float64 C-order bytes, read (and optionally copied) block by block."""
    digest = hashlib.sha256()
    for start in range(0, atoms.shape[0], SAMPLE_CHUNK):
        block = np.ascontiguousarray(atoms[start:start + SAMPLE_CHUNK], dtype=np.float64)
        digest.update(block.tobytes())
        if copy_to is not None:
            copy_to[start:start + block.shape[0]] = block
    return digest.hexdigest()


def _record_checksums(ds: xr.Dataset, atoms_checksum: str | None) -> None:
    """SHA-256 of every variable (``atoms_checksum``: the atoms', computed while copying them; None: no atoms)."""
    sums = {name: _checksum(ds[name].values) for name in ds.data_vars if name != ATOMS}
    if atoms_checksum is not None:
        sums[ATOMS] = atoms_checksum
    ds.attrs["checksums"] = json.dumps(sums)


def _verify_checksums(ds: xr.Dataset, atoms: Any, where: str) -> None:
    """Missing chunk files read back as fill values; the recorded checksums catch that."""
    try:
        recorded = json.loads(ds.attrs["checksums"])
    except (KeyError, json.JSONDecodeError, TypeError):
        raise ValueError(f"{where}: attribute 'checksums' is missing or unreadable") from None
    for name in ds.data_vars:
        if name != ATOMS and recorded.get(name) != _checksum(ds[name].values):
            raise ValueError(f"{where}: variable {name!r} does not match its checksum (truncated or modified store)")
    if atoms is not None and recorded.get(ATOMS) != _atoms_checksum(atoms):
        raise ValueError(f"{where}: variable {ATOMS!r} does not match its checksum (truncated or modified store)")


def model_from_dataset(ds: xr.Dataset, where: str = "model", atoms: Any = None) -> Any:
    """Validate a Dataset against the contract and rebuild the model.

    ``atoms``: the y atoms as a lazily read array (a store's zarr array); default ``ds.y_atoms``.
    """
    validate_model_dataset(ds, where)
    method = ds.attrs["method"]
    if method in ATOM_STORES and atoms is None:
        atoms = ds[ATOMS].values
    _verify_checksums(ds, atoms, where)
    try:
        registered = json.loads(ds.attrs["registered"])
        version = int(ds.attrs["schema_version"])
        state = {
            "arrays": {name: (atoms if name == ATOMS else ds[name].values)
                       for name in model_variables(registered, method, version)},
            "kernel_x": json.loads(ds.attrs["kernel_x"]),
            "kernel_y": json.loads(ds.attrs["kernel_y"]),
            "params": json.loads(ds.attrs["params"]),
            "diagnostics": json.loads(ds.attrs["diagnostics"]),
            "n_samples": int(ds.attrs["n_samples"]),
            "registered": registered,
        }
        if "support" in ds.attrs:
            state["support"] = json.loads(ds.attrs["support"])
        provenance = json.loads(ds.attrs["provenance"])
    except (json.JSONDecodeError, TypeError) as error:
        raise ValueError(f"{where}: unreadable attribute ({error})") from None
    try:
        law = ESTIMATORS[method].from_state(state)
    except ValueError as error:
        raise ValueError(f"{where}: {error}") from None
    return ConditionalModel.of(law, XView(read_missing(ds.attrs, where), read_summaries(ds, where)), provenance)


def save_model(model: Any, path: str | os.PathLike, *, overwrite: bool = False,
               provenance: dict[str, Any] | None = None, tuning: xr.Dataset | None = None,
               run_key: str | None = None, keep_versions: int = DEFAULT_KEEP_VERSIONS) -> Path:
    """Publish the model as a new version of the store at ``path`` (``pipeline.versions``: the
    version is written whole, then the pointer ``path`` moves to it in one rename, and versions beyond
    the newest ``keep_versions`` are pruned unless being read). Refuses an existing ``path`` unless
    ``overwrite``.

    The atoms are copied block by block (they may be a lazily read array, e.g. the staged data's y).
    ``tuning``: a tuning store's Dataset (``data_schemas.tuning``), kept as the ``tuning_*`` variables.
    ``run_key``: recorded as an attribute for the orchestration's resume check. ``model``: a
    ``ConditionalModel`` (the view of x it reads is stored with it: its missing-value rule as the
    attribute ``x_missing``, its boosted summaries as ``x_summaries``), or a bare law, which reads rows
    as they are; ``provenance`` defaults to the model's.
    """
    target = Path(path)
    refuse_existing(target, overwrite)  # before the checksums over every variable
    law, view, provenance = _parts(model, provenance)
    method = method_of(law)
    state = law.state()
    ds = _with_view(_dataset(state, provenance, method), view)
    if tuning is not None:
        ds = ds.merge(tuning_variables(tuning))
    if run_key:
        ds.attrs["run_key"] = run_key
    with publish(target, run_key, keep=keep_versions) as staging:
        ds.to_zarr(staging, mode="w", zarr_format=3, consolidated=False)
        group = zarr.open_group(staging, mode="r+", zarr_format=3)
        atoms_checksum = None
        if method in ATOM_STORES:
            atoms = state["arrays"][ATOMS]
            copy = group.create_array(ATOMS, shape=tuple(atoms.shape), dtype="float64",
                                      chunks=(min(SAMPLE_CHUNK, max(atoms.shape[0], 1)), atoms.shape[1]),
                                      dimension_names=METHOD_VARIABLES[method][ATOMS])
            atoms_checksum = _atoms_checksum(atoms, copy_to=copy)
        _record_checksums(ds, atoms_checksum)
        group.attrs["checksums"] = ds.attrs["checksums"]
        with xr.open_zarr(staging, consolidated=False, zarr_format=3) as written:
            validate_model_dataset(written, f"model {target}")
    return target


def lease_model(path: str | os.PathLike) -> Lease:
    """A read lease on the model version ``path`` names now (``pipeline.versions.open_version``); a
    pointer to a missing version is a ``ValueError`` naming the model."""
    try:
        return open_version(path)
    except ValueError as error:
        raise ValueError(f"model {error}") from None


def load_model(path: str | os.PathLike) -> Any:
    """Open a model store and return the fitted model (``jdlcore.ConditionalModel``: every query takes x
    rows as staged and answers on y's scale); foreign, truncated or newer
    stores raise ``ValueError`` naming the store and the broken rule. The atoms stay on disk and are
    read block by block when a query needs them.

    For a versioned store the pointer is resolved once: the model reads that version to the end,
    whatever is published meanwhile, and the version is not pruned while the model exists. The model's
    ``store_version_`` names the version (None for an unversioned store) and ``store_path_`` the
    directory read."""
    lease = lease_model(path)
    source = lease.path
    if not source.exists():
        raise ValueError(f"model: {source} does not exist")
    where = f"model {path}" + (f" (version {lease.version})" if lease.version else "")
    try:
        ds = xr.open_zarr(source, consolidated=False, zarr_format=3)
    except Exception as error:  # zarr raises many types for foreign or damaged directories
        settle_reads()  # the members read beside the one that failed
        raise ValueError(f"{where}: not a readable zarr v3 store ({type(error).__name__}: {error})") from None
    with ds:
        validate_model_dataset(ds, where)
        has_atoms = ds.attrs["method"] in ATOM_STORES
        small = ds.drop_vars(ATOMS) if has_atoms else ds
        for name, variable in small.variables.items():  # one by one, to name a damaged one
            try:
                variable.load()
            except Exception as error:
                raise ValueError(f"{where}: variable {name!r} is damaged ({type(error).__name__}: {error})") from None
        try:
            atoms = zarr.open_array(source / ATOMS, mode="r", zarr_format=3) if has_atoms else None
        except Exception as error:
            raise ValueError(f"{where}: damaged data ({type(error).__name__}: {error})") from None
        if has_atoms:
            small[ATOMS] = ds[ATOMS]  # lazy: validated by dims, read through ``atoms``
        model = model_from_dataset(small, where=where, atoms=atoms)
    model.store_version_, model.store_path_ = lease.version, source
    weakref.finalize(model.law_, lease.release)  # the lease lasts as long as the law (which the model holds)
    return model
