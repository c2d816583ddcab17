"""The fitted model as one object (``jdlcore.ConditionalModel``): its queries take x rows as the user has
them and answer on y's scale, against brute force from the law's weights; a stored default-path model
answers from ``load_model`` exactly as ``jdl score`` and ``jdl evaluate`` write."""
import numpy as np
import pytest

from jdlcore import CME, JDL, ConditionalModel, GaussianKernel
from jdlcore.features.missing import MissingValues
from jdlcore.features.view import XView

LEVELS = np.array([0.1, 0.5, 0.9])


def _gappy(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """x: a continuous column, one missing a fifth of its values (y shifts where it is missing), and a
    category code in {0, 1, 2}; y scalar."""
    rng = np.random.default_rng(seed)
    X = np.column_stack([rng.standard_normal(n), rng.standard_normal(n), rng.integers(0, 3, n).astype(float)])
    gone = rng.uniform(size=n) < 0.2
    y = X[:, 0] + 0.5 * X[:, 2] + np.where(gone, 1.5, 0.3 * X[:, 1]) + 0.3 * rng.standard_normal(n)
    X[gone, 1] = np.nan
    return X, y


@pytest.fixture(scope="module")
def gappy_model():
    X, y = _gappy(600)
    law = JDL(kernel_x=GaussianKernel(1.5), kernel_y=GaussianKernel(0.5), reg=1e-4)
    return ConditionalModel(law, categorical=(2,)).fit(X, y), X, y


def test_fit_learns_the_missing_value_rule_and_queries_read_rows_through_it(gappy_model):
    model, X, y = gappy_model
    assert model.view_.missing == MissingValues.learn(X, (2,)) and model.view_.missing.flagged == (1,)
    Z = model.view_.rows(X[:40])  # the filled columns, the code, then the indicator of column 1
    assert Z.shape == (40, 4) and not np.isnan(Z).any()
    assert list(model.law_.kernel_x.categorical) == [2, 3]  # the code and the indicator compared as categories
    np.testing.assert_array_equal(model.conditional_quantile(X[:40], LEVELS),
                                  model.law_.conditional_quantile(Z, LEVELS))
    np.testing.assert_array_equal(model.predict(X[:40]), model.law_.predict(Z))
    np.testing.assert_array_equal(model.crps(X[:40], y[:40]), model.law_.crps(Z, y[:40]))
    # the rows that miss column 1 are told apart from the others by the indicator
    missing = np.isnan(X[:, 1])
    mean = model.predict(X)
    assert abs(np.mean(mean[missing] - y[missing])) < 0.2 and abs(np.mean(mean[~missing] - y[~missing])) < 0.2
    assert model.diagnostics_ is model.law_.diagnostics_ and model.reg == 1e-4  # read through to the law
    laws, t = model.conditional_law(X[:40]), np.array([-1.0, 0.0, 2.0])  # each row's law, read once
    np.testing.assert_allclose(laws.cdf(t), model.conditional_cdf(X[:40], t), atol=1e-12)
    np.testing.assert_allclose(laws.mean()[:, 0], model.predict(X[:40]), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(laws.crps(y[:40]), model.crps(X[:40], y[:40]), rtol=1e-12, atol=1e-12)


def test_fit_keeps_the_kernel_s_categorical_columns_and_checks_its_lengthscales():
    X, y = _gappy(300, seed=6)
    model = ConditionalModel(JDL(kernel_x=GaussianKernel(1.5, categorical=[2]), kernel_y=GaussianKernel(0.5))).fit(X, y)
    assert list(model.law_.kernel_x.categorical) == [2, 3] and model.view_.missing.fill[2] == -1.0  # codes not filled
    with pytest.raises(ValueError, match=r"^kernel_x: has 3 lengthscales for the 4 columns the model reads \(3 of X, "
                                         r"then an indicator per column that misses values: \[1\]\); give 4 or one"):
        ConditionalModel(JDL(kernel_x=GaussianKernel([1.0, 1.0, 1.0]))).fit(X, y)
    assert model.n_features_in_ == 3


def test_a_table_with_unnamed_columns_is_read_by_position_labels():
    pd = pytest.importorskip("pandas")
    X, y = _gappy(300, seed=7)
    model = ConditionalModel(JDL(kernel_x=GaussianKernel(1.5)), categorical=(2,)).fit(pd.DataFrame(X), y)
    np.testing.assert_array_equal(model.predict(pd.DataFrame(X[:5])), model.predict(X[:5]))


def test_a_table_with_text_columns_is_fitted_as_jdl_stage_codes_it():
    """A DataFrame with a text column (a missing cell among them), a column of a categorical dtype and one
    of text mixed with a few numbers: the model learns their levels in order of first appearance, as
    ``jdl stage`` does, and answers as the same law fitted on those codes declared categorical, to the bit;
    it is queried by level name, and a level it lacks is refused."""
    pd = pytest.importorskip("pandas")
    from data_schemas.data import LevelEncoder

    rng = np.random.default_rng(3)
    n = 400
    a, kind, grade = rng.standard_normal(n), rng.choice(["p", "q", "r"], n), rng.choice(["K", 1, 2], n)
    y = a + 2.0 * (kind == "q") - (grade == "K") + 0.3 * rng.standard_normal(n)
    text = kind.astype(object)
    text[5] = None
    frame = pd.DataFrame({"a": a, "kind": text, "size": pd.Categorical(rng.choice(["s", "m"], n)),
                          "grade": grade.astype(object)})
    law = JDL(kernel_x=GaussianKernel(1.0), kernel_y=GaussianKernel(0.5), reg=1e-4)
    model = ConditionalModel(law).fit(frame, y)
    staged = {name: LevelEncoder(name) for name in ("kind", "size", "grade")}
    codes = np.column_stack([a] + [staged[name].encode(frame[name].to_numpy(object), 0) for name in staged])
    assert model.columns_.levels == {name: tuple(encoder.levels) for name, encoder in staged.items()}
    assert model.columns_.levels["kind"][:2] == (kind[0], kind[1]) and "<missing>" in model.columns_.levels["kind"]
    assert model.law_.kernel_x.categorical == (1, 2, 3)
    by_codes = ConditionalModel(law, categorical=(1, 2, 3)).fit(codes, y)
    np.testing.assert_array_equal(model.conditional_quantile(frame, LEVELS), by_codes.conditional_quantile(codes, LEVELS))
    assert np.abs(model.predict(frame).ravel() - y).mean() < 0.5  # the levels carry the law's shifts
    with pytest.raises(ValueError, match=r"^X column 'kind': level 'z' \(row 0\) is not one the model was fitted on"):
        model.predict(frame.head(1).assign(kind=["z"]))


def test_the_law_s_row_methods_do_not_read_through(gappy_model):
    model, X, y = gappy_model
    with pytest.raises(AttributeError, match="marginal_ratio"):
        model.marginal_ratio(X, y)  # the law's: it reads rows as the kernel does
    with pytest.raises(RuntimeError, match="call fit"):
        ConditionalModel().predict(X)


def test_params_follow_the_estimator_contract():
    model = ConditionalModel(JDL(reg=1e-3), categorical=(2,))
    assert model.get_params(deep=False) == {"law": model.law, "categorical": (2,)}
    assert model.set_params(law__reg=1e-2).law.reg == 1e-2
    with pytest.raises(ValueError, match="not a parameter of ConditionalModel"):
        model.set_params(regs=1)


@pytest.fixture(scope="module")
def standardised_model():
    """A law of r = (y - median) / spread, the median and the spread the boosted summaries of x."""
    pytest.importorskip("lightgbm")
    from jdlcore.features.summaries import fit_summaries

    rng = np.random.default_rng(3)
    X = rng.standard_normal((1_500, 2))
    y = np.exp(X[:, 0]) + (0.2 + 0.5 * (X[:, 1] > 0)) * rng.standard_normal(1_500)
    view = XView(MissingValues.learn(X), fit_summaries(X, y, seed=0).standardised())
    law = JDL(kernel_x=GaussianKernel(2.5), kernel_y=GaussianKernel(0.5), reg=1e-4).fit(*view.pair(X, y))
    return ConditionalModel.of(law, view), X[:60], y[:60]


def _laws_by_hand(model, X):
    """Each row's weights (q, N) and atoms of y (q, N), moved to y's scale from the law of r by hand."""
    Z = model.view_.rows(X)
    summaries = model.view_.summaries
    median = Z[:, -len(summaries.in_use) + summaries.in_use.index("summary_median")]
    spread = np.maximum(np.exp(Z[:, -len(summaries.in_use) + summaries.in_use.index("summary_log_spread")]),
                        summaries.scale_floor)
    atoms = np.clip(median[:, None] + spread[:, None] * model.law_.law_atoms_[None, :, 0], *summaries.y_range)
    return model.law_.conditional_weights(Z), atoms


def test_a_standardised_model_answers_on_y_s_scale_against_brute_force(standardised_model):
    model, X, y = standardised_model
    assert model.standardises
    P, atoms = _laws_by_hand(model, X)
    np.testing.assert_allclose(model.predict(X).ravel(), np.sum(P * atoms, axis=1), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(model.conditional_expectation(X, lambda v: v**2)[:, 0], np.sum(P * atoms**2, axis=1),
                               rtol=1e-11, atol=1e-12)
    t = np.array([0.0, 1.0, 2.5])
    np.testing.assert_allclose(model.conditional_cdf(X, t), np.einsum("ik,ikt->it", P, atoms[:, :, None] <= t),
                               atol=1e-12)
    running = np.cumsum(np.take_along_axis(P, np.argsort(atoms, axis=1, kind="stable"), axis=1), axis=1)
    ascending = np.sort(atoms, axis=1)
    for j, level in enumerate(LEVELS):  # the least atom whose CDF reaches the level
        first = np.argmax(running >= level - 1e-12, axis=1)
        np.testing.assert_allclose(model.conditional_quantile(X, LEVELS)[:, j], ascending[np.arange(len(X)), first],
                                   rtol=1e-12)
    brute = (np.sum(P * np.abs(atoms - y[:, None]), axis=1)
             - 0.5 * np.einsum("ij,ijk,ik->i", P, np.abs(atoms[:, :, None] - atoms[:, None, :]), P))
    np.testing.assert_allclose(model.crps(X, y), brute, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(model.energy_score(X, y), brute, rtol=1e-9, atol=1e-12)
    laws = model.conditional_law(X)
    np.testing.assert_allclose(laws.atoms_on_y()[..., 0], atoms, rtol=1e-12)
    np.testing.assert_allclose(laws.cdf(t), np.einsum("ik,ikt->it", P, atoms[:, :, None] <= t), atol=1e-12)
    np.testing.assert_allclose(laws.quantiles(LEVELS), model.conditional_quantile(X, LEVELS), rtol=1e-12)
    np.testing.assert_allclose(laws.mean()[:, 0], np.sum(P * atoms, axis=1), rtol=1e-12, atol=1e-12)


def test_draws_follow_the_weights(standardised_model):
    model, X, _ = standardised_model
    draws = model.sample(X[:2], 40_000, seed=5)
    assert draws.shape == (2, 40_000, 1)
    np.testing.assert_array_equal(draws, model.sample(X[:2], 40_000, seed=5))  # seeded
    P, atoms = _laws_by_hand(model, X[:2])
    for i in range(2):
        for t in np.quantile(atoms[i], [0.25, 0.5, 0.75]):  # the empirical CDF at three points, within 5 sd
            expected = np.sum(P[i] * (atoms[i] <= t))
            assert abs(np.mean(draws[i, :, 0] <= t) - expected) < 5 * np.sqrt(0.25 / 40_000) + 1e-12


def test_the_energy_score_of_a_vector_y_is_its_pairwise_definition():
    rng = np.random.default_rng(2)
    X = rng.standard_normal((300, 1))
    Y = np.column_stack([X[:, 0], -X[:, 0]]) + 0.4 * rng.standard_normal((300, 2))
    model = ConditionalModel(JDL(kernel_x=GaussianKernel(0.7), kernel_y=GaussianKernel(0.7), reg=1e-4)).fit(X, Y)
    P, atoms = model.conditional_weights(X[:20]), model.law_atoms_
    distance = np.linalg.norm(atoms[None, :, :] - Y[:20, None, :], axis=2)
    spread = np.linalg.norm(atoms[:, None, :] - atoms[None, :, :], axis=2)
    brute = np.sum(P * distance, axis=1) - 0.5 * np.einsum("ij,jk,ik->i", P, spread, P)
    np.testing.assert_allclose(model.energy_score(X[:20], Y[:20]), brute, rtol=1e-10, atol=1e-12)


@pytest.fixture(scope="module")
def default_path(tmp_path_factory):
    """The default path on the command line: a table with boosted summaries, y standardised by them, a
    column missing values and a categorical column staged, tuned, fitted, scored and evaluated; (the
    folder, the table as a DataFrame, y, the functions scored)."""
    pd = pytest.importorskip("pandas")
    pytest.importorskip("zarr")
    from jdl.cli import main

    tmp_path = tmp_path_factory.mktemp("default-path")
    rng = np.random.default_rng(1)  # y's median and spread both depend on x; b misses a fifth of its values
    n = 2_000
    a, b, c = rng.standard_normal(n), rng.uniform(-2, 2, n), rng.integers(0, 4, n)
    y = np.sin(1.5 * a) + 0.5 * c + (0.2 + 0.3 * np.abs(b)) * rng.standard_normal(n)
    b[rng.uniform(size=n) < 0.2] = np.nan
    frame = pd.DataFrame({"a": a, "b": b, "c": np.array(["p", "q", "r", "s"])[c], "t": y})
    frame.to_parquet(tmp_path / "d.parquet")
    data, tuning, model_path = tmp_path / "d.zarr", tmp_path / "tuning.zarr", tmp_path / "m.zarr"
    assert main(["stage", str(tmp_path / "d.parquet"), "--x", "a,b,c", "--y", "t", "--categorical", "c",
                 "--out", str(data)]) == 0
    assert main(["tune", str(data), "--out", str(tuning), "--folds", "1", "--summaries", "standardised"]) == 0
    assert main(["fit", str(data), "--tuning", str(tuning), "--out", str(model_path)]) == 0
    functions = ["mean", "second_moment", "cdf:-1,0,1.5", "quantile:0.1,0.5,0.9"]
    assert main(["score", str(model_path), str(data), "--out", str(tmp_path / "s.zarr"),
                 *[part for spec in functions for part in ("--function", spec)]]) == 0
    assert main(["evaluate", str(model_path), str(data), "--out", str(tmp_path / "e.zarr")]) == 0
    return tmp_path, frame, y, functions


def test_a_stored_default_model_answers_as_score_and_evaluate_write(default_path):
    """The default path with boosted summaries, y standardised by them, a column missing values and a
    categorical column: the loaded model's answers at the staged rows are what ``jdl score`` and ``jdl
    evaluate`` wrote, to 1e-12."""
    pd = pytest.importorskip("pandas")
    zarr = pytest.importorskip("zarr")
    import xarray as xr

    from pipeline.model_store import load_model

    tmp_path, frame, y, functions = default_path
    data, model_path = tmp_path / "d.zarr", tmp_path / "m.zarr"
    model = load_model(model_path)
    assert isinstance(model, ConditionalModel) and model.standardises and model.view_.missing.flagged == (1,)
    rows = zarr.open_group(data, mode="r")["x"][:]  # as staged: category codes, NaN where missing
    scores = zarr.open_group(tmp_path / "s.zarr", mode="r")
    got = {"mean": model.predict(rows)[:, None], "second_moment": model.conditional_expectation(rows, lambda v: v**2),
           "cdf:-1,0,1.5": model.conditional_cdf(rows, [-1, 0, 1.5]),
           "quantile:0.1,0.5,0.9": model.conditional_quantile(rows, [0.1, 0.5, 0.9])}
    for spec in functions:
        written = np.asarray(scores[spec][:]).reshape(len(rows), -1)
        np.testing.assert_allclose(got[spec].reshape(len(rows), -1), written, rtol=1e-12, atol=1e-12, err_msg=spec)
    with xr.open_zarr(tmp_path / "e.zarr") as evaluation:
        np.testing.assert_allclose(model.crps(rows, y), evaluation["crps"].values, rtol=1e-12, atol=1e-12)
    # the same rows as a table, the categorical column by level name (its columns in another order)
    table = frame[["c", "b", "a"]]
    np.testing.assert_array_equal(model.conditional_quantile(table, [0.1, 0.5, 0.9]), got["quantile:0.1,0.5,0.9"])
    unseen = table.head(3).assign(c=["p", "z", "q"])
    with pytest.raises(ValueError, match=r"^X column 'c': level 'z' \(row 1\) is not one the model was fitted on"):
        model.predict(unseen)
    other = model.rows(unseen, unseen="other")  # the kernel's rows: a, b, the code of c, ...
    assert other[1, 2] == -1.0 and other[0, 2] == model.columns_.levels["c"].index("p")
    with pytest.raises(ValueError, match=r"^X: has no column 'a'; the model reads a, b, c"):
        model.predict(table[["b", "c"]])
    with_na = table.head(2).assign(c=pd.array(["p", pd.NA], dtype="string"))  # pandas' NA: a missing level
    with pytest.raises(ValueError, match=r"^X column 'c': level '<missing>' \(row 1\) is not one"):
        model.predict(with_na)  # the training rows of c missed no value
    # its parameters are its law's, and the codes of c are categorical: a clone refits the same model
    assert model.law.get_params(deep=False) == model.law_.get_params(deep=False) and model.categorical == (2,)


def test_jdlcore_tune_gives_the_model_of_the_command_line_on_the_same_rows(default_path):
    """``jdlcore.tune`` on the staged rows (category codes, NaN where missing) with the settings of the
    command line's tuning chooses the same view and setting, and its refitted model answers as ``jdl
    fit --tuning``'s: the 99 quantiles of the crps_99 and the crps to 1e-9. Neither model reports the law
    of the standardised y as near the marginal: both compare with the marginal on y's scale."""
    import json
    import warnings

    zarr = pytest.importorskip("zarr")
    from jdlcore import tune
    from jdlcore.models.degeneracy import DegeneracyWarning
    from pipeline.model_store import load_model
    from pipeline.tuning import load_tuning

    tmp_path, _, y, _ = default_path
    rows = zarr.open_group(tmp_path / "d.zarr", mode="r")["x"][:]
    with warnings.catch_warnings():
        warnings.simplefilter("error", DegeneracyWarning)  # the law of r is judged on y's scale (``fit_law``)
        result = tune(rows, y, estimator=JDL(kernel_x=GaussianKernel(1.0, categorical=[2])), folds=1,
                      summaries="standardised")
    stored, tuning = load_model(tmp_path / "m.zarr"), load_tuning(tmp_path / "tuning.zarr")
    for fitted in (result.model, stored):
        assert "near_marginal" not in fitted.diagnostics_["degeneracies"] and fitted.diagnostics_["marginal_ratio"] < 0.6
    best = json.loads(tuning.attrs["best"])
    assert result.best["reg"] == best["reg"] and result.best["score"] == pytest.approx(best["score"], rel=1e-12)
    np.testing.assert_allclose(result.best["lengthscale_x"], best["lengthscale_x"], rtol=1e-12)
    model = result.model
    assert isinstance(model, ConditionalModel) and model.view_.missing == stored.view_.missing
    assert model.standardises and model.view_.summaries.in_use == stored.view_.summaries.in_use
    assert result.summaries_gain == pytest.approx(tuning.attrs["summaries_gain"], rel=1e-9)
    levels = np.arange(1, 100) / 100
    np.testing.assert_allclose(model.conditional_quantile(rows, levels), stored.conditional_quantile(rows, levels),
                               rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(model.crps(rows, y), stored.crps(rows, y), rtol=1e-9, atol=1e-12)


def test_state_rebuilds_the_whole_model(default_path):
    """``state()`` holds the law, the missing-value rule, the summaries and the columns as arrays and JSON;
    ``from_state`` rebuilds a model that answers to the bit, by level name too; a missing part is refused."""
    import json

    zarr = pytest.importorskip("zarr")
    from pipeline.model_store import load_model

    tmp_path, frame, y, _ = default_path
    stored = load_model(tmp_path / "m.zarr")
    state = stored.state()
    json.dumps({part: value for part, value in state.items() if part != "law"})
    again = ConditionalModel.from_state(state)
    rows = zarr.open_group(tmp_path / "d.zarr", mode="r")["x"][:]
    assert again.standardises and again.view_ == stored.view_ and again.columns_ == stored.columns_
    np.testing.assert_array_equal(again.conditional_quantile(rows, LEVELS), stored.conditional_quantile(rows, LEVELS))
    np.testing.assert_array_equal(again.crps(frame[["a", "b", "c"]], y), stored.crps(rows, y))
    with pytest.raises(ValueError, match="^state: missing part 'summaries'"):
        ConditionalModel.from_state({part: value for part, value in state.items() if part != "summaries"})


def test_new_rows_staged_without_y_are_scored_and_refused_by_the_commands_that_need_y(tmp_path, capsys):
    """A real table's held-out rows staged without y score as the same rows staged with their y do; tune,
    fit and evaluate refuse such a batch in one line and write nothing."""
    pd = pytest.importorskip("pandas")
    zarr = pytest.importorskip("zarr")
    from sklearn.datasets import load_diabetes

    from jdl.cli import main

    frame = load_diabetes(as_frame=True).frame  # 442 rows, shipped with scikit-learn
    x = ["age", "bmi", "bp", "s5"]
    frame.iloc[:350].to_parquet(tmp_path / "train.parquet")
    held_out = frame.iloc[350:]
    held_out.to_parquet(tmp_path / "held.parquet")
    held_out[x].iloc[:1].to_parquet(tmp_path / "one.parquet")  # one row, every column constant
    stage = ["stage", "--x", ",".join(x)]
    assert main([*stage[:1], str(tmp_path / "train.parquet"), *stage[1:], "--y", "target",
                 "--out", str(tmp_path / "train.zarr")]) == 0
    assert main([*stage[:1], str(tmp_path / "held.parquet"), *stage[1:], "--y", "target",
                 "--out", str(tmp_path / "with-y.zarr")]) == 0
    capsys.readouterr()
    assert main([*stage[:1], str(tmp_path / "held.parquet"), *stage[1:], "--out", str(tmp_path / "new.zarr")]) == 0
    assert "staged 92 rows: x ['age', 'bmi', 'bp', 's5'], no y (a batch to score)" in capsys.readouterr().out
    assert main([*stage[:1], str(tmp_path / "one.parquet"), *stage[1:], "--out", str(tmp_path / "one.zarr")]) == 0
    assert main(["fit", str(tmp_path / "train.zarr"), "--lengthscale-x", "3", "--lengthscale-y", "0.5", "--reg",
                 "1e-4", "--out", str(tmp_path / "m.zarr")]) == 0
    functions = ["--function", "mean", "--function", "quantile:0.1,0.5,0.9"]
    for name in ("new", "with-y", "one"):
        assert main(["score", str(tmp_path / "m.zarr"), str(tmp_path / f"{name}.zarr"), "--out",
                     str(tmp_path / f"s-{name}.zarr"), *functions]) == 0
    scores = {name: zarr.open_group(tmp_path / f"s-{name}.zarr", mode="r") for name in ("new", "with-y", "one")}
    for spec in ("mean", "quantile:0.1,0.5,0.9"):
        np.testing.assert_array_equal(scores["new"][spec][:], scores["with-y"][spec][:])
        np.testing.assert_allclose(scores["one"][spec][:], scores["with-y"][spec][:1], rtol=1e-12)  # one row's BLAS
    capsys.readouterr()
    for command in (["tune", str(tmp_path / "new.zarr"), "--out", str(tmp_path / "t.zarr")],
                    ["fit", str(tmp_path / "new.zarr"), "--lengthscale-x", "1", "--lengthscale-y", "1", "--reg", "1e-4",
                     "--out", str(tmp_path / "f.zarr")],
                    ["evaluate", str(tmp_path / "m.zarr"), str(tmp_path / "new.zarr"), "--out", str(tmp_path / "e.zarr")]):
        assert main(command) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "has no y, staged as a batch to score (jdl stage without --y)" in err[0], err
        assert f"; {command[0]} needs the y of each row: stage it with --y" in err[0]
    assert not any((tmp_path / name).exists() for name in ("t.zarr", "f.zarr", "e.zarr"))


def test_scikit_learn_clones_and_cross_validates_it_on_rows_with_missing_values():
    sklearn = pytest.importorskip("sklearn")
    from sklearn.base import clone
    from sklearn.model_selection import cross_val_score

    X, y = _gappy(450, seed=4)
    model = ConditionalModel(JDL(kernel_x=GaussianKernel(1.5), kernel_y=GaussianKernel(0.5), reg=1e-4),
                             categorical=(2,))
    copy = clone(model)
    assert copy.get_params(deep=False)["categorical"] == (2,) and copy.law is not model.law
    scores = cross_val_score(model, X, y, cv=3)  # the estimator's score: minus the mean CRPS
    assert scores.shape == (3,) and np.all(scores < 0)
    fitted = clone(model).fit(X[:300], y[:300])
    assert fitted.score(X[300:], y[300:]) == pytest.approx(-np.mean(fitted.crps(X[300:], y[300:])), rel=1e-12)
    assert sklearn.utils.get_tags(model).input_tags.allow_nan


def test_the_tuned_default_is_jdlcore_tune_s_model_and_scikit_learn_cross_validates_it():
    """``TunedModel`` fits the model ``jdlcore.tune`` chooses (the same answers to the
    bit), keeps its parameters through a clone, and ``cross_val_score`` tunes it on each fold."""
    from sklearn.base import clone
    from sklearn.model_selection import cross_val_score

    from jdlcore import TunedModel, tune

    X, y = _gappy(400, seed=9)
    default = TunedModel(categorical=(2,))
    model = clone(default).fit(X, y)
    tuned = tune(X, y, estimator=JDL(kernel_x=GaussianKernel(1.0, categorical=[2]))).model
    np.testing.assert_array_equal(model.conditional_quantile(X[:50], LEVELS), tuned.conditional_quantile(X[:50], LEVELS))
    assert model.view_ == tuned.view_ and model.view_.missing.flagged == (1,)
    assert isinstance(model, ConditionalModel)
    assert clone(default).get_params(deep=False) == {"law": None, "categorical": (2,), "summaries": "auto"}
    assert repr(default) == "TunedModel(law=None, categorical=(2,))"
    assert repr(clone(default).set_params(summaries="none")) == "TunedModel(law=None, categorical=(2,), summaries='none')"
    scores = cross_val_score(clone(default).set_params(summaries="none"), X, y, cv=2)  # each fold tuned afresh
    assert scores.shape == (2,) and np.all(scores < 0)
    with pytest.raises(ValueError, match="^law: TunedModel tunes a jdl law"):
        TunedModel(CME()).fit(X, y)


def test_laws_read_in_blocks_of_rows_answer_as_all_rows_at_once(standardised_model, monkeypatch):
    model, X, _ = standardised_model
    square = lambda v: v**2  # noqa: E731
    whole, draws = model.conditional_expectation(X, square), model.sample(X, 50, seed=2)
    monkeypatch.setattr("jdlcore.models.conditional_model.SCORE_ROWS", 7)  # 60 rows in 9 blocks
    np.testing.assert_allclose(model.conditional_expectation(X, square), whole, rtol=1e-13, atol=1e-13)
    np.testing.assert_array_equal(model.sample(X, 50, seed=2), draws)  # the seeded stream read row by row
