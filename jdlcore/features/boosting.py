"""A level's quantile boosters, trained a round at a time on jdl's pool and cut at a round count chosen
out of fold, and their scores at every row (``jdlcore.features.summaries`` fits the map from them).

``in_turns`` trains the boosters of (level, fold) jobs in turns on the pool's threads; ``early_stopped``
stops a level where the first of its folds stalls and counts its rounds by the held-out loss summed over
the folds; ``at_every_row`` gives a booster's scores after a number of rounds at every row, to the bit as
``predict`` gives them, from the scores LightGBM keeps at its training rows where it can
(``training_scores``, ``KeptScores``)."""
from __future__ import annotations

import threading
from typing import Any, Callable, Sequence

import numpy as np

from ..pool import pool_map, pool_threads, stop_point

__all__ = ["KeptScores", "at_every_row", "early_stopped", "first_round", "in_turns", "training_scores",
           "KEPT_SCORES_EVERY"]

KEPT_SCORES_EVERY = 16  # rounds between readings of a booster's training scores (KeptScores)


def early_stopped(lightgbm: Any, params: dict[tuple[int, int], dict[str, Any]],
                  datasets: Callable[[tuple[int, int]], tuple[Any, Any]], held: Sequence[int], max_rounds: int,
                  patience: int, kept: KeptScores | None = None) -> tuple[dict[tuple[int, int], Any], list[int]]:
    """The boosters ``params`` names, by (level, fold), each trained on the first of ``datasets(job)``
    (training, held-out or None), and the round count of each level, in ascending order. A level's
    boosters train a round at a time (``in_turns``) until the first of them whose mean quantile loss on
    its fold's held-out rows has not improved for ``patience`` rounds, or ``max_rounds``; the count is the
    round, of those trained, where that loss weighted by the held-out rows (``held``: their number per
    fold) and summed over the folds is least. A fold without held-out rows trains alongside and takes no
    part; a level none of whose folds has any stops at one round.

    This is the count that boosters each stopped on their own fold's loss give where the sum is read
    up to the shortest of their curves (all have trained that far), without training the others past
    it: on diamonds at 40,000 rows one median booster alone ran to 1,216 rounds where its level's
    count was 547. (Stopping on the sum itself ran that level to 1,851 rounds and the boosters' time
    from 14 s to 31 s, for 0.7% of crps_99.)

    ``kept``: where given, each booster's scores at its training rows are kept as it trains
    (``KeptScores``), from the round of the least summed loss read so far on: the count is never
    earlier."""
    levels = sorted({level for level, _ in params})
    scored = {level: [job for job in params if job[0] == level and held[job[1]]] for level in levels}
    stop = {level: max_rounds if scored[level] else 1 for level in levels}
    losses: dict[tuple[int, int], list[float]] = {job: [] for job in params}  # each round's held-out loss
    least = {job: (np.inf, 0) for job in params}  # each booster's least held-out loss and its round
    summed: dict[int, list[float]] = {level: [] for level in levels}  # each round's loss summed over the folds

    def scored_round(job: tuple[int, int], booster: Any, trained: int) -> None:
        if kept is not None:
            kept.read(job, booster, trained)
        if held[job[1]]:
            level = job[0]
            losses[job].append(booster.eval_valid()[0][2])
            if losses[job][-1] < least[job][0]:
                least[job] = (losses[job][-1], trained)
            if trained - least[job][1] >= patience:  # this fold stalls: its level stops here at the latest
                stop[level] = min(stop[level], trained)
            read = min(stop[level], *(len(losses[other]) for other in scored[level]))
            for r in range(len(summed[level]) + 1, read + 1):  # every fold has read round r: its sum is known
                summed[level].append(sum(held[k] * losses[level, k][r - 1] for _, k in scored[level]))
                if kept is not None:
                    kept.summed_loss(level, r, summed[level][-1])

    boosters = in_turns(list(params), lambda job: first_round(lightgbm, params[job], *datasets(job)), stop,
                        scored_round)
    counts = [int(np.argmin(summed[level][:stop[level]])) + 1 if scored[level] else 1 for level in levels]
    return boosters, counts


class KeptScores:
    """Boosters' scores at their training rows (in their Dataset's order), read as they train every
    ``every`` rounds (``training_scores``), by (level, fold) and round. A booster trained past its
    level's count then gives its scores at the count from the last round read before it (``latest``)
    and the few trees after it (``at_every_row``), not by predicting every tree again at every training
    row: at 200,000 rows of births the median boosters ran 890 rounds for a count of 888, and
    predicting them took 8 s each. A reading costs about a third of a round (0.8 ms at 32,000 rows,
    3.9 ms at 160,000), so one in ``every``; adding a tree costs one tree's prediction at every training
    row. The count is the round of the least summed held-out loss (``early_stopped``), so a level's
    scores read before the last reading at or before the least such loss known so far
    (``summed_loss``) are dropped: they can no longer be wanted."""

    def __init__(self, every: int | None = None):
        self.every = KEPT_SCORES_EVERY if every is None else every
        self._kept: dict[tuple[int, int], dict[int, np.ndarray]] = {}
        self._least: dict[int, float] = {}  # each level's least summed loss so far

    def read(self, job: tuple[int, int], booster: Any, rounds: int) -> None:
        """After round ``rounds`` of ``job``'s booster, before its next: its scores, where that round is read."""
        if rounds % self.every == 0:
            self._kept.setdefault(job, {})[rounds] = training_scores(booster)

    def summed_loss(self, level: int, rounds: int, loss: float) -> None:
        """``level``'s held-out loss summed over its folds after ``rounds`` rounds (each round once, in
        order): where it is the least so far, the scores read before the last reading at or before
        ``rounds`` are dropped."""
        if loss < self._least.get(level, np.inf):
            self._least[level] = loss
            first = rounds - rounds % self.every
            for (kept_level, _), scores in self._kept.items():
                if kept_level == level:
                    for early in [r for r in scores if r < first]:
                        del scores[early]

    def latest(self, job: tuple[int, int], rounds: int) -> tuple[int, np.ndarray] | None:
        """(the last round read at or before ``rounds``, its scores), None where none is kept."""
        read = [r for r in self._kept.get(job, {}) if r <= rounds]
        return (max(read), self._kept[job][max(read)]) if read else None


