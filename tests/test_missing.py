"""Missing x values: the kernel rule (jdlcore.features.missing) against a brute force, staging, and the pipeline
(tune, fit, score, evaluate) reading them through the rule stored with the model."""
import json

import numpy as np
import pytest

from jdlcore import GaussianKernel, LaplaceKernel, Matern32Kernel
from jdlcore.features.missing import INDICATOR_SUFFIX, UNSEEN_CODE, MissingValues

pd = pytest.importorskip("pandas")
pytest.importorskip("zarr")


def rows_with_gaps(rng, n=40):
    """x (n, 3): column 0 continuous with a third missing, 1 continuous complete, 2 category codes."""
    X = np.column_stack([rng.standard_normal(n), rng.standard_normal(n), rng.integers(0, 3, n).astype(float)])
    X[rng.random(n) < 1 / 3, 0] = np.nan
    return X


def brute_force_distance(a, b, rule, lengthscales):
    """The squared distance the module's docstring states, pair by pair: present values compared as they
    are, a missing one at its fill value plus a mismatch 1 / l_miss^2, two missing ones equal."""
    l0, l1, l2, l_miss = lengthscales
    total = 0.0
    present = ~np.isnan([a[0], b[0]])
    if present.all():
        total += ((a[0] - b[0]) / l0) ** 2
    elif present.any():
        value = a[0] if present[0] else b[0]
        total += ((value - rule.fill[0]) / l0) ** 2 + 1.0 / l_miss ** 2
    total += ((a[1] - b[1]) / l1) ** 2
    total += (a[2] != b[2]) / l2 ** 2
    return total


def test_the_kernel_of_the_augmented_rows_is_the_stated_rule(rng):
    X = rows_with_gaps(rng)
    rule = MissingValues.learn(X, categorical=[2])
    assert rule.flagged == (0,) and rule.categorical([2]) == [2, 3]
    lengthscales = np.array([0.7, 1.3, 0.9, 0.5])
    kernel = GaussianKernel(lengthscales, categorical=rule.categorical([2]))
    K = kernel(rule.augment(X))
    expected = np.exp(-0.5 * np.array([[brute_force_distance(a, b, rule, lengthscales) for b in X] for a in X]))
    np.testing.assert_allclose(K, expected, rtol=0, atol=1e-14)
    missing = np.isnan(X[:, 0])
    assert np.all(K[np.ix_(missing, missing)][:, :, None].squeeze() > 0)  # two missing values are equal along column 0


@pytest.mark.parametrize("family", [GaussianKernel, LaplaceKernel, Matern32Kernel])
def test_the_rule_keeps_every_kernel_positive_definite(rng, family):
    X = rows_with_gaps(rng, 80)
    rule = MissingValues.learn(X, categorical=[2])
    for l_miss in (0.05, 1.0, 30.0):  # missing kept apart from present values, or read at the median
        K = family(np.array([0.4, 1.0, 0.7, l_miss]), categorical=rule.categorical([2]))(rule.augment(X))
        assert np.linalg.eigvalsh(K).min() > -1e-10


def test_learn_takes_the_medians_of_the_present_values_and_flags_the_columns_that_miss_some(rng):
    X = rows_with_gaps(rng, 101)
    X[5, 2] = np.nan  # a categorical NaN: a code of its own, no indicator
    rule = MissingValues.learn(X, categorical=[2])
    assert rule.fill[0] == np.median(X[~np.isnan(X[:, 0]), 0]) and rule.fill[1] == np.median(X[:, 1])
    assert rule.fill[2] == UNSEEN_CODE and rule.flagged == (0,)
    A = rule.augment(X)
    assert A.shape == (101, 4) and not np.isnan(A).any()
    np.testing.assert_array_equal(A[:, 3], np.isnan(X[:, 0]))
    assert A[5, 2] == UNSEEN_CODE
    # a query missing a value where the training rows missed none reads it at the median, without an indicator
    query = np.array([[0.3, np.nan, 1.0]])
    np.testing.assert_array_equal(rule.augment(query), [[0.3, rule.fill[1], 1.0, 0.0]])
    assert rule.features(["a", "b", "c"]) == ["a", "b", "c", "a" + INDICATOR_SUFFIX]


