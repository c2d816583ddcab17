"""Categorical x columns: the kernel against a brute-force one-hot embedding, staging (detected and
declared columns, their levels), the levels stored with the model and read by name at scoring, the
unseen-level rules, and bad input refused in one line with nothing written."""
import json

import numpy as np
import pytest

from jdlcore import JDL, GaussianKernel, LaplaceKernel, Matern32Kernel, Matern52Kernel, kernel_from_dict
from jdlcore.kernels import median_heuristic
from jdlcore.scaling import robust_scaling

pd = pytest.importorskip("pandas")
zarr = pytest.importorskip("zarr")

COLORS = {"red": 0.0, "green": 2.0, "blue": -2.0}  # the colour shifts y; the code column does nothing


def table(n: int, seed: int, colors=tuple(COLORS)) -> "pd.DataFrame":
    """u (continuous), color (text: shifts y), code (integers 1-3, declared categorical: irrelevant)."""
    rng = np.random.default_rng(seed)
    color = rng.choice(list(colors), n)
    u = rng.standard_normal(n)
    y = np.array([COLORS.get(c, 0.0) for c in color]) + 0.5 * u + 0.3 * rng.standard_normal(n)
    return pd.DataFrame({"u": u, "color": color, "code": rng.integers(1, 4, n), "y": y})


def one_hot(A: np.ndarray, kernel, levels: dict[int, int]) -> np.ndarray:
    """The embedding the categorical kernel stands for: continuous columns standardised and over their
    lengthscale, each categorical column j as one-hot over its levels times 1 / (sqrt(2) l_j)."""
    d = A.shape[1]
    lengthscale = np.broadcast_to(np.asarray(kernel.lengthscale, dtype=float), (d,))
    location = np.zeros(d) if kernel.location is None else np.broadcast_to(kernel.location, (d,))
    scale = np.ones(d) if kernel.scale is None else np.broadcast_to(kernel.scale, (d,))
    parts = []
    for j in range(d):
        if j in levels:
            parts.append((A[:, j, None] == np.arange(levels[j])[None, :]) / (np.sqrt(2.0) * lengthscale[j]))
        else:
            parts.append(((A[:, j] - location[j]) / scale[j] / lengthscale[j])[:, None])
    return np.hstack(parts)