def at_every_row(booster: Any, X: np.ndarray, training: np.ndarray, rounds: int, threads: int,
                 kept: tuple[int, np.ndarray] | None = None) -> np.ndarray:
    """The booster's scores at every row of X (n, d) after ``rounds`` rounds, to the bit as its ``predict``
    gives them. Where it has trained exactly that many, at the rows it trained on (``training``: a mask
    of n) they are those LightGBM kept as it trained (``training_scores``), and only the others are
    predicted: at 40,000 rows a fold's median booster of 547 rounds took about 0.4 s to predict them all.
    Where it trained more and ``kept`` gives its scores there after an earlier round (``KeptScores``),
    they are those with each later tree's prediction added in turn, as LightGBM adds a round's tree to
    the scores it keeps (and ``predict`` sums the trees, in the same order); else every row is predicted."""
    trained = booster.current_iteration()
    if trained != rounds and (kept is None or trained < rounds):
        return booster.predict(X, num_iteration=rounds, num_threads=threads)
    out = np.empty(X.shape[0])
    if trained == rounds:
        out[training] = training_scores(booster)
    else:
        since, scores = kept
        scores = scores.copy()
        for tree in range(since, rounds):
            scores += booster.predict(X[training], start_iteration=tree, num_iteration=1, num_threads=threads)
        out[training] = scores
    others = ~training
    if others.any():
        out[others] = booster.predict(X[others], num_iteration=rounds, num_threads=threads)
    return out


def training_scores(booster: Any) -> np.ndarray:
    """The booster's scores at the rows of its training Dataset, in their order, as LightGBM keeps them
    while it trains (handed to an evaluation function: LightGBM's public way to them)."""
    scores: list[np.ndarray] = []

    def kept(predicted: np.ndarray, data: Any) -> tuple[str, float, bool]:
        scores.append(np.array(predicted, dtype=np.float64, copy=True))
        return "scores", 0.0, False

    booster.eval_train(feval=kept)
    return scores[0]


def first_round(lightgbm: Any, params: dict[str, Any], train: Any, valid: Any = None) -> Any:
    """A booster after its first round on the Dataset ``train``, its held-out Dataset ``valid`` attached
    (None: none), kept as trained (``train`` would otherwise write it to text and read it back); the
    rounds after it are ``update`` calls (``in_turns``), which grow the trees ``train`` would."""
    attached = {"valid_sets": [valid], "valid_names": ["held"]} if valid is not None else {}
    return lightgbm.train(params, train, num_boost_round=1, keep_training_booster=True, **attached)


def in_turns(jobs: list[tuple[int, int]], started: Callable[[tuple[int, int]], Any], stop: dict[int, int],
             after_round: Callable[[tuple[int, int], Any, int], None] | None = None) -> dict[tuple[int, int], Any]:
    """The boosters of ``jobs`` (level, fold), each ``started(job)`` (its first round) and then trained a
    round at a time until its level has ``stop[level]`` rounds; ``after_round(job, booster, rounds)``,
    called after each round with no other call of it running, may lower a level's ``stop`` (early
    stopping). The rounds run on the kernel pool's threads, each taking the booster with the fewest rounds
    that none is training: no thread waits at the end of a round for the others (five boosters a round
    on two threads left one idle a sixth of the time), and a level's boosters stay within a round or two
    of each other. Each booster's trees depend on its own rounds alone, so they are those of training it
    by itself; a booster may take a round or two more than its level's count, which the caller cuts."""
    lock = threading.Lock()
    boosters: dict[tuple[int, int], Any] = {}
    rounds, busy = dict.fromkeys(jobs, 0), set()

    def turns(_: int) -> None:
        while True:
            stop_point()
            with lock:
                ready = [job for job in jobs if job not in busy and rounds[job] < stop[job[0]]]
                if not ready:  # what is left is being trained by the other threads
                    return
                job = min(ready, key=rounds.__getitem__)
                busy.add(job)
            if rounds[job]:
                boosters[job].update()
            else:
                boosters[job] = started(job)
            with lock:
                rounds[job] += 1
                busy.discard(job)
                if after_round is not None:
                    after_round(job, boosters[job], rounds[job])

    pool_map(turns, list(range(min(pool_threads(), len(jobs)))))
    return boosters
