"""Inspect a model store: a text card and diagnostic plots (``jdl inspect``, the per-fit Prefect artifact).

The card and plots read only the store (``pipeline.model_store.load_model``, plus the optional
``tuning_*`` table through xarray). Conditional densities and CDFs come from ``jdlcore.conditional.curves`` (the
model's own law smoothed by a Gaussian); a model that answers only class probabilities (KLR) is
drawn by them. Weights of models without positivity may be negative; the plots say so.
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from jdlcore.models.conditional_model import ConditionalModel
from jdlcore.features.missing import INDICATOR_SUFFIX
from jdlcore.conditional.curves import (
    CENTRAL_SHARE, GRID_POINTS, central_grid, query_points, conditional_curves, conditional_density, default_x_values,
    density_bandwidth,
)
from pipeline.model_store import load_model

__all__ = ["model_card", "card_rows", "write_plots", "diagnostics_figure", "conditional_density", "conditional_curves",
           "density_bandwidth", "default_x_values", "read_tuning", "GRID_POINTS"]
TUNING_VARIABLES = ("tuning_validation_loss", "tuning_rank_x", "tuning_rank_y")


# -- reading --------------------------------------------------------------------------------------
def read_tuning(path: str | os.PathLike) -> xr.Dataset | None:
    """The store's tuning table (``tuning_validation_loss`` over (tuning_lengthscale_x,
    tuning_lengthscale_y, tuning_reg), ``tuning_rank_x`` / ``tuning_rank_y`` over the two
    lengthscales), loaded into memory; None when the store has none."""
    with xr.open_zarr(path, consolidated=False, zarr_format=3) as ds:
        if not all(name in ds.variables for name in TUNING_VARIABLES):
            return None
        return ds[list(TUNING_VARIABLES)].load()


def _store_attrs(path: str | os.PathLike) -> dict[str, Any]:
    with xr.open_zarr(path, consolidated=False, zarr_format=3) as ds:
        return dict(ds.attrs)


def _width(model: Any, side: str) -> int:
    """Number of features on ``side``: a KLR model's y is one label column."""
    basis = getattr(model, f"basis_{side}_", None)
    return basis.width if basis is not None else 1


def _names(model: Any, side: str) -> list[str]:
    width = _width(model, side)
    provenance = model.provenance_ if isinstance(model.provenance_, dict) else {}
    names = provenance.get(f"{side}_features")
    view = model.view_
    if names and side == "x":  # indicators of missing values and boosted summaries after the columns
        names = view.columns(names)
    if names and side == "y" and view.standardises:
        names = [f"({name} - median) / spread" for name in names]  # the law the model holds: y standardised
    return [str(n) for n in names] if names and len(names) == width else [f"{side}{k}" for k in range(width)]


def _best(tuning: xr.Dataset) -> dict[str, float] | None:
    """The candidate with the smallest finite validation loss (None when every candidate failed)."""
    loss = tuning["tuning_validation_loss"]
    values = loss.values
    if not np.any(np.isfinite(values)):
        return None
    i, j, k = np.unravel_index(np.nanargmin(values), values.shape)
    return {"lengthscale_x": float(loss["tuning_lengthscale_x"][i]),
            "lengthscale_y": float(loss["tuning_lengthscale_y"][j]),
            "reg": float(loss["tuning_reg"][k]), "score": float(values[i, j, k]),
            "rank_x": float(tuning["tuning_rank_x"].values[i, j]),
            "rank_y": float(tuning["tuning_rank_y"].values[i, j])}


# -- the card -------------------------------------------------------------------------------------
def _relative_trace(model: Any, side: str) -> np.ndarray:
    """Residual trace after k = 0..m pivots over trace K, shape (m + 1,) (empty without a factorisation)."""
    trace = np.asarray(model.diagnostics_.get(f"trace_error_{side}", []), dtype=np.float64)
    return trace / trace[0] if trace.size and trace[0] > 0 else np.zeros_like(trace)


