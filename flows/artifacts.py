"""The diagnostics of a fit: a PNG next to the model store and, in a Prefect run, two artifacts.

The PNG is written next to the model store (``<store>.diagnostics.png``, replaced atomically). Inside
a Prefect run, a markdown summary table and the PNG's link become artifacts, which Prefect keeps
with the flow run in its API database.
"""
from __future__ import annotations

import os
from pathlib import Path

from jdlcore import JDL
from pipeline.model_card import card_rows, diagnostics_figure

from .context import in_prefect_run

__all__ = ["publish_fit", "fit_summary_markdown", "diagnostics_png_path"]


def diagnostics_png_path(model_path: str | os.PathLike) -> Path:
    target = Path(model_path)
    return target.with_name(f"{target.name}.diagnostics.png")


def fit_summary_markdown(model_path: str | os.PathLike, model: JDL) -> str:
    """The model card of a fit (``pipeline.model_card.card_rows``) as a markdown table."""
    rows = [("model store", f"`{Path(model_path).resolve()}`"), *card_rows(model_path, model)]
    return "\n".join(["# JDL fit", "", "| | |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows)])


def publish_fit(model_path: str | os.PathLike, model: JDL) -> Path:
    """Write the diagnostics PNG next to the store and, in a Prefect run, create the fit's two
    artifacts; returns the PNG."""

    png = diagnostics_png_path(model_path)
    partial = png.with_name(f".tmp-{os.getpid()}-{png.name}")
    try:
        diagnostics_figure(model_path, partial, model)
        os.replace(partial, png)
    finally:
        partial.unlink(missing_ok=True)
    if not in_prefect_run():
        return png
    from prefect.artifacts import create_image_artifact, create_markdown_artifact

    markdown = fit_summary_markdown(model_path, model) + f"\n\nDiagnostics plot: `{png.resolve()}`\n"
    create_markdown_artifact(markdown, key="jdl-fit-summary", description="JDL fit summary")
    create_image_artifact(png.resolve().as_uri(), key="jdl-fit-diagnostics", description="residual trace and "
                          "conditional density slices")
    return png
