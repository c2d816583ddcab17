"""One stage call: a Prefect task inside a Prefect flow run, else a plain call with the same retry rule."""
from __future__ import annotations

import time
from typing import Any

from .context import in_prefect_run
from .progress import report
from . import stages

__all__ = ["run_stage"]


def run_stage(name: str, *args: Any) -> Any:
    """Run the stage ``name`` of ``flows.stages``: as its Prefect task inside a flow run, else in-process,
    retrying a transient failure after each of ``RETRY_DELAYS`` seconds."""
    if in_prefect_run():
        from .tasks import TASKS  # Prefect is imported only where a Prefect run already loaded it

        return TASKS[name](*args)
    for delay in (*stages.RETRY_DELAYS, None):  # read at the call: a test may shorten them
        try:
            return stages.STAGES[name](*args)
        except Exception as error:
            if delay is None or not stages.is_transient(error):
                raise
            report(f"{name}: {type(error).__name__}: {error}; retrying in {delay:g} s")
            time.sleep(delay)
