"""Boosted summaries of x: learned features of x that the x kernel reads beside the columns, or alone.

A product of per-feature kernels needs a basis that grows with the rows once several columns count at
short lengthscales; gradient-boosted trees resolve such structure cheaply. ``fit_summaries`` fits
quantile boosters (LightGBM, levels ``QUANTILE_LEVELS``) of a scalar y on x, and ``BoostedSummaries.features``
turns their predictions into summaries of the conditional law of y given x:

  summary_median       the predicted median, in y's units
  summary_log_spread   log of the predicted 10%-90% spread (floored at ``SPREAD_FLOOR`` of y's own)
  summary_skew         the predicted quantile skewness (q90 + q10 - 2 q50) / (q90 - q10), in [-1, 1],
                       read only where y is standardised by the first two (``STANDARDISED_ONLY``)

Where the map standardises y, the model's law is of r = (y - median) / spread, read back on y's scale
through ``location_scale`` (``jdlcore.conditional.location_scale``).

**Cross-fitted, as a function of x**: a booster's predictions at its own training rows are closer to
y than at new rows, and a law learned from them would be too narrow. Each row falls in one of
``FOLDS`` folds by a hash of its x values (``row_folds``); fold k's boosters train on the other folds
and summarise fold k, training and new rows alike, so the map is one function of x. The outer levels
boost from their fold's median booster (``init_score``) and learn only the offsets from it; each
level's rounds are cut at the count whose loss summed over the held-out folds is least
(``jdlcore.features.boosting``). The map is stored as JSON bytes of LightGBM's text models
(``to_bytes`` / ``from_bytes``).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

import numpy as np

from ..conditional.location_scale import LocationScale
from ..pool import pool_map, pool_threads
from .boosting import KeptScores, at_every_row, early_stopped, first_round, in_turns

__all__ = ["BoostedSummaries", "fit_summaries", "row_folds", "summary_rule", "with_summaries", "kernel_features",
           "kernel_categorical", "DEFAULT_SUMMARIES", "QUANTILE_LEVELS", "FOLDS", "SUMMARY_ROWS", "NAMES",
           "SUMMARY_RULES", "BOOSTER_PARAMS", "MAX_ROUNDS", "PATIENCE"]

QUANTILE_LEVELS = (0.1, 0.5, 0.9)  # the boosters' quantile levels: the spread is 0.9's less 0.1's
MEDIAN = QUANTILE_LEVELS.index(0.5)  # the level the others boost from
OUTER = [j for j in range(len(QUANTILE_LEVELS)) if j != MEDIAN]
FOLDS = 5  # of the cross-fitting
SUMMARY_ROWS = 1_000_000  # rows the boosters train on (a seeded sample above that)
MAX_ROUNDS = 2_000  # boosting rounds a booster may take
PATIENCE = 50  # rounds without a better held-out loss after which a booster stops
NAMES = ("summary_median", "summary_log_spread", "summary_skew")
STANDARDISED_ONLY = ("summary_skew",)  # summaries the x kernel reads only where y is standardised
STANDARDISING = ("summary_median", "summary_log_spread")  # the location and the log scale y is standardised by
SPREAD_FLOOR = 1e-3  # the spread's floor, as a share of y's own 10%-90% spread (quantile boosters may cross)
# the quantile, over the training rows, of the predicted spreads below which a standardised y is divided by
# that quantile instead: a row whose boosters cross or nearly meet would otherwise stretch its residual
# a hundredfold and more (diamonds at 40,000 rows: 90 rows at the floor, residuals to -78 spreads), and the
# support could no longer carry the y basis' sums
SCALE_QUANTILE = 1 / 100  # the 1% quantile
SUMMARY_RULES = ("auto", "boosted", "standardised", "none")
DEFAULT_SUMMARIES = "auto"
BOOSTER_PARAMS: dict[str, Any] = {  # LightGBM's defaults, written out, deterministic
    "objective": "quantile", "metric": "quantile", "learning_rate": 0.1, "num_leaves": 31, "min_data_in_leaf": 20,
    "deterministic": True, "force_col_wise": True, "verbosity": -1,
}
# the record's format: 4 for a map that keeps ``summary_skew`` (every map fitted now whose skewness
# varies), which a jdl that reads only 1 to 3 must refuse rather than fail on a summary it does not know;
# 3 for a map whose outer levels boost from the median (``from_median``: every map fitted now), which a
# jdl that reads only 1 or 2 must refuse rather than read their offsets as quantiles;
# 2 for an older map that standardises y (``standardises``), which a jdl that reads only 1 must refuse
# rather than answer on the standardised scale; 1 for an older map read as it is
READ_FORMATS = (1, 2, 3, 4)


def summary_rule(rule: str, y_width: int) -> bool:
    """Whether a tuning with ``rule`` ("auto": the default, "boosted", "standardised", "none") fits
    summaries for a y of ``y_width`` columns: all but "none" do for a scalar y ("auto" then keeps them
    only where they score better, with y standardised by them on a table of
    ``jdlcore.tuning.views.STANDARDISE_ROWS`` rows or more; "standardised" on any table; ``jdlcore.tuning.views``);
    "boosted" or "standardised" with a wider y is a ``ValueError`` (the summaries are quantiles of one y
    column)."""
    if rule not in SUMMARY_RULES:
        raise ValueError(f"summaries: unknown rule {rule!r}; choose one of {', '.join(map(repr, SUMMARY_RULES))}")
    if rule in ("boosted", "standardised") and y_width != 1:
        raise ValueError(f"summaries: {rule!r} summarises a scalar y, and y has {y_width} columns; use 'auto' or "
                         "'none'")
    return rule != "none" and y_width == 1


def row_folds(X: np.ndarray, folds: int = FOLDS) -> np.ndarray:
    """The fold of each row of X (n, d), shape (n,) in [0, folds): a 64-bit mix of the row's float64 bits
    (-0.0 read as 0.0), the same on every machine; equal rows share a fold."""
    bits = np.ascontiguousarray(np.asarray(X, dtype=np.float64) + 0.0).view(np.uint64)
    mixed = np.full(bits.shape[0], 0x9E3779B97F4A7C15, dtype=np.uint64)
    for column in bits.T:
        mixed = _splitmix(mixed ^ column)
    return (mixed >> np.uint64(33)) % np.uint64(folds)


def _splitmix(z: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser, elementwise on uint64 (wrapping arithmetic)."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@dataclass
class BoostedSummaries:
    """The fitted map: ``boosters[k][j]`` is fold k's booster at ``QUANTILE_LEVELS[j]`` (LightGBM model text).

    width: x's columns; categorical: their category-code columns (LightGBM splits them as categories;
    negative codes, the unseen level, read as missing); floor: the spread floor in y's units; kept: the
    summaries that vary over the training rows (``NAMES`` order; ``in_use``: those the x kernel reads);
    rounds: each level's boosting rounds (chosen out of fold, ``fit_summaries``; empty for a record that predates them);
    columns: whether the x kernel reads x's columns beside the summaries (else the summaries alone);
    standardises: whether the model's y is read standardised by the summaries, r = (y - median) / spread
    (``location_scale``; ``STANDARDISING`` kept); scale_floor: the least spread it divides by, in y's units
    (``SCALE_QUANTILE``); from_median: whether the outer levels' boosters predict offsets from their
    fold's median booster (every map ``fit_summaries`` fits; False for a record that predates them);
    y_range: the least and greatest y of the rows the map was fitted on, to which the law of a
    standardised y is clipped (``location_scale``; unbounded for a record that predates it)."""

    boosters: list[list[str]]
    width: int
    categorical: tuple[int, ...]
    floor: float
    kept: tuple[str, ...] = NAMES
    rounds: tuple[int, ...] = ()
    columns: bool = True
    standardises: bool = False
    scale_floor: float = 0.0
    from_median: bool = False
    y_range: tuple[float, float] = (-np.inf, np.inf)
    _loaded: list[list[Any]] | None = field(default=None, repr=False, compare=False)

    @property
    def folds(self) -> int:
        return len(self.boosters)

    def predictions(self, X: np.ndarray) -> np.ndarray:
        """The boosters' quantiles at the rows of X (n, width), each row by its fold's, shape (n, len(QUANTILE_LEVELS)):
        the outer levels' the median's plus their offsets where ``from_median``."""
        X = self._check(X)
        folds, boosters = row_folds(X, self.folds), self._boosters()
        return _by_own_fold([np.flatnonzero(folds == k) for k in range(self.folds)],
                            lambda k, j, rows: boosters[k][j].predict(X[rows], num_threads=0), self.from_median)

    @property
    def in_use(self) -> tuple[str, ...]:
        """The summaries the x kernel reads, ``NAMES`` order: those kept, less ``STANDARDISED_ONLY`` where
        y is not read standardised by the map."""
        return self.kept if self.standardises else self._kept_beside_y()

    def features(self, X: np.ndarray, quantiles: np.ndarray | None = None) -> np.ndarray:
        """The summaries in use of the rows of X (n, width), shape (n, len(in_use)), in ``NAMES`` order;
        from ``quantiles``, the boosters' ``predictions`` at X, where they are given."""
        values = self.every_summary(X) if quantiles is None else self.of_quantiles(quantiles)
        return values[:, [NAMES.index(name) for name in self.in_use]]

    def every_summary(self, X: np.ndarray) -> np.ndarray:
        """Every summary of ``NAMES`` at the rows of X (n, width), in use or not, shape (n, len(NAMES));
        the skewness clipped to [-1, 1], its bounds where the quantiles do not cross."""
        return self.of_quantiles(self.predictions(X))

    def of_quantiles(self, Q: np.ndarray) -> np.ndarray:
        """Every summary of ``NAMES`` from the boosters' quantiles Q (n, len(QUANTILE_LEVELS)) as ``predictions``
        gives them, shape (n, len(NAMES))."""
        spread = np.maximum(Q[:, 2] - Q[:, 0], self.floor)
        skew = np.clip((Q[:, 2] + Q[:, 0] - 2 * Q[:, 1]) / spread, -1.0, 1.0)
        return np.column_stack([Q[:, 1], np.log(spread), skew])

    def augment(self, X: np.ndarray, quantiles: np.ndarray | None = None) -> np.ndarray:
        """The rows of X (n, width) as the x kernel reads them, float64: X with its summaries in use
        appended, shape (n, width + len(in_use)), or the summaries alone, (n, len(in_use)), where
        ``columns`` is False. ``quantiles``: the boosters' ``predictions`` at X (n, len(QUANTILE_LEVELS)), where
        already made (by this map, or a copy of it that reads them another way: the same boosters)."""
        X = self._check(X)
        if quantiles is not None and quantiles.shape != (X.shape[0], len(QUANTILE_LEVELS)):
            raise ValueError(f"quantiles: expected shape {(X.shape[0], len(QUANTILE_LEVELS))} for x's rows, "
                             f"got {quantiles.shape}")
        features = self.features(X, quantiles)
        return np.hstack([X, features]) if self.columns else features

    def alone(self) -> "BoostedSummaries":
        """The same map, read by an x kernel without x's columns (``columns`` False)."""
        return replace(self, columns=False)

    @property
    def can_standardise(self) -> bool:
        """Whether the median and the log spread are kept, so that y can be read standardised by them."""
        return set(STANDARDISING) <= set(self.kept)

    def standardised(self, skew: bool = True) -> "BoostedSummaries":
        """The same map, with the model's y read standardised by it (``location_scale``), the x kernel
        reading the skewness too where ``skew`` (and it is kept), else the median and the spread alone."""
        self._check_standardisable()
        return replace(self, standardises=True, kept=self.kept if skew else self._kept_beside_y())

    def _kept_beside_y(self) -> tuple[str, ...]:
        """The kept summaries less ``STANDARDISED_ONLY``: those an x kernel reads beside y as it is."""
        return tuple(name for name in self.kept if name not in STANDARDISED_ONLY)

    def location_scale(self, Z: np.ndarray) -> LocationScale:
        """Each row's location (the predicted median) and scale (``scale``) from rows Z (n, d') as
        ``augment`` returns them (the summaries in use are their last columns), with y's range ``y_range``."""
        return LocationScale.of(self._summary(Z, "summary_median"), self.scale(Z), "summaries", *self.y_range)

    def scale(self, Z: np.ndarray) -> np.ndarray:
        """Each row's scale, shape (n,): the predicted 10%-90% spread, at least ``scale_floor``, from rows
        Z (n, d') as ``augment`` returns them."""
        return np.maximum(np.exp(self._summary(Z, "summary_log_spread")), self.scale_floor)

    def _summary(self, Z: np.ndarray, name: str) -> np.ndarray:
        """The column ``name`` of rows Z (n, d') as ``augment`` returns them, for a map that can standardise."""
        self._check_standardisable()
        return Z[:, Z.shape[1] - len(self.in_use) + self.in_use.index(name)]

    def _check_standardisable(self) -> None:
        if not self.can_standardise:
            raise ValueError(f"summaries: standardising y needs {' and '.join(STANDARDISING)}; kept {list(self.kept)}")

    def _check(self, X: Any) -> np.ndarray:
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != self.width:
            raise ValueError(f"x: the summaries were fitted on {self.width} columns, got shape {X.shape}")
        return X

    def _boosters(self) -> list[list[Any]]:
        if self._loaded is None:
            lightgbm = _lightgbm()
            self._loaded = [[lightgbm.Booster(model_str=text) for text in fold] for fold in self.boosters]
        return self._loaded

    def __getstate__(self) -> dict[str, Any]:  # Dask ships the text; each process loads its own boosters
        return {**self.__dict__, "_loaded": None}

    def to_bytes(self) -> bytes:
        """The map as UTF-8 JSON (``from_bytes`` inverts it)."""
        written = (4 if set(STANDARDISED_ONLY) & set(self.kept) else 3 if self.from_median
                   else 2 if self.standardises else 1)
        return json.dumps({"format": written, "levels": list(QUANTILE_LEVELS), "width": self.width,
                           "categorical": list(self.categorical), "floor": self.floor, "kept": list(self.kept),
                           "rounds": list(self.rounds), "columns": self.columns, "standardises": self.standardises,
                           "scale_floor": self.scale_floor, "from_median": self.from_median,
                           **({"y_range": list(self.y_range)} if np.all(np.isfinite(self.y_range)) else {}),
                           "boosters": self.boosters}).encode()

    @classmethod
    def from_bytes(cls, data: bytes, where: str = "summaries") -> "BoostedSummaries":
        """The map ``to_bytes`` wrote; ``ValueError`` naming ``where`` for a foreign or newer record."""
        try:
            spec = json.loads(bytes(data).decode())
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise ValueError(f"{where}: not a summaries record ({error})") from None
        if not isinstance(spec, dict) or spec.get("format") not in READ_FORMATS or spec.get("levels") != list(QUANTILE_LEVELS):
            raise ValueError(f"{where}: a summaries record of another format (format {spec.get('format')!r}, "
                             f"this jdl reads {', '.join(map(str, READ_FORMATS))})")
        return cls(boosters=[list(fold) for fold in spec["boosters"]], width=int(spec["width"]),
                   categorical=tuple(int(j) for j in spec["categorical"]), floor=float(spec["floor"]),
                   kept=tuple(spec["kept"]), rounds=tuple(int(r) for r in spec.get("rounds", ())),
                   columns=bool(spec.get("columns", True)), standardises=bool(spec.get("standardises", False)),
                   scale_floor=float(spec.get("scale_floor", 0.0)), from_median=spec["format"] >= 3,
                   y_range=tuple(float(v) for v in spec.get("y_range", (-np.inf, np.inf))))


