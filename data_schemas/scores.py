"""Contract of a scores store (``jdl score``): a zarr v3 group aligned with the scored data.

One float64 array per scoring function, named exactly as given on the command line, with the
scored data's ``sample`` axis first and these dimension names:

| function | dims |
|---|---|
| mean | (sample, y_feature) |
| second_moment | (sample, y_feature, y_feature_2) |
| cdf:t1,... | (sample, threshold), attribute ``parameters`` = [t1, ...] |
| quantile:l1,... | (sample, level), attribute ``parameters`` = [l1, ...] |
| proba | (sample, class), attribute ``parameters`` = the class values |

Group attributes: ``schema`` = "jdl.scores", ``schema_version``, ``model`` and ``data`` (absolute
paths; ``model`` is the directory of the model version read), ``model_version`` (the version's name,
"" for an unversioned model store; optional), ``n_samples``, ``functions`` (JSON list of the function
names, in order). A name longer than ``MAX_NAME`` characters (99 quantile levels, say) would not
fit a file name: its array is named ``KIND-HASH`` (``array_name``), and (schema 2) the attribute
``arrays`` maps each function name to its array's; ``scores_array`` reads either. A model whose laws
are projected (rule "project") adds ``projection_levels``: the number of scored rows at each level
(JSON object, level -> count; ``jdlcore.conditional.laws.LEVELS``) and ``projection_full_level`` (2
for a scalar y, 1 for a vector y: every moment the rule keeps, kept). Optional: older stores lack them.

Schema 3: the parameters are coordinates, so xarray selects by them
(``xr.open_zarr(path)["quantile:0.1,0.5,0.9"].sel(level=0.9)``). The first function of a kind has
the dim above (``level``, ``threshold``, ``class``), each further one of that kind ``level_2``,
``level_3``, ... (``scores_dims``), and for each such dim a float64 array of the same name holds the
function's parameters; ``y_feature`` (and ``y_feature_2``), where a mean or second moment is scored,
hold the y feature names. Stores of schema 2 (no coordinates; every function of a kind on one dim
name) still load.
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
