"""The boosted summaries of x (pipeline.summaries): the cross-fitting checked against boosters trained
directly on the other folds, the leak it prevents, the record's round trip, and the path through tune,
fit (in memory and on a real Dask scheduler) and score."""
import json
from dataclasses import replace

import numpy as np
import pytest

lightgbm = pytest.importorskip("lightgbm")
zarr = pytest.importorskip("zarr")
from jdl.cli import main  # noqa: E402
from pipeline.model_store import load_model  # noqa: E402
from jdlcore.features.summaries import (  # noqa: E402
    BOOSTER_PARAMS, MEDIAN, NAMES, QUANTILE_LEVELS, BoostedSummaries, fit_summaries, kernel_categorical, kernel_features,
    row_folds,
    summary_rule,
)
from pipeline.staging import OTHER_CODE, categorical_levels, level_recoding, open_staged, recode  # noqa: E402
from pipeline.tuning import load_tuning, tune_store  # noqa: E402
from jdlcore.tuning.views import CLEAR_GAIN, STANDARDISE_ROWS  # noqa: E402
from jdlcore.tuning import SEARCH_TOLERANCE  # noqa: E402


def _table(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """x: two continuous columns and a 4-level code; y's median and spread both depend on x."""
    rng = np.random.default_rng(seed)
    X = np.column_stack([rng.standard_normal(n), rng.uniform(-2, 2, n), rng.integers(0, 4, n)]).astype(float)
    y = np.sin(1.5 * X[:, 0]) + 0.5 * X[:, 2] + (0.2 + 0.3 * np.abs(X[:, 1])) * rng.standard_normal(n)
    return X, y


def _view_search(data, rows, splits, **settings):
    """A tuning's ``ViewSearch`` on the staged store ``data``'s rows ``rows`` (store indices) and ``splits``,
    the crps judging, ``settings`` (tune options) given as keywords."""
    from jdlcore.tuning import TuneOptions, resolve_criterion
    from jdlcore.tuning.views import ViewSearch
    from pipeline.staging import categorical_indices

    group = open_staged(data)
    X, Y = group["x"][:][rows], group["y"][:][rows]
    options = TuneOptions(**settings)
    base = options.base_estimator()
    return ViewSearch(X, Y, rows, int(group.attrs["n_samples"]), splits, base, resolve_criterion("crps", None, 1),
                      options.settled(base), list(group.attrs["x_features"]), list(group.attrs["y_features"]),
                      categorical_indices(group))


def _summaries_of(data, job, rule):
    """``fitted_summaries`` of ``job`` with the ``rule``, its sample read from the staged store ``data``."""
    from jdlcore.tuning.views import fitted_summaries
    from pipeline.staging import read_sample

    return fitted_summaries(job, rule, lambda sample: (read_sample(data, "x", sample),
                                                       read_sample(data, "y", sample)[:, 0]))


def test_row_folds_are_a_function_of_the_row_and_balanced():
    X, _ = _table(20_000)
    folds = row_folds(X, 5)
    assert folds.shape == (20_000,) and set(np.unique(folds)) == set(range(5))
    assert np.all(np.abs(np.bincount(folds) - 4_000) < 300)  # a 64-bit mix: about n / K each
    np.testing.assert_array_equal(row_folds(X[::-1], 5), folds[::-1])  # of the row, not of its position
    doubled = np.vstack([X[:50], X[:50]])
    np.testing.assert_array_equal(row_folds(doubled, 5)[:50], row_folds(doubled, 5)[50:])
    assert row_folds(np.array([[-0.0, 1.0]]), 5)[0] == row_folds(np.array([[0.0, 1.0]]), 5)[0]
    assert (row_folds(X[:, ::-1], 5) != folds).mean() > 0.7  # the columns' order counts


def _by_hand(X: np.ndarray, y: np.ndarray, train: np.ndarray, rounds: tuple[int, ...], seed: int = 0) -> list:
    """Brute force: the boosters of one fold trained on the rows ``train`` with the map's settings, each
    level's ``rounds``: the median's from a constant, each outer level's from the median's predictions
    at those rows; as a list of functions rows -> the level's quantile (the outer: median + offset)."""
    def booster(level: float, count: int, start: np.ndarray | None = None):
        return lightgbm.train({**BOOSTER_PARAMS, "alpha": level, "seed": seed},
                              lightgbm.Dataset(X[train], y[train], init_score=start, categorical_feature=[2]),
                              num_boost_round=count)

    median = booster(0.5, rounds[MEDIAN])
    outer = {j: booster(level, rounds[j], median.predict(X[train])) for j, level in enumerate(QUANTILE_LEVELS) if j != MEDIAN}
    return [median.predict if j == MEDIAN else (lambda rows, b=outer[j]: median.predict(rows) + b.predict(rows))
            for j in range(len(QUANTILE_LEVELS))]


def test_each_row_is_summarised_by_boosters_trained_without_its_fold():
    """Brute force: for each fold, train LightGBM on the other folds' rows with the same settings (the
    outer levels from the median's predictions); the map's quantiles at the fold's rows are those
    boosters' predictions, for training and new rows."""
    X, y = _table(3_000)
    summaries = fit_summaries(X, y, [2], seed=3, folds=3, max_rounds=40, patience=5)
    assert len(summaries.rounds) == len(QUANTILE_LEVELS) and all(1 <= r <= 40 for r in summaries.rounds)
    assert summaries.from_median
    new, _ = _table(500, seed=1)
    hands = [_by_hand(X, y, np.flatnonzero(row_folds(X, 3) != k), summaries.rounds, seed=3) for k in range(3)]
    for rows in (X, new):
        folds = row_folds(rows, 3)
        Q = summaries.predictions(rows)
        for k in range(3):
            for j in range(len(QUANTILE_LEVELS)):
                np.testing.assert_allclose(Q[folds == k, j], hands[k][j](rows[folds == k]), rtol=0, atol=1e-12)
    features = summaries.features(new)
    Q = summaries.predictions(new)
    np.testing.assert_allclose(features[:, 0], Q[:, 1])
    np.testing.assert_allclose(features[:, 1], np.log(np.maximum(Q[:, 2] - Q[:, 0], summaries.floor)))
    # y read as it is: the median and the spread; the skewness only where y is standardised by them
    assert summaries.kept == NAMES and summaries.in_use == NAMES[:2] and features.shape == (500, 2)
    assert summaries.augment(new).shape == (500, 3 + 2)
    standardised = summaries.standardised()
    assert standardised.in_use == NAMES and standardised.augment(new).shape == (500, 3 + len(NAMES))
    skew = standardised.features(new)[:, 2]
    by_hand = [(q90 + q10 - 2 * q50) / max(q90 - q10, summaries.floor) for q10, q50, q90 in Q]
    np.testing.assert_allclose(skew, np.clip(by_hand, -1, 1), rtol=1e-12, atol=1e-15)
    assert np.ptp(skew) > 0 and np.all(np.abs(skew) <= 1)


def _fold_losses(X: np.ndarray, y: np.ndarray, level: float, folds: int, cap: int,
                 median_rounds: int | None = None) -> np.ndarray:
    """Brute force, shape (folds, cap): the pinball loss at ``level``, summed over each fold's rows, of
    the booster trained on that fold's complement, after each of ``cap`` rounds; an outer level's from
    the predictions of its fold's median booster at ``median_rounds``."""
    fold = row_folds(X, folds)
    loss = np.zeros((folds, cap))
    for k in range(folds):
        train, held = fold != k, fold == k
        start = np.zeros(X.shape[0])
        if level != 0.5:
            start = lightgbm.train({**BOOSTER_PARAMS, "alpha": 0.5, "seed": 0},
                                   lightgbm.Dataset(X[train], y[train], categorical_feature=[2]),
                                   num_boost_round=median_rounds).predict(X)
        booster = lightgbm.train({**BOOSTER_PARAMS, "alpha": level, "seed": 0},
                                 lightgbm.Dataset(X[train], y[train], init_score=start[train] if level != 0.5 else None,
                                                  categorical_feature=[2]), num_boost_round=cap)
        for r in range(cap):
            diff = y[held] - start[held] - booster.predict(X[held], num_iteration=r + 1)
            loss[k, r] = np.sum(np.maximum(level * diff, (level - 1.0) * diff))
    return loss


def test_each_level_s_rounds_minimise_the_held_out_loss_summed_over_the_folds():
    """Brute force: the least summed loss over the rounds is the map's count (no early stop within the
    cap here), and the count grows with the rows."""
    X, y = _table(2_000)
    cap = 60
    summaries = fit_summaries(X, y, [2], folds=3, max_rounds=cap, patience=cap)
    for j, level in enumerate(QUANTILE_LEVELS):
        loss = _fold_losses(X, y, level, 3, cap, summaries.rounds[MEDIAN]).sum(axis=0)
        assert summaries.rounds[j] == int(np.argmin(loss)) + 1
        assert loss[summaries.rounds[j] - 1] < loss[-1] or summaries.rounds[j] == cap
    more = fit_summaries(*_table(16_000), [2], folds=3)
    fewer = fit_summaries(*_table(1_000), [2], folds=3)
    assert all(m > f for m, f in zip(more.rounds, fewer.rounds)), (more.rounds, fewer.rounds)


def test_a_level_s_boosters_stop_together_when_one_fold_s_loss_stalls():
    """Brute force: the rounds walked until the first fold whose own held-out loss has not improved for
    ``patience`` rounds; the count is the least of the summed loss over those rounds (not over all
    ``cap``: the boosters stop there, not each on its own, nor all on the sum)."""
    X, y = _table(3_000, seed=1)
    cap, patience = 150, 3
    summaries = fit_summaries(X, y, [2], folds=3, max_rounds=cap, patience=patience)
    stopped = []
    for j, level in enumerate(QUANTILE_LEVELS):
        loss = _fold_losses(X, y, level, 3, cap, summaries.rounds[MEDIAN])
        runs = [next((r for r in range(1, cap + 1) if r - (np.argmin(curve[:r]) + 1) >= patience), cap)
                for curve in loss]
        walked = min(runs)
        stopped.append(walked < cap and np.argmin(loss.sum(axis=0)) + 1 > walked)
        assert summaries.rounds[j] == int(np.argmin(loss.sum(axis=0)[:walked])) + 1, (level, summaries.rounds)
    assert any(stopped)  # on some level the stop, not the cap, decided the count


def test_boosters_trained_in_turns_on_two_threads_are_those_trained_on_one(monkeypatch):
    """The rounds chosen out of fold and every tree are the same whether the boosters take their rounds
    in turns on two threads or one after another in this thread, for rounds chosen (early stopping) and
    given (a split's map). (LightGBM's own threads per booster stay at one: at two its histograms' sums
    may round differently.)"""
    import jdlcore.pool as pool
    import jdlcore.features.summaries as summaries

    monkeypatch.setattr(summaries, "_booster_threads", lambda: 1)  # LightGBM's threads per booster held fixed
    X, y = _table(3_000, seed=1)
    maps = {}
    for threads in (1, 2):
        monkeypatch.setattr(pool, "_THREADS", threads)
        chosen = fit_summaries(X, y, [2], folds=5, patience=5)
        maps[threads] = (chosen.to_bytes(), fit_summaries(X[:2_000], y[:2_000], [2], folds=5, rounds=chosen.rounds,
                                                          like=chosen).to_bytes())
    assert maps[1] == maps[2]


def test_in_turns_trains_each_booster_to_its_level_s_stop_as_it_is_lowered(monkeypatch):
    """``in_turns`` with stand-in boosters: every booster reaches its level's stop, the one lowered on
    the way (early stopping) too, and at most one round per thread past it; ``after_round`` is never
    called twice at once."""
    import threading

    import jdlcore.pool as pool
    from jdlcore.features.boosting import in_turns

    monkeypatch.setattr(pool, "_THREADS", 2)

    class Booster:
        def __init__(self):
            self.rounds = 1

        def update(self):
            self.rounds += 1

    inside, overlaps = threading.Lock(), []
    stop = {0: 40, 1: 12}

    def after_round(job, booster, rounds):
        if not inside.acquire(blocking=False):
            overlaps.append(job)
            return
        try:
            assert booster.rounds == rounds
            if job == (0, 3) and rounds == 9:  # fold 3 of level 0 stalls at round 9
                stop[0] = 9
        finally:
            inside.release()

    jobs = [(level, k) for level in (0, 1) for k in range(5)]
    boosters = in_turns(jobs, lambda job: Booster(), stop, after_round)
    assert overlaps == [] and sorted(boosters) == jobs
    assert all(9 <= boosters[0, k].rounds <= 9 + 2 for k in range(5))
    assert all(boosters[1, k].rounds == 12 for k in range(5))


def test_cross_fitting_keeps_the_training_rows_noise_out_of_their_summaries():
    """y independent of x: boosters predicting their own training rows follow the noise; the
    cross-fitted summaries of the training rows do not."""
    rng = np.random.default_rng(5)
    X, y = rng.standard_normal((4_000, 3)), rng.standard_normal(4_000)
    summaries = fit_summaries(X, y, seed=0)
    out_of_fold = summaries.features(X)[:, 0]
    in_sample = lightgbm.train({**BOOSTER_PARAMS, "alpha": 0.5}, lightgbm.Dataset(X, y), 100).predict(X)
    assert abs(np.corrcoef(out_of_fold, y)[0, 1]) < 0.06
    assert np.corrcoef(in_sample, y)[0, 1] > 0.3
    # nor do their spreads follow how far each row's y lies from the centre (fold k's outer boosters start
    # from fold k's median booster, trained without fold k)
    spread = summaries.features(X)[:, 1]
    assert abs(np.corrcoef(spread, np.abs(y - np.median(y)))[0, 1]) < 0.06


def test_the_skewness_at_crossed_and_degenerate_quantiles(monkeypatch):
    """The skewness (q90 + q10 - 2 q50) / max(q90 - q10, floor) by hand at chosen quantiles: its bounds
    where the median sits on an outer level, 0 where the levels are symmetric, clipped to [-1, 1] where
    the median falls outside them or the outer levels cross (the spread then at its floor)."""
    Q = np.array([[0.0, 1.0, 4.0],    # leans right: (4 + 0 - 2) / 4
                  [0.0, 2.0, 4.0],    # symmetric
                  [0.0, 0.0, 4.0],    # the median on the 10% level: the upper bound
                  [0.0, 4.0, 4.0],    # on the 90% level: the lower bound
                  [0.0, 6.0, 4.0],    # above the 90% level: (4 - 12) / 4, clipped
                  [3.0, 2.0, 1.0],    # crossed: (1 + 3 - 4) / floor = 0
                  [3.0, 1.0, 1.0]])   # crossed, and skewed: (1 + 3 - 2) / 0.5, clipped
    summaries = BoostedSummaries([], 1, (), floor=0.5, standardises=True)
    monkeypatch.setattr(BoostedSummaries, "predictions", lambda self, X: Q)
    every = summaries.every_summary(np.zeros((len(Q), 1)))
    np.testing.assert_allclose(every[:, 2], [0.5, 0.0, 1.0, -1.0, -1.0, 0.0, 1.0], rtol=0, atol=1e-15)
    np.testing.assert_allclose(every[:, 1], np.log([4, 4, 4, 4, 4, 0.5, 0.5]))
    np.testing.assert_array_equal(summaries.features(np.zeros((len(Q), 1))), every)  # all three in use


def test_the_map_decides_its_summaries_and_scale_floor_from_its_own_predictions_to_the_bit(monkeypatch):
    """The quantiles a new map reads at its own rows to decide the summaries it keeps and its scale floor
    (the median from the scores its outer levels started from, not predicted again) are the map's
    ``predictions`` there, read back from its text, to the bit; so are the kept summaries and the floor,
    also where the median booster trained past its count (early stopping)."""
    import jdlcore.features.boosting as boosting
    import jdlcore.features.summaries as module

    used = []
    of_quantiles = BoostedSummaries.of_quantiles
    monkeypatch.setattr(BoostedSummaries, "of_quantiles",
                        lambda self, Q: used.append(Q.copy()) or of_quantiles(self, Q))
    trained = []
    first_round = boosting.first_round
    monkeypatch.setattr(boosting, "first_round", lambda *a: trained.append(first_round(*a)) or trained[-1])
    X, y = _table(2_000)
    summaries = fit_summaries(X, y, [2], patience=5)
    again = BoostedSummaries.from_bytes(summaries.to_bytes())
    assert len(used) == 1 and np.array_equal(used[0], again.predictions(X))
    every = again.every_summary(X)
    assert summaries.kept == tuple(name for name, column in zip(NAMES, every.T) if np.ptp(column) > 0)
    spreads = np.exp(every[:, NAMES.index("summary_log_spread")])
    assert summaries.scale_floor == np.quantile(spreads, module.SCALE_QUANTILE)
    medians = [booster for booster in trained if booster.params["alpha"] == QUANTILE_LEVELS[1]]
    assert any(booster.current_iteration() > summaries.rounds[1] for booster in medians)


def test_kept_scores_are_read_every_few_rounds_and_dropped_before_the_least_summed_loss():
    """``KeptScores`` with stand-in boosters: a booster's scores are read at every ``every``-th round; once a
    level's summed loss is least at a round, its readings before the last one at or before that round
    are dropped (the count is never earlier), another level's kept."""
    from jdlcore.features.boosting import KeptScores

    class Booster:
        rounds = 0

        def eval_train(self, feval):
            feval(np.full(3, float(self.rounds)), None)

    kept, boosters = KeptScores(every=4), {job: Booster() for job in ((0, 0), (0, 1), (1, 0))}
    for r in range(1, 21):
        for job, booster in boosters.items():
            booster.rounds = r
            kept.read(job, booster, r)
        kept.summed_loss(0, r, abs(r - 10.5))  # least at round 10 (11 ties it, and comes later)
        kept.summed_loss(1, r, float(r))  # least at round 1
    assert kept.latest((0, 0), 20)[0] == 20 and kept.latest((0, 1), 11)[0] == 8
    np.testing.assert_array_equal(kept.latest((0, 0), 10)[1], np.full(3, 8.0))
    assert kept.latest((0, 0), 7) is None  # read at round 4, dropped
    assert [kept.latest((1, 0), r)[0] for r in (4, 9, 20)] == [4, 8, 20]  # level 1: nothing dropped
    assert kept.latest((2, 0), 20) is None


def test_a_median_trained_past_its_count_starts_the_outer_levels_from_the_same_scores_read_or_predicted(monkeypatch):
    """Where the median boosters trained past their count, each fold's scores at every row (the start
    of its outer levels) are the same to the bit, and so is the map, whether they come from the scores
    read as the boosters trained (every round, every third, every 16th) plus the trees after the last
    reading, or from predicting every row again (never read)."""
    import jdlcore.features.boosting as boosting
    import jdlcore.features.summaries as module

    at_every_row = boosting.at_every_row
    calls: dict[bytes, tuple[int, int, int | None, np.ndarray]] = {}  # by fold (its training rows)

    def recorded(booster, X, training, rounds, threads, kept=None):
        start = at_every_row(booster, X, training, rounds, threads, kept)
        calls[training.tobytes()] = (booster.current_iteration(), rounds, None if kept is None else kept[0], start)
        return start

    monkeypatch.setattr(module, "at_every_row", recorded)
    # the median's count (38) is below the round its first fold stalls at (43): every median booster
    # trains past it whatever the threads do (a booster may also finish a round begun before the stop)
    X, y = _table(4_000, seed=3)
    runs = {}
    for every in (10**9, 1, 3, 16):
        monkeypatch.setattr(boosting, "KEPT_SCORES_EVERY", every)
        calls.clear()
        runs[every] = (fit_summaries(X, y, [2], patience=10).to_bytes(), dict(calls))
    never_map, never = runs[10**9]
    assert len(never) == 5 and all(since is None for _, _, since, _ in never.values())
    for every in (1, 3, 16):
        chosen, read = runs[every]
        assert chosen == never_map and read.keys() == never.keys()
        for fold, (trained, rounds, since, start) in read.items():
            np.testing.assert_array_equal(start, never[fold][-1])
            if trained > rounds:  # read at the last round at or before the count
                assert since == rounds - rounds % every
    assert all(trained > rounds >= 16 for trained, rounds, _, _ in never.values())  # the case this is about


def test_the_record_round_trips_and_refuses_another_format():
    X, y = _table(1_000)
    summaries = fit_summaries(X, y, [2], max_rounds=10)
    again = BoostedSummaries.from_bytes(summaries.to_bytes())
    assert again.kept == summaries.kept and again.categorical == (2,) and again.width == 3
    assert again.rounds == summaries.rounds
    assert again.y_range == summaries.y_range == (y.min(), y.max())  # the range a standardised law is clipped to
    np.testing.assert_array_equal(again.features(X), summaries.features(X))
    standardised = BoostedSummaries.from_bytes(summaries.standardised().to_bytes())
    assert standardised.standardises and standardised.scale_floor == summaries.scale_floor > 0
    # a map that keeps the skewness: a jdl reading only 1 to 3 refuses the record
    assert json.loads(summaries.standardised().to_bytes())["format"] == 4 and again.from_median
    record = json.loads(summaries.to_bytes())
    assert record["format"] == 4 and record["kept"] == list(NAMES)
    # without it, outer levels that are offsets from the median: a jdl reading only 1 or 2 refuses it
    record = json.loads(replace(summaries, kept=NAMES[:2]).to_bytes())
    assert record["format"] == 3 and BoostedSummaries.from_bytes(json.dumps(record).encode()).from_median
    del record["rounds"], record["y_range"]  # a record written before the rounds were chosen out of fold,
    unranged = BoostedSummaries.from_bytes(json.dumps(record).encode())  # and before y's range was kept
    assert unranged.rounds == () and unranged.y_range == (-np.inf, np.inf)
    older = BoostedSummaries.from_bytes(json.dumps({**record, "format": 2}).encode())
    assert not older.from_median  # an older map's boosters are the quantiles themselves
    np.testing.assert_array_equal(older.predictions(X)[:, MEDIAN], summaries.predictions(X)[:, MEDIAN])
    for key in ("standardises", "scale_floor", "from_median"):  # a record of format 1: y read as it is
        del record[key]
    old = BoostedSummaries.from_bytes(json.dumps({**record, "format": 1}).encode())
    assert not old.standardises and old.scale_floor == 0.0 and not old.from_median
    with pytest.raises(ValueError, match="another format"):
        BoostedSummaries.from_bytes(json.dumps({**record, "format": 99}).encode(), "model m")
    with pytest.raises(ValueError, match="not a summaries record"):
        BoostedSummaries.from_bytes(b"\xff\xfe", "model m")
    with pytest.raises(ValueError, match="fitted on 3 columns"):
        summaries.augment(X[:, :2])


def test_nothing_to_summarise_and_the_rules():
    X, _ = _table(500)
    assert fit_summaries(X, np.full(500, 2.0), max_rounds=5) is None  # y constant: no summary varies
    # every row in one fold, so no booster has rows to train on: x takes one value, or two that share a
    # fold (a binary column coded 1 and 2)
    assert fit_summaries(np.ones((500, 2)), np.arange(500.0), max_rounds=5) is None
    two = np.repeat([[1.0], [2.0]], 250, axis=0)
    assert np.unique(row_folds(two)).size == 1 and fit_summaries(two, np.arange(500.0), max_rounds=5) is None
    assert summary_rule("auto", 1) and not summary_rule("auto", 2) and not summary_rule("none", 1)
    with pytest.raises(ValueError, match="y has 2 columns"):
        summary_rule("boosted", 2)
    with pytest.raises(ValueError, match="unknown rule 'trees'"):
        summary_rule("trees", 1)


@pytest.fixture
def staged(tmp_path):
    import pandas as pd

    X, y = _table(2_000)
    frame = pd.DataFrame({"a": X[:, 0], "b": X[:, 1], "c": np.array(["p", "q", "r", "s"], dtype=object)[X[:, 2].astype(int)],
                          "t": y})
    frame.to_parquet(tmp_path / "src.parquet")
    new = frame.iloc[:300].copy()
    new.loc[new.index[:5], "c"] = "unseen"
    new.to_parquet(tmp_path / "new.parquet")
    for name in ("src", "new"):
        assert main(["stage", str(tmp_path / f"{name}.parquet"), "--x", "a,b,c", "--y", "t", "--out",
                     str(tmp_path / f"{name}.zarr"), "--chunk-size", "500"]) == 0
    return tmp_path


def test_tune_fit_and_score_carry_the_summaries_in_memory_and_on_dask(staged, dask_client, capsys):
    tmp = staged
    # one validation split (not five folds) keeps the test short; "auto" decides on it as on folds
    assert main(["tune", str(tmp / "src.zarr"), "--out", str(tmp / "tuning.zarr"), "--folds", "1",
                 "--summaries", "standardised"]) == 0
    assert ("with x summaries summary_median, summary_log_spread, y standardised by the median and spread"
            in capsys.readouterr().out)
    tuning = load_tuning(tmp / "tuning.zarr")
    assert json.loads(tuning.attrs["x_summaries"]) == list(NAMES[:2]) and tuning.attrs["summaries"] == "standardised"
    assert tuning.attrs["summaries_gain"] > CLEAR_GAIN  # kept: they beat the columns alone by more than 1%
    assert tuning.sizes["x_feature"] == 3 + 2 and len(json.loads(tuning.attrs["best"])["lengthscale_x"]) == 5
    assert tuning.attrs["summaries_standardise_y"]  # a scalar y, the crps: y read standardised by them
    models = {}
    for name, scheduler in (("memory", "memory"), ("dask", dask_client.scheduler.address)):
        assert main(["fit", str(tmp / "src.zarr"), "--tuning", str(tmp / "tuning.zarr"), "--out",
                     str(tmp / f"{name}.zarr"), "--scheduler", scheduler]) == 0
        models[name] = load_model(tmp / f"{name}.zarr")
    memory, dask = models["memory"], models["dask"]
    assert memory.provenance_["x_summaries"] == list(NAMES[:2]) and memory.basis_x_.width == 5
    assert dask.view_.summaries.to_bytes() == memory.view_.summaries.to_bytes()
    new = open_staged(tmp / "new.zarr")  # its codes read as the model's, the unseen level as OTHER_CODE
    X_new = recode(new["x"][:], level_recoding(categorical_levels(new), memory.provenance_["x_levels"], ["a", "b", "c"],
                                               "other"))
    assert np.all(X_new[:5, 2] == OTHER_CODE) and np.all(X_new[5:, 2] >= 0)
    Xq = memory.view_.summaries.augment(X_new)
    # both fits learned the law of the same standardised y (the Dask one standardised chunk by chunk)
    assert memory.view_.summaries.standardises and dask.view_.summaries.standardises
    np.testing.assert_allclose(dask.law_.conditional_expectation(Xq), memory.law_.conditional_expectation(Xq), rtol=0,
                               atol=1e-8)
    # the scores are on y's scale: the law of r moved by each row's predicted median and spread and
    # clipped to the training rows' range of y, by hand
    low, high = memory.view_.summaries.y_range
    assert (low, high) == (_table(2_000)[1].min(), _table(2_000)[1].max())
    median, spread = Xq[:, 3], np.maximum(np.exp(Xq[:, 4]), memory.view_.summaries.scale_floor)
    moved = median[:, None] + spread[:, None] * memory.support_atoms_[None, :, 0]
    assert np.any(moved < low) and np.any(moved > high)  # some laws reach past y's range: the clip is tested
    mean_y = np.sum(memory.law_.conditional_weights(Xq) * np.clip(moved, low, high), axis=1)
    quantiles_y = np.clip(median[:, None] + spread[:, None] * memory.law_.conditional_quantile(Xq, [0.1, 0.9]), low,
                          high)
    for name, scheduler in (("s-mem.zarr", "memory"), ("s-dask.zarr", dask_client.scheduler.address)):
        assert main(["score", str(tmp / "memory.zarr"), str(tmp / "new.zarr"), "--out", str(tmp / name),
                     "--function", "mean", "--function", "quantile:0.1,0.9", "--unseen", "other",
                     "--scheduler", scheduler]) == 0
        scores = zarr.open_group(tmp / name, mode="r")
        np.testing.assert_allclose(scores["mean"][:, 0], mean_y, rtol=1e-12, atol=1e-9)
        assert np.isclose(scores["quantile:0.1,0.9"][:], quantiles_y, rtol=1e-12, atol=1e-9).mean() > 0.99
    assert main(["tune", str(tmp / "src.zarr"), "--out", str(tmp / "plain.zarr"), "--summaries", "none",
                 "--lengthscales-x", "1.0", "--regs", "1e-4", "--no-search"]) == 0
    plain = load_tuning(tmp / "plain.zarr")
    assert plain.sizes["x_feature"] == 3 and "x_summaries" not in plain.variables
    assert main(["fit", str(tmp / "src.zarr"), "--tuning", str(tmp / "plain.zarr"), "--out", str(tmp / "p.zarr")]) == 0
    assert load_model(tmp / "p.zarr").view_.summaries is None


def test_auto_leaves_the_summaries_out_where_the_columns_alone_do_as_well(tmp_path, monkeypatch):
    """One smooth column: a kernel on x resolves the law, the boosters' summaries only add their noise;
    "auto" compares the two searches and keeps the columns alone, "boosted" keeps the summaries. Where y
    is standardised the columns alone are searched once, after the summarised runs, and that search's
    result is the one kept."""
    from jdlcore.tuning.views import ViewSearch

    searched, search = [], ViewSearch.columns_alone

    def columns_alone(job):
        searched.append(job)
        return search(job)

    monkeypatch.setattr(ViewSearch, "columns_alone", columns_alone)
    rng = np.random.default_rng(2)
    x = rng.uniform(-3, 3, 3_000)
    np.savez(tmp_path / "s.npz", x=x, y=np.sin(x) + x / 3 + (0.15 + 0.25 * np.abs(x)) * rng.standard_normal(3_000))
    assert main(["stage", str(tmp_path / "s.npz"), "--x", "x", "--y", "y", "--out", str(tmp_path / "d.zarr")]) == 0
    auto = load_tuning(tune_store(tmp_path / "d.zarr", tmp_path / "auto.zarr", folds=1))  # one split: short
    assert auto.attrs["summaries_gain"] <= SEARCH_TOLERANCE and json.loads(auto.attrs["x_summaries"]) == []
    assert auto.attrs["summaries_standardise_y"] is False
    assert len(searched) == 1
    searched.clear()
    # y standardised by them scores 0.14% better on the 600 validation rows: below CLEAR_GAIN, the gain
    # "standardised" needs, so it too keeps the columns alone (the thresholds themselves: the unit tests
    # of ``choose_view`` below)
    standardised = load_tuning(tune_store(tmp_path / "d.zarr", tmp_path / "std.zarr", summaries="standardised",
                                          folds=1))
    assert 0 < standardised.attrs["summaries_gain"] <= CLEAR_GAIN
    assert json.loads(standardised.attrs["x_summaries"]) == []
    assert len(searched) == 1
    searched.clear()
    assert "x_summaries" not in auto.variables and np.ndim(json.loads(auto.attrs["best"])["lengthscale_x"]) == 0
    boosted = load_tuning(tune_store(tmp_path / "d.zarr", tmp_path / "boosted.zarr", summaries="boosted", folds=1))
    assert boosted.attrs["summaries_gain"] is None and json.loads(boosted.attrs["x_summaries"]) == list(NAMES[:2])
    assert len(json.loads(boosted.attrs["best"])["lengthscale_x"]) == 3 and searched == []


def test_stores_written_before_the_summaries_still_load_and_fit(staged):
    """A tuning store of schema version 2 and a model store of version 6 (no summaries): a fit reads the
    tuning as the columns alone, and the model loads with none."""
    from pipeline.fitting import fit_store

    tmp = staged
    path = tune_store(tmp / "src.zarr", tmp / "old.zarr", summaries="none", lengthscales_x=[1.0], regs=[1e-4],
                      search=False)
    old = zarr.open_group(path, mode="r+")
    old.attrs["schema_version"] = 2
    for name in ("summaries", "x_summaries", "summaries_gain", "summaries_seconds"):
        del old.attrs[name]
    best = json.loads(load_tuning(path).attrs["best"])
    model_path, _ = fit_store(tmp / "src.zarr", tmp / "m.zarr", tuning=path,
                              **{k: best[k] for k in ("lengthscale_x", "lengthscale_y", "reg")})
    model = load_model(model_path)
    assert model.view_.summaries is None and model.basis_x_.width == 3
    zarr.open_group(model.store_path_, mode="r+").attrs["schema_version"] = 6
    again = load_model(model_path)
    assert again.view_.summaries is None and int(zarr.open_group(again.store_path_).attrs["schema_version"]) == 6


def test_the_x_kernel_with_summaries_is_a_psd_kernel_of_x():
    """The summaries are one function of x, so the kernel on (x, summaries) is a kernel of x: a
    training row and a new row with its x get the same summaries (kernel value 1 between them), and
    the Gram matrix over training rows, new rows and repeats is positive semi-definite."""
    from jdlcore import GaussianKernel

    X, y = _table(2_000)
    summaries = fit_summaries(X, y, [2], max_rounds=30)
    new, _ = _table(100, seed=4)
    rows = np.vstack([X[:100], new, X[:50].copy()])  # the last 50 repeat training rows, as new rows would
    Z = summaries.augment(rows)
    np.testing.assert_array_equal(Z[200:], Z[:50])
    kernel = GaussianKernel(np.full(5, 0.7), categorical=[2]).standardised(Z)
    K = kernel(Z)
    np.testing.assert_allclose(K[200:, :50], K[:50, :50], rtol=0, atol=0)
    assert np.allclose(np.diag(K[200:, :50]), 1.0)
    assert np.linalg.eigvalsh(K).min() > -1e-10



def test_the_map_read_alone_gives_the_x_kernel_the_summaries_only():
    X, y = _table(1_000)
    beside = fit_summaries(X, y, [2], max_rounds=20)
    alone = beside.alone()
    assert beside.columns and not alone.columns and alone.boosters is beside.boosters
    np.testing.assert_array_equal(alone.augment(X), beside.features(X))
    np.testing.assert_array_equal(beside.augment(X), np.hstack([X, beside.features(X)]))
    assert kernel_features(["a", "b", "c"], alone) == list(NAMES[:2]) and kernel_categorical([2], alone) == []
    assert kernel_features(["a", "b", "c"], beside) == ["a", "b", "c", *NAMES[:2]]
    assert kernel_categorical([2], beside) == [2]
    assert kernel_features(["a"], alone.standardised()) == list(NAMES)  # y standardised: the skewness too
    assert kernel_features(["a"], None) == ["a"] and kernel_categorical([0], None) == [0]
    again = BoostedSummaries.from_bytes(alone.to_bytes())
    assert not again.columns and again.augment(X).shape == (1_000, 2)
    record = json.loads(beside.to_bytes())
    del record["columns"]  # a record written before the summaries could be read alone: beside the columns
    assert BoostedSummaries.from_bytes(json.dumps(record).encode()).columns


def test_fixed_rounds_train_each_level_that_long():
    X, y = _table(1_500)
    summaries = fit_summaries(X, y, [2], folds=3, rounds=(7, 11, 5))
    assert summaries.rounds == (7, 11, 5)
    for fold in summaries._boosters():
        assert [booster.num_trees() for booster in fold] == [7, 11, 5]


def test_a_booster_s_scores_at_every_row_are_its_predictions_to_the_bit():
    """``at_every_row``: a booster trained exactly the rounds asked for gives the scores LightGBM kept
    of its training rows (in the Dataset's order, scattered back to theirs) and predicts the others;
    asked for fewer rounds than it trained, it adds the trees after the last of its scores read as it
    trained (``KeptScores``), one at a time, or predicts every row where none was read that early. Each
    equals ``predict`` at every row, to the bit."""
    from jdlcore.features.boosting import KeptScores, at_every_row, first_round

    X, y = _table(2_000, seed=4)
    X[::7, 1] = np.nan  # missing values: LightGBM's default direction, by bin and by value alike
    training = np.random.default_rng(5).random(2_000) < 0.8
    train = lightgbm.Dataset(X[training], y[training], categorical_feature=[2], params={"verbosity": -1})
    booster = first_round(lightgbm, {**BOOSTER_PARAMS, "alpha": 0.5, "seed": 0, "num_threads": 1}, train)
    kept = KeptScores(every=8)
    kept.read((1, 0), booster, 1)
    for trained in range(2, 61):
        booster.update()
        kept.read((1, 0), booster, trained)
    for rounds in (60, 59, 50, 47, 40, 33, 20, 7):
        since = kept.latest((1, 0), rounds)
        assert since is None if rounds < 8 else since[0] == rounds - rounds % 8
        np.testing.assert_array_equal(at_every_row(booster, X, training, rounds, 1, since),
                                      booster.predict(X, num_iteration=rounds))


def test_each_tuning_split_is_summarised_by_a_map_blind_to_its_validation_rows(staged):
    """The tuning's map of a split is the map refitted, at its rounds, without the split's validation
    rows (brute force); changing those rows' y leaves it as it is, and changes the tuning's own map."""
    from jdlcore.tuning import splits_for
    from jdlcore.tuning import subsample_rows

    group = open_staged(staged / "src.zarr")
    X, y = group["x"][:], group["y"][:, 0]
    rows = subsample_rows(2_000, 1_500, 0)  # the tuning's subsample: store rows
    splits = splits_for(rows.size, 0.2, "auto", 0)
    fitted, maps, _ = _summaries_of(staged / "src.zarr", _view_search(staged / "src.zarr", rows, splits), "boosted")
    assert len(maps) == len(splits) == 5  # 300 validation rows a split: cross-validation
    for read, (_, val) in zip(maps, splits):
        keep = np.setdiff1d(np.arange(2_000), rows[val])
        by_hand = fit_summaries(X[keep], y[keep], [2], rounds=fitted.rounds)
        assert read.kept == fitted.kept and read.rounds == fitted.rounds
        np.testing.assert_array_equal(read.features(X), by_hand.features(X))
    val = rows[splits[0][1]]
    moved = y.copy()
    moved[val] += 5.0 * np.sign(moved[val] - np.median(y))
    again = fit_summaries(np.delete(X, val, axis=0), np.delete(moved, val), [2], rounds=fitted.rounds)
    np.testing.assert_array_equal(again.features(X), maps[0].features(X))
    assert not np.array_equal(fit_summaries(X, moved, [2], rounds=fitted.rounds).features(X), fitted.features(X))


def _two_split_job(staged):
    """(a tuning's search job on the staged table's 2,000 rows, two splits each with its own map and
    lengthscales fixed, its map, the splits' maps, the splits, x's rows)."""
    from jdlcore.tuning import splits_for, subsample_rows

    rows = subsample_rows(2_000, 2_000, 0)
    splits = splits_for(rows.size, 0.2, 2, 0)
    job = _view_search(staged / "src.zarr", rows, splits, regs=[1e-4], lengthscales_x=[1.0], lengthscales_y=[1.0],
                       search=False, search_rows=4_000)
    fitted, maps, _ = _summaries_of(staged / "src.zarr", job, "standardised")
    return replace(job, fold_maps=maps), fitted, maps, splits, job.X


def test_each_split_reads_its_map_as_the_run_reads_the_tunings(staged):
    """A run's splits read their own maps beside the columns or alone, y standardised or not, and the
    summaries in use of the run's map: with y standardised on few rows the median and spread alone,
    else the skewness too."""
    job, fitted, maps, splits, X = _two_split_job(staged)
    for read, width in ((fitted.standardised(skew=False), 3 + 2), (fitted.standardised(), 3 + 3),
                        (fitted.standardised().alone(), 3), (fitted, 3 + 2)):
        run = job.run(read)
        for (train, val), fold, own in zip(splits, run.folds, maps):
            assert fold[0].shape[1] == fold[2].shape[1] == width
            np.testing.assert_array_equal(fold[2][:, -len(read.in_use):],
                                          replace(own, standardises=read.standardises, kept=read.kept).features(X[val]))


def test_a_job_s_runs_read_the_quantiles_made_once_to_the_bit(staged, monkeypatch):
    """``ViewSearch.summarised`` predicts each map's quantiles at the subsample's rows once; every run then
    reads them (beside the columns or alone, y standardised or not, each split by its own map) without
    predicting again, and its rows and scores are those of a job that predicts them in each run."""
    job, fitted, maps, splits, X = _two_split_job(staged)
    predicted = []
    predictions = BoostedSummaries.predictions
    monkeypatch.setattr(BoostedSummaries, "predictions", lambda self, Z: predicted.append(self) or predictions(self, Z))
    summarised = job.summarised([fitted, *maps])
    assert len(predicted) == 1 + len(maps)
    for read in (fitted.standardised(), fitted.standardised().alone(), fitted, fitted.alone()):
        predicted.clear()
        once = summarised.marked("alone").run(read)
        assert predicted == []
        each = job.run(read)
        assert len(predicted) == 1 + len(maps)
        np.testing.assert_array_equal(summarised.augmented(read), job.augmented(read))
        for fold_once, fold_each in zip(once.folds, each.folds):
            for a, b in zip(fold_once, fold_each):
                np.testing.assert_array_equal(a, b)
        assert once.best["score"] == each.best["score"]


def test_a_map_reads_its_rows_from_its_quantiles_as_from_its_boosters():
    """``augment`` from the quantiles ``predictions`` gives (made by the map or a copy reading it another
    way) equals ``augment`` predicting them, to the bit; quantiles of other rows are refused."""
    X, y = _table(1_500)
    summaries = fit_summaries(X, y, [2], patience=5)
    quantiles = summaries.predictions(X)
    for read in (summaries, summaries.alone(), summaries.standardised(), summaries.standardised(skew=False).alone()):
        np.testing.assert_array_equal(read.augment(X, quantiles), read.augment(X))
    with pytest.raises(ValueError, match="quantiles: expected shape"):
        summaries.augment(X, quantiles[:-1])


def test_one_split_with_few_validation_rows_has_one_map_that_never_saw_them(staged, monkeypatch):
    """One split whose validation rows are at most ``MAP_HOLDOUT_SHARE`` of the sample: no map per split;
    the tuning's map (the one the fit uses) is fitted on the store's rows less the split's validation
    rows (brute force). With more validation rows, the map has every row and the split a map of its own."""
    from jdlcore.tuning import splits_for
    from jdlcore.tuning import subsample_rows
    from jdlcore.tuning.views import MAP_HOLDOUT_SHARE

    group = open_staged(staged / "src.zarr")
    X, y = group["x"][:], group["y"][:, 0]
    rows = subsample_rows(2_000, 1_500, 0)
    splits = splits_for(rows.size, 0.2, 1, 0)  # 300 validation rows: 15% of the 2,000
    assert splits[0][1].size > MAP_HOLDOUT_SHARE * 2_000
    job = _view_search(staged / "src.zarr", rows, splits)
    fitted, maps, _ = _summaries_of(staged / "src.zarr", job, "boosted")
    assert len(maps) == 1 and np.array_equal(fitted.features(X), fit_summaries(X, y, [2]).features(X))
    monkeypatch.setattr("jdlcore.tuning.views.MAP_HOLDOUT_SHARE", 0.15)
    fitted, maps, _ = _summaries_of(staged / "src.zarr", job, "boosted")
    assert maps is None
    keep = np.setdiff1d(np.arange(2_000), rows[splits[0][1]])
    by_hand = fit_summaries(X[keep], y[keep], [2])
    assert by_hand.rounds == fitted.rounds and by_hand.kept == fitted.kept
    np.testing.assert_array_equal(fitted.features(X), by_hand.features(X))


class _RecordedViewSearch:
    """The part of a ``ViewSearch`` that ``choose_view`` calls besides ``run``, for fakes that record the
    runs: the runs beside and alone one after the other, so that their order is read."""

    def marked(self, label):
        return self

    def beside_and_alone(self, read):
        return self.run(read), self.run(read.alone())

    def columns_alone(self):
        return self.run(None)


def test_the_runs_compared_and_the_one_kept():
    """The summaries alone are kept over the columns with the summaries beside them only where they
    score better by more than the tolerance; "auto" then keeps the better summarised run only where it
    beats the columns alone by more than the tolerance: the columns at the beside run's lengthscales
    with the summaries left out where that already shows it (no search of the columns alone), else
    the columns alone searched. (A criterion not read on y's scale by a factor per row: y is not
    standardised; ``test_a_standardised_y_is_kept_only_where_it_clearly_beats_the_columns`` has the crps.)"""
    from types import SimpleNamespace

    from jdlcore.conditional.losses import SecondMomentLoss
    from jdlcore.tuning.views import CLEAR_GAIN, choose_view

    X, y = _table(600)
    summaries = fit_summaries(X, y, [2], max_rounds=5)

    class Job(_RecordedViewSearch):
        progress = None
        score = SecondMomentLoss()
        n_rows = STANDARDISE_ROWS  # a criterion not on y's scale
        Y = np.zeros((1, 1))  # a scalar y

        def __init__(self, plain: float, beside: float, alone: float, left_out: float):
            self.scores = {"plain": plain, "beside": beside, "alone": alone}
            self.without = left_out
            self.runs: list[str] = []

        def run(self, read):
            name = "plain" if read is None else ("beside" if read.columns else "alone")
            assert read is None or not read.standardises
            self.runs.append(name)
            return SimpleNamespace(name=name, best={"score": self.scores[name]}, summaries=read)

        def left_out(self, run):
            assert run.name == "beside"
            self.runs.append("left out")
            return self.without

    tol = SEARCH_TOLERANCE
    cases = [  # scores (plain, beside, alone, beside's with the summaries left out), rule -> the run kept,
        # the runs made, the gain's (before, after) scores (None: no gain)
        ((10.0, 9.0, 9.0 * (1 - 2 * tol), 10.0), "auto", "alone", ["left out"], (10.0, 9.0 * (1 - 2 * tol))),
        ((10.0, 9.0, 9.0 * (1 - tol / 2), 9.5), "auto", "beside", ["left out"], (9.5, 9.0)),
        ((10.0, 9.0, 9.0 * (1 - tol / 2), 9.0 * (1 + tol / 2)), "auto", "beside", ["left out", "plain"], (10.0, 9.0)),
        ((9.0, 9.0, 9.5, 9.0 * (1 + CLEAR_GAIN / 2)), "auto", "plain", ["left out", "plain"], (9.0, 9.0)),
        ((10.0, 10.0 * (1 - tol / 2), 10.0, 10.0), "auto", "plain", ["left out", "plain"], (10.0, 10.0 * (1 - tol / 2))),
        ((8.0, 9.0, 9.5, 9.0), "auto", "plain", ["left out", "plain"], (8.0, 9.0)),
        ((10.0, 11.0, 12.0, 9.0), "boosted", "beside", [], None),
        ((10.0, 12.0, 11.0, 9.0), "boosted", "alone", [], None),
    ]
    for scores, rule, kept, then, gain_of in cases:
        job = Job(*scores)
        run, gain = choose_view(job, summaries, rule)
        assert run.name == kept, (scores, rule)
        assert job.runs == ["beside", "alone"] + then, (scores, rule)
        assert gain is None if gain_of is None else np.isclose(gain, (gain_of[0] - gain_of[1]) / gain_of[0])
    job = Job(1.0, 0.5, 0.5, 1.0)
    assert choose_view(job, None, "auto")[0].name == "plain" and job.runs == ["plain"]


def test_a_standardised_y_is_kept_only_where_it_clearly_beats_the_columns():
    """With the rule "standardised" and the crps (and both summaries kept) every summarised run reads y
    standardised by them; of the summaries beside the columns and alone, within the tolerance of the
    better, the smaller x basis is kept; the columns alone are always searched (leaving the summaries
    out of the kernel would still read them through y), and the summaries are kept only where they beat
    the columns by more than ``CLEAR_GAIN``; a map that kept one summary cannot standardise, and "auto"
    does not below ``STANDARDISE_ROWS`` rows (from there it does): both run as before."""
    from types import SimpleNamespace

    from jdlcore.conditional.losses import CRPSLoss
    from jdlcore.tuning.views import CLEAR_GAIN, choose_view

    X, y = _table(600)
    summaries = fit_summaries(X, y, [2], max_rounds=5)
    assert summaries.can_standardise and not summaries.standardises

    class Job(_RecordedViewSearch):
        progress = None
        score = CRPSLoss()
        n_rows = STANDARDISE_ROWS - 1
        Y = np.zeros((1, 1))  # a scalar y

        def __init__(self, plain: float, beside: float, alone: float, ranks: tuple[int, int] = (500, 50)):
            self.scores = {"plain": plain, "beside": beside, "alone": alone}
            self.ranks = {"plain": 100, "beside": ranks[0], "alone": ranks[1]}
            self.runs: list[tuple[str, bool]] = []

        def run(self, read):
            name = "plain" if read is None else ("beside" if read.columns else "alone")
            self.runs.append((name, read is not None and read.standardises))
            return SimpleNamespace(name=name, best={"score": self.scores[name], "rank_x": self.ranks[name]},
                                   summaries=read)

        def left_out(self, run):
            raise AssertionError("a standardised y reads the summaries even when the kernel leaves them out")

    standardised = [("beside", True), ("alone", True), ("plain", False)]
    for scores, kept in [((10.0, 9.0, 9.5), "beside"), ((10.0, 9.5, 9.0), "alone"),
                         ((10.0, 10.0 * (1 - CLEAR_GAIN / 2), 10.0), "plain"),
                         ((10.0, 10.0 * (1 - 2 * CLEAR_GAIN), 10.0), "beside")]:
        job = Job(*scores)
        run, gain = choose_view(job, summaries, "standardised")
        assert run.name == kept and job.runs == standardised, scores
        assert np.isclose(gain, (10.0 - min(scores[1:])) / 10.0)
        assert kept == "plain" or run.summaries.standardises and run.summaries.in_use == NAMES[:2]  # few rows
    tol = SEARCH_TOLERANCE
    for scores, ranks, kept in [((10.0, 9.0, 9.0 * (1 + tol / 2)), (2000, 50), "alone"),
                                ((10.0, 9.0 * (1 + tol / 2), 9.0), (50, 2000), "beside"),
                                ((10.0, 9.0, 9.0 * (1 + 2 * tol)), (2000, 50), "beside"),
                                ((10.0, 9.0, 9.0 * (1 + tol / 2)), (50, 2000), "beside")]:
        run, gain = choose_view(Job(*scores, ranks=ranks), summaries, "standardised")
        assert run.name == kept, (scores, ranks)
        assert np.isclose(gain, (10.0 - scores[("beside", "alone").index(kept) + 1]) / 10.0)
    for read, rule in ((replace(summaries, kept=summaries.kept[:1]), "standardised"), (summaries, "auto")):
        job = Job(10.0, 9.0, 9.5)
        job.left_out = lambda run: 10.0
        assert choose_view(job, read, rule)[0].name == "beside"
        assert job.runs == [("beside", False), ("alone", False)]
    # the columns alone searched already (beside the boosters): their result is read, not searched again
    for read, runs in ((summaries, standardised[:2]), (None, [])):
        job = Job(10.0, 10.0 * (1 - CLEAR_GAIN / 2), 10.0)
        searched = SimpleNamespace(name="plain", best={"score": 10.0, "rank_x": 100}, summaries=None)
        assert choose_view(job, read, "standardised", lambda: searched)[0] is searched
        assert job.runs == runs
    job = Job(10.0, 9.0, 9.5)  # "auto" on a table that fills the tuning's subsample standardises too
    job.n_rows = STANDARDISE_ROWS
    run, _ = choose_view(job, summaries, "auto")
    assert run.name == "beside" and run.summaries.standardises and job.runs == standardised
    assert run.summaries.in_use == NAMES  # and, on that many rows, reads the skewness too


def test_auto_tries_the_summaries_beside_y_as_it_is_where_standardised_they_lose():
    """Under "auto" on ``STANDARDISE_ROWS`` rows or more, where the summaries with y standardised do not
    beat the columns alone by more than ``CLEAR_GAIN``, they are searched beside y as it is and kept
    where they beat the columns alone (searched once, their result read again; no left-out shortcut) by
    more than ``SEARCH_TOLERANCE``; where y standardised wins, or under "standardised", nothing more runs.
    The runs are made one after the other, in this order."""
    from types import SimpleNamespace

    from jdlcore.conditional.losses import CRPSLoss
    from jdlcore.tuning.views import CLEAR_GAIN, choose_view

    X, y = _table(600)
    summaries = fit_summaries(X, y, [2], max_rounds=5)

    class Job(_RecordedViewSearch):
        progress = None
        score = CRPSLoss()
        n_rows = STANDARDISE_ROWS
        Y = np.zeros((1, 1))

        def __init__(self, standardised: float, as_it_is: float):
            self.scores = {("beside", True): standardised, ("alone", True): 11.0, ("plain", False): 10.0,
                           ("beside", False): as_it_is, ("alone", False): 11.0}
            self.runs: list[tuple[str, bool]] = []

        def run(self, read):
            key = ("plain" if read is None else "beside" if read.columns else "alone",
                   read is not None and read.standardises)
            self.runs.append(key)
            return SimpleNamespace(key=key, best={"score": self.scores[key], "rank_x": 100}, summaries=read)

        def left_out(self, run):
            raise AssertionError("the columns alone were searched already: no left-out shortcut")

    standardised = [("beside", True), ("alone", True), ("plain", False)]
    as_it_is = [("beside", False), ("alone", False)]
    short = 10.0 * (1 - CLEAR_GAIN / 2)  # y standardised gains half of CLEAR_GAIN: not enough
    tol = SEARCH_TOLERANCE
    for scores, rule, kept, runs, gain in [
            ((short, 10.0 * (1 - 2 * tol)), "auto", ("beside", False), standardised + as_it_is, 2 * tol),
            ((short, 10.0 * (1 - tol / 2)), "auto", ("plain", False), standardised + as_it_is, tol / 2),
            ((10.0 * (1 - 2 * CLEAR_GAIN), 9.0), "auto", ("beside", True), standardised, 2 * CLEAR_GAIN),
            ((short, 9.0), "standardised", ("plain", False), standardised, CLEAR_GAIN / 2)]:
        job = Job(*scores)
        run, found = choose_view(job, summaries, rule)
        assert run.key == kept and np.isclose(found, gain), (scores, rule)
        assert job.runs == runs, (scores, rule)
        if kept == ("beside", True):
            assert run.summaries.in_use == NAMES  # with y standardised on that many rows, the skewness too
        if kept == ("beside", False):
            assert run.summaries.in_use == NAMES[:2] and not run.summaries.standardises


def test_the_summaries_left_out_score_as_the_columns_alone_at_those_lengthscales(staged):
    """``ViewSearch.left_out`` scores the beside run's best setting with the summaries' lengthscales at
    ``SEARCH_LONGEST`` and the columns' at each of ``LEFT_OUT_FACTORS`` times theirs, in turn while the
    score falls: the best of the same scores as search-free candidates fitted by hand at those kernels."""

    from jdlcore import JDL
    from jdlcore.tuning import SEARCH_LONGEST, kernels_at, score_grid, splits_for, subsample_rows
    from jdlcore.tuning.views import LEFT_OUT_FACTORS

    rows = subsample_rows(2_000, 2_000, 0)
    job = _view_search(staged / "src.zarr", rows, splits_for(rows.size, 0.2, 1, 0), search=False, search_rows=4_000)
    summaries = fit_summaries(job.X, job.Y[:, 0], [2], max_rounds=30)
    beside = job.run(summaries)
    by_hand = np.array(np.broadcast_to(beside.best["lengthscale_x"], (5,)), dtype=np.float64)
    by_hand[-2:] = SEARCH_LONGEST

    def scored(factor: float) -> float:
        lengthscales = by_hand.copy()
        lengthscales[:3] = np.where(lengthscales[:3] < SEARCH_LONGEST, factor * lengthscales[:3], SEARCH_LONGEST)
        kernels = kernels_at(beside.kernel_x, beside.kernel_y, {**beside.best, "lengthscale_x": lengthscales})
        return score_grid(beside.folds, JDL(), [kernels[0]], [kernels[1]], [beside.best["reg"]], job.score)[0]["score"]

    scores = [scored(factor) for factor in LEFT_OUT_FACTORS]
    walked = [scores[0]]
    for score in scores[1:]:  # in turn, while the score falls
        if not score < walked[-1]:
            break
        walked.append(score)
    assert job.left_out(beside) == min(walked) != beside.best["score"]
    assert len(walked) > 1 and len(set(scores)) == len(scores)  # a shorter factor helps here: the walk counts
    out = replace(beside, best={**beside.best, "lengthscale_x": by_hand.tolist(), "score": 1.5})
    assert job.left_out(out) == 1.5  # already left out: its own score


def test_a_model_on_the_summaries_alone_through_fit_score_and_inspect(tmp_path, capsys, monkeypatch):
    """The path of a tuning that keeps the summaries alone (forced here, whatever they score): the tuning
    store, the fit, the scores and the model card read them alone."""
    import pandas as pd
    import xarray as xr

    from pipeline.evaluation import evaluate_store
    from pipeline.fitting import fit_store

    monkeypatch.setattr("jdlcore.tuning.views._cheapest_near_best", lambda beside, alone: alone)
    rng = np.random.default_rng(7)
    X = rng.standard_normal((2_000, 3))
    y = 2.0 * (X[:, 0] > 0.3) + (0.3 + 0.4 * (X[:, 0] > 0.3)) * rng.standard_normal(2_000)
    names = [f"c{k}" for k in range(3)]
    pd.DataFrame({**{name: X[:, k] for k, name in enumerate(names)}, "t": y}).to_parquet(tmp_path / "d.parquet")
    assert main(["stage", str(tmp_path / "d.parquet"), "--x", ",".join(names), "--y", "t", "--out",
                 str(tmp_path / "d.zarr")]) == 0
    assert main(["tune", str(tmp_path / "d.zarr"), "--out", str(tmp_path / "tuning.zarr"), "--no-search",
                 "--summaries", "standardised"]) == 0
    assert ("with x summaries summary_median, summary_log_spread alone (no x column), y standardised by the median "
            "and spread"
            in capsys.readouterr().out)
    tuning = load_tuning(tmp_path / "tuning.zarr")
    assert tuning.attrs["summaries_alone"] and tuning.sizes["x_feature"] == 2  # 2,000 rows: no skewness
    assert main(["fit", str(tmp_path / "d.zarr"), "--tuning", str(tmp_path / "tuning.zarr"), "--out",
                 str(tmp_path / "m.zarr")]) == 0
    model = load_model(tmp_path / "m.zarr")
    assert not model.view_.summaries.columns and model.basis_x_.width == 2
    assert main(["score", str(tmp_path / "m.zarr"), str(tmp_path / "d.zarr"), "--out", str(tmp_path / "s.zarr"),
                 "--function", "mean"]) == 0
    Z = model.view_.summaries.features(X)  # y standardised by them: the law of r moved to y's scale by hand
    assert model.view_.summaries.standardises and model.view_.summaries.y_range == (y.min(), y.max())
    spread = np.maximum(np.exp(Z[:, 1:]), model.view_.summaries.scale_floor)
    atoms = np.clip(Z[:, :1] + spread * model.support_atoms_[:, 0], y.min(), y.max())  # each row's law of y
    expected = np.sum(model.law_.conditional_weights(Z) * atoms, axis=1, keepdims=True)
    np.testing.assert_allclose(zarr.open_group(tmp_path / "s.zarr", mode="r")["mean"][:], expected, rtol=1e-12,
                               atol=1e-12)
    assert np.corrcoef(expected[:, 0], 2.0 * (X[:, 0] > 0.3))[0, 1] > 0.95
    # the evaluation reads the law of y: brute-force CRPS of the atoms moved row by row, on 40 rows
    evaluation = xr.open_zarr(evaluate_store(tmp_path / "m.zarr", tmp_path / "d.zarr", tmp_path / "e.zarr"))
    rows = slice(0, 40)
    P, atoms = model.law_.conditional_weights(Z[rows]), atoms[rows]
    brute = (np.sum(P * np.abs(atoms - y[rows, None]), axis=1)
             - 0.5 * np.einsum("ij,ijk,ik->i", P, np.abs(atoms[:, :, None] - atoms[:, None, :]), P))
    np.testing.assert_allclose(evaluation["crps"].values[rows], brute, rtol=1e-9)
    with pytest.raises(ValueError, match="reads y standardised by the boosted summaries, which only jdl answers"):
        fit_store(tmp_path / "d.zarr", tmp_path / "cme.zarr", method="cme", tuning=tmp_path / "tuning.zarr",
                  lengthscale_x=1.0, lengthscale_y=1.0, reg=1e-3)
    assert not (tmp_path / "cme.zarr").exists()
    assert main(["inspect", str(tmp_path / "m.zarr")]) == 0
    assert "summary_median" in capsys.readouterr().out
