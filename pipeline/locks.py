"""A lock per output store, held in the filesystem next to it, so that runs writing one store take turns.

``store_lock(target)`` holds an exclusive ``flock`` on ``.<name>.lock`` beside ``target`` (the file
records the holder's host, PID, command and start time, for the messages of those who wait). The
kernel releases the lock when its holder exits, however it exits: a killed run leaves at most the
file, and the next run takes the lock at once (the stale lock is recovered). The holder removes the
file when it is done; a waiter that wakes on a removed file starts over, so two runs never both
hold a lock on one target.

A run that finds the lock held reports the holder once (``progress``) and waits. It gives up after
``timeout`` seconds (default: the environment variable ``JDL_LOCK_TIMEOUT``, else 24 hours) with
``LockTimeout`` naming the holder's PID.

``flock`` locks are shared between processes of one host on a local filesystem; on a network
filesystem, serialise runs by the deployments' Prefect concurrency limit instead (deploy/prefect.yaml).
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterator

__all__ = ["store_lock", "lock_path", "lock_holder", "LockTimeout", "DEFAULT_LOCK_TIMEOUT"]

DEFAULT_LOCK_TIMEOUT = 24 * 3600.0  # seconds a run waits for another run's lock on its output
_POLL = 0.1  # seconds between attempts while the lock is held


class LockTimeout(TimeoutError):
    """The lock on an output store stayed held by another run for longer than the timeout."""


def lock_path(target: str | os.PathLike) -> Path:
    """The lock file of the store ``target``: ``.<name>.lock`` in the same directory."""
    target = Path(target)
    return target.with_name(f".{target.name}.lock")


def lock_holder(target: str | os.PathLike) -> dict | None:
    """What the lock file of ``target`` says about its holder (host, pid, command, since), or None
    when there is no readable lock file. It says who last held the lock, not that it is still held."""
    try:
        holder = json.loads(lock_path(target).read_text())
    except (OSError, ValueError):
        return None
    return holder if isinstance(holder, dict) else None


def _timeout(timeout: float | None) -> float:
    if timeout is not None:
        return timeout
    text = os.environ.get("JDL_LOCK_TIMEOUT")
    if not text:
        return DEFAULT_LOCK_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"JDL_LOCK_TIMEOUT: expected seconds as a number, got {text!r}") from None
    if not value >= 0:
        raise ValueError(f"JDL_LOCK_TIMEOUT: must be >= 0 seconds, got {text!r}")
    return value


def _describe(holder: dict | None) -> str:
    if not holder:
        return "another run"
    return f"PID {holder.get('pid')} on {holder.get('host')} ({holder.get('command')}, since {holder.get('since')})"


def _try_acquire(path: Path) -> int | None:
    """An open descriptor holding the lock of the file now at ``path``, or None if another holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    try:  # the holder before us may have removed the file while we opened it: ours would guard nothing
        current = os.stat(path)
    except FileNotFoundError:
        current = None
    mine = os.fstat(fd)
    if current is None or (current.st_dev, current.st_ino) != (mine.st_dev, mine.st_ino):
        os.close(fd)
        return None
    return fd


@contextlib.contextmanager
def store_lock(target: str | os.PathLike, *, timeout: float | None = None,
               progress: Callable[[str], None] | None = None) -> Iterator[Path]:
    """Hold the lock of the store ``target`` for the block (see the module docstring); yields the lock
    file's path. ``progress`` gets one line when the lock is found held."""
    limit = _timeout(timeout)
    path = lock_path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    reported = False
    while (fd := _try_acquire(path)) is None:
        holder = lock_holder(target)
        if time.monotonic() - started >= limit:
            raise LockTimeout(f"out: {target} is locked by {_describe(holder)}; gave up after {limit:g} s "
                              f"(JDL_LOCK_TIMEOUT)")
        if not reported and progress is not None:
            progress(f"waiting for {_describe(holder)}, which is writing {target}")
            reported = True
        time.sleep(_POLL)
    try:
        command = " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])[:200]
        record = {"host": socket.gethostname(), "pid": os.getpid(), "command": command,
                  "since": datetime.now(timezone.utc).isoformat(timespec="seconds")}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(record).encode(), 0)
        yield path
    finally:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # before the release: a waiter that then locks the removed file starts over
        os.close(fd)
