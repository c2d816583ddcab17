"""What a command shows on the console besides its result: a progress bar on stderr while it runs,
and which log lines reach the console (failures are printed by the command line, in one line)."""
from __future__ import annotations

import contextlib
import logging
import os
import warnings
from typing import Iterator

__all__ = ["console_logging", "progress_bar"]


class _DropErrors(logging.Filter):
    """Keep Prefect's progress lines on the console; the CLI prints a failure itself, in one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno < logging.ERROR


def console_logging(verbose: bool, prefect: bool) -> None:
    """Console lines: in-process, the ``jdl`` logger's lines only if ``verbose`` (the progress bar
    shows the progress); under Prefect, its warnings only unless ``verbose``, never errors (the CLI
    prints them in one line; what reaches the API is unchanged)."""
    from jdlcore.models.degeneracy import DegeneracyWarning

    warnings.filterwarnings("ignore", category=DegeneracyWarning)  # printed from the stored diagnostics instead
    if not prefect:
        if verbose:
            logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
            logging.getLogger("jdl").setLevel(logging.INFO)
        return
    if not verbose:  # read by Prefect's logging configuration when it is first imported
        os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "WARNING")
    import prefect  # noqa: F401  (configures its logging)

    for logger in [logging.getLogger()] + [logging.getLogger(name) for name in logging.root.manager.loggerDict]:
        for handler in getattr(logger, "handlers", []):
            if isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler):
                handler.addFilter(_DropErrors())


@contextlib.contextmanager
def progress_bar(title: str) -> Iterator[None]:
    """A rich progress bar on stderr fed by the lines the tasks report (``flows.progress``), shown only
    where stderr is a terminal: elsewhere (a log file, a pipe) a bar would leave its last line behind."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from flows.progress import displayed, parse_fraction

    console = Console(stderr=True)
    if not console.is_terminal:
        yield
        return
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task(title, total=None)

        def show(line: str) -> None:
            fraction = parse_fraction(line)
            if fraction is None:
                bar.update(task, description=f"{title}: {line}", total=None, completed=0)
            else:
                bar.update(task, description=f"{title}: {line}", completed=fraction[0], total=fraction[1])

        with displayed(show):
            yield
