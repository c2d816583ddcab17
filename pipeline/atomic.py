"""Atomic directory stores: write into a temporary sibling, rename into place only on success."""
from __future__ import annotations

import contextlib
import os
import shutil
import socket
import uuid
from pathlib import Path
from typing import Callable, Iterator

__all__ = ["atomic_store", "refuse_existing", "remove_abandoned", "remove_abandoned_in"]


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
    """
    target = Path(target)
    refuse_existing(target, overwrite)
    remove_abandoned(target)
    staging = target.with_name(f"{_prefix(target)}{_host()}-{os.getpid()}-{uuid.uuid4().hex}")
    try:
        yield staging
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
