"""Versioned stores: every write is a new immutable version, and an atomic pointer names the current one.

The layout of a versioned store ``model.zarr``::

    model.zarr                          a symbolic link (the pointer) to model.zarr.versions/<version>
    model.zarr.versions/<version>/      one complete store per write, never changed after it is published
    model.zarr.versions/<version>.lease readers' shared locks on that version
    model.zarr.versions/<version>.diagnostics.png   a file that belongs to that version (``COMPANIONS``)
    model.zarr.diagnostics.png          a link to the current version's file, moved with the pointer

A version is named ``<UTC time>-<run key, first 12 hex digits>`` (a random tag without a run key), so
that names sort by publication time. Anything that opens ``model.zarr`` (xarray, zarr, the jdl
commands) reads the current version through the link; a version directory is itself a complete store.

- **Publishing** (``publish``) writes the new version under a temporary name, renames it into
  ``<name>.versions/`` and then swaps the link in one ``rename`` of a new link over the old one: a
  reader sees the old version or the new one, never a mix and never nothing. A plain (unversioned)
  store already at the path is first moved into the versions as the previous version.
- **Reading** (``open_version``) resolves the link once and holds a shared lock on that version's lease
  file for as long as the caller keeps it (``Lease``), so the version read stays whole to the end.
- **Retention** (``prune``, after each publish): the newest ``keep`` versions and the current one are
  kept. An older version is removed only when no reader holds its lease; a version being read is kept
  until a later publish finds it free. Locks are ``flock`` locks, released by the kernel when a reader
  exits, however it exits.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

from .atomic import atomic_store, remove_abandoned_in

__all__ = ["DEFAULT_KEEP_VERSIONS", "COMPANIONS", "DIAGNOSTICS", "check_keep", "versions_dir", "version_name", "list_versions",
           "current_version", "resolve", "publish", "published", "prune", "open_version", "Lease", "being_read",
           "use_version", "companion_path", "link_companions"]

DEFAULT_KEEP_VERSIONS = 3  # versions a publish keeps, the new one included
_SUFFIX = ".versions"
_LEASE = ".lease"
_PRUNING = ".pruning-"
_STAMP = "%Y%m%dT%H%M%S%fZ"  # a version name's UTC time (it sorts as the time does)
# suffixes of the files that belong to one version, kept beside it (<version><suffix>) and reached from
# <target><suffix>, a link that follows the pointer: a fit's diagnostics figure (``flows.artifacts``)
DIAGNOSTICS = ".diagnostics.png"
COMPANIONS = (DIAGNOSTICS,)


def check_keep(keep: int) -> int:
    """``keep`` (versions kept by a publish) if it is an integer >= 1, else ``ValueError``."""
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
        raise ValueError(f"keep_versions: must be an integer >= 1 (got {keep!r})")
    return keep


def versions_dir(target: str | os.PathLike) -> Path:
    """The directory of ``target``'s versions: ``<name>.versions`` beside it."""
    target = Path(target)
    return target.with_name(target.name + _SUFFIX)


def version_name(run_key: str | None) -> str:
    """A new version's name: the UTC time to the microsecond, then the run key's first 12 hex digits."""
    return f"{datetime.now(timezone.utc).strftime(_STAMP)}-{(run_key or uuid.uuid4().hex)[:12]}"


def published(version: str) -> tuple[datetime, str]:
    """(the UTC time a version was published, its tag: a run key's first 12 hex digits, or
    "unversioned" for a store moved into the versions)."""
    stamp, _, tag = version.partition("-")
    return datetime.strptime(stamp, _STAMP).replace(tzinfo=timezone.utc), tag


def list_versions(target: str | os.PathLike) -> list[str]:
    """The names of ``target``'s published versions, oldest first."""
    directory = versions_dir(target)
    if not directory.is_dir():
        return []
    return sorted(entry.name for entry in directory.iterdir() if entry.is_dir() and not entry.name.startswith("."))


def current_version(target: str | os.PathLike) -> str | None:
    """The version the pointer ``target`` names (None when ``target`` is not a versioned store's pointer)."""
    target = Path(target)
    if not target.is_symlink():
        return None
    link = Path(os.readlink(target))
    if link.parent.name != target.name + _SUFFIX:
        return None
    return link.name


def resolve(target: str | os.PathLike) -> Path:
    """The directory that ``target`` stands for now: its current version for a versioned store, else
    ``target`` itself. ``ValueError`` when the pointer names a version that is missing."""
    target = Path(target)
    version = current_version(target)
    if version is None:
        return target
    path = versions_dir(target) / version
    if not path.is_dir():
        kept = ", ".join(list_versions(target)) or "none"
        raise ValueError(f"{target}: points to version {version}, which is missing (versions kept: {kept})")
    return path


def _point(target: Path, version: str) -> None:
    """Make ``target`` a link to ``version`` in one rename (a plain directory there is moved into the
    versions), and its companions' links links to the version's (``link_companions``)."""
    if target.exists() and not target.is_symlink():
        mtime = datetime.fromtimestamp(target.stat().st_mtime, timezone.utc).strftime(_STAMP)
        os.rename(target, versions_dir(target) / f"{mtime}-unversioned")
    _replace_link(target, Path(versions_dir(target).name) / version)
    link_companions(target)


def _replace_link(path: Path, to: Path) -> None:
    """Make ``path`` a symbolic link to ``to`` (relative to its directory) in one rename."""
    link = path.with_name(f".{path.name}.link-{os.getpid()}-{uuid.uuid4().hex}")
    os.symlink(to, link)
    try:
        os.replace(link, path)
    except BaseException:
        link.unlink(missing_ok=True)
        raise