def fit_summaries(X: np.ndarray, y: np.ndarray, categorical: Sequence[int] = (), *, seed: int = 0,
                  folds: int = FOLDS, max_rounds: int = MAX_ROUNDS, patience: int = PATIENCE,
                  rounds: Sequence[int] | None = None, like: BoostedSummaries | None = None) -> BoostedSummaries | None:
    """Cross-fitted quantile boosters of y (n,) on X (n, d), the outer levels boosting from the median
    (see the module's docstring), their rounds chosen out of fold or, where ``rounds`` gives them, one
    count per level of ``QUANTILE_LEVELS``; None where no summary varies over the rows (too few rows for a split,
    y constant, or every row in one fold, as where x takes one value: no booster then has rows to train
    on): then there is nothing to add. ``like``: a map that already decided the summaries to keep, their
    scale floor and y's range, which this one takes (no pass over the rows to see which vary); else the
    floor is the ``SCALE_QUANTILE`` quantile of the spreads the map predicts at its rows, and the range
    that of y.

    ``categorical``: the category-code columns. The caller samples the rows (``SUMMARY_ROWS``)."""
    lightgbm = _lightgbm()
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64).reshape(-1)
    fold = row_folds(X, folds)
    if np.unique(fold).size < 2:
        return None
    held = [np.flatnonzero(fold == k) for k in range(folds)]
    threads = _booster_threads()

    def params(job: tuple[int, int]) -> dict[str, Any]:
        return {**BOOSTER_PARAMS, "alpha": QUANTILE_LEVELS[job[0]], "seed": seed, "num_threads": threads}

    def datasets(job: tuple[int, int], start: list[np.ndarray] | None, held_out: bool = True) -> tuple[Any, Any]:
        """(training, held-out or None) of booster (level, fold): a Dataset each (LightGBM's train writes
        its parameters), from ``start[fold]`` (scores at every row) where given; the held-out one only
        where ``held_out`` asks for it (the rounds chosen on it)."""
        k = job[1]
        rows = np.flatnonzero(fold != k)
        train = lightgbm.Dataset(X[rows], y[rows], init_score=None if start is None else start[k][rows],
                                 categorical_feature=list(categorical) or "auto", params={"verbosity": -1})
        valid = (lightgbm.Dataset(X[held[k]], y[held[k]], init_score=None if start is None else start[k][held[k]],
                                  reference=train) if held_out and held[k].size else None)
        return train, valid

    def boosted(levels: list[int], start: list[np.ndarray] | None,
                kept: KeptScores | None = None) -> tuple[dict[tuple[int, int], Any], list[int]]:
        jobs = [(j, k) for j in levels for k in range(folds)]  # (level, fold): one booster each
        if rounds is None:
            return early_stopped(lightgbm, {job: params(job) for job in jobs}, lambda job: datasets(job, start),
                                 [rows.size for rows in held], max_rounds, patience, kept)
        fixed = {j: int(rounds[j]) for j in levels}
        trained = in_turns(jobs, lambda job: first_round(lightgbm, params(job), *datasets(job, start, False)),
                           fixed)
        return trained, [fixed[j] for j in levels]

    kept = KeptScores()  # the median boosters' scores at their training rows, read as they train
    fitted, (median_rounds,) = boosted([MEDIAN], None, kept)
    since = [kept.latest((MEDIAN, k), median_rounds) for k in range(folds)]
    del kept  # the readings other than those
    # each fold's median booster at every row: the start of its fold's outer levels
    start = pool_map(lambda k: at_every_row(fitted[MEDIAN, k], X, fold != k, median_rounds, threads, since[k]),
                     list(range(folds)))
    outer, outer_rounds = boosted(OUTER, start)
    fitted.update(outer)
    rounds_of = {MEDIAN: median_rounds, **dict(zip(OUTER, outer_rounds))}
    counts = [rounds_of[j] for j in range(len(QUANTILE_LEVELS))]
    # each fold's boosters as text, the folds side by side (about 16 ms a booster at 5,000 rows)
    boosters = pool_map(lambda k: [fitted[j, k].model_to_string(num_iteration=counts[j]) for j in range(len(QUANTILE_LEVELS))],
                        list(range(folds)))
    low, high = np.quantile(y, [QUANTILE_LEVELS[0], QUANTILE_LEVELS[-1]])
    floor = SPREAD_FLOOR * float(high - low) if high > low else float(np.finfo(float).tiny)
    summaries = BoostedSummaries(boosters, X.shape[1], tuple(int(j) for j in categorical), floor,
                                 rounds=tuple(counts), from_median=True, y_range=(float(y.min()), float(y.max())))
    if like is not None:
        return replace(summaries, kept=like.kept, scale_floor=like.scale_floor, y_range=like.y_range)
    values = summaries.of_quantiles(_own_fold_quantiles(fitted, counts, start, X, held))
    varying = tuple(name for name, column in zip(NAMES, values.T) if np.ptp(column) > 0)
    if not varying:
        return None
    summaries.kept = varying
    summaries.scale_floor = float(np.quantile(np.exp(values[:, NAMES.index("summary_log_spread")]), SCALE_QUANTILE))
    return summaries