def test_the_rule_round_trips_through_json_and_refuses_what_it_cannot_read(rng):
    rule = MissingValues.learn(rows_with_gaps(rng), categorical=[2])
    again = MissingValues.from_dict(json.loads(json.dumps(rule.to_dict())))
    assert again == rule
    with pytest.raises(ValueError, match=r"^model m: x_missing: not a missing-value rule"):
        MissingValues.from_dict({"width": 3}, "model m: x_missing")
    with pytest.raises(ValueError, match=r"needs 3 finite fill values"):
        MissingValues(3, (0.0, np.nan, 1.0), ())
    with pytest.raises(ValueError, match=r"^x column 1: every value is missing"):
        MissingValues.learn(np.column_stack([np.ones(4), np.full(4, np.nan)]))
    with pytest.raises(ValueError, match=r"learned on 3 columns, got shape \(2, 2\)"):
        rule.augment(np.zeros((2, 2)))


# -- staging ---------------------------------------------------------------------------------------
def test_staging_keeps_missing_values_and_counts_them(tmp_path, rng):
    from data_schemas.data import MISSING_LEVEL
    from pipeline.staging import categorical_levels, open_staged, stage

    n = 300
    frame = pd.DataFrame({"u": rng.standard_normal(n), "w": rng.standard_normal(n),
                          "color": rng.choice(["red", "blue"], n), "y": rng.standard_normal(n)})
    frame.loc[[3, 50, 51], "u"] = np.nan
    frame["color"] = frame["color"].astype(object)
    frame.loc[[7, 250], "color"] = None
    frame.to_csv(tmp_path / "t.csv", index=False)  # empty cells in the file
    group = open_staged(stage(tmp_path / "t.csv", tmp_path / "t.zarr", ["u", "w", "color"], ["y"], chunk_size=64))
    x = group["x"][:]
    np.testing.assert_array_equal(np.flatnonzero(np.isnan(x[:, 0])), [3, 50, 51])
    assert not np.isnan(x[:, 1:]).any()
    assert dict(group.attrs["missing_x"]) == {"u": 3}
    levels = categorical_levels(group)["color"]
    assert MISSING_LEVEL in levels and x[7, 2] == x[250, 2] == levels.index(MISSING_LEVEL)
    assert group.attrs["schema_version"] == 4


# -- the pipeline ----------------------------------------------------------------------------------
def informative_gaps(rng, n):
    """y = a + noise where a is present; where a is missing (a quarter of the rows) y is near 3, far from
    what the median of a (about 0) says: the missingness itself carries the information."""
    a, b = rng.standard_normal(n), rng.standard_normal(n)
    gone = rng.random(n) < 0.25
    y = np.where(gone, 3.0, a) + 0.2 * b + 0.3 * rng.standard_normal(n)
    return pd.DataFrame({"a": np.where(gone, np.nan, a), "b": b, "y": y})


@pytest.fixture(scope="module")
def fitted_with_gaps(tmp_path_factory):
    from pipeline.fitting import fit_store
    from pipeline.staging import stage
    from pipeline.tuning import load_tuning, tune_store

    work = tmp_path_factory.mktemp("gaps")
    rng = np.random.default_rng(3)
    informative_gaps(rng, 800).to_parquet(work / "train.parquet")
    test = informative_gaps(rng, 400)
    test.loc[:9, "b"] = np.nan  # b missed no value in training
    test.to_parquet(work / "test.parquet")
    for name in ("train", "test"):
        stage(work / f"{name}.parquet", work / f"{name}.zarr", ["a", "b"], ["y"])
    tune_store(work / "train.zarr", work / "tuning.zarr", summaries="none")
    best = json.loads(load_tuning(work / "tuning.zarr").attrs["best"])
    _, model = fit_store(work / "train.zarr", work / "model.zarr", tuning=work / "tuning.zarr",
                         **{k: best[k] for k in ("lengthscale_x", "lengthscale_y", "reg")})
    return work, test, model


