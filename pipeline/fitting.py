"""Fit a model (JDL or one of the baselines and variants) from a staged data store and write the model store.

In this process for small data, on Dask otherwise (see ``pipeline.cluster`` for ``scheduler``):
there the factorisations and reductions run chunk by chunk, each chunk a task that reads its own
slice of the zarr store (so it can be recomputed after a worker is lost), and nothing n-sized
reaches this process. Both paths solve the same small problem with jdlcore.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import zarr

from jdlcore import GaussianKernel, build_problem
from jdlcore.kernels import DEFAULT_KERNEL, Kernel, kernel_family
from jdlcore.lowrank.cholesky import Factorisation
from jdlcore.models.estimator import Estimator
from jdlcore.models.registry import METHODS as REGISTRY, estimator_class, method_options
from jdlcore.models.degeneracy import MARGINAL_ROWS, factor_degeneracies
from jdlcore.conditional.support import check_support_rows, sample_rows
from jdlcore.scaling import DEFAULT_SCALING, SCALING_ROWS, check_scaling_choice, robust_scaling
from jdlcore.features.view import XView
from jdlcore.models.conditional_model import ConditionalModel, fit_law

from .atomic import refuse_existing
from .cluster import broadcast, dask_client, resolve_scheduler
from .model_store import save_model
from .staging import categorical_indices, categorical_levels, data_fingerprint, open_staged, read_sample
from .summaries import read_summaries
from .x_view import learn_missing, read_missing
from .versions import DEFAULT_KEEP_VERSIONS, check_keep

__all__ = ["fit_store", "make_estimator", "method_kernels", "run_parameters", "read_rows", "store_chunks",
           "data_scaling", "METHODS"]


def read_rows(path: str, role: str, start: int, stop: int) -> np.ndarray:
    """Rows [start, stop) of array ``role`` of a staged store (a Dask task)."""
    return zarr.open_group(path, mode="r", zarr_format=3)[role][start:stop]


def store_chunks(client, data: str | os.PathLike, group: zarr.Group) -> dict[str, list]:
    """Futures of the row chunks of a staged store on Dask, {"x": [(n_c, d_x)], "y": [(n_c, d_y)]}
    paired row for row; each is a task reading its own rows (``read_rows``), so it can be recomputed."""
    n, step = int(group.attrs["n_samples"]), group["x"].chunks[0]
    bounds = [(start, min(start + step, n)) for start in range(0, n, step)]
    path = str(Path(data).resolve())
    return {role: [client.submit(read_rows, path, role, a, b, pure=False) for a, b in bounds] for role in ("x", "y")}


PROBES = 16  # first rows of x at which the stored model reports its signed law's negative mass
METHODS = tuple(REGISTRY)
# fitted from the m x m reductions, which Dask computes chunk by chunk; the others fit in this process
CHUNKED_METHODS = tuple(name for name, cls in REGISTRY.items() if cls.fits_from_reductions)


Scaling = tuple[np.ndarray, np.ndarray]  # (location, scale) per feature: see jdlcore.scaling


def make_estimator(method: str, *, lengthscale_x: float | np.ndarray, lengthscale_y: float | np.ndarray, reg: float,
                   scaling: dict[str, Scaling] | None = None, categorical: list[int] | None = None,
                   kernel_x: str = DEFAULT_KERNEL, **options: Any) -> Estimator:
    """The unfitted, validated estimator of ``method`` (``jdlcore.METHODS``): kernels of the given
    lengthscales (scalars, or one per feature) for the kernels it has (the other lengthscale is
    unused), the x kernel of the family ``kernel_x`` and y's Gaussian, standardised by ``scaling``
    ({"x": (location, scale), "y": ...}; the lengthscales are
    then in standard units), the x kernel with the ``categorical`` columns (indices) compared as
    category codes, ``reg``, and the fit options it declares
    (``jdlcore.models.registry.method_options``: None or positivity "auto" is the method's default; an
    option it does not have is refused)."""
    cls = estimator_class(method)
    kernels = method_kernels(method, lengthscale_x=lengthscale_x, lengthscale_y=lengthscale_y, scaling=scaling,
                             categorical=categorical, kernel_x=kernel_x)
    estimator = cls(**kernels, reg=reg, **method_options(method, options))
    estimator.check_params()
    return estimator


def method_kernels(method: str, *, lengthscale_x: float | np.ndarray, lengthscale_y: float | np.ndarray,
                   scaling: dict[str, Scaling] | None = None, categorical: list[int] | None = None,
                   kernel_x: str = DEFAULT_KERNEL) -> dict[str, Kernel]:
    """The kernels ``method`` has, by parameter name (``kernel_x``, ``kernel_y``): of the given
    lengthscales, x's of the family ``kernel_x`` (``jdlcore.kernels.LENGTHSCALE_KERNELS``) and y's
    Gaussian, standardised by ``scaling`` and with the ``categorical`` x columns, as ``make_estimator``
    describes."""
    scaling = scaling or {}
    families = {"x": kernel_family(kernel_x), "y": GaussianKernel}
    kernels = {f"kernel_{side}": families[side](value, **dict(zip(("location", "scale"), scaling.get(side, ()))),
                                                categorical=categorical if side == "x" else None)
               for side, value in (("x", lengthscale_x), ("y", lengthscale_y))}
    return {name: kernels[name] for name in estimator_class(method).KERNELS}


def run_parameters(method: str, reg: float, options: dict[str, Any]) -> dict[str, Any]:
    """The parameters the estimator of ``method`` will have besides its kernels, without building it: its
    declared defaults, ``reg`` and the fit ``options`` given (``method_options``: None or positivity
    "auto" is the default), as ``get_params`` would return them. A fit's run key holds them, so a
    default given explicitly is the same run. The scaling is the fit's own setting (the estimator is given
    it, ``fit_store``), so it is left out here."""
    params = {**estimator_class(method).defaults(), "reg": reg, **method_options(method, options)}
    params.pop("scaling", None)
    return params


def data_scaling(data: str | os.PathLike, group: zarr.Group, view: XView = XView()) -> dict[str, Scaling]:
    """The robust scaling (``jdlcore.scaling.robust_scaling``: median and interquartile range per
    feature; 0 and 1 for categorical columns) of x (as ``view`` reads it) and y of a staged store,
    estimated on ``scaling_rows`` (a seeded sample). ``ValueError`` naming a constant column."""
    rows = scaling_rows(group)
    X = view.rows(read_sample(data, "x", rows))
    return {"x": robust_scaling(X, view.columns(group.attrs["x_features"]), "x",
                                view.categorical(categorical_indices(group))),
            "y": robust_scaling(view.y(X, read_sample(data, "y", rows)), group.attrs["y_features"], "y")}


def scaling_rows(group: zarr.Group) -> np.ndarray:
    """The seeded sample of ``SCALING_ROWS`` rows of a staged store (all of them in a smaller one) that a
    fit estimates the data's scaling and its missing-value rule from."""
    return sample_rows(int(group.attrs["n_samples"]), 0, SCALING_ROWS)