def codes_and_numbers(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.c_[3.0 * rng.standard_normal(n) + 5.0, rng.integers(0, 4, n), rng.uniform(size=n), rng.integers(0, 3, n)]


# -- the kernel ------------------------------------------------------------------------------------
@pytest.mark.parametrize("family, of_distance", [
    (GaussianKernel, lambda r: np.exp(-r**2 / 2)),
    (LaplaceKernel, lambda r: np.exp(-r)),
    (Matern32Kernel, lambda r: (1 + np.sqrt(3) * r) * np.exp(-np.sqrt(3) * r)),
    (Matern52Kernel, lambda r: (1 + np.sqrt(5) * r + 5 * r**2 / 3) * np.exp(-np.sqrt(5) * r)),
])
@pytest.mark.parametrize("lengthscale", [0.8, np.array([0.7, 0.4, 1.3, 2.5])])
def test_a_categorical_column_is_the_kernel_of_its_one_hot_codes(family, of_distance, lengthscale):
    Z = codes_and_numbers(60, 0)
    kernel = family(lengthscale, categorical=[1, 3]).standardised(Z)
    assert kernel.location[[1, 3]].tolist() == [0.0, 0.0] and kernel.scale[[1, 3]].tolist() == [1.0, 1.0]
    E = one_hot(Z, kernel, {1: 4, 3: 3})
    brute = of_distance(np.sqrt(((E[:, None, :] - E[None, :, :]) ** 2).sum(axis=-1)))
    # the Laplace kernel takes the square root of a squared distance computed as |a|^2 + |b|^2 - 2 a.b,
    # whose rounding (1e-16 near the diagonal) becomes 1e-8 after the root
    tolerance = 1e-7 if family is LaplaceKernel else 1e-13
    np.testing.assert_allclose(kernel(Z), brute, rtol=0, atol=tolerance)
    # positive semi-definite (it is a kernel of an embedding in a Euclidean space)
    assert np.linalg.eigvalsh(kernel(Z)).min() > -1e-10
    # an "other" code (-1) matches no level: along its column it is at distance 1 / l_j^2 from every row
    other = Z[:5].copy()
    other[:, 1] = -1.0
    E_other = one_hot(other, kernel, {1: 4, 3: 3})
    brute_other = of_distance(np.sqrt(((E_other[:, None, :] - E[None, :, :]) ** 2).sum(axis=-1)
                                      + 0.5 / np.broadcast_to(lengthscale, (4,))[1] ** 2))
    np.testing.assert_allclose(kernel(other, Z), brute_other, rtol=0, atol=tolerance)


def test_each_category_mismatch_adds_its_weight_in_column_order_to_the_bit(monkeypatch):
    """The mismatches are weighed in slabs of rows, column after column: every squared distance is the
    continuous part plus 1 / l_j^2 for each categorical column j whose codes differ, added in column order,
    to the bit (a missing code differs from every code, itself included); a weight that overflows (a
    lengthscale of 1e-170) adds inf where the codes differ and nothing where they agree."""
    import jdlcore.kernels as kernels

    rng = np.random.default_rng(3)
    Z = np.c_[rng.standard_normal(70), rng.integers(-1, 4, 70), rng.uniform(size=70), rng.integers(0, 3, 70),
              rng.integers(0, 2, 70)].astype(float)
    Z[rng.random(70) < 0.1, 3] = np.nan
    codes = [1, 3, 4]
    for lengthscale in (np.array([0.9, 0.4, 1.3, 0.7, 2.0]), np.array([0.9, 1e-170, 1.3, 0.7, 2.0])):
        kernel = GaussianKernel(lengthscale, categorical=codes)
        A, B = kernel._scale(Z[:23]), kernel._scale(Z[23:])
        expected = kernels._squared_distances(A[:, [0, 2]], B[:, [0, 2]])
        with np.errstate(over="ignore", divide="ignore"):
            weights = 1.0 / lengthscale[codes] ** 2
        for i in range(A.shape[0]):
            for j in range(B.shape[0]):
                for column, weight in zip(codes, weights):
                    if not A[i, column] == B[j, column]:
                        expected[i, j] = expected[i, j] + weight
        for slab in (kernels._SLAB_ELEMENTS, 47, 1):  # one slab; rows 1 at a time of 47 columns; row by row
            monkeypatch.setattr(kernels, "_SLAB_ELEMENTS", slab)
            with np.errstate(over="ignore", divide="ignore"):
                found = kernel._sqdist(A, B)
            assert np.array_equal(found, expected)
    assert np.isinf(expected).any() and np.isfinite(expected).any()


def test_a_short_categorical_lengthscale_is_a_delta_kernel_in_the_product_and_a_long_one_leaves_it_out():
    Z = codes_and_numbers(40, 1)
    continuous = GaussianKernel(np.array([0.9, 1.2]))(Z[:, [0, 2]])
    same = (Z[:, 1, None] == Z[None, :, 1]) & (Z[:, 3, None] == Z[None, :, 3])
    short = GaussianKernel(np.array([0.9, 1e-3, 1.2, 1e-3]), categorical=[1, 3])(Z)
    np.testing.assert_allclose(short, continuous * same, rtol=0, atol=1e-300)
    long = GaussianKernel(np.array([0.9, 1e8, 1.2, 1e8]), categorical=[1, 3])(Z)
    np.testing.assert_allclose(long, continuous, rtol=1e-15)


def test_a_categorical_kernel_round_trips_through_json_bit_for_bit_and_states_its_rules():
    Z = codes_and_numbers(50, 2)
    kernel = GaussianKernel(np.array([0.3, 0.7, 1.1, 5.0]), categorical=[3, 1]).standardised(Z)
    assert kernel.categorical == (1, 3)
    again = kernel_from_dict(json.loads(json.dumps(kernel.to_dict())))
    assert again == kernel and again.categorical == (1, 3)
    assert again.location.tobytes() == kernel.location.tobytes() and again.scale.tobytes() == kernel.scale.tobytes()
    np.testing.assert_array_equal(again(Z), kernel(Z))
    assert kernel.with_lengthscale(0.5).categorical == (1, 3) and kernel != GaussianKernel(kernel.lengthscale,
                                                                                          location=kernel.location,
                                                                                          scale=kernel.scale)
    with pytest.raises(ValueError, match="categorical: column 5 is out of range for A with 4 features"):
        GaussianKernel(1.0, categorical=[5])(Z)
    with pytest.raises(ValueError, match="categorical: column 4 is out of range for a lengthscale of 4 entries"):
        GaussianKernel(np.ones(4), categorical=[4])
    with pytest.raises(ValueError, match="categorical: must be distinct column indices >= 0"):
        GaussianKernel(1.0, categorical=[1, 1])
    with pytest.raises(ValueError, match="a categorical column's location and scale must be 0 and 1"):
        GaussianKernel(1.0, location=np.ones(4), scale=np.ones(4), categorical=[1])
    with pytest.raises(ValueError, match="no gradient along category codes"):
        kernel.distance_gradient(Z[:3], Z, np.ones((3, 50)))


def test_the_scaling_leaves_categorical_columns_as_codes_and_refuses_a_single_level():
    Z = codes_and_numbers(200, 3)
    location, scale = robust_scaling(Z, categorical=[1, 3])
    plain = robust_scaling(Z[:, [0, 2]])
    np.testing.assert_array_equal(location, [plain[0][0], 0.0, plain[0][1], 0.0])
    np.testing.assert_array_equal(scale, [plain[1][0], 1.0, plain[1][1], 1.0])
    Z[:, 3] = 2.0
    with pytest.raises(ValueError, match=r"^x column 'kind': is categorical with a single level \(code 2\)"):
        robust_scaling(Z, ["a", "b", "c", "kind"], categorical=[1, 3])


def test_the_median_heuristic_counts_a_category_mismatch_as_one_standard_unit():
    Z = codes_and_numbers(120, 4)
    kernel = GaussianKernel(1.0, categorical=[1, 3]).standardised(Z)
    E = one_hot(Z, kernel, {1: 4, 3: 3})  # at lengthscale 1: a mismatch is at squared distance 1/2 + 1/2
    upper = np.triu_indices(len(Z), k=1)
    brute = np.median(np.sqrt(((E[:, None, :] - E[None, :, :]) ** 2).sum(axis=-1))[upper])
    assert median_heuristic(Z, kernel=kernel.with_lengthscale(3.0)) == pytest.approx(brute, rel=1e-12)


# -- staging ---------------------------------------------------------------------------------------
def test_staging_detects_text_columns_and_stores_declared_codes_with_their_levels(tmp_path):
    from pipeline.staging import categorical_indices, categorical_levels, open_staged, stage

    frame = table(300, 0)
    frame.loc[:2, "code"] = [3, 1, 3]
    frame["code"] = frame["code"].astype(object)
    frame.loc[3, "code"] = "3.0"  # the same level as 3
    frame.to_csv(tmp_path / "t.csv", index=False)
    group = open_staged(stage(tmp_path / "t.csv", tmp_path / "t.zarr", ["u", "color", "code"], ["y"],
                              categorical=["code"], chunk_size=64))
    levels = categorical_levels(group)
    assert list(levels) == ["color", "code"] and categorical_indices(group) == [1, 2]
    assert levels["code"][:2] == ["3", "1"] and sorted(levels["code"]) == ["1", "2", "3"]
    assert levels["color"] == list(dict.fromkeys(frame["color"]))  # order of first appearance, across chunks
    x = group["x"][:]
    np.testing.assert_array_equal(x[:, 0], frame["u"].to_numpy())
    assert [levels["color"][int(c)] for c in x[:, 1]] == frame["color"].tolist()
    assert [levels["code"][int(c)] for c in x[:, 2]] == [str(int(float(v))) for v in frame["code"]]
    # a Parquet string column is detected the same way; without the declaration, code stays numeric
    frame.assign(code=frame["code"].astype(float)).to_parquet(tmp_path / "t.parquet")
    group = open_staged(stage(tmp_path / "t.parquet", tmp_path / "p.zarr", ["u", "color", "code"], ["y"]))
    assert categorical_levels(group) == {"color": levels["color"]}
    np.testing.assert_array_equal(group["x"][:, 1], x[:, 1])


def test_a_column_of_codes_mixing_text_and_numbers_is_read_as_categories(tmp_path, capsys):
    """A school grade ("K", 1, 2, 3) is categorical without a flag; a column of many numbers with one
    stray text cell is refused at that cell, naming the flag that reads it as categories."""
    from jdl.cli import main
    from pipeline.staging import categorical_levels, open_staged, stage

    frame = table(300, 3)
    grade = np.resize(np.array([1, 2, 3, "K"], dtype=object), 300)
    frame.assign(grade=grade).to_csv(tmp_path / "t.csv", index=False)
    group = open_staged(stage(tmp_path / "t.csv", tmp_path / "t.zarr", ["u", "grade"], ["y"], chunk_size=64))
    levels = categorical_levels(group)["grade"]
    assert levels == ["1", "2", "3", "K"]
    assert [levels[int(c)] for c in group["x"][:, 1]] == [str(v) for v in grade]
    stray = frame["u"].astype(object)
    stray[11] = "K"
    frame.assign(u=stray).to_csv(tmp_path / "stray.csv", index=False)
    capsys.readouterr()
    assert main(["stage", str(tmp_path / "stray.csv"), "--x", "u,color", "--y", "y", "--out",
                 str(tmp_path / "s.zarr")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["jdl stage: error: x column 'u': non-numeric value 'K' at row 11; name it in --categorical u "
                   "(categorical=['u']) to read the column as categories, or leave the cell empty to read it as "
                   "missing"]
    assert not (tmp_path / "s.zarr").exists()
    late = frame.assign(u=frame["u"].astype(object))  # text only after the rows that decide: refused there
    late.loc[250, "u"] = "K"
    late.to_csv(tmp_path / "late.csv", index=False)
    with pytest.raises(ValueError, match=r"^x column 'u': non-numeric value 'K' at row 250; name it in --categorical"):
        stage(tmp_path / "late.csv", tmp_path / "l.zarr", ["u"], ["y"], chunk_size=64)


def test_jdl_stage_reports_the_categorical_columns(tmp_path, capsys):
    from jdl.cli import main

    table(200, 2).to_csv(tmp_path / "t.csv", index=False)
    capsys.readouterr()
    assert main(["stage", str(tmp_path / "t.csv"), "--x", "u,color,code", "--y", "y", "--categorical", "code",
                 "--out", str(tmp_path / "t.zarr")]) == 0
    assert "; categorical: color (3 levels), code (3 levels) -> " in capsys.readouterr().out


@pytest.mark.parametrize("change, categorical, message", [
    (lambda f: f.assign(color=None), [], r"^x column 'color': every value is missing; a column needs present values$"),
    (lambda f: f.assign(color="red"), [], r"^x column 'color': is categorical with a single level \('red'\)"),
    (lambda f: f.assign(u=np.nan), [], r"^x column 'u': every value is missing; a column needs present values$"),
    (lambda f: f, ["y"], r"^categorical: column 'y' is not an x column \(x: u, color, code\)"),
    (lambda f: f.assign(y=f["color"]), [], r"^y column 'y': non-numeric value '\w+' at row 0$"),
])
def test_bad_categorical_input_fails_in_one_line_and_writes_nothing(tmp_path, capsys, change, categorical, message):
    import re

    from jdl.cli import main

    change(table(200, 1)).to_csv(tmp_path / "bad.csv", index=False)
    arguments = ["--categorical", ",".join(categorical)] if categorical else []
    capsys.readouterr()
    assert main(["stage", str(tmp_path / "bad.csv"), "--x", "u,color,code", "--y", "y", "--out",
                 str(tmp_path / "bad.zarr"), *arguments]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and re.search(message, err[0].removeprefix("jdl stage: error: ").removeprefix(
        "stage: parameter ")), err
    assert not (tmp_path / "bad.zarr").exists()


# -- the pipeline ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    from jdl.cli import main

    root = tmp_path_factory.mktemp("categorical")
    train = table(900, 5)
    train.to_csv(root / "train.csv", index=False)
    batch = table(300, 6, colors=("blue", "green", "red"))  # levels in another order of first appearance
    batch.to_csv(root / "batch.csv", index=False)
    unseen = batch.assign(color=np.where(np.arange(300) % 7 == 3, "purple", batch["color"]))
    unseen.to_csv(root / "unseen.csv", index=False)
    for name in ("train", "batch", "unseen"):
        assert main(["stage", str(root / f"{name}.csv"), "--x", "u,color,code", "--y", "y", "--categorical", "code",
                     "--out", str(root / f"{name}.zarr")]) == 0
    assert main(["tune", str(root / "train.zarr"), "--out", str(root / "t.zarr"), "--regs", "1e-5,1e-4",
                 "--summaries", "none", "--folds", "1"]) == 0
    assert main(["fit", str(root / "train.zarr"), "--out", str(root / "m.zarr"), "--tuning", str(root / "t.zarr"),
                 "--positivity", "clip"]) == 0
    return root, train, batch, unseen


def _codes(frame: "pd.DataFrame", levels: dict[str, list[str]], other: bool = False) -> np.ndarray:
    """x as the model's codes, by hand: each level's position in the training levels (-1 if absent)."""
    columns = [frame["u"].to_numpy()]
    for name in ("color", "code"):
        index = {level: k for k, level in enumerate(levels[name])}
        values = [index.get(str(v), -1) for v in frame[name]]
        assert other or min(values) >= 0
        columns.append(np.asarray(values, dtype=float))
    return np.column_stack(columns)


def test_levels_round_trip_through_the_model_store_and_scoring_reads_them_by_name(fitted):
    from jdl.cli import main
    from pipeline.model_store import load_model
    from pipeline.staging import categorical_levels, open_staged

    root, train, batch, _ = fitted
    levels = categorical_levels(open_staged(root / "train.zarr"))
    assert categorical_levels(open_staged(root / "batch.zarr"))["color"] != levels["color"]  # so recoding is needed
    model = load_model(root / "m.zarr")
    assert model.provenance_["x_levels"] == levels  # JSON strings: exact
    kernel = model.basis_x_.kernel
    assert kernel.categorical == (1, 2)
    assert main(["score", str(root / "m.zarr"), str(root / "batch.zarr"), "--out", str(root / "s.zarr"),
                 "--function", "mean", "--function", "cdf:-1,0,1"]) == 0
    scores = zarr.open_group(root / "s.zarr", mode="r")
    assert model.view_.summaries is None  # tuned on the columns alone: x is the codes
    by_hand = JDL(kernel, model.basis_y_.kernel, reg=model.reg, tol=model.tol, positivity="clip").fit(
        _codes(train, levels), train[["y"]].to_numpy())
    X_batch = _codes(batch, levels)
    np.testing.assert_allclose(scores["mean"][:], by_hand.predict(X_batch), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(scores["cdf:-1,0,1"][:], by_hand.conditional_cdf(X_batch, [-1.0, 0.0, 1.0]),
                               rtol=0, atol=1e-10)
    # the colour is what moves y: the conditional means follow it
    means = pd.Series(scores["mean"][:, 0]).groupby(batch["color"].to_numpy()).mean()
    assert means["green"] > means["red"] + 1.0 > means["blue"] + 2.0


def test_tuning_keeps_the_relevant_categorical_column_and_leaves_the_irrelevant_one_out(fitted):
    from pipeline.model_store import load_model

    root = fitted[0]
    lengthscale = load_model(root / "m.zarr").basis_x_.kernel.lengthscale
    assert lengthscale[1] < 1.0  # color: a mismatch decorrelates
    assert lengthscale[2] > 10 * max(lengthscale[0], lengthscale[1])  # code: noise, left long


def test_an_unseen_level_is_refused_by_name_or_matches_no_level(fitted, capsys):
    from jdl.cli import main
    from pipeline.model_store import load_model
    from pipeline.staging import categorical_levels, open_staged

    root, train, _, unseen = fitted
    capsys.readouterr()
    assert main(["score", str(root / "m.zarr"), str(root / "unseen.zarr"), "--out", str(root / "u.zarr"),
                 "--function", "mean"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "x column 'color': level 'purple' in data" in err[0] and err[0].endswith(
        "pass --unseen other (unseen='other' in Python) to let it match no level"), err
    assert not (root / "u.zarr").exists()
    assert main(["score", str(root / "m.zarr"), str(root / "unseen.zarr"), "--out", str(root / "u.zarr"),
                 "--function", "mean", "--unseen", "other"]) == 0
    model = load_model(root / "m.zarr")
    levels = categorical_levels(open_staged(root / "train.zarr"))
    X = _codes(unseen, levels, other=True)
    assert (X[:, 1] == -1).sum() == len(range(3, 300, 7))
    np.testing.assert_allclose(zarr.open_group(root / "u.zarr", mode="r")["mean"][:],
                               model.predict(X), rtol=1e-10, atol=1e-12)


def test_a_validation_store_is_read_in_the_training_datas_levels(fitted):
    from pipeline.tuning import load_tuning, tune_store

    root, _, batch, _ = fitted
    batch.iloc[::-1].to_csv(root / "reversed.csv", index=False)  # another order of first appearance
    from pipeline.staging import stage

    stage(root / "reversed.csv", root / "reversed.zarr", ["u", "color", "code"], ["y"], categorical=["code"])
    # signed laws: the projection's numerical test may come out otherwise on a row when the rows come in
    # another order (BLAS blocks round differently), which would hide what this test is after
    tables = [load_tuning(tune_store(root / "train.zarr", root / f"tv-{name}.zarr", validation=root / f"{name}.zarr",
                                     regs=[1e-4], search=False, constraints="none"))
              for name in ("batch", "reversed")]
    np.testing.assert_allclose(tables[0]["validation_loss"].values, tables[1]["validation_loss"].values, rtol=1e-12)


def test_inspect_lists_the_levels(fitted, capsys):
    from jdl.cli import main

    root = fitted[0]
    capsys.readouterr()
    assert main(["inspect", str(root / "m.zarr")]) == 0
    card = capsys.readouterr().out
    line = next(line for line in card.splitlines() if line.strip().startswith("x feature color"))
    assert "categorical, 3 levels (" in line and "mismatch lengthscale" in line


def test_methods_without_an_x_kernel_and_compression_refuse_categorical_data(fitted):
    from pipeline.compression import compress_store
    from pipeline.fitting import fit_store

    root = fitted[0]
    with pytest.raises(ValueError, match=r"method: jpdl has no x kernel to compare the categorical columns "
                                         r"\(color, code\) by"):
        fit_store(root / "train.zarr", root / "jpdl.zarr", lengthscale_x=1.0, lengthscale_y=1.0, reg=1e-4,
                  method="jpdl")
    with pytest.raises(ValueError, match="has categorical x columns \\(color, code\\); compression"):
        compress_store(root / "train.zarr", root / "c.zarr", m=20)
    assert not (root / "jpdl.zarr").exists() and not (root / "c.zarr").exists()


def test_one_binary_column_and_a_y_mostly_zero_tune_and_fit_by_default(tmp_path):
    """Half the pairs or more tied, in x (one two-level column) and in y (0 on most rows): the median
    heuristic is 0 on both, and the default grid takes the median over the distinct pairs (it was a
    refusal). The conditional law then follows the group's share of zeros: P(y <= 0.5 | x), by hand
    0.75 + 0.25 (1 - exp(-0.5)) for "a" and 0.9 + 0.1 (1 - exp(-0.5)) for "b"."""
    from jdl.cli import main

    rng = np.random.default_rng(3)
    group = rng.choice(["a", "b"], 2_000)
    zero = rng.random(2_000) < np.where(group == "a", 0.75, 0.9)
    frame = pd.DataFrame({"group": group, "y": np.where(zero, 0.0, rng.exponential(size=2_000))})
    frame.to_csv(tmp_path / "t.csv", index=False)
    pd.DataFrame({"group": ["a", "b"], "y": [0.0, 1.0]}).to_csv(tmp_path / "q.csv", index=False)
    for name in ("t", "q"):
        assert main(["stage", str(tmp_path / f"{name}.csv"), "--x", "group", "--y", "y",
                     "--out", str(tmp_path / f"{name}.zarr")]) == 0
    assert main(["tune", str(tmp_path / "t.zarr"), "--out", str(tmp_path / "tuning.zarr")]) == 0
    assert main(["fit", str(tmp_path / "t.zarr"), "--out", str(tmp_path / "m.zarr"),
                 "--tuning", str(tmp_path / "tuning.zarr")]) == 0
    assert main(["score", str(tmp_path / "m.zarr"), str(tmp_path / "q.zarr"), "--out", str(tmp_path / "s.zarr"),
                 "--function", "cdf:0.5"]) == 0
    cdf = zarr.open_group(tmp_path / "s.zarr", mode="r")["cdf:0.5"][:, 0]
    expected = np.array([0.75, 0.9]) + np.array([0.25, 0.1]) * (1 - np.exp(-0.5))
    np.testing.assert_allclose(cdf, expected, atol=0.04)
