"""Model store round trip on real zarr on disk, and refusal of foreign, truncated and newer stores."""
import json
import shutil

import numpy as np
import pytest

from jdlcore import JDL, GaussianKernel

xr = pytest.importorskip("xarray")
pytest.importorskip("zarr")
from pipeline.model_store import load_model, model_to_dataset, save_model  # noqa: E402

from .conftest import bivariate_gaussian  # noqa: E402


@pytest.fixture(scope="module")
def fitted():
    X, Y = bivariate_gaussian(500, seed=6)
    return JDL(GaussianKernel(0.5), GaussianKernel(0.5), reg=1e-4, tol=1e-5).fit(X, Y)


def test_round_trip_is_exact(fitted, tmp_path):
    path = save_model(fitted, tmp_path / "model.zarr", provenance={"data": "bivariate gaussian"})
    loaded = load_model(path)
    for name, array in fitted.state()["arrays"].items():  # the stored arrays come back bit for bit
        np.testing.assert_array_equal(loaded.state()["arrays"][name], array, err_msg=name)
    Xq = np.linspace(-4, 4, 33)[:, None]
    # queries agree to rounding (BLAS may sum in another order for differently aligned arrays)
    np.testing.assert_allclose(loaded.conditional_weights(Xq), fitted.conditional_weights(Xq), rtol=0, atol=1e-13)
    assert loaded.diagnostics_["grid_min"] == fitted.diagnostics_["grid_min"]
    assert loaded.get_params()["reg"] == 1e-4 and loaded.kernel_x == GaussianKernel(0.5)
    assert [p.name for p in tmp_path.iterdir()] == ["model.zarr"]  # no temporary left behind
    ds = xr.open_zarr(path, consolidated=False)
    assert ds.attrs["schema"] == "jdl.model" and json.loads(ds.attrs["provenance"]) == {"data": "bivariate gaussian"}


def test_existing_target_is_refused_unless_overwrite(fitted, tmp_path):
    path = save_model(fitted, tmp_path / "m.zarr")
    with pytest.raises(ValueError, match="already exists"):
        save_model(fitted, path)
    save_model(fitted, path, overwrite=True)
    load_model(path)


def test_foreign_truncated_and_newer_stores_are_refused(fitted, tmp_path):
    foreign = tmp_path / "foreign.zarr"
    xr.Dataset({"a": ("x", np.arange(3.0))}).to_zarr(foreign, zarr_format=3, consolidated=False)
    with pytest.raises(ValueError, match="not a jdl model store"):
        load_model(foreign)
    with pytest.raises(ValueError, match="does not exist"):
        load_model(tmp_path / "missing.zarr")
    junk = tmp_path / "junk.zarr"
    junk.mkdir()
    (junk / "zarr.json").write_text("{not json")
    with pytest.raises(ValueError, match="not a readable zarr v3 store"):
        load_model(junk)
    truncated = save_model(fitted, tmp_path / "truncated.zarr")
    shutil.rmtree(truncated / "A_y")
    with pytest.raises(ValueError, match="model .*truncated.zarr"):
        load_model(truncated)
    missing_chunks = save_model(fitted, tmp_path / "chunks.zarr")
    for chunk in (missing_chunks / "A_y" / "c").rglob("*"):
        if chunk.is_file():
            chunk.unlink()
    with pytest.raises(ValueError, match="'A_y' does not match its checksum"):
        load_model(missing_chunks)
    newer = model_to_dataset(fitted)
    newer.attrs["schema_version"] = 99
    newer.to_zarr(tmp_path / "newer.zarr", zarr_format=3, consolidated=False)
    with pytest.raises(ValueError, match="schema_version 99 is newer"):
        load_model(tmp_path / "newer.zarr")