def check_lengthscale_widths(method: str, hyper: dict[str, Any], group: zarr.Group, view: XView = XView()) -> None:
    """``ValueError`` unless each per-feature lengthscale of a kernel ``method`` has (``hyper``'s
    lengthscale_x, lengthscale_y) has one entry per feature of the staged store (x's as ``view`` reads
    them: missing-value indicators and the summaries in use after the columns)."""
    read = {"x": view.columns(group.attrs["x_features"]), "y": list(group.attrs["y_features"])}
    for side in ("x", "y"):
        value, names = hyper[f"lengthscale_{side}"], read[side]
        if f"kernel_{side}" in estimator_class(method).KERNELS and np.ndim(value) == 1 and len(value) != len(names):
            raise ValueError(f"lengthscale_{side}: has {len(value)} entries but the data has {len(names)} {side} "
                             f"features ({', '.join(names)})")


def fit_scaling(scaling: str | None, data: str | os.PathLike, group: zarr.Group, table: Any,
                view: XView = XView()) -> tuple[str, dict]:
    """(the scaling's name, its vectors by role) for a fit: a tuning store's own (its lengthscales are in
    its units; ``scaling``, if given, must agree), else ``scaling`` (default "robust") estimated on the
    data as ``view`` reads it. ``scaling``: None or one of ``SCALINGS``, already checked."""
    if table is not None:
        from .tuning import tuned_scaling

        tuned, vectors = tuned_scaling(table)
        _agrees("scaling", scaling, tuned, f"scaling {tuned!r}", "in those units")
        return tuned, vectors
    scaling = scaling or DEFAULT_SCALING
    return scaling, data_scaling(data, group, view) if scaling == "robust" else {}


