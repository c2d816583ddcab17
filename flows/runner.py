"""Where a jdl run executes: in-process (the default, no server) or as a recorded Prefect flow run.

``execute(name, prefect=...)`` runs one of the flows (``flows.pipelines``): with ``prefect`` it calls
the Prefect flow of ``flows.jdl_flows`` (recorded on the configured Prefect API, or a temporary local
one), otherwise the same function in this process, without Prefect. Inside, every stage goes
through ``run_stage``: a Prefect task within a Prefect flow run, a plain call with the same retry
rule outside one. ``prefect_requested`` decides what the command line does: record when asked to,
or when a Prefect API is configured (PREFECT_API_URL in the environment or in the active Prefect
profile).
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["execute", "run_stage", "in_prefect_run", "prefect_requested", "configured_api_url"]


def in_prefect_run() -> bool:
    """Whether this code runs inside a Prefect flow or task run (Prefect is not imported to find out)."""
    if "prefect" not in sys.modules:
        return False
    from prefect.context import FlowRunContext, TaskRunContext

    return FlowRunContext.get() is not None or TaskRunContext.get() is not None


def run_stage(name: str, *args: Any) -> Any:
    """Run the stage ``name`` of ``flows.stages``: as its Prefect task inside a flow run, else in-process,
    retrying a transient failure after each of ``RETRY_DELAYS`` seconds."""
    if in_prefect_run():
        from .tasks import TASKS

        return TASKS[name](*args)
    from .stages import RETRY_DELAYS, STAGES, is_transient

    for delay in (*RETRY_DELAYS, None):
        try:
            return STAGES[name](*args)
        except Exception as error:
            if delay is None or not is_transient(error):
                raise
            from .progress import report

            report(f"{name}: {type(error).__name__}: {error}; retrying in {delay:g} s")
            time.sleep(delay)


def execute(name: str, *, prefect: bool, **parameters: Any) -> Any:
    """Run the flow ``name`` (stage, tune, fit, score, train_and_score, compress, reproduce) with
    ``parameters``: as a recorded Prefect flow run if ``prefect``, else in this process."""
    if prefect:
        from . import jdl_flows

        return getattr(jdl_flows, f"{name}_flow")(**parameters)
    from . import pipelines

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