def _by_own_fold(held: list[np.ndarray], level_at: Callable[[int, int, np.ndarray], np.ndarray],
                 from_median: bool = True) -> np.ndarray:
    """The quantiles (n, len(QUANTILE_LEVELS)) of rows each read by its own fold's boosters (``held[k]``: the
    indices of fold k's rows, n in all): level j of fold k at rows ``rows`` is ``level_at(k, j, rows)``,
    the outer levels' offsets from the median added to it where ``from_median``."""
    Q = np.empty((sum(rows.size for rows in held), len(QUANTILE_LEVELS)))
    for k, rows in enumerate(held):
        if rows.size:
            for j in range(len(QUANTILE_LEVELS)):
                Q[rows, j] = level_at(k, j, rows)
    if from_median:
        Q[:, OUTER] += Q[:, [MEDIAN]]
    return Q


def _own_fold_quantiles(fitted: dict[tuple[int, int], Any], counts: list[int], start: list[np.ndarray],
                        X: np.ndarray, held: list[np.ndarray]) -> np.ndarray:
    """The quantiles (n, len(QUANTILE_LEVELS)) of the map at the rows of X (n, d), each row by its own fold's
    boosters (``held[k]``: fold k's rows) cut at ``counts``, as ``BoostedSummaries.predictions`` gives them
    to the bit: the median is its booster's score that the outer levels started from (``start[k]``:
    fold k's median booster at every row), not predicted again (on diamonds at 40,000 rows that was 547
    trees at each of 40,000 rows, 0.6 s)."""
    return _by_own_fold(held, lambda k, j, rows: start[k][rows] if j == MEDIAN
                        else fitted[j, k].predict(X[rows], num_iteration=counts[j]))


