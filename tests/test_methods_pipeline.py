"""Every method (jdl, jpdl, cme, klr, greedy, psd) through the model store, `jdl fit --method` and `jdl score`."""
import json

import numpy as np
import pytest

zarr = pytest.importorskip("zarr")
from data_schemas.model import SCHEMA_VERSION  # noqa: E402
from jdl.cli import main  # noqa: E402
from pipeline.model_card import card_rows, diagnostics_figure  # noqa: E402
from pipeline.fitting import fit_store  # noqa: E402
from pipeline.model_store import load_model, method_of  # noqa: E402
from pipeline.scoring import score_store  # noqa: E402
from pipeline.staging import stage  # noqa: E402

N = 800
HYPER = dict(lengthscale_x=0.5, lengthscale_y=0.5, reg=1e-4)
# method -> (data set, extra fit parameters, scoring functions)
CASES = {
    "jdl": ("continuous", {}, ["mean", "second_moment", "cdf:-1,0,1", "quantile:0.1,0.9"]),
    "jpdl": ("continuous", {"degree": 3}, ["mean", "second_moment", "cdf:-1,0,1", "quantile:0.1,0.9"]),
    "cme": ("continuous", {"constraints": "positivity"}, ["mean", "second_moment", "cdf:-1,0,1", "quantile:0.5"]),
    "klr": ("continuous", {"threshold": 0.0}, ["proba", "cdf:0"]),
    "greedy": ("classes", {}, ["mean", "second_moment", "cdf:-1,0,1", "quantile:0.1,0.9"]),
    "psd": ("continuous", {"tol": 1e-2, "reg": 1e-2}, ["mean", "second_moment", "cdf:-1,0,1", "quantile:0.1,0.9"]),
}


def test_every_registered_method_has_a_case():
    from jdlcore import METHODS

    assert set(CASES) == set(METHODS)


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """Two staged stores: continuous x, and x cut into 3 classes; y continuous in both."""
    root = tmp_path_factory.mktemp("methods")
    rng = np.random.default_rng(4)
    x = rng.standard_normal(N)
    y = 0.8 * x + 0.6 * rng.standard_normal(N)
    labels = np.digitize(x, [-0.5, 0.5]).astype(float)
    paths = {}
    for name, first in (("continuous", x), ("classes", labels)):
        np.save(root / f"{name}.npy", np.column_stack([first, y]))
        paths[name] = stage(root / f"{name}.npy", root / f"{name}.zarr", ["0"], ["1"], chunk_size=300)
    # each with a second x column that misses a fifth of its values: read through the missing-value rule
    gappy = np.where(rng.uniform(size=N) < 0.2, np.nan, rng.standard_normal(N))
    for name, first in (("continuous", x), ("classes", labels)):
        np.save(root / f"{name}-gappy.npy", np.column_stack([first, gappy, y]))
        paths[f"{name}-gappy"] = stage(root / f"{name}-gappy.npy", root / f"{name}-gappy.zarr", ["0", "1"], ["2"],
                                       chunk_size=300)
    return root, paths


def expected_scores(model, spec: str, x: np.ndarray) -> np.ndarray:
    """The model's own answer to a scoring function (what the scores store must hold)."""
    kind, _, rest = spec.partition(":")
    values = [float(v) for v in rest.split(",")] if rest else None
    if kind == "proba":
        return model.predict_proba(x)
    if model.method == "klr":
        return model.event_probability(x)[:, None]
    if kind == "mean":
        return model.conditional_expectation(x)
    if kind == "second_moment":
        return model.conditional_expectation(x, lambda v: v[:, :, None] * v[:, None, :])
    if kind == "cdf":
        return model.conditional_cdf(x, values)
    return model.conditional_quantile(x, values)


