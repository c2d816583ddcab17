"""Contract of a scores store (``jdl score``): a zarr v3 group aligned with the scored data.

One float64 array per scoring function, named as given on the command line, the scored data's
``sample`` axis first and each function's parameters as coordinates (``scores_dims``; a long name is
stored as ``KIND-HASH``, ``array_name``). The whole format and its versions: docs/stores.md.
"""
from __future__ import annotations

import hashlib
import json

SCHEMA_NAME = "jdl.scores"
SCHEMA_VERSION = 3  # 2: long function names map to short array names (attribute "arrays"); 3: coordinates
MAX_NAME = 128  # characters of a function name kept as its array's name (file systems allow 255 bytes)

FUNCTION_DIMS: dict[str, tuple[str, ...]] = {
    "mean": ("sample", "y_feature"),
    "second_moment": ("sample", "y_feature", "y_feature_2"),
    "cdf": ("sample", "threshold"),
    "quantile": ("sample", "level"),
    "proba": ("sample", "class"),
}


PARAMETRISED = ("cdf", "quantile", "proba")  # kinds whose second dim is their parameters (a coordinate)


def function_dims(spec: str) -> tuple[str, ...]:
    """Dimension names of the array of one function spec ('mean', 'cdf:-1,0,1', ...)."""
    kind = spec.partition(":")[0]
    if kind not in FUNCTION_DIMS:
        raise ValueError(f"function {spec!r}: unknown kind {kind!r}")
    return FUNCTION_DIMS[kind]


def scores_dims(functions: list[str]) -> dict[str, tuple[str, ...]]:
    """The dims of each function's array in a store of schema 3: ``function_dims``, the parameter dim of
    the k-th function of its kind (k >= 2) suffixed ``_k``, so that each function has its own coordinate."""
    seen: dict[str, int] = {}
    dims = {}
    for spec in functions:
        base = function_dims(spec)
        kind = spec.partition(":")[0]
        if kind in PARAMETRISED:
            seen[kind] = seen.get(kind, 0) + 1
            base = base[:1] + (base[1] if seen[kind] == 1 else f"{base[1]}_{seen[kind]}",)
        dims[spec] = base
    return dims


def array_name(spec: str) -> str:
    """The array name of a function: the function name itself, or KIND-HASH (the kind and the first
    16 hex digits of the name's SHA-256) when it is longer than ``MAX_NAME``."""
    if len(spec) <= MAX_NAME:
        return spec
    return f"{spec.partition(':')[0]}-{hashlib.sha256(spec.encode()).hexdigest()[:16]}"


def scores_array(group, spec: str):
    """The array of the function ``spec`` in a scores store (a zarr group)."""
    names = json.loads(group.attrs.get("arrays", "{}"))
    return group[names.get(spec, spec)]


def validate_scores_group(group, where: str = "scores") -> None:
    """Raise ``ValueError`` naming the first broken rule of the scores contract (a zarr group)."""
    attrs = dict(group.attrs)
    if attrs.get("schema") != SCHEMA_NAME:
        raise ValueError(f"{where}: not a jdl scores store (attribute schema={attrs.get('schema')!r})")
    if not isinstance(attrs.get("schema_version"), int) or attrs["schema_version"] > SCHEMA_VERSION:
        raise ValueError(f"{where}: schema_version {attrs.get('schema_version')!r} is newer than this jdl reads")
    for name in ("model", "data", "n_samples", "functions"):
        if name not in attrs:
            raise ValueError(f"{where}: attribute {name!r} is missing")
    functions = json.loads(attrs["functions"])
    names = json.loads(attrs.get("arrays", "{}"))
    coordinates = attrs["schema_version"] >= 3
    expected = scores_dims(functions) if coordinates else {spec: function_dims(spec) for spec in functions}
    for spec in functions:
        name = names.get(spec, spec)
        if name not in group:
            raise ValueError(f"{where}: array {name!r} is missing" + (f" (function {spec!r})" if name != spec else ""))
        array = group[name]
        dims = tuple(array.metadata.dimension_names or ())
        if dims != expected[spec]:
            raise ValueError(f"{where}: array {spec!r} has dims {dims}, expected {expected[spec]}")
        if coordinates and spec.partition(":")[0] in PARAMETRISED:
            coordinate = dims[1]
            if coordinate not in group or list(group[coordinate][:]) != list(array.attrs.get("parameters", [])):
                raise ValueError(f"{where}: coordinate {coordinate!r} of {spec!r} is missing or differs from its "
                                 "parameters")
        if array.shape[0] != attrs["n_samples"] or array.dtype.kind != "f":
            raise ValueError(f"{where}: array {spec!r} has shape {array.shape} and dtype {array.dtype}, "
                             f"expected {attrs['n_samples']} float rows")
