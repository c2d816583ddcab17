"""The diagnostics of a fit: a PNG next to the model store and, in a Prefect run, two artifacts.

The PNG belongs to the model version it shows: it is kept beside that version
(``<store>.versions/<version>.diagnostics.png``), and ``<store>.diagnostics.png`` is a link that moves
with the store's pointer (``pipeline.versions.COMPANIONS``), also when ``jdl versions --use`` goes
back to another version. Inside a Prefect run, a markdown summary table and the PNG's link become
artifacts, which Prefect keeps with the flow run in its API database.
"""
from __future__ import annotations

import os
from pathlib import Path

from jdlcore import JDL
from pipeline.model_card import card_rows, diagnostics_figure
from pipeline.versions import DIAGNOSTICS, companion_path, current_version, link_companions

from .context import in_prefect_run

__all__ = ["publish_fit", "fit_summary_markdown", "diagnostics_png_path"]


def diagnostics_png_path(model_path: str | os.PathLike) -> Path:
    """The diagnostics PNG of the model store's current version, as users open it: ``<store>.diagnostics.png``."""
    target = Path(model_path)
    return target.with_name(f"{target.name}{DIAGNOSTICS}")


def fit_summary_markdown(model_path: str | os.PathLike, model: JDL) -> str:
    """The model card of a fit (``pipeline.model_card.card_rows``) as a markdown table."""
    rows = [("model store", f"`{Path(model_path).resolve()}`"), *card_rows(model_path, model)]
    return "\n".join(["# JDL fit", "", "| | |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows)])


def publish_fit(model_path: str | os.PathLike, model: JDL) -> Path:
    """Write the diagnostics PNG of the model's version and point ``<store>.diagnostics.png`` at it
    (a store without versions gets the file itself there) and, in a Prefect run, create the fit's two
    artifacts; returns ``<store>.diagnostics.png``."""
    png = diagnostics_png_path(model_path)
    version = getattr(model, "store_version_", None) or current_version(model_path)
    kept = png if version is None else companion_path(model_path, version, DIAGNOSTICS)
    partial = kept.with_name(f".tmp-{os.getpid()}-{kept.name}")
    try:
        diagnostics_figure(model_path, partial, model)
        os.replace(partial, kept)
    finally:
        partial.unlink(missing_ok=True)
    if version is not None:
        link_companions(model_path)
    if not in_prefect_run():
        return png
    from prefect.artifacts import create_image_artifact, create_markdown_artifact

    markdown = fit_summary_markdown(model_path, model) + f"\n\nDiagnostics plot: `{png.resolve()}`\n"
    create_markdown_artifact(markdown, key="jdl-fit-summary", description="JDL fit summary")
    create_image_artifact(png.resolve().as_uri(), key="jdl-fit-diagnostics", description="residual trace and "
                          "conditional density slices")
    return png
