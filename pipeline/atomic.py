"""Atomic directory stores: write into a temporary sibling, rename into place only on success."""
from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from pathlib import Path
from typing import Iterator

__all__ = ["atomic_store", "refuse_existing"]


def refuse_existing(target: str | os.PathLike, overwrite: bool) -> None:
    """Raise ``ValueError`` if ``target`` exists and may not be replaced; call it early, before costly work."""
    if Path(target).exists() and not overwrite:
        raise ValueError(f"out: {target} already exists (use overwrite to replace it)")


@contextlib.contextmanager
def atomic_store(target: str | os.PathLike, *, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary path next to ``target``; on normal exit it replaces ``target``.

    On any exception the temporary directory is removed and ``target`` is left untouched, so a
    failed write never leaves a partial store. An existing ``target`` is refused unless ``overwrite``.
    """
    target = Path(target)
    refuse_existing(target, overwrite)
    staging = target.with_name(f".{target.name}.tmp-{uuid.uuid4().hex}")
    try:
        yield staging
        if target.exists():
            shutil.rmtree(target)
        os.replace(staging, target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
