"""Resume instead of recompute: run keys over data fingerprints and parameters, checked on the stores.

Each stage of a flow writes one store and records in it the *run key* of its inputs: the SHA-256 of
the stage name, the fingerprint of what it read (the source file's bytes, the staged data's
fingerprint, the model store's checksums) and the parameters that change its result (not where the
work ran). Before working, a task looks at its output:

- a valid store of its kind with the same run key: reused, nothing recomputed;
- a jdl store of its kind with another key (yesterday's model, a crashed run's predecessor): replaced
  atomically once the new one is complete;
- anything else at that path (a foreign directory, a store of another kind): refused, never deleted.

This is Prefect task caching keyed on the data and parameters, with the cache entry kept in the
store it describes: deleting or corrupting the store invalidates it, and it survives a crash, a new
temporary Prefect API and a different machine that sees the same files.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Callable

import zarr

__all__ = ["KEY_VERSION", "run_key", "source_fingerprint", "existing_key", "decide", "Decision"]

KEY_VERSION = 2  # 2: fit keys cover the support atoms and positivity 'auto' meaning the projection
_FILE_BLOCK = 1 << 24


def run_key(stage: str, **inputs: Any) -> str:
    """SHA-256 over the stage name and its inputs (JSON, keys sorted)."""
    text = json.dumps({"stage": stage, "key_version": KEY_VERSION, **inputs}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def source_fingerprint(path: str | os.PathLike) -> str:
    """SHA-256 of a source file's bytes; for a directory (a zarr source), of every file's relative
    path and bytes in sorted order. ``ValueError`` if the source does not exist."""
    source = Path(path)
    if not source.exists():
        raise ValueError(f"source: {source} does not exist")
    digest = hashlib.sha256()
    files = [source] if source.is_file() else sorted(p for p in source.rglob("*") if p.is_file())
    for file in files:
        digest.update(str(file.relative_to(source) if file != source else file.name).encode())
        with open(file, "rb") as handle:
            while block := handle.read(_FILE_BLOCK):
                digest.update(block)
    return digest.hexdigest()


def existing_key(path: str | os.PathLike, schema: str) -> tuple[bool, str | None]:
    """(is a store of ``schema``, its recorded run key) for whatever is at ``path``."""
    try:
        attrs = dict(zarr.open_group(Path(path), mode="r", zarr_format=3).attrs)
    except Exception:  # absent, not zarr, damaged: not a store of this kind
        return False, None
    return attrs.get("schema") == schema, attrs.get("run_key")


class Decision:
    REUSE = "reuse"
    WRITE = "write"
    REPLACE = "replace"


def decide(path: str | os.PathLike, schema: str, key: str, validate: Callable[[str], Any]) -> str:
    """What a stage does with its output ``path`` (see the module docstring).

    ``validate(path)`` must raise ``ValueError`` for a damaged store; such a store is replaced.
    Raises ``ValueError`` when ``path`` holds something that is not a ``schema`` store.
    """
    target = Path(path)
    if not target.exists():
        return Decision.WRITE
    ours, recorded = existing_key(target, schema)
    if not ours:
        raise ValueError(f"out: {target} exists and is not a {schema} store; refusing to replace it")
    if recorded != key:
        return Decision.REPLACE
    try:
        validate(str(target))
    except ValueError:
        return Decision.REPLACE
    return Decision.REUSE
