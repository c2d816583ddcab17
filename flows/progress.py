"""Progress of long work: stages report lines. Inside a Prefect run its run logger records them (the
API and the UI keep them with the run); outside one, the ``jdl`` logger of the standard library
does. Where a display is installed (the CLI's progress bar), it shows them too.

Lines of the form "<what> k/N <unit>" advance a bar; other lines update its description.
"""
from __future__ import annotations

import contextlib
import logging
import re
from typing import Callable, Iterator

from .context import in_prefect_run

__all__ = ["report", "displayed", "parse_fraction"]

_display: Callable[[str], None] | None = None
_FRACTION = re.compile(r"\b(\d+)/(\d+)\b")


def parse_fraction(line: str) -> tuple[int, int] | None:
    """(k, N) of the first "k/N" in ``line`` with 0 <= k <= N > 0, else None."""
    match = _FRACTION.search(line)
    if match is None:
        return None
    done, total = int(match.group(1)), int(match.group(2))
    return (done, total) if 0 <= done <= total and total > 0 else None


def report(line: str) -> None:
    """Log ``line`` (to the current Prefect run, if any) and show it on the installed display, if any."""
    if in_prefect_run():
        from prefect import get_run_logger

        get_run_logger().info(line)
    else:
        logging.getLogger("jdl").info(line)
    if _display is not None:
        _display(line)


@contextlib.contextmanager
def displayed(display: Callable[[str], None]) -> Iterator[None]:
    """Install ``display`` for the lines reported inside the block."""
    global _display
    previous, _display = _display, display
    try:
        yield
    finally:
        _display = previous