def test_the_model_learns_what_a_missing_value_says(fitted_with_gaps):
    from pipeline.model_store import load_model
    from pipeline.scoring import score_store

    work, test, _ = fitted_with_gaps
    model = load_model(work / "model.zarr")
    assert model.view_.missing.flagged == (0,) and model.view_.missing.features(["a", "b"])[-1] == "a missing"
    assert np.ndim(model.basis_x_.kernel.lengthscale) == 0 or len(model.basis_x_.kernel.lengthscale) == 3
    score_store(work / "model.zarr", work / "test.zarr", work / "scores.zarr", ["mean"])
    import zarr

    mean = zarr.open_group(work / "scores.zarr", mode="r")["mean"][:, 0]
    gone = test["a"].isna().to_numpy()
    truth = np.where(gone, 3.0, test["a"].fillna(0).to_numpy()) + 0.2 * test["b"].fillna(0).to_numpy()
    assert np.abs(mean[gone] - 3.0).mean() < 0.3  # a median imputation would say about 0
    assert np.sqrt(np.mean((mean - truth)[~test["b"].isna().to_numpy()] ** 2)) < 0.3


def test_scoring_reads_missing_values_through_the_stored_rule(fitted_with_gaps):
    """Scores of rows with missing values equal the model's own laws at the rows filled and flagged by
    hand: a flagged column at its median with indicator 1, an unflagged one at its median."""
    from pipeline.model_store import load_model
    from pipeline.scoring import score_store
    from pipeline.staging import open_staged

    work, test, fitted = fitted_with_gaps
    model = load_model(work / "model.zarr")
    assert model.view_.missing == fitted.view_.missing
    path = score_store(work / "model.zarr", work / "test.zarr", work / "scores_q.zarr", ["quantile:0.1,0.5,0.9"])
    import zarr

    from data_schemas.scores import scores_array

    quantiles = scores_array(zarr.open_group(path, mode="r"), "quantile:0.1,0.5,0.9")[:]
    x = open_staged(work / "test.zarr")["x"][:]
    rule = model.view_.missing
    by_hand = np.column_stack([np.where(np.isnan(x[:, 0]), rule.fill[0], x[:, 0]),
                               np.where(np.isnan(x[:, 1]), rule.fill[1], x[:, 1]), np.isnan(x[:, 0])])
    np.testing.assert_allclose(quantiles, model.law_.conditional_quantile(by_hand, [0.1, 0.5, 0.9]), rtol=0, atol=1e-12)
    np.testing.assert_allclose(quantiles, model.conditional_quantile(x, [0.1, 0.5, 0.9]), rtol=0, atol=1e-12)
    assert np.isnan(x[:10, 1]).all() and rule.fill[1] == pytest.approx(np.median(test["b"].dropna()), abs=0.2)


def test_evaluation_and_the_model_card_name_the_indicator(fitted_with_gaps, capsys):
    from jdl.cli import main

    work, _, _ = fitted_with_gaps
    capsys.readouterr()
    assert main(["inspect", str(work / "model.zarr")]) == 0
    assert "a missing" in capsys.readouterr().out
    assert main(["evaluate", str(work / "model.zarr"), str(work / "test.zarr"), "--out", str(work / "ev.zarr")]) == 0


def test_a_model_without_the_rule_refuses_missing_values_and_compression_refuses_them(fitted_with_gaps):
    from pipeline.compression import compress_store
    from jdlcore.features.view import XView

    work, _, _ = fitted_with_gaps
    with pytest.raises(ValueError, match=r"^x: column 1 \(from 0\) has missing values, and the model reads none"):
        XView().rows(np.array([[0.0, 1.0], [0.5, np.nan]]))
    with pytest.raises(ValueError, match=r"has missing x values \(in a\); compression"):
        compress_store(work / "train.zarr", work / "small.zarr", m=20)
    assert not (work / "small.zarr").exists()