def _count(value: float) -> str:
    return str(int(value)) if np.isfinite(value) else "n/a"


def model_card(path: str | os.PathLike) -> str:
    """A human-readable multi-line summary of the model store at ``path``.

    Raises ``ValueError`` (from ``load_model``, unchanged) for a missing, foreign or damaged store.
    Hyperparameters are printed exactly (``repr`` of the stored floats); times are in seconds.
    """
    rows = card_rows(path)
    width = max(len(label) for label, _ in rows)
    lines = [f"  {label:<{width}}  {value}" for label, value in rows]
    return "\n".join([f"jdl model store {Path(path).resolve()}", *lines])


def card_rows(path: str | os.PathLike, model: ConditionalModel | None = None) -> list[tuple[str, str]]:
    """The model card as (label, value) rows; ``model``: the store's model if already at hand."""
    model = load_model(path) if model is None else model
    attrs = _store_attrs(path)
    tuning = read_tuning(path)
    d, p = model.diagnostics_, (model.provenance_ or {})
    rows: list[tuple[str, str]] = [
        ("schema", f"{attrs.get('schema')} v{attrs.get('schema_version')}, written by jdl {attrs.get('jdl_version')}"),
        ("method", f"{attrs.get('method')} ({type(model.law_).__name__})"),
        ("samples", f"n = {model.n_samples_:,}"),
        ("data", str(p.get("data", "(not recorded)"))),
        ("fingerprint", f"sha256 {p['data_fingerprint']}" if p.get("data_fingerprint") else "(not recorded)"),
        ("x features", ", ".join(_names(model, "x"))),
        ("y features", ", ".join(_names(model, "y"))),
    ]
    bases = [(side, getattr(model, f"basis_{side}_", None)) for side in ("x", "y")]
    bases = [(side, basis) for side, basis in bases if basis is not None]
    for side, basis in bases:
        rows.append((f"{'kernel' if hasattr(basis, 'kernel') else 'basis'} {side}", basis.describe()))
    for side, basis in bases:
        rows += _feature_rows(side, getattr(basis, "kernel", None), _names(model, side),
                              (model.provenance_ or {}).get(f"{side}_levels") or {})
    for name in model.law_.parameters:  # the law's hyperparameters
        value = getattr(model.law_, name)
        if name == "positivity" and getattr(model, "constraints", "positivity") != "positivity":
            value = f"{value} (not used)"
        rows.append((name, repr(float(value)) if name in ("reg", "tol") else str(value)))
    rows.append(("ranks", ", ".join(f"m_{side.upper()} = {basis.size}" for side, basis in bases)))
    for side, _ in bases:
        relative = _relative_trace(model, side)
        if relative.size > 1:
            stop = d.get(f"stop_reason_{side}")
            rows.append((f"trace error {side}", f"{relative[-1]:.3e} of trace K after {relative.size - 1} pivots"
                                                + (f" (stop: {stop})" if stop else "")))
    rows.append(("objective", f"{d['objective']:.8g}" if "objective" in d else "n/a"))
    if "normalization_defect" in d:
        rows.append(("normalization", f"defect {d['normalization_defect']:.3e}"))
    if "grid_min" in d:
        rows.append(("grid positivity", f"min 1 + h = {d['grid_min']:.3e} after {d.get('rounds', '?')} rounds, "
                                        f"{d.get('active', '?')} active of {d.get('constraints', '?')} constraints"))
    timing = [f"{name[:-len('_seconds')]} {value:.3g}" for name, value in d.items()
              if name.endswith("_seconds") and isinstance(value, (int, float))]
    rows.append(("timing (s)", ", ".join(timing) if timing else "(none recorded)"))
    if "sos_certified" in d:
        rows.append(("sos positivity", f"certified {d['sos_certified']}, min eigenvalue "
                                       f"{d.get('sos_min_eigenvalue', math.nan):.3e}, residual "
                                       f"{d.get('sos_residual_l1', math.nan):.3e}"))
    if "negative_mass_max" in d:
        rows.append(("negative mass", f"max {d['negative_mass_max'] + 0.0:.3e}, "  # + 0.0: no "-0"
                                      f"mean {d.get('negative_mass_mean', math.nan) + 0.0:.3e} "
                                      f"at the first {d.get('negative_mass_probes', '?')} x rows"))
    if hasattr(model, "support_"):
        rows += _law_rows(model)
    if "marginal_ratio" in d:
        rows.append(("vs marginal", f"{d.get('marginal_score', 'loss')} {d['marginal_ratio']:.3f} of the marginal law's "
                                    "on training rows (1: x adds nothing)"))
    rows += [(f"warning {kind}", message) for kind, message in d.get("degeneracies", {}).items()]
    if hasattr(model, "registered_"):
        registered = model.registered_
        rows.append(("registered", ", ".join(f"{name} {tuple(shape)}".replace(" ()", "")
                                             for name, (_, shape) in registered.items()) or "(none)"))
    if p.get("scheduler"):
        rows.append(("fitted on", str(p["scheduler"])))
    if tuning is not None:
        rows += _tuning_rows(model, tuning, p.get("tuning"))
    return rows