def _booster_threads() -> int:
    """LightGBM threads per booster: a map's boosters train side by side on the kernel pool
    (``jdlcore.features.boosting.in_turns``), the cores shared among its threads. (On 2 cores two one-thread
    boosters side by side took 0.66 s where one after the other at two threads took 0.97 s: two threads
    wait on each other every round of a small table. The boosters are the same to the bit.)"""
    return max(1, (os.cpu_count() or 1) // pool_threads())


def kernel_features(features: Sequence[str], summaries: BoostedSummaries | None) -> list[str]:
    """The names of the columns an x kernel fitted with ``summaries`` reads: ``features`` (the data's x
    columns) unless it reads the summaries alone, then the summaries in use."""
    if summaries is None:
        return list(features)
    return (list(features) if summaries.columns else []) + list(summaries.in_use)


def kernel_categorical(categorical: Sequence[int], summaries: BoostedSummaries | None) -> list[int]:
    """The indices, among the columns an x kernel fitted with ``summaries`` reads, of the data's
    category-code columns ``categorical`` (none where it reads the summaries alone)."""
    return list(categorical) if summaries is None or summaries.columns else []


def with_summaries(summaries: BoostedSummaries | None, X: np.ndarray) -> np.ndarray:
    """The x rows (n, d) as a kernel fitted with ``summaries`` reads them: X itself without summaries,
    else ``summaries.augment(X)``."""
    return X if summaries is None else summaries.augment(X)


def _lightgbm() -> Any:
    try:
        import lightgbm
    except ImportError:  # pragma: no cover - lightgbm is a dependency of the pipeline extra
        raise ImportError("summaries: the boosted summaries need LightGBM: pip install 'jdl[pipeline]'") from None
    return lightgbm