@pytest.mark.parametrize("method", list(CASES))
def test_fit_store_load_score_each_method(stores, method):
    root, paths = stores
    data, extra, functions = CASES[method]
    path, fitted = fit_store(paths[data], root / f"{method}.zarr", method=method, **{**HYPER, **extra})
    loaded = load_model(path)
    assert type(loaded.law_) is type(fitted.law_) and method_of(loaded.law_) == method
    attrs = zarr.open_group(path, mode="r").attrs
    assert attrs["method"] == method and attrs["schema_version"] == SCHEMA_VERSION
    x = zarr.open_group(paths[data], mode="r")["x"][:]
    for spec in functions:  # the stored model answers exactly as the fitted one
        np.testing.assert_array_equal(expected_scores(loaded, spec, x[:50]), expected_scores(fitted, spec, x[:50]))
    scores = score_store(path, paths[data], root / f"{method}-scores.zarr", functions)
    group = zarr.open_group(scores, mode="r")
    for spec in functions:
        np.testing.assert_allclose(group[spec][:], expected_scores(loaded, spec, x), rtol=0, atol=1e-12, err_msg=spec)
    rows = dict(card_rows(path, loaded))
    assert rows["method"].startswith(method)
    assert diagnostics_figure(path, root / f"{method}.png", loaded).stat().st_size > 0


# the methods whose x can miss values, with the settings they take on the three columns the rule reads
# (the polynomial's indicator is 0/1, so degree 1; coarser bases keep CME's and the PSD model's problems small). The
# greedy JDL's x is one column of class labels: it has no missing-value rule to read through.
GAPPY = {"jdl": {}, "jpdl": {"degree": 1}, "cme": {"tol": 1e-2}, "klr": {}, "psd": {"max_rank": 12}}


def test_every_method_but_greedy_has_a_gappy_case():
    assert set(GAPPY) == set(CASES) - {"greedy"}


@pytest.mark.parametrize("method", list(GAPPY))
def test_each_loaded_method_answers_staged_rows_with_missing_values_as_scoring_writes(stores, method):
    """``load_model`` returns the model that scoring uses: at the staged rows as they are (NaN where a value
    is missing), its answers are the scores store's, to 1e-12."""
    root, paths = stores
    data, extra, functions = CASES[method]
    data = f"{data}-gappy"
    path, _ = fit_store(paths[data], root / f"{method}-gappy.zarr", method=method,
                        **{**HYPER, **extra, **GAPPY[method]})
    loaded = load_model(path)
    assert loaded.view_.missing.flagged == (1,)
    x = zarr.open_group(paths[data], mode="r")["x"][:]
    assert np.isnan(x[:, 1]).any()
    group = zarr.open_group(score_store(path, paths[data], root / f"{method}-gappy-scores.zarr", functions), mode="r")
    for spec in functions:
        np.testing.assert_allclose(expected_scores(loaded, spec, x), group[spec][:], rtol=0, atol=1e-12, err_msg=spec)
    assert loaded.predict(x[:5]).shape[0] == 5  # the mean, or a classifier's most probable class


def test_klr_answers_only_its_event(stores):
    root, paths = stores
    path, _ = fit_store(paths["continuous"], root / "klr-only.zarr", method="klr", threshold=0.5, **HYPER)
    with pytest.raises(ValueError, match="function 'mean': a klr model answers proba or cdf:0.5 only"):
        score_store(path, paths["continuous"], root / "no.zarr", ["mean"])
    with pytest.raises(ValueError, match="function 'cdf:0': a klr model answers"):
        score_store(path, paths["continuous"], root / "no.zarr", ["cdf:0"])
    assert not (root / "no.zarr").exists()


def test_greedy_refuses_an_unseen_class_and_leaves_no_store(stores, tmp_path):
    root, paths = stores
    path, _ = fit_store(paths["classes"], root / "greedy-unseen.zarr", method="greedy", **HYPER)
    rng = np.random.default_rng(0)
    np.save(tmp_path / "new.npy", np.column_stack([np.tile([0.0, 7.0], 5), rng.standard_normal(10)]))
    new = stage(tmp_path / "new.npy", tmp_path / "new.zarr", ["0"], ["1"])
    with pytest.raises(ValueError, match="class 7.0 was not seen in training"):
        score_store(path, new, tmp_path / "s.zarr", ["mean"])
    assert not (tmp_path / "s.zarr").exists()


