"""``jdl serve``: serve the deployments of a Prefect project file from one process.

The same ``deploy/prefect.yaml`` works with ``prefect deploy --all`` (a process work pool and a
worker) and here, where one long-running process registers every deployment with its schedules and
executes the runs the Prefect scheduler creates. Entry points ``flows/<module>.py:<flow>`` are
imported as modules of the installed ``flows`` package.
"""
from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any

from pipeline.settings import check_home

__all__ = ["load_deployments", "runner_deployments", "serve_deployments"]

_SCHEDULE_KEYS = ("cron", "interval", "rrule")


def load_deployments(config: str | os.PathLike) -> list[dict[str, Any]]:
    """The ``deployments`` entries of a prefect.yaml, checked for name, entrypoint and schedules."""
    import yaml

    path = Path(config)
    if not path.is_file():
        raise ValueError(f"config: {path} does not exist")
    try:
        project = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        raise ValueError(f"config {path}: not valid YAML ({error})") from None
    deployments = (project or {}).get("deployments") if isinstance(project, dict) else None
    if not deployments or not isinstance(deployments, list):
        raise ValueError(f"config {path}: no 'deployments' list")
    for k, entry in enumerate(deployments):
        for key in ("name", "entrypoint"):
            if not isinstance(entry, dict) or not entry.get(key):
                raise ValueError(f"config {path}: deployment {k} has no {key!r}")
        for schedule in entry.get("schedules") or []:
            if not isinstance(schedule, dict) or not any(key in schedule for key in _SCHEDULE_KEYS):
                raise ValueError(f"config {path}: deployment {entry['name']!r} has a schedule without "
                                 f"{' / '.join(_SCHEDULE_KEYS)}")
    return deployments


def _flow(entrypoint: str):
    file, _, name = entrypoint.partition(":")
    if not file.endswith(".py") or not name:
        raise ValueError(f"entrypoint {entrypoint!r}: expected path/to/module.py:flow_function")
    module = importlib.import_module(file.removesuffix(".py").replace("/", "."))
    flow = getattr(module, name, None)
    if flow is None or not hasattr(flow, "to_deployment"):
        raise ValueError(f"entrypoint {entrypoint!r}: {name} is not a flow of {module.__name__}")
    return flow


def _schedules(entries: list[dict[str, Any]]) -> list:
    from prefect.schedules import Cron, Interval, RRule

    schedules = []
    for entry in entries:
        active = {"active": bool(entry.get("active", True))}
        if "cron" in entry:
            schedules.append(Cron(entry["cron"], timezone=entry.get("timezone"), **active))
        elif "interval" in entry:
            schedules.append(Interval(float(entry["interval"]), timezone=entry.get("timezone"), **active))
        else:
            schedules.append(RRule(entry["rrule"], timezone=entry.get("timezone"), **active))
    return schedules


def _concurrency_limit(entry: dict[str, Any]):
    """The entry's ``concurrency_limit`` (a number, or {limit, collision_strategy}) as Prefect takes it."""
    limit = entry.get("concurrency_limit")
    if limit is None or isinstance(limit, int):
        return limit
    from prefect.client.schemas.objects import ConcurrencyLimitConfig

    return ConcurrencyLimitConfig(**limit)


def runner_deployments(config: str | os.PathLike) -> list:
    """One ``RunnerDeployment`` per entry of ``config`` (name, schedules, parameters, tags, description,
    concurrency limit)."""
    return [
        _flow(entry["entrypoint"]).to_deployment(
            name=entry["name"], schedules=_schedules(entry.get("schedules") or []),
            parameters=entry.get("parameters") or {}, tags=entry.get("tags") or [],
            description=entry.get("description"), concurrency_limit=_concurrency_limit(entry),
        )
        for entry in load_deployments(config)
    ]


def serve_deployments(config: str | os.PathLike, limit: int | None = None) -> None:
    """Register the deployments of ``config`` on the Prefect API and execute their runs until stopped."""
    from prefect import serve
    from prefect.settings import PREFECT_API_URL


    if not PREFECT_API_URL.value():
        raise ValueError("serve: PREFECT_API_URL is not set; start a Prefect server (prefect server start) and "
                         "set PREFECT_API_URL=http://HOST:4200/api")
    check_home()
    serve(*runner_deployments(config), limit=limit)
