"""The reg axis of a tuning: a ladder of decades that each pair of lengthscales walks from a start
(``walk_ladder``) instead of scoring every rung, or regs a caller lists, all scored (``Regs``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from .axes import check_grid
from .constants import REG_LADDER, REG_START, SEARCH_TOLERANCE

__all__ = ["walk_ladder", "Regs", "DEFAULT_REGS", "as_regs"]



def walk_ladder(count: int, score_at: Callable[[int], float], start: int, tolerance: float = SEARCH_TOLERANCE) -> int:
    """The index of the lowest score on a ladder of ``count`` settings, walked from ``start``: its
    neighbours are scored, and the walk goes on toward the better of them for as long as each rung
    scores within ``tolerance`` (relative) of the lowest score so far (a non-finite score counts as
    +inf); the lowest scored is returned. Where the score is unimodal along the ladder this is its
    minimum, usually found with far fewer than ``count`` scores; a bump smaller than the tolerance, which
    validation noise makes, does not stop the walk. ``score_at`` is called at most once per index."""
    if not 0 <= start < count:
        raise ValueError(f"start: must index the ladder of {count}, got {start}")
    scores: dict[int, float] = {}

    def near(k: int) -> bool:  # scored, and within the tolerance of the lowest score so far
        if k not in scores:
            value = float(score_at(k))
            scores[k] = value if np.isfinite(value) else np.inf
        lowest = min(scores.values())
        return scores[k] <= lowest + tolerance * abs(lowest)

    near(start)
    neighbours = [k for k in (start - 1, start + 1) if 0 <= k < count]
    for k in neighbours:
        near(k)
    if neighbours:
        k = min(neighbours, key=scores.__getitem__)
        step = k - start
        while near(k) and 0 <= k + step < count:
            k += step
    return min(scores, key=scores.__getitem__)


@dataclass(frozen=True)
class Regs:
    """The reg axis of a tuning: ``values`` (ascending, distinct, > 0) and whether each pair of
    lengthscales scores all of them or only the ones its walk visits (``walk``: ``walk_ladder`` from a
    start reg). ``DEFAULT_REGS`` walks ``REG_LADDER``; regs a caller lists are all scored (``as_regs``)."""

    values: tuple[float, ...]
    walk: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", tuple(check_grid(self.values, "regs")))

    def scored(self, candidate: Callable[[float], dict[str, Any]], start: float | None = None
               ) -> tuple[list[dict[str, Any]], float]:
        """(the rows ``candidate(reg)`` gave for the regs scored, in ascending reg; the reg of the lowest
        score, ``start`` where none is finite). ``start``: the reg a walk starts at, the ladder's rung
        nearest to it (in log scale; None: ``REG_START``)."""
        rows: dict[int, dict[str, Any]] = {}

        def score_at(k: int) -> float:
            rows[k] = candidate(self.values[k])
            return rows[k]["score"]

        origin = self.nearest(REG_START if start is None else start)
        if self.walk:
            walk_ladder(len(self.values), score_at, origin)
        else:
            for k in range(len(self.values)):
                score_at(k)
        ordered = [rows[k] for k in sorted(rows)]
        finite = [row for row in ordered if np.isfinite(row["score"])]
        return ordered, (min(finite, key=lambda row: row["score"])["reg"] if finite else self.values[origin])

    def nearest(self, reg: float) -> int:
        """The index of the value nearest to ``reg`` in log scale."""
        return int(np.argmin(np.abs(np.log(np.asarray(self.values)) - np.log(float(reg)))))


DEFAULT_REGS = Regs(REG_LADDER, walk=True)


def as_regs(regs: "Regs | Sequence[float] | None") -> Regs:
    """The reg axis of a tuning: ``DEFAULT_REGS`` for None, a ``Regs`` as it is, and regs a caller
    lists all scored (checked: at least one, finite, > 0, distinct; ``ValueError`` naming regs)."""
    if regs is None:
        return DEFAULT_REGS
    return regs if isinstance(regs, Regs) else Regs(tuple(float(v) for v in regs))