def companion_path(target: str | os.PathLike, version: str, suffix: str) -> Path:
    """Where ``version``'s file ``suffix`` (one of ``COMPANIONS``) of ``target`` is kept."""
    return versions_dir(target) / f"{version}{suffix}"


def link_companions(target: str | os.PathLike) -> None:
    """Point each companion link ``<target><suffix>`` at the current version's file, in one rename; a
    link whose version has no such file is removed (a file there from before versioning is replaced)."""
    target = Path(target)
    version = current_version(target)
    if version is None:
        return
    for suffix in COMPANIONS:
        link, kept = target.with_name(target.name + suffix), companion_path(target, version, suffix)
        if kept.exists():
            _replace_link(link, Path(versions_dir(target).name) / kept.name)
        elif link.is_symlink():
            link.unlink()


@contextlib.contextmanager
def publish(target: str | os.PathLike, run_key: str | None = None, *,
            keep: int = DEFAULT_KEEP_VERSIONS) -> Iterator[Path]:
    """Yield a temporary directory to write a new version of ``target`` into; on normal exit it becomes
    the version ``version_name(run_key)``, the pointer moves to it and older versions are pruned
    (``prune``). On any exception nothing is published, the temporary is removed, and a versions
    directory this call created is removed again."""
    check_keep(keep)
    target = Path(target)
    directory = versions_dir(target)
    created = not directory.exists()
    directory.mkdir(parents=True, exist_ok=True)
    name = version_name(run_key)
    try:
        with atomic_store(directory / name) as staging:
            yield staging
        _point(target, name)
    except BaseException:
        if created and not any(directory.iterdir()):
            directory.rmdir()
        raise
    prune(target, keep)


def _lease_path(version: Path) -> Path:
    return version.with_name(version.name + _LEASE)


def being_read(target: str | os.PathLike, version: str) -> bool:
    """Whether a reader holds a lease on ``target``'s ``version`` now."""
    try:
        fd = os.open(_lease_path(versions_dir(target) / version), os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def use_version(target: str | os.PathLike, version: str) -> str | None:
    """Make ``version`` (a published version of ``target``) the current one, in one rename, e.g. to go
    back to an earlier fit; returns the version that was current. Readers keep the version they
    opened. ``ValueError`` naming the versions kept when there is no such version."""
    target = Path(target)
    kept = list_versions(target)
    if version not in kept:
        raise ValueError(f"{target}: no version {version!r} (versions kept: {', '.join(kept) or 'none'})")
    previous = current_version(target)
    _point(target, version)
    return previous


def prune(target: str | os.PathLike, keep: int = DEFAULT_KEEP_VERSIONS) -> list[str]:
    """Remove ``target``'s versions beyond the newest ``keep``, except the current one and those being
    read (their lease is held); also the temporaries of dead writers and leases of removed versions.
    Returns the names of the versions removed."""
    target = Path(target)
    directory = versions_dir(target)
    if not directory.is_dir():
        return []
    remove_abandoned_in(directory)
    current = current_version(target)
    versions = list_versions(target)
    removed = []
    for name in versions[:max(len(versions) - keep, 0)]:
        if name != current and _remove_unread(directory / name):
            removed.append(name)
    for lease in directory.glob(f"*{_LEASE}"):  # leases of versions gone (a reader that lost the race)
        if not (directory / lease.name.removesuffix(_LEASE)).exists():
            _remove_unread(directory / lease.name.removesuffix(_LEASE))
    for left in directory.glob(f"{_PRUNING}*"):  # a pruning stopped half-way
        shutil.rmtree(left, ignore_errors=True)
    return removed


def _remove_unread(version: Path) -> bool:
    """Remove ``version`` and its lease file if no reader holds the lease; whether it was removed."""
    lease = _lease_path(version)
    fd = os.open(lease, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        if version.exists():
            doomed = version.with_name(f"{_PRUNING}{version.name}-{uuid.uuid4().hex}")
            os.rename(version, doomed)  # readers now find the version gone, whole or not at all
            shutil.rmtree(doomed, ignore_errors=True)
        for suffix in COMPANIONS:
            version.with_name(version.name + suffix).unlink(missing_ok=True)
        lease.unlink(missing_ok=True)
        return True
    finally:
        os.close(fd)


class Lease:
    """A reader's shared lock on one version (nothing for an unversioned store): the version is not
    pruned while the lease is held. ``release()`` ends it; so does the reader's exit."""

    def __init__(self, path: Path, version: str | None, fd: int | None) -> None:
        self.path, self.version, self._fd = path, version, fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __del__(self) -> None:
        self.release()


def open_version(target: str | os.PathLike) -> Lease:
    """Resolve ``target`` once and hold a read lease on the version it names (see ``Lease``); its
    ``path`` is the directory to read. A version directory given by its own path is leased as it is.
    A version pruned between resolving and locking is resolved again."""
    target = Path(target)
    for _ in range(100):
        path = resolve(target)
        if not path.parent.name.endswith(_SUFFIX) or path.name.startswith(".") or not path.is_dir():
            return Lease(path, None, None)  # not a version (or absent: the reader names the reason)
        fd = os.open(_lease_path(path), os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_SH)  # waits only while a pruner removes a version
        if path.is_dir():
            return Lease(path, path.name, fd)
        os.close(fd)
    raise ValueError(f"{target}: its versions changed faster than it could be read")
