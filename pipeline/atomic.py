"""Atomic directory stores: write into a temporary sibling, rename into place only on success.

A zarr store's metadata is consolidated (``consolidate``) just before the rename, so that
``xarray.open_zarr(path)`` reads every store's layout in one file and without a warning. In zarr
format 3 consolidated metadata is an extension of zarr-python's (it warns so when writing; the
warning is silenced here, the choice being made): readers that do not know it read each array's own
metadata, which is written as well. A published store is never changed in place, so the consolidated
copy cannot go stale; jdl's own checks of a store (``open_staged``, ``open_scores``, the model, tuning
and evaluation loaders) read each array's metadata instead, so a store damaged on disk is still found.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import uuid
import warnings
from pathlib import Path
from typing import Callable, Iterator

__all__ = ["atomic_store", "consolidate", "refuse_existing", "remove_abandoned", "remove_abandoned_in"]


def refuse_existing(target: str | os.PathLike, overwrite: bool) -> None:
    """Raise ``ValueError`` if ``target`` exists and may not be replaced; call it early, before costly work."""
    if Path(target).exists() and not overwrite:
        raise ValueError(f"out: {target} already exists (use overwrite to replace it)")


def _prefix(target: Path) -> str:
    return f".{target.name}.tmp-"


def _host() -> str:
    return socket.gethostname().replace("-", "_")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def remove_abandoned(target: str | os.PathLike) -> list[Path]:
    """Remove temporary siblings of ``target`` left by writers on this host that no longer run
    (a killed process cannot clean up after itself); returns what was removed. Temporaries of
    live processes and of other hosts are left alone."""
    target = Path(target)
    return _remove_dead(target.parent, f"{_prefix(target)}*", lambda entry: entry.name.removeprefix(_prefix(target)))


def remove_abandoned_in(directory: str | os.PathLike) -> list[Path]:
    """``remove_abandoned`` for the temporaries of every target in ``directory``."""
    return _remove_dead(Path(directory), ".*.tmp-*", lambda entry: entry.name.partition(".tmp-")[2])


def _remove_dead(directory: Path, pattern: str, writer: Callable[[Path], str]) -> list[Path]:
    """Remove the entries of ``directory`` matching ``pattern`` whose writer ("HOST-PID-...",
    ``writer(entry)``) ran on this host and is dead."""
    removed = []
    if not directory.is_dir():
        return removed
    for entry in directory.glob(pattern):
        host, _, rest = writer(entry).partition("-")
        pid = rest.partition("-")[0]
        if host == _host() and pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


@contextlib.contextmanager
def atomic_store(target: str | os.PathLike, *, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary path next to ``target``; on normal exit it replaces ``target``.

    On any exception the temporary directory is removed and ``target`` is left untouched, so a
    failed write never leaves a partial store; temporaries of killed writers are removed by the
    next write of the same target (``remove_abandoned``). An existing ``target`` is refused unless ``overwrite``.
    A zarr store written there has its metadata consolidated before the rename (``consolidate``).
    """
    target = Path(target)
    refuse_existing(target, overwrite)
    remove_abandoned(target)
    staging = target.with_name(f"{_prefix(target)}{_host()}-{os.getpid()}-{uuid.uuid4().hex}")
    try:
        yield staging
        if _zarr_group(staging):
            consolidate(staging)
        if target.exists():  # moved aside first: readers miss the store for two renames, not a deletion
            replaced = staging.with_name(staging.name + "-replaced")
            os.rename(target, replaced)
            os.replace(staging, target)
            shutil.rmtree(replaced, ignore_errors=True)
        else:
            os.replace(staging, target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def consolidate(path: str | os.PathLike) -> None:
    """Consolidate the metadata of the zarr (format 3) store at ``path`` into its root ``zarr.json``
    (zarr-python's warning that this is an extension of the format is silenced: see the module)."""
    import zarr

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Consolidated metadata is currently not part")
        zarr.consolidate_metadata(str(path), zarr_format=3)


def _zarr_group(path: Path) -> bool:
    """Whether ``path`` holds a zarr format 3 group (its ``zarr.json`` says so)."""
    try:
        metadata = json.loads((path / "zarr.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(metadata, dict) and metadata.get("zarr_format") == 3 and metadata.get("node_type") == "group"