def _feature_rows(side: str, kernel: Any, names: list[str], levels: dict[str, list[str]]) -> list[tuple[str, str]]:
    """Per feature of a kernel with a scaling, per-feature lengthscales or categorical columns: its
    location and scale (the standardisation the kernel applies before every evaluation) or, for a
    categorical one, its levels; its lengthscale in standard and in the data's units, and its
    relevance: the shortest lengthscale over its own (1: the most relevant feature; near 0: the
    kernel hardly varies along it)."""
    if kernel is None or not kernel.scalable or (kernel.scale is None and np.ndim(kernel.lengthscale) == 0
                                                 and not kernel.categorical):
        return []
    width = len(names)
    own = np.broadcast_to(np.asarray(kernel.lengthscale, dtype=np.float64), (width,))
    data = np.broadcast_to(np.asarray(kernel.data_lengthscale, dtype=np.float64), (width,))
    relevance = own.min() / own
    rows = []
    for k, name in enumerate(names):
        if k in kernel.categorical:
            known = levels.get(name, [])
            shown = ", ".join(known[:8]) + (", ..." if len(known) > 8 else "")
            indicator = name not in levels and name.endswith(INDICATOR_SUFFIX)
            kind = (f"indicator of a missing {name[:-len(INDICATOR_SUFFIX)]} (its value read at the median)"
                    if indicator else f"categorical, {len(known)} levels ({shown})")
            rows.append((f"{side} feature {name}", f"{kind}; mismatch lengthscale {own[k]:.4g}, "
                                                   f"relevance {relevance[k]:.3f}"))
            continue
        scaling = ("" if kernel.scale is None else
                   f"location {np.broadcast_to(kernel.location, (width,))[k]:.6g}, "
                   f"scale {np.broadcast_to(kernel.scale, (width,))[k]:.6g}; ")
        rows.append((f"{side} feature {name}", f"{scaling}lengthscale {own[k]:.4g}"
                     + (f" (standard units; {data[k]:.4g} in the data's)" if kernel.scale is not None else "")
                     + f", relevance {relevance[k]:.3f}"))
    return rows


def _law_rows(model: ConditionalModel) -> list[tuple[str, str]]:
    """The conditional law: its rule, the support atoms and what they reproduce exactly."""
    from jdlcore.conditional.laws import LEVELS

    d, support = model.diagnostics_, model.support_
    rule = {"project": "projected (positive; mass, mean and second moment kept where they can be)",
            "clip": "clipped (positive; negative mass discarded)",
            "signed": "signed (not positive where 1 + h < 0)"}[model.law_rule]
    rows = [("law", rule),
            ("support", f"M = {support.size} atoms ({support.construction}; {support.requested} requested), "
                        + ("the training values themselves" if support.construction == "distinct" else
                           f"sums kept exactly up to: {support.exact} (relative defect {support.defect:.1e})"))]
    record = d.get("projection")
    if record:
        shares = ", ".join(f"{LEVELS[int(level)]} {100 * share:.3g}%" for level, share in
                           sorted(record["levels"].items(), key=lambda kv: -int(kv[0])))
        rows.append(("projection", f"at {record['rows']:,} training x rows: {shares}; exact path "
                                   f"{100 * record['exact_path']:.3g}%, failed {100 * record['failed']:.3g}%"))
    return rows


