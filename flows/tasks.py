"""The stages of ``flows.stages`` as Prefect tasks: each run is recorded with the flow run, and a
transient failure (``flows.stages.is_transient``) is retried after ``RETRY_DELAYS``; bad input is not.
"""
from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from . import stages
from .stages import RETRY_DELAYS, is_transient

__all__ = ["stage_task", "tune_task", "fit_task", "score_task", "evaluate_task", "compress_task", "reproduce_cell_task",
           "TASKS"]


def _retry_on_transient(task_, task_run, state) -> bool:
    try:
        error = state.result(raise_on_failure=False)
    except Exception as raised:  # the result itself could not be read back
        error = raised
    return is_transient(error if isinstance(error, BaseException) else None)


_RETRIED = dict(retries=len(RETRY_DELAYS), retry_delay_seconds=list(RETRY_DELAYS),
                retry_condition_fn=_retry_on_transient, cache_policy=NO_CACHE)

stage_task = task(name="stage", **_RETRIED)(stages.stage)
tune_task = task(name="tune", **_RETRIED)(stages.tune)
fit_task = task(name="fit", **_RETRIED)(stages.fit)
score_task = task(name="score", **_RETRIED)(stages.score)
evaluate_task = task(name="evaluate", **_RETRIED)(stages.evaluate)
compress_task = task(name="compress", **_RETRIED)(stages.compress)
reproduce_cell_task = task(name="reproduce-cell", cache_policy=NO_CACHE)(stages.reproduce_cell)

TASKS = {"stage": stage_task, "tune": tune_task, "fit": fit_task, "score": score_task, "evaluate": evaluate_task,
         "compress": compress_task,
         "reproduce_cell": reproduce_cell_task}
