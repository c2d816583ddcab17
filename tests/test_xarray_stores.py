"""Stores as xarray users open them: every store the jdl commands write opens with ``xr.open_zarr(path)``
and no warning (consolidated metadata), the scores' parameters and the data's feature names are
coordinates to select by, and stores of the previous schemas still load."""
import json
import warnings

import numpy as np
import pytest

xr = pytest.importorskip("xarray")
zarr = pytest.importorskip("zarr")
from jdl.cli import main  # noqa: E402
from pipeline.atomic import consolidate  # noqa: E402
from pipeline.scoring import open_scores  # noqa: E402
from pipeline.staging import open_staged  # noqa: E402

QUANTILES, MORE_QUANTILES, THRESHOLDS = "quantile:0.1,0.5,0.9", "quantile:0.25,0.75", "cdf:-1,0,1"


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("xarray")
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal(600), rng.uniform(0, 10, 600)
    np.savez(root / "src.npz", a=a, b=b, t=np.sin(a) + 0.1 * b + 0.3 * rng.standard_normal(600))
    assert main(["stage", str(root / "src.npz"), "--x", "a,b", "--y", "t", "--out", str(root / "d.zarr")]) == 0
    assert main(["tune", str(root / "d.zarr"), "--out", str(root / "t.zarr"), "--regs", "1e-5,1e-3",
                 "--summaries", "none", "--no-search"]) == 0
    assert main(["fit", str(root / "d.zarr"), "--out", str(root / "m.zarr"), "--tuning", str(root / "t.zarr")]) == 0
    assert main(["score", str(root / "m.zarr"), str(root / "d.zarr"), "--out", str(root / "s.zarr"),
                 "--function", "mean", "--function", "second_moment", "--function", QUANTILES,
                 "--function", MORE_QUANTILES, "--function", THRESHOLDS]) == 0
    return root


def quietly_opened(path):
    """xr.open_zarr(path) with every warning an error."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return xr.open_zarr(path)


@pytest.mark.parametrize("name", ["d.zarr", "t.zarr", "m.zarr", "s.zarr"])
def test_every_store_opens_in_xarray_without_a_warning(stores, name):
    ds = quietly_opened(stores / name)
    assert ds.attrs["schema"].startswith("jdl.")
    assert json.loads((stores / name / "zarr.json").read_text())["consolidated_metadata"]["kind"] == "inline"


def test_scores_are_selected_by_their_parameters(stores):
    ds = quietly_opened(stores / "s.zarr")
    raw = zarr.open_group(stores / "s.zarr", mode="r")
    np.testing.assert_array_equal(ds[QUANTILES].sel(level=0.9).values, raw[QUANTILES][:, 2])
    np.testing.assert_array_equal(ds[MORE_QUANTILES].sel(level_2=0.25).values, raw[MORE_QUANTILES][:, 0])
    np.testing.assert_array_equal(ds[THRESHOLDS].sel(threshold=0.0).values, raw[THRESHOLDS][:, 1])
    np.testing.assert_array_equal(ds["mean"].sel(y_feature="t").values, raw["mean"][:, 0])
    assert list(ds["second_moment"].dims) == ["sample", "y_feature", "y_feature_2"]
    assert ds["level"].values.tolist() == [0.1, 0.5, 0.9] and ds["level_2"].values.tolist() == [0.25, 0.75]


def test_data_columns_are_selected_by_name(stores):
    ds = quietly_opened(stores / "d.zarr")
    raw = np.load(stores / "src.npz")
    np.testing.assert_array_equal(ds["x"].sel(x_feature="b").values, raw["b"])
    np.testing.assert_array_equal(ds["y"].sel(y_feature="t").values, raw["t"])
    assert ds["x_feature"].values.tolist() == ["a", "b"]


def test_stores_of_the_previous_schemas_still_load_and_a_missing_coordinate_is_refused(stores, tmp_path):
    import shutil

    for name in ("d.zarr", "s.zarr"):
        shutil.copytree(stores / name, tmp_path / name)
    scores = zarr.open_group(tmp_path / "s.zarr", mode="r+")
    del scores["level"]
    consolidate(tmp_path / "s.zarr")
    with pytest.raises(ValueError, match="coordinate 'level' of 'quantile:0.1,0.5,0.9' is missing"):
        open_scores(tmp_path / "s.zarr")
    for coordinate in ("level_2", "threshold", "y_feature", "y_feature_2"):  # schema 2: no coordinates
        del scores[coordinate]
    del scores[MORE_QUANTILES]  # under schema 2 a second function of a kind shared the dim "level"
    scores.attrs.update({"schema_version": 2, "functions": json.dumps(["mean", "second_moment", QUANTILES,
                                                                         THRESHOLDS])})
    consolidate(tmp_path / "s.zarr")
    open_scores(tmp_path / "s.zarr")
    data = zarr.open_group(tmp_path / "d.zarr", mode="r+")
    del data["x_feature"]
    consolidate(tmp_path / "d.zarr")
    with pytest.raises(ValueError, match="coordinate 'x_feature' is missing"):
        open_staged(tmp_path / "d.zarr")
    del data["y_feature"]
    data.attrs["schema_version"] = 2
    consolidate(tmp_path / "d.zarr")
    assert open_staged(tmp_path / "d.zarr").attrs["x_features"] == ["a", "b"]


def test_a_store_damaged_on_disk_is_found_despite_its_consolidated_metadata(stores, tmp_path):
    """The consolidated copy still lists an array whose directory is gone; jdl's checks read the files."""
    import shutil

    for name in ("d.zarr", "s.zarr"):
        shutil.copytree(stores / name, tmp_path / name)
    shutil.rmtree(tmp_path / "d.zarr" / "y")
    with pytest.raises(ValueError, match="array 'y' is missing"):
        open_staged(tmp_path / "d.zarr")
    shutil.rmtree(tmp_path / "s.zarr" / "mean")
    with pytest.raises(ValueError, match="array 'mean' is missing"):
        open_scores(tmp_path / "s.zarr")