def _tuning_rows(model: ConditionalModel, tuning: xr.Dataset, recorded: Any) -> list[tuple[str, str]]:
    loss = tuning["tuning_validation_loss"]
    sizes = [loss.sizes[dim] for dim in loss.dims]
    unscored = int(np.isnan(tuning["tuning_rank_x"].values).sum()) * sizes[2]  # pairs the early stop skipped
    rows = [("tuning grid", f"{sizes[0]} lengthscale_x x {sizes[1]} lengthscale_y x {sizes[2]} reg = {loss.size} "
                            f"candidates, {int(np.isfinite(loss.values).sum())} with a finite validation loss"
                            + (f", {unscored} not scored (shorter x lengthscales, after one scored worse)"
                               if unscored else ""))]
    best = _best(tuning)
    if best is None:
        return rows + [("tuning best", "(every candidate failed)")]
    rows.append(("tuning best", f"validation loss {best['score']:.6g} at lengthscale_x = {best['lengthscale_x']!r}, "
                                f"lengthscale_y = {best['lengthscale_y']!r}, reg = {best['reg']!r} "
                                f"(m_X = {_count(best['rank_x'])}, m_Y = {_count(best['rank_y'])})"))
    searched = recorded.get("best") if isinstance(recorded, dict) else None
    if isinstance(searched, dict) and any(isinstance(searched.get(f"lengthscale_{side}"), list) for side in "xy"):
        best = searched  # the per-feature search refined the grid's best: the tuning store's best is its result
        rows.append(("tuning search", f"validation loss {best['score']:.6g} at one lengthscale per feature "
                                      f"(x feature rows), reg = {best['reg']!r}"))
    fitted = (model.basis_x_.kernel.lengthscale, model.basis_y_.kernel.lengthscale, model.reg)
    same = all(np.shape(a) == np.shape(b) and np.allclose(a, b, rtol=1e-9, atol=0)
               for a, b in zip(fitted, (best["lengthscale_x"], best["lengthscale_y"], best["reg"])))
    rows.append(("tuning vs fit", "the fitted setting is the best candidate" if same
                 else "the fitted setting differs from the best candidate"))
    if isinstance(recorded, dict):
        rows.append(("tuning store", f"{recorded.get('store')} (criterion {recorded.get('criterion')}, "
                                     f"{recorded.get('rows_used')} rows)"))
    return rows


# -- plots ----------------------------------------------------------------------------------------
def _figure(ncols: int, width: float, height: float):
    """A Figure on its own Agg canvas (no pyplot: nothing global to open or close) and its axes."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure, figure.subplots(1, ncols, squeeze=False)[0]


def _save(figure: Any, path: str | os.PathLike) -> Path:
    figure.savefig(path, format="png", dpi=100)
    figure.clear()
    return Path(path)


def _plot_trace(ax: Any, model: Any) -> None:
    for side, label in (("x", "m_X"), ("y", "m_Y")):
        relative = _relative_trace(model, side)
        if relative.size < 2:  # no factorisation on this side (polynomial, class or no basis)
            continue
        ranks = np.arange(relative.size)
        keep = relative > 0  # an exhausted factorisation ends at exactly 0, which a log axis cannot show
        ax.plot(ranks[keep], relative[keep], marker=".", label=f"{side} ({label} = {relative.size - 1})")
    if getattr(model, "tol", 0) > 0:
        ax.axhline(float(model.tol), color="gray", linestyle="--", label=f"tol = {float(model.tol):g}")
    ax.set_yscale("log")
    ax.set_xlabel("rank (pivots)")
    ax.set_ylabel("residual trace / trace K")
    ax.set_title("pivoted Cholesky residual trace")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small")
    else:
        ax.text(0.5, 0.5, "exact basis: no pivoted Cholesky", ha="center", va="center", transform=ax.transAxes)


def _plot_class_probabilities(ax: Any, model: Any) -> None:
    """A classifier (KLR): P(class | x) along the first x feature, the others at their pivots' median."""
    x = _slice_points(model, 64)
    proba = model.law_.predict_proba(x)  # x as the law's kernel reads it
    x_name = _names(model, "x")[0]
    for k, label in enumerate(model.classes_):
        ax.plot(x[:, 0], proba[:, k], label=f"class {label:g}")
    ax.set_xlabel(x_name)
    ax.set_ylabel("probability")
    ax.set_title("class probabilities", fontsize="medium")
    ax.legend(fontsize="small")


