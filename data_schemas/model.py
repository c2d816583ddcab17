"""Contract of a fitted-model store: an xarray Dataset in zarr v3, one variable set per method.

``METHOD_VARIABLES`` lists each method's variables and their dimensions, ``REQUIRED_ATTRS`` the
attributes; the conditional laws live on the stored support atoms, never the n training atoms. The
whole format, its attributes and its version history: docs/stores.md.
"""
from __future__ import annotations

import json

from jdlcore.models.registry import METHODS

from .tuning import validate_grid, validate_summaries

SCHEMA_NAME = "jdl.model"
SCHEMA_VERSION = 7
READABLE_VERSIONS = (2, 3, 4, 5, 6, 7)  # version 2 had only the "jdl" method, with the same variables as in 3
SUPPORT_VERSION = 4  # the first version with support atoms


def _spectral(side: str) -> dict[str, tuple[str, ...]]:
    """A kernel basis from pivoted Cholesky (``jdlcore.lowrank.basis.SpectralBasis``) and its residual trace."""
    return {
        f"{side}_pivot_points": (f"pivot_{side}", f"{side}_feature"),
        f"{side}_coefficients": (f"pivot_{side}", f"basis_{side}"),
        f"{side}_rotation": (f"pivot_{side}", f"basis_{side}"),
        f"{side}_eigenvalues": (f"basis_{side}",),
        f"{side}_trace_error": (f"step_{side}",),
    }


def _polynomial(side: str) -> dict[str, tuple[str, ...]]:
    """A monomial basis (``jdlcore.models.polynomial_basis.PolynomialBasis``): standardisation, exponents, orthonormaliser."""
    return {
        f"{side}_center": (f"{side}_feature",),
        f"{side}_scale": (f"{side}_feature",),
        f"{side}_exponents": (f"monomial_{side}", f"{side}_feature"),
        f"{side}_coefficients": (f"monomial_{side}", f"basis_{side}"),
        f"{side}_eigenvalues": (f"basis_{side}",),
        f"{side}_trace_error": (f"step_{side}",),
    }


_REDUCTIONS: dict[str, tuple[str, ...]] = {
    **{f"reduction_{name}_{side}": (f"basis_{side}",) for side in ("x", "y") for name in ("lam", "sum", "min", "max")},
    "reduction_cross": ("basis_y", "basis_x"),
}
def _classes(side: str) -> dict[str, tuple[str, ...]]:
    """The class one-hot basis of a discrete variable (``jdlcore.models.greedy.ClassBasis``): classes and counts."""
    return {f"{side}_classes": (f"basis_{side}",), f"{side}_counts": (f"basis_{side}",),
            f"{side}_trace_error": (f"step_{side}",)}


_BASES = {"spectral": _spectral, "polynomial": _polynomial, "classes": _classes}
_ATOM_MODEL = {"y_atoms": ("sample", "y_feature"), **_REDUCTIONS}


def _method_variables(cls: type) -> dict[str, tuple[str, ...]]:
    """The variables of a registered method's store and their dims, from its class's declarations:
    its own state arrays (``state_dims``), the training atoms and reductions where its laws live on
    atoms, and the variables of each basis kind (``bases``)."""
    dims = dict(cls.state_dims)
    if cls.laws_on_atoms:
        dims.update(_ATOM_MODEL)
    for side, kind in zip(("x", "y"), cls.bases):
        if kind is not None:
            dims.update(_BASES[kind](side))
    return dims


# The variables of each method (the attribute ``method``) and their dimensions, for every method of
# the registry (``jdlcore.METHODS``).
METHOD_VARIABLES: dict[str, dict[str, tuple[str, ...]]] = {name: _method_variables(cls) for name, cls in METHODS.items()}
# Methods whose conditional laws are weights on support atoms, with the n training atoms stored (y_atoms, registered sums).
ATOM_METHODS = tuple(name for name, cls in METHODS.items() if cls.laws_on_atoms)
# Methods whose store holds the n training atoms (y_atoms, chunked along ``sample``, read lazily).
ATOM_STORES = tuple(name for name, dims in METHOD_VARIABLES.items() if "y_atoms" in dims)
VARIABLE_DIMS = METHOD_VARIABLES["jdl"]

# Optional: the tuning table the hyperparameters were chosen from (data_schemas.tuning, renamed).
TUNING_DIMS: dict[str, tuple[str, ...]] = {
    "tuning_validation_loss": ("tuning_lengthscale_x", "tuning_lengthscale_y", "tuning_reg"),
    "tuning_rank_x": ("tuning_lengthscale_x", "tuning_lengthscale_y"),
    "tuning_rank_y": ("tuning_lengthscale_x", "tuning_lengthscale_y"),
}

