"""Model store round trip on real zarr on disk, and refusal of foreign, truncated and newer stores."""
import json
import shutil

import numpy as np
import pytest

from jdlcore import JDL, Factorisation, GaussianKernel, build_problem

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
        np.testing.assert_array_equal(loaded.law_.state()["arrays"][name], array, err_msg=name)
    Xq = np.linspace(-4, 4, 33)[:, None]
    # queries agree to rounding (BLAS may sum in another order for differently aligned arrays)
    np.testing.assert_allclose(loaded.conditional_weights(Xq), fitted.conditional_weights(Xq), rtol=0, atol=1e-13)
    for name in ("law", "support_size", "support_construction", "support_exact", "support_defect"):
        assert loaded.diagnostics_[name] == fitted.diagnostics_[name], name
    assert loaded.support_.requested == fitted.support_.requested
    # the state keeps the kernel the fit used: the one given, standardised to the training columns
    assert loaded.law_.get_params()["reg"] == 1e-4 and loaded.kernel_x == fitted.basis_x_.kernel
    assert loaded.kernel_x.with_scaling(None, None) == GaussianKernel(0.5)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.zarr", "model.zarr.versions"]  # no temporary
    assert [p.name for p in (tmp_path / "model.zarr.versions").iterdir() if not p.name.endswith(".lease")] == [
        loaded.store_version_]
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
    shutil.rmtree(truncated / "y_atoms")
    versioned = r"model .*truncated.zarr \(version [0-9TZ]+-[0-9a-f]{12}\)"
    with pytest.raises(ValueError, match=versioned + ": variable 'y_atoms' is missing"):
        load_model(truncated)
    for variable in ("y_atoms", "coef"):
        missing_chunks = save_model(fitted, tmp_path / f"chunks-{variable}.zarr")
        for chunk in (missing_chunks / variable / "c").rglob("*"):
            if chunk.is_file():
                chunk.unlink()
        with pytest.raises(ValueError, match=f"'{variable}' does not match its checksum"):
            load_model(missing_chunks)
    for version, rule in ((99, "schema_version 99 is newer"), (1, "schema_version 1 is older")):
        other = model_to_dataset(fitted)
        other.attrs["schema_version"] = version
        other.to_zarr(tmp_path / f"v{version}.zarr", zarr_format=3, consolidated=False)
        with pytest.raises(ValueError, match=rule):
            load_model(tmp_path / f"v{version}.zarr")


def test_loaded_atoms_stay_on_disk_and_registered_functions_survive(tmp_path):
    """A loaded model reads its training atoms lazily from the store (the paper's diagnostics stream
    over them, no cached A_Y); its queries read the stored support; the functions registered at the
    fit come back bit for bit (a function registered later is not stored, and costs O(M) to register)."""
    from jdlcore.conditional.atoms import STANDARD_FUNCTIONS, Atoms

    X, Y = bivariate_gaussian(700, seed=2)
    problem = build_problem(X, Y, GaussianKernel(0.5), GaussianKernel(0.5), Factorisation(tol=1e-5),
                            test_functions=STANDARD_FUNCTIONS)
    fitted = JDL(GaussianKernel(0.5), GaussianKernel(0.5), reg=1e-4, constraints="normalization").fit_problem(problem, Y)
    fitted.register("cube", lambda y: y**3)
    loaded = load_model(save_model(fitted, tmp_path / "m.zarr"))
    assert not isinstance(loaded.y_atoms_, np.ndarray)  # a zarr array
    assert sorted(loaded.registered_) == ["mean", "second_moment"]
    for name in loaded.registered_:
        np.testing.assert_array_equal(loaded.registered_[name][0], fitted.registered_[name][0])
        np.testing.assert_array_equal(loaded.law_._training_sums[name].moments, fitted._training_sums[name].moments)
    loaded.register("cube", lambda y: y**3)
    loaded.law_.atoms_ = Atoms(loaded.y_atoms_, loaded.basis_y_, block_rows=97, cache_entries=0)
    Xq = np.linspace(-3, 3, 41)[:, None]
    expected = fitted.conditional_expectation(Xq, lambda y: np.cos(y))
    np.testing.assert_allclose(loaded.conditional_expectation(Xq, lambda y: np.cos(y)), expected, rtol=0, atol=1e-12)
    np.testing.assert_allclose(loaded.expectation("cube", Xq), fitted.conditional_expectation(Xq, lambda y: y**3),
                               rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(loaded.negative_mass(Xq), fitted.negative_mass(Xq), rtol=0, atol=1e-12)
    np.testing.assert_array_equal(loaded.conditional_quantile(Xq, [0.1, 0.5, 0.9]),
                                  fitted.conditional_quantile(Xq, [0.1, 0.5, 0.9]))
    assert loaded.law_.grid_minimum(X) == pytest.approx(fitted.grid_minimum(X), abs=1e-12)
    both = loaded.expectations(["mean", "second_moment"], Xq)
    np.testing.assert_allclose(both["mean"], fitted.conditional_expectation(Xq), rtol=0, atol=1e-10)
    np.testing.assert_allclose(both["second_moment"][:, 0, 0], fitted.conditional_expectation(Xq, lambda y: y**2)[:, 0],
                               rtol=0, atol=1e-10)