def fit_kernel_x(kernel_x: str | None, table: Any) -> str:
    """The x kernel's family for a fit: a tuning store's own (its lengthscales are that family's;
    ``kernel_x``, if given, must agree), else ``kernel_x`` (default ``DEFAULT_KERNEL``)."""
    if table is None:
        return kernel_x or DEFAULT_KERNEL
    tuned = str(table.attrs.get("kernel_x", DEFAULT_KERNEL))  # stores written before the option: Gaussian
    _agrees("kernel_x", kernel_x, tuned, f"the {tuned} x kernel", "that family's")
    return tuned


def _agrees(name: str, given: str | None, tuned: str, tuned_with: str, units: str) -> None:
    """Refuse a fit setting ``name`` given (not None) other than the ``tuned`` one its tuning store's
    lengthscales belong to (``tuned_with``, ``units``: how the message names them)."""
    if given is not None and given != tuned:
        raise ValueError(f"{name}: the tuning store was tuned with {tuned_with}, and its lengthscales are {units}; "
                         f"fit with {name} {tuned!r} or leave it out (got {given!r})")


def fit_store(
    data: str | os.PathLike,
    out: str | os.PathLike,
    *,
    lengthscale_x: float,
    lengthscale_y: float,
    reg: float,
    method: str = "jdl",
    scaling: str | None = None,
    kernel_x: str | None = None,
    scheduler: str | None = None,
    overwrite: bool = False,
    tuning: str | os.PathLike | None = None,
    run_key: str | None = None,
    keep_versions: int = DEFAULT_KEEP_VERSIONS,
    progress: Callable[[str], None] | None = None,
    **options: Any,
) -> tuple[Path, Any]:
    """Fit ``method`` on a staged store and save the model store at ``out``; returns its path and the
    model (``jdlcore.ConditionalModel``: the law and the view of x it reads).

    ``options``: the method's fit options (``jdlcore.models.registry.FIT_OPTIONS``: tol, max_rank,
    pivoting, seed, constraints, positivity, support_size, degree, threshold), each the method's own
    default when left out. ``scaling``: "robust" standardises the kernels' inputs by each feature's
    median and interquartile range (``data_scaling``; the lengthscales are then in standard units),
    "none" uses the raw columns; default: the tuning store's, else "robust". The scaling is stored in
    the model's kernels, so scoring applies it. ``kernel_x``: the x kernel's family
    (``jdlcore.kernels.LENGTHSCALE_KERNELS``); default: the tuning store's, else Gaussian. ``positivity`` "auto" is the method's first rule ("project" for jdl: the
    conditional laws on the support atoms projected onto probability vectors that keep their mass,
    mean and second moment; "sos" for jpdl, "atoms" for greedy).
    jdl and cme run on Dask above ``AUTO_ROWS`` rows (or as ``scheduler`` says); the other methods
    fit in this process (an explicit cluster scheduler is refused for them). ``progress`` receives
    a line per finished stage. The model's diagnostics carry the time split (``pivots_seconds`` and
    ``reductions_seconds`` on Dask, ``solve_seconds``, ``fit_seconds``) and ``write_seconds`` (set
    after the store is written, so not stored in it). ``tuning``: the tuning store the
    hyperparameters came from; its table is kept in the model store (``tuning_*``) and its best
    setting in the provenance. ``run_key`` is recorded for the orchestration's resume check. The model
    is published as a new version of ``out`` (``pipeline.versions``), keeping the newest ``keep_versions``.
    """
    check_keep(keep_versions)
    hyper = dict(lengthscale_x=lengthscale_x, lengthscale_y=lengthscale_y, reg=reg)
    estimator = make_estimator(method, **hyper, kernel_x=kernel_x or DEFAULT_KERNEL, **options)  # every rule first
    if scaling is not None:
        check_scaling_choice(scaling)
    target = Path(out)
    refuse_existing(target, overwrite)  # before the fit, not after it
    group = open_staged(data, needs_y="fit")
    table, view = _tuning_record(tuning, data, group, method)
    kernel_x = fit_kernel_x(kernel_x, table)
    check_lengthscale_widths(method, hyper, group, view)
    # a method without kernels (jpdl) has nothing to standardise
    scaling, vectors = (fit_scaling(scaling, data, group, table, view) if estimator_class(method).KERNELS
                        else ("none", {}))
    x_levels = categorical_levels(group)
    if x_levels and "kernel_x" not in estimator_class(method).KERNELS:
        with_x_kernel = [name for name, cls in REGISTRY.items() if "kernel_x" in cls.KERNELS]
        raise ValueError(f"method: {method} has no x kernel to compare the categorical columns "
                         f"({', '.join(x_levels)}) by; use one of {', '.join(with_x_kernel)}")
    estimator.set_params(**method_kernels(method, lengthscale_x=lengthscale_x, lengthscale_y=lengthscale_y,
                                          scaling=vectors, categorical=view.categorical(categorical_indices(group)),
                                          kernel_x=kernel_x))
    if "scaling" in estimator.parameters:  # the kernels carry the data's scaling ("robust"), or none
        estimator.set_params(scaling=scaling)
    estimator.check_params()
    n = int(group.attrs["n_samples"])
    check_support_rows(getattr(estimator, "support_size", None), n, f"rows of {data}")
    started = time.perf_counter()
    if method not in CHUNKED_METHODS:
        if scheduler not in (None, "", "auto", "memory"):
            raise ValueError(f"scheduler: method {method} fits in memory; use --scheduler memory or auto "
                             f"(got {scheduler!r})")
        scheduler = None
        model = fit_law(estimator, view, group["x"][:], group["y"][:])
    else:
        scheduler = resolve_scheduler(scheduler, n)
        model = _fit_from_reductions(estimator, data, group, scheduler, progress, view)
    model.diagnostics_["fit_seconds"] = time.perf_counter() - started
    _check_degeneracies(model, data, n, view, tuned=table is not None)
    if hasattr(model, "negative_support_mass"):
        probes = view.rows(group["x"][:PROBES])
        negative = model.negative_support_mass(probes)
        model.diagnostics_.update({"negative_mass_max": float(negative.max()),
                                   "negative_mass_mean": float(negative.mean()), "negative_mass_probes": PROBES})
    if progress is not None:
        progress(f"solved: {model.diagnostics_['solve_seconds']:.2f} s")
    provenance: dict[str, Any] = {
        "data": str(Path(data).resolve()), "data_fingerprint": data_fingerprint(group),
        "x_features": group.attrs["x_features"], "y_features": group.attrs["y_features"],
        "scheduler": scheduler or "in-memory", "scaling": scaling,
        **({"x_levels": x_levels} if x_levels else {}),
        **({"x_summaries": list(view.summaries.in_use)} if view.summaries else {}),
    }
    if table is not None:
        provenance["tuning"] = {"store": str(Path(tuning).resolve()), "best": json.loads(table.attrs["best"]),
                                "criterion": table.attrs["criterion"], "rows_used": table.attrs["rows_used"]}
    model = ConditionalModel.of(model, view, provenance)
    mark = time.perf_counter()
    path = save_model(model, target, overwrite=overwrite, tuning=table, run_key=run_key, keep_versions=keep_versions)
    model.diagnostics_["write_seconds"] = time.perf_counter() - mark
    return path, model