def _slice_points(model: Any, n: int) -> np.ndarray:
    """``default_x_values`` (the first feature at quantiles, the others at their medians); for a model
    with boosted summaries beside x's columns, the summaries of those points appended in place of the
    pivots' medians (a model reading the summaries alone is sliced along the first summary)."""
    x = default_x_values(model.law_, n)
    summaries = model.view_.summaries
    return x if summaries is None or not summaries.columns else summaries.augment(x[:, :summaries.width])


def _slices(model: ConditionalModel, x_values: Any, n_slices: int):
    if x_values is None:
        x = _slice_points(model, n_slices)
    else:  # the data's columns, read as the model reads them
        x = np.asarray(x_values, dtype=np.float64)
        if x.ndim == 1:  # queries of the data's one column, or one query of its columns
            provenance = model.provenance_ if isinstance(model.provenance_, dict) else {}
            x = x[:, None] if len(provenance.get("x_features") or [None]) == 1 else x[None, :]
        x = query_points(model.law_, model.rows(x))
    grid, cut = central_grid(model.law_, 0)
    density, cdf = conditional_curves(model.law_, x, grid)
    return x, grid, density, cdf, cut


def _plot_slices(model: ConditionalModel, x: np.ndarray, grid: np.ndarray, density: np.ndarray, density_ax: Any,
                 cdf: np.ndarray | None = None, cdf_ax: Any | None = None, cut: bool = False) -> None:
    """The conditional densities (and CDFs) at the x slices over ``grid``; ``cut``: the grid is the
    central ``CENTRAL_SHARE`` of y's marginal, not its full range (said on the axis)."""
    x_name, y_name = _names(model, "x")[0], _names(model, "y")[0]
    y_label = f"{y_name} (central {CENTRAL_SHARE:.0%} of its marginal)" if cut else y_name
    marginal = "" if _width(model, "y") == 1 else "marginal "
    for k in range(x.shape[0]):
        density_ax.plot(grid, density[k], label=f"{x_name} = {x[k, 0]:.3g}")
    density_ax.axhline(0.0, color="gray", linewidth=0.5)
    title = f"{marginal}conditional density of {y_name}, h = {density_bandwidth(model):.3g}"
    low = float(density.min())
    if low < -1e-9 * float(np.abs(density).max()):
        title += f"\nhas negative parts (min {low:.2g}): weights below 0"
    density_ax.set_title(title, fontsize="medium")
    density_ax.set_xlabel(y_label)
    density_ax.set_ylabel(f"p({y_name} | {x_name})")
    density_ax.legend(fontsize="small")
    if cdf_ax is not None and cdf is not None:
        for k in range(x.shape[0]):
            cdf_ax.plot(grid, cdf[k], label=f"{x_name} = {x[k, 0]:.3g}")
        cdf_ax.set_title(f"{marginal}conditional CDF of {y_name}", fontsize="medium")
        cdf_ax.set_xlabel(y_label)
        cdf_ax.set_ylabel(f"Q({y_name} <= y | {x_name})")


