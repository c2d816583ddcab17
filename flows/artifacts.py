"""Prefect artifacts of a fit: a markdown summary table and a diagnostics PNG.

The PNG is written next to the model store (``<store>.diagnostics.png``, replaced atomically) and
linked from the artifacts; Prefect keeps the artifacts with the flow run in its API database.
"""
from __future__ import annotations

import os
from pathlib import Path

from prefect.artifacts import create_image_artifact, create_markdown_artifact

from jdlcore import JDL

__all__ = ["publish_fit", "fit_summary_markdown", "diagnostics_png_path"]


def diagnostics_png_path(model_path: str | os.PathLike) -> Path:
    target = Path(model_path)
    return target.with_name(f"{target.name}.diagnostics.png")


def fit_summary_markdown(model_path: str | os.PathLike, model: JDL) -> str:
    """A markdown table of what a fit produced: data, hyperparameters, ranks, objective, time split."""
    d, p = model.diagnostics_, model.provenance_
    rows = [
        ("model store", f"`{Path(model_path).resolve()}`"),
        ("data", f"`{p.get('data')}` ({model.n_samples_:,} rows, fingerprint `{str(p.get('data_fingerprint'))[:16]}`)"),
        ("kernels", f"Gaussian, lengthscale_x = {model.basis_x_.kernel.lengthscale:.4g}, "
                    f"lengthscale_y = {model.basis_y_.kernel.lengthscale:.4g}"),
        ("reg, tol", f"{model.reg:.3g}, {model.tol:.3g}"),
        ("constraints", f"{model.constraints} ({model.positivity})"),
        ("ranks", f"m_X = {d['rank_x']}, m_Y = {d['rank_y']}"),
        ("objective", f"{d['objective']:.6g}"),
        ("negative mass", f"max {d.get('negative_mass_max', float('nan')):.2e} at "
                          f"{d.get('negative_mass_probes', 0)} x pivots"),
        ("where", str(p.get("scheduler"))),
    ]
    tuning = p.get("tuning")
    if tuning:
        rows.append(("tuning", f"best validation loss {tuning['best']['score']:.5g} on {tuning['rows_used']:,} rows "
                               f"(`{tuning['store']}`)"))
    rows += [(name.replace("_seconds", " (s)"), f"{value:.2f}") for name, value in d.items()
             if name.endswith("_seconds") and isinstance(value, (int, float))]
    lines = ["# JDL fit", "", "| | |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows)]
    return "\n".join(lines)


def publish_fit(model_path: str | os.PathLike, model: JDL) -> Path:
    """Write the diagnostics PNG next to the store and create the fit's two artifacts; returns the PNG."""
    from .model_card import diagnostics_figure

    png = diagnostics_png_path(model_path)
    partial = png.with_name(f".tmp-{os.getpid()}-{png.name}")
    try:
        diagnostics_figure(model_path, partial)
        os.replace(partial, png)
    finally:
        partial.unlink(missing_ok=True)
    markdown = fit_summary_markdown(model_path, model) + f"\n\nDiagnostics plot: `{png.resolve()}`\n"
    create_markdown_artifact(markdown, key="jdl-fit-summary", description="JDL fit summary")
    create_image_artifact(png.resolve().as_uri(), key="jdl-fit-diagnostics", description="residual trace and "
                          "conditional density slices")
    return png