def test_in_memory_methods_refuse_a_cluster_and_rules_they_do_not_know(stores):
    root, paths = stores
    with pytest.raises(ValueError, match="method jpdl fits in memory"):
        fit_store(paths["continuous"], root / "x.zarr", method="jpdl", scheduler="local", **HYPER)
    with pytest.raises(ValueError, match="positivity: unknown value 'sos'; choose one of 'project'"):
        fit_store(paths["continuous"], root / "x.zarr", method="jdl", positivity="sos", **HYPER)
    with pytest.raises(ValueError, match=r"tol: method jpdl has no such option \(only jdl, cme, klr, greedy, psd\)"):
        fit_store(paths["continuous"], root / "x.zarr", method="jpdl", tol=1e-3, **HYPER)
    assert not (root / "x.zarr").exists()


def test_chunked_cme_on_real_dask_equals_in_memory(stores, dask_client):
    root, paths = stores
    _, a = fit_store(paths["continuous"], root / "cme-mem.zarr", method="cme", scheduler="memory", **HYPER)
    _, b = fit_store(paths["continuous"], root / "cme-dask.zarr", method="cme",
                     scheduler=dask_client.scheduler.address, **HYPER)
    Xq = np.linspace(-3, 3, 25)[:, None]
    assert b.basis_x_.size == a.basis_x_.size
    np.testing.assert_allclose(b.conditional_expectation(Xq), a.conditional_expectation(Xq), rtol=0, atol=1e-10)
    np.testing.assert_allclose(b.total_mass(Xq), a.total_mass(Xq), rtol=0, atol=1e-10)


def test_schema_versions(stores):
    """A store written before the support atoms (versions 2 and 3: no support variables) loads with its
    support built from its training atoms, as the fit builds it; a version 2 store of another method
    is foreign."""
    root, paths = stores
    path, model = fit_store(paths["continuous"], root / "v2.zarr", method="jdl", **HYPER)
    group = zarr.open_group(path, mode="r+")
    for name in [name for name in group.array_keys() if name.startswith("support") or name.endswith("_support")]:
        del group[name]
    del group.attrs["support"]
    Xq = np.linspace(-2, 2, 9)[:, None]
    for version in (3, 2):
        group.attrs["schema_version"] = version
        old = load_model(path)
        assert old.support_.exact == model.support_.exact and old.positivity == "project"
        np.testing.assert_allclose(old.support_.atoms, model.support_.atoms, rtol=1e-11)
        np.testing.assert_allclose(old.conditional_expectation(Xq), model.conditional_expectation(Xq), rtol=0, atol=1e-10)
    group.attrs["method"] = "cme"
    with pytest.raises(ValueError, match="unknown method 'cme'"):
        load_model(path)
    group.attrs.update({"schema_version": 3, "method": "svm"})
    with pytest.raises(ValueError, match="unknown method 'svm'"):
        load_model(path)


def test_cli_fit_method_and_score(stores, capsys):
    root, paths = stores
    out = root / "cli-cme.zarr"
    assert main(["fit", str(paths["continuous"]), "--out", str(out), "--method", "cme", "--constraints",
                 "normalization", "--lengthscale-x", "0.5", "--lengthscale-y", "0.5", "--reg", "1e-4"]) == 0
    assert "fitted cme on n = 800" in capsys.readouterr().out
    assert json.loads(zarr.open_group(out, mode="r").attrs["params"])["constraints"] == "normalization"
    assert main(["fit", str(paths["continuous"]), "--out", str(root / "cli-jpdl.zarr"), "--method", "jpdl",
                 "--degree", "2", "--reg", "1e-4"]) == 0  # no lengthscales: a polynomial model has none
    assert main(["fit", str(paths["continuous"]), "--out", str(root / "bad.zarr"), "--method", "cme",
                 "--threshold", "0", "--lengthscale-x", "0.5", "--lengthscale-y", "0.5", "--reg", "1e-4"]) == 2
    assert "parameter threshold: method cme has no such option (only klr)" in capsys.readouterr().err
    assert main(["score", str(out), str(paths["continuous"]), "--out", str(root / "cli-s.zarr"),
                 "--function", "mean", "--function", "cdf:0"]) == 0