REQUIRED_ATTRS = ("schema", "schema_version", "jdl_version", "method", "kernel_x", "kernel_y", "params",
                  "diagnostics", "provenance", "registered", "checksums", "n_samples")


SUPPORT_DIMS: dict[str, tuple[str, ...]] = {"support_atoms": ("support", "y_feature"), "support_weights": ("support",)}


def registered_dims(k: int, version: int = SCHEMA_VERSION) -> dict[str, tuple[str, ...]]:
    """Variables and dims of the k-th registered test function."""
    dims = {f"registered_{k}_moments": ("basis_y", f"registered_{k}_value"),
            f"registered_{k}_totals": (f"registered_{k}_value",)}
    if version >= SUPPORT_VERSION:
        dims[f"registered_{k}_support"] = ("support", f"registered_{k}_value")
    return dims


def model_variables(registered: list, method: str = "jdl", version: int = SCHEMA_VERSION) -> dict[str, tuple[str, ...]]:
    """Every variable of a ``method`` model store of schema ``version`` with ``registered`` test
    functions, and its dims."""
    if method not in METHOD_VARIABLES:
        raise ValueError(f"method: unknown value {method!r}; choose one of {', '.join(map(repr, METHOD_VARIABLES))}")
    dims = dict(METHOD_VARIABLES[method])
    if method in ATOM_METHODS and version >= SUPPORT_VERSION:
        dims.update(SUPPORT_DIMS)
    for k in range(len(registered)):
        dims.update(registered_dims(k, version))
    return dims


def validate_model_dataset(ds, where: str = "model") -> None:
    """Raise ``ValueError`` naming the first broken rule of the model contract."""
    schema = ds.attrs.get("schema")
    if schema != SCHEMA_NAME:
        raise ValueError(f"{where}: not a jdl model store (attribute schema={schema!r}, expected {SCHEMA_NAME!r})")
    version = ds.attrs.get("schema_version")
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        raise ValueError(
            f"{where}: schema_version {version!r} is newer than this jdl reads ({SCHEMA_VERSION}); upgrade jdl"
        )
    if version not in READABLE_VERSIONS:
        raise ValueError(f"{where}: schema_version {version} is older than this jdl reads ({READABLE_VERSIONS[0]}); "
                         "refit the model")
    for name in REQUIRED_ATTRS:
        if name not in ds.attrs:
            raise ValueError(f"{where}: attribute {name!r} is missing")
    method = ds.attrs["method"]
    if method not in METHOD_VARIABLES or (version < 3 and method != "jdl"):
        raise ValueError(f"{where}: unknown method {method!r} (known: {', '.join(METHOD_VARIABLES)})")
    try:
        registered = json.loads(ds.attrs["registered"])
        if not isinstance(registered, list) or not all(isinstance(e, dict) and {"name", "shape"} <= set(e)
                                                       for e in registered):
            raise ValueError
    except (ValueError, TypeError):
        raise ValueError(f"{where}: attribute 'registered' must be a JSON list of {{name, shape}}") from None
    if registered and method not in ATOM_METHODS:
        raise ValueError(f"{where}: a {method} model has no registered test functions")
    for name, dims in model_variables(registered, method, version).items():
        if name not in ds.variables:
            raise ValueError(f"{where}: variable {name!r} is missing (truncated store?)")
        if tuple(ds[name].dims) != dims:
            raise ValueError(f"{where}: variable {name!r} has dims {tuple(ds[name].dims)}, expected {dims}")
        if ds[name].dtype.kind != "f":
            raise ValueError(f"{where}: variable {name!r} has dtype {ds[name].dtype}, expected float")
    present = [name for name in TUNING_DIMS if name in ds.variables]
    if present:
        if len(present) != len(TUNING_DIMS):
            raise ValueError(f"{where}: tuning variables {sorted(set(TUNING_DIMS) - set(present))} are missing")
        for name, dims in TUNING_DIMS.items():
            if tuple(ds[name].dims) != dims:
                raise ValueError(f"{where}: variable {name!r} has dims {tuple(ds[name].dims)}, expected {dims}")
        validate_grid(ds, TUNING_DIMS["tuning_validation_loss"], where)
    validate_summaries(ds, where)
    if method in ATOM_STORES and ds.sizes["sample"] != ds.attrs["n_samples"]:
        raise ValueError(f"{where}: {ds.sizes['sample']} samples but attribute n_samples={ds.attrs['n_samples']}")
