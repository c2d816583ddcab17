"""Whether code runs inside a Prefect run: what progress lines, artifacts and stage calls ask first."""
from __future__ import annotations

import sys

__all__ = ["in_prefect_run"]


def in_prefect_run() -> bool:
    """Whether this code runs inside a Prefect flow or task run (Prefect is not imported to find out)."""
    if "prefect" not in sys.modules:
        return False
    from prefect.context import FlowRunContext, TaskRunContext

    return FlowRunContext.get() is not None or TaskRunContext.get() is not None
