"""Checks shared by the contracts of the stores written as xarray Datasets (tuning, evaluation)."""
from __future__ import annotations

from typing import Any

__all__ = ["check_header", "require_variables"]


def check_header(attrs: Any, schema: str, version: int, required: tuple[str, ...], where: str, kind: str) -> None:
    """``ValueError`` unless ``attrs`` name the ``schema`` at a version this jdl reads (<= ``version``) and
    hold every attribute of ``required``; ``kind`` names the store in the message ("tuning", ...)."""
    if attrs.get("schema") != schema:
        raise ValueError(f"{where}: not a jdl {kind} store (attribute schema={attrs.get('schema')!r})")
    found = attrs.get("schema_version")
    if not isinstance(found, int) or found > version:
        raise ValueError(f"{where}: schema_version {found!r} is newer than this jdl reads ({version})")
    for name in required:
        if name not in attrs:
            raise ValueError(f"{where}: attribute {name!r} is missing")


def require_variables(ds: Any, dims: dict[str, tuple[str, ...]], where: str) -> None:
    """Each variable of ``dims`` exists with exactly those dims."""
    for name, expected in dims.items():
        if name not in ds.data_vars or tuple(ds[name].dims) != expected:
            raise ValueError(f"{where}: variable {name!r} is missing or does not have dims {expected}")