def test_the_python_recipe_reads_missing_values_as_the_pipeline_does():
    """The rule by hand (what ``ConditionalModel`` does): learned on the training rows, applied at fit and
    at queries."""
    from jdlcore import JDL, tune

    rng = np.random.default_rng(5)
    train, test = informative_gaps(rng, 600), informative_gaps(rng, 300)
    X, Y = train[["a", "b"]].to_numpy(), train[["y"]].to_numpy()
    rule = MissingValues.learn(X)
    result = tune(rule.augment(X), Y, estimator=JDL(kernel_x=GaussianKernel(1.0, categorical=rule.categorical([]))), summaries="none")
    gone = test["a"].isna().to_numpy()
    mean = result.model.predict(rule.augment(test[["a", "b"]].to_numpy()))
    assert np.abs(mean[gone] - 3.0).mean() < 0.3
    with pytest.raises(ValueError, match=r"^X: contains NaN"):
        JDL().fit(X, Y)


def test_a_fit_without_a_tuning_learns_the_rule_from_its_own_rows(fitted_with_gaps, capsys):
    """``jdl fit`` with explicit settings: the rule from the fit's sample of the data, a scalar lengthscale
    for every column the view reads, and a per-feature one refused unless it covers the indicator."""
    from jdl.cli import main
    from pipeline.model_store import load_model

    work, _, _ = fitted_with_gaps
    arguments = ["fit", str(work / "train.zarr"), "--lengthscale-y", "0.5", "--reg", "1e-4"]
    assert main([*arguments, "--lengthscale-x", "0.8", "--out", str(work / "plain.zarr")]) == 0
    model = load_model(work / "plain.zarr")
    assert model.view_.missing.flagged == (0,) and model.basis_x_.width == 3
    capsys.readouterr()
    assert main([*arguments, "--lengthscale-x", "0.8,1.2", "--out", str(work / "bad.zarr")]) == 2
    assert "lengthscale_x: has 2 entries but the data has 3 x features (a, b, a missing)" in capsys.readouterr().err
    assert not (work / "bad.zarr").exists()


def test_a_fit_and_a_scoring_on_a_real_dask_scheduler_read_missing_values_as_in_memory(fitted_with_gaps,
                                                                                      dask_client):
    """Each chunk's x is read through the rule on the workers (``XView.rows`` as a task): the model and its
    scores equal the in-memory ones."""
    import zarr

    from jdl.cli import main
    from pipeline.model_store import load_model
    from pipeline.staging import open_staged

    work, _, _ = fitted_with_gaps
    models = {}
    for name, scheduler in (("memory", "memory"), ("dask", dask_client.scheduler.address)):
        assert main(["fit", str(work / "train.zarr"), "--tuning", str(work / "tuning.zarr"), "--out",
                     str(work / f"fit-{name}.zarr"), "--scheduler", scheduler]) == 0
        models[name] = load_model(work / f"fit-{name}.zarr")
    assert models["dask"].view_.missing == models["memory"].view_.missing
    X = open_staged(work / "test.zarr")["x"][:]  # as staged, missing values and all
    np.testing.assert_allclose(models["dask"].conditional_expectation(X), models["memory"].conditional_expectation(X),
                               rtol=0, atol=1e-8)
    assert main(["score", str(work / "fit-memory.zarr"), str(work / "test.zarr"), "--out", str(work / "s-dask.zarr"),
                 "--function", "mean", "--scheduler", dask_client.scheduler.address]) == 0
    np.testing.assert_allclose(zarr.open_group(work / "s-dask.zarr", mode="r")["mean"][:],
                               models["memory"].conditional_expectation(X), rtol=0, atol=1e-12)