def _check_degeneracies(model: Any, data: str | os.PathLike, n: int, view: XView, tuned: bool) -> None:
    """The fitted model's degeneracies, compared with the marginal on a sample of the n staged rows of
    ``data`` and announced (warned; the findings go into the store's diagnostics). ``tuned``: its
    lengthscales came from a tuning, and the rank findings are told as such (``factor_degeneracies``)."""
    if tuned and "degeneracies" in model.diagnostics_:
        found = model.diagnostics_["degeneracies"]
        told = factor_degeneracies(model.diagnostics_, n, float(getattr(model, "tol", 0.0)), tuned=True)
        found.update({kind: message for kind, message in told.items() if kind in found})
    if hasattr(model, "check_degeneracies"):
        rows = sample_rows(n, model.seed, MARGINAL_ROWS)
        X, Y = view.pair(read_sample(data, "x", rows), read_sample(data, "y", rows))
        model.check_degeneracies(X, Y, **({"on": view.location_scale(X)} if view.standardises else {}))


def _tuning_record(tuning: str | os.PathLike | None, data: str | os.PathLike, group: zarr.Group,
                   method: str) -> tuple[Any, XView]:
    """(the tuning store's Dataset, None without one; the view of x the fit reads): the tuning's
    missing-value rule and boosted summaries, the rule learned from the data where the tuning records
    none (``learn_missing`` on ``scaling_rows``). A map that standardises y is refused for a ``method``
    other than jdl, the one that answers on y's scale."""
    table, missing, summaries = None, None, None
    if tuning is not None:
        from .tuning import STANDARDISE_ROWS, load_tuning

        table = load_tuning(tuning)
        missing, summaries = read_missing(table.attrs, f"tuning {tuning}"), read_summaries(table, f"tuning {tuning}")
        if summaries is not None and summaries.standardises and method != "jdl":
            raise ValueError(f"method: the tuning store {tuning} reads y standardised by the boosted summaries, which "
                             f"only jdl answers on y's scale (the default from {STANDARDISE_ROWS:,} rows); fit jdl, "
                             f"or tune with --summaries boosted (y as it is) or none for {method}")
    return table, XView(missing or learn_missing(data, group, scaling_rows(group)), summaries)


