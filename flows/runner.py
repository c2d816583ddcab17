"""Where a jdl run executes: in-process (the default, no server) or as a recorded Prefect flow run.

``execute(name, prefect=...)`` runs one of the flows (``flows.pipelines``): with ``prefect`` it calls
the Prefect flow of ``flows.jdl_flows`` (recorded on the configured Prefect API, or a temporary local
one), otherwise the same function in this process, without Prefect. Inside, every stage goes
through ``flows.stage_runner.run_stage``: a Prefect task within a Prefect flow run, a plain call with
the same retry rule outside one. ``prefect_requested`` decides what the command line does: record when asked to,
or when a Prefect API is configured (PREFECT_API_URL in the environment or in the active Prefect
profile).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from . import pipelines
from .stage_runner import run_stage

__all__ = ["execute", "run_stage", "prefect_requested", "configured_api_url"]


def execute(name: str, *, prefect: bool, **parameters: Any) -> Any:
    """Run the flow ``name`` (stage, tune, fit, score, train_and_score, compress, reproduce) with
    ``parameters``: as a recorded Prefect flow run if ``prefect``, else in this process."""
    if prefect:
        from . import jdl_flows  # imports Prefect: only when a run is recorded

        return getattr(jdl_flows, f"{name}_flow")(**parameters)
    return getattr(pipelines, name)(**parameters)


def configured_api_url() -> str | None:
    """PREFECT_API_URL from the environment, else from the active profile of Prefect's profiles file
    (PREFECT_PROFILES_PATH, or profiles.toml in PREFECT_HOME, default ~/.prefect); None if unset."""
    if os.environ.get("PREFECT_API_URL"):
        return os.environ["PREFECT_API_URL"]
    home = Path(os.environ.get("PREFECT_HOME") or Path.home() / ".prefect").expanduser()
    path = Path(os.environ.get("PREFECT_PROFILES_PATH") or home / "profiles.toml").expanduser()
    try:
        import tomllib

        profiles = tomllib.loads(path.read_text())
    except (OSError, ValueError):  # no profiles file, or one Prefect itself would reject
        return None
    active = os.environ.get("PREFECT_PROFILE") or profiles.get("active")
    settings = profiles.get("profiles", {}).get(active, {}) if isinstance(active, str) else {}
    url = settings.get("PREFECT_API_URL") if isinstance(settings, dict) else None
    return url if isinstance(url, str) and url else None


def prefect_requested(flag: bool) -> bool:
    """Whether a command records its run in Prefect: ``flag`` (``--prefect``), or a configured API."""
    return bool(flag) or configured_api_url() is not None