def _plot_validation(axes: Any, tuning: xr.Dataset) -> None:
    loss = tuning["tuning_validation_loss"]
    lx, ly, regs = (np.asarray(loss[dim].values) for dim in loss.dims)
    values = loss.values
    finite = np.isfinite(values)
    surface = np.where(finite.any(axis=2), np.nanmin(np.where(finite, values, np.inf), axis=2), np.nan)
    ax = axes[0]
    image = ax.imshow(surface.T, origin="lower", aspect="auto", cmap="viridis")
    ax.figure.colorbar(image, ax=ax, label="validation loss (min over reg)")
    ax.set_xticks(range(lx.size), [f"{v:.3g}" for v in lx], rotation=45)
    ax.set_yticks(range(ly.size), [f"{v:.3g}" for v in ly])
    ax.set_xlabel("lengthscale_x")
    ax.set_ylabel("lengthscale_y")
    ax.set_title("validation surface")
    best = _best(tuning)
    if best is None:
        return
    i, j = int(np.argmin(np.abs(lx - best["lengthscale_x"]))), int(np.argmin(np.abs(ly - best["lengthscale_y"])))
    ax.plot([i], [j], marker="*", color="red", markersize=14)
    axes[1].plot(regs, values[i, j], marker="o")
    axes[1].axvline(best["reg"], color="red", linestyle="--")
    axes[1].set_xscale("log")
    axes[1].set_xlabel("reg")
    axes[1].set_ylabel("validation loss")
    axes[1].set_title(f"best pair: lengthscale_x = {lx[i]:.3g}, lengthscale_y = {ly[j]:.3g}", fontsize="medium")


def write_plots(path: str | os.PathLike, out_dir: str | os.PathLike, *, x_values: Any = None,
                n_slices: int = 5) -> list[Path]:
    """Write the diagnostic PNGs of the model store at ``path`` into ``out_dir`` (created if needed).

    residual_trace.png: relative residual trace vs rank for x and y (log axis); conditional_density.png:
    smoothed conditional density and conditional CDF (equal to ``model.conditional_cdf`` for scalar y,
    the first feature's marginal otherwise) of the first y feature at ``x_values`` (k, d_X), default
    ``default_x_values(model, n_slices)``; validation_surface.png, only for stores with a
    tuning table: min-over-reg validation loss over lengthscale_x x lengthscale_y, and loss vs reg at
    the best pair. Returns the written paths in that order.
    """
    model = load_model(path)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    figure, axes = _figure(1, 6, 4)
    _plot_trace(axes[0], model)
    written.append(_save(figure, out / "residual_trace.png"))
    if model.answers("conditional_expectation"):
        figure, axes = _figure(2, 11, 4.2)
        x, grid, density, cdf, cut = _slices(model, x_values, n_slices)
        _plot_slices(model, x, grid, density, axes[0], cdf, axes[1], cut)
        written.append(_save(figure, out / "conditional_density.png"))
    else:
        figure, axes = _figure(1, 6, 4.2)
        _plot_class_probabilities(axes[0], model)
        written.append(_save(figure, out / "class_probabilities.png"))
    tuning = read_tuning(path)
    if tuning is not None:
        figure, axes = _figure(2, 11, 4.2)
        _plot_validation(axes, tuning)
        written.append(_save(figure, out / "validation_surface.png"))
    return written


def diagnostics_figure(path: str | os.PathLike, png_path: str | os.PathLike, model: ConditionalModel | None = None) -> Path:
    """One compact PNG at ``png_path`` (residual trace | density slices at the default x values) for
    the model store at ``path`` (``model``: its model if already at hand); returns ``png_path`` as a Path."""
    model = load_model(path) if model is None else model
    figure, axes = _figure(2, 10, 3.6)
    _plot_trace(axes[0], model)
    if model.answers("conditional_expectation"):
        x, grid, density, _, cut = _slices(model, None, 5)
        _plot_slices(model, x, grid, density, axes[1], cut=cut)
    else:
        _plot_class_probabilities(axes[1], model)
    return _save(figure, png_path)