def _fit_from_reductions(estimator: Any, data: str | os.PathLike, group: zarr.Group, scheduler: str | None,
                         progress: Callable[[str], None] | None, view: XView) -> Any:
    """JDL and CME from the factorisations and m x m reductions: in this process (``scheduler`` None)
    or chunk by chunk on Dask, where each chunk is a task reading its own rows of the store (and reading
    them through ``view``)."""
    factorisation = Factorisation.of(estimator)
    on_atoms = estimator.laws_on_atoms  # a support and a grid sample to build as well
    options = dict(support_size=estimator.support_size, grid_points=estimator.grid_points) if on_atoms else {}
    if scheduler is None:
        X, Y = view.pair(group["x"][:], group["y"][:])
        problem = build_problem(X, Y, estimator.kernel_x, estimator.kernel_y, factorisation,
                                values_x=estimator.reads_x_values, **options)
    else:
        from .chunked_fit import chunked_problem

        Y = group["y"]  # read lazily: the model store copies the atoms block by block
        n = int(group.attrs["n_samples"])
        samples = {}
        if on_atoms:
            grid_rows, rows = sample_rows(n, estimator.seed, estimator.grid_points), sample_rows(n, estimator.seed)
            y_sample = read_sample(data, "y", rows)  # the model's y: standardised where the view says so
            y_sample = view.pair(read_sample(data, "x", rows), y_sample)[1] if view.standardises else y_sample
            samples = dict(y_sample=y_sample,
                           grid_x=view.rows(read_sample(data, "x", grid_rows)))
        with dask_client(scheduler) as client:
            chunks = store_chunks(client, data, group)
            # each chunk as the kernel reads it: missing values filled and flagged, summaries added, y
            # standardised where the map says so; a task of its own after its read
            shipped = broadcast(client, view)
            chunks["x"] = [client.submit(XView.rows, shipped, block) for block in chunks["x"]]
            if view.standardises:
                chunks["y"] = [client.submit(XView.y, shipped, x, y) for x, y in zip(chunks["x"], chunks["y"])]
                Y = np.vstack(client.gather(chunks["y"]))  # the model's atoms: r, n x 8 bytes
            problem = chunked_problem(client, chunks["x"], chunks["y"], estimator.kernel_x, estimator.kernel_y,
                                      factorisation, extremes=estimator.reads_x_values, progress=progress,
                                      **samples, **options)
    return estimator.fit_problem(problem, Y)
