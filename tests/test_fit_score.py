"""End to end through the CLI: stage -> fit (in memory and on a real Dask scheduler) -> score."""
import json

import numpy as np
import pytest

pytest.importorskip("pandas")
zarr = pytest.importorskip("zarr")
from jdl.cli import main  # noqa: E402
from pipeline.model_store import load_model  # noqa: E402


@pytest.fixture
def staged(tmp_path, rng):
    n = 1500
    x = rng.standard_normal(n)
    y = 0.8 * x + 0.6 * rng.standard_normal(n)
    np.savez(tmp_path / "src.npz", a=x, t=y)
    assert main(["stage", str(tmp_path / "src.npz"), "--x", "a", "--y", "t", "--out", str(tmp_path / "d.zarr"),
                 "--chunk-size", "400"]) == 0
    return tmp_path, x[:, None], y[:, None]


def fit_args(tmp_path, name, *extra):
    return ["fit", str(tmp_path / "d.zarr"), "--out", str(tmp_path / name), "--lengthscale-x", "0.5",
            "--lengthscale-y", "0.5", "--reg", "1e-4", "--tol", "1e-4", *extra]


def test_stage_fit_score_in_memory(staged, capsys):
    tmp_path, x, y = staged
    assert main(fit_args(tmp_path, "m.zarr")) == 0
    out = capsys.readouterr().out
    assert "fitted jdl on n = 1,500" in out and "law project on M = " in out
    model = load_model(tmp_path / "m.zarr")
    assert model.positivity == "project" and model.diagnostics_["law"] == "project"
    assert model.conditional_weights(x).min() >= 0
    assert main(["score", str(tmp_path / "m.zarr"), str(tmp_path / "d.zarr"), "--out", str(tmp_path / "s.zarr"),
                 "--function", "mean", "--function", "second_moment", "--function", "cdf:-1,0,1",
                 "--function", "quantile:0.05,0.5,0.95"]) == 0
    scores = zarr.open_group(tmp_path / "s.zarr", mode="r")
    np.testing.assert_allclose(scores["mean"][:], model.conditional_expectation(x), atol=1e-12)
    np.testing.assert_allclose(scores["second_moment"][:][:, 0, 0], model.conditional_expectation(x, lambda v: v**2)[:, 0], atol=1e-12)
    np.testing.assert_allclose(scores["cdf:-1,0,1"][:], model.conditional_cdf(x, [-1, 0, 1]), atol=1e-12)
    # quantiles are atoms: a rounding-level difference in the weights can only move one at an exact tie
    same = scores["quantile:0.05,0.5,0.95"][:] == model.conditional_quantile(x, [0.05, 0.5, 0.95])
    assert same.mean() > 0.999
    assert scores["mean"].metadata.dimension_names == ("sample", "y_feature")
    from data_schemas.scores import validate_scores_group

    validate_scores_group(scores)
    scores_attrs_removed = zarr.open_group(tmp_path / "s.zarr", mode="r+")
    del scores_attrs_removed["cdf:-1,0,1"]
    with pytest.raises(ValueError, match="array 'cdf:-1,0,1' is missing"):
        validate_scores_group(zarr.open_group(tmp_path / "s.zarr", mode="r"))
    assert main(["score", str(tmp_path / "m.zarr"), str(tmp_path / "d.zarr"), "--out", str(tmp_path / "t.zarr"),
                 "--function", "median"]) == 2
    assert "function 'median': unknown" in capsys.readouterr().err
    assert not (tmp_path / "t.zarr").exists()


def test_a_function_name_too_long_for_a_file_name_is_stored_under_a_short_one(staged):
    from data_schemas.scores import array_name, scores_array, validate_scores_group

    tmp_path, x, _ = staged
    assert main(fit_args(tmp_path, "m.zarr")) == 0
    levels = np.round(np.linspace(0.01, 0.99, 99), 2)
    spec = "quantile:" + ",".join(f"{v:g}" for v in levels)  # 295 characters: over a file name's 255
    assert main(["score", str(tmp_path / "m.zarr"), str(tmp_path / "d.zarr"), "--out", str(tmp_path / "s.zarr"),
                 "--function", spec, "--function", "mean"]) == 0
    scores = zarr.open_group(tmp_path / "s.zarr", mode="r")
    validate_scores_group(scores)
    assert array_name(spec).startswith("quantile-") and array_name(spec) in scores and array_name("mean") == "mean"
    model = load_model(tmp_path / "m.zarr")
    quantiles = scores_array(scores, spec)
    assert quantiles.attrs["parameters"] == levels.tolist() and quantiles.shape == (len(x), 99)
    assert np.mean(quantiles[:] == model.conditional_quantile(x, levels)) > 0.999
    np.testing.assert_allclose(scores_array(scores, "mean")[:], model.conditional_expectation(x), atol=1e-12)


def test_fit_and_score_on_real_dask_scheduler_equal_in_memory(staged, dask_client):
    """Fit and score as Dask tasks on a real scheduler with two worker processes; the model and
    the scores equal the in-process ones."""
    tmp_path, x, _ = staged
    address = dask_client.scheduler.address
    assert main(fit_args(tmp_path, "mem.zarr", "--constraints", "normalization", "--scheduler", "memory")) == 0
    assert main(fit_args(tmp_path, "dask.zarr", "--constraints", "normalization", "--scheduler", address)) == 0
    a, b = load_model(tmp_path / "mem.zarr"), load_model(tmp_path / "dask.zarr")
    assert b.provenance_["scheduler"] == address and sorted(b.registered_) == ["mean", "second_moment"]
    Xq = np.linspace(-3, 3, 25)[:, None]
    np.testing.assert_allclose(b.support_.atoms, a.support_.atoms, rtol=1e-11)  # sums in another order
    # the support weights solve an ill-conditioned system whose targets the two paths sum in different
    # orders (1e-13 apart): single weights agree to about 1e-5 relative, the moments they keep to 1e-10
    np.testing.assert_allclose(a.conditional_weights(Xq), b.conditional_weights(Xq), rtol=0, atol=1e-6)
    np.testing.assert_allclose(a.conditional_expectation(Xq), b.conditional_expectation(Xq), rtol=0, atol=1e-10)
    functions = ["--function", "mean", "--function", "second_moment", "--function", "cdf:-1,0,1",
                 "--function", "quantile:0.1,0.9"]
    for name, scheduler in (("s-mem.zarr", "memory"), ("s-dask.zarr", address)):
        assert main(["score", str(tmp_path / "dask.zarr"), str(tmp_path / "d.zarr"), "--out", str(tmp_path / name),
                     *functions, "--scheduler", scheduler]) == 0
    in_process, on_dask = (zarr.open_group(tmp_path / name, mode="r") for name in ("s-mem.zarr", "s-dask.zarr"))
    for spec in ("mean", "second_moment", "cdf:-1,0,1"):  # to rounding: the workers' BLAS runs one thread
        np.testing.assert_allclose(on_dask[spec][:], in_process[spec][:], rtol=0, atol=1e-13, err_msg=spec)
    same = on_dask["quantile:0.1,0.9"][:] == in_process["quantile:0.1,0.9"][:]  # atoms: equal but at exact ties
    assert same.mean() > 0.999
    np.testing.assert_allclose(on_dask["mean"][:], b.conditional_expectation(x), rtol=0, atol=1e-12)


def test_positivity_choice_and_scheduler_values(staged, capsys):
    from pipeline.cluster import resolve_scheduler
    from pipeline.fitting import make_estimator

    hyper = dict(lengthscale_x=1.0, lengthscale_y=1.0, reg=1e-3)
    assert make_estimator("jdl", **hyper, positivity="auto").positivity == "project"  # at every n
    assert make_estimator("jdl", **hyper, positivity="grid").positivity == "grid"
    assert make_estimator("jpdl", **hyper, positivity="auto").positivity == "sos"
    assert make_estimator("greedy", **hyper, positivity="auto").positivity == "atoms"
    assert not hasattr(make_estimator("cme", **hyper, positivity="auto"), "positivity")
    with pytest.raises(ValueError, match="positivity: unknown value 'magic'"):
        make_estimator("jdl", **hyper, positivity="magic")
    assert resolve_scheduler(None, 10) is None and resolve_scheduler("auto", 10**7) == "local"
    assert resolve_scheduler("memory", 10**7) is None and resolve_scheduler("tcp://h:1", 5) == "tcp://h:1"
    tmp_path, _, _ = staged
    assert main(fit_args(tmp_path, "m.zarr", "--scheduler", "nowhere")) == 2
    assert "scheduler: 'nowhere' is not auto, memory, local" in capsys.readouterr().err
    assert not (tmp_path / "m.zarr").exists()


def test_tuning_records_a_failing_candidate_and_goes_on(staged, monkeypatch):
    """A candidate that raises is kept in the tuning store (NaN loss, its error in ``failures``); the
    search picks the best of the others."""
    import json

    from jdlcore import JDL
    from pipeline.tuning import load_tuning, tune_store

    tmp_path, _, _ = staged
    real = JDL.fit_problem

    def fragile(self, problem, Y):
        if self.reg == 1e-3:
            raise ValueError("this candidate broke")
        return real(self, problem, Y)

    monkeypatch.setattr(JDL, "fit_problem", fragile)  # the class every candidate of the grid is
    path = tune_store(tmp_path / "d.zarr", tmp_path / "t.zarr", lengthscales_x=[0.5], lengthscales_y=[0.5],
                      regs=[1e-5, 1e-3], scheduler="memory", summaries="none")  # one column: no search
    table = load_tuning(path)
    loss = table["validation_loss"].values.ravel()
    assert np.isfinite(loss[0]) and np.isnan(loss[1])
    failures = json.loads(table.attrs["failures"])
    assert failures == [{"lengthscale_x": 0.5, "lengthscale_y": 0.5, "reg": 1e-3,
                         "error": "ValueError: this candidate broke"}]
    assert json.loads(table.attrs["best"])["reg"] == 1e-5


def test_scoring_counts_the_projection_levels_and_says_when_a_moment_was_lost(tmp_path, capsys, dask_client):
    """Narrow conditional laws (y = sin(x) + 0.02 e, short lengthscales), where many query rows cannot
    keep the second moment: the scores store counts the rows at each level (in this process and as
    Dask tasks alike), the counts are the model's own ``law_levels``, and ``jdl score`` says how many
    rows lost a moment. ``jdl inspect`` shows the fit's record at its sampled training x."""
    rng = np.random.default_rng(0)
    x = rng.uniform(-3, 3, 3000)
    np.savez(tmp_path / "src.npz", a=x, t=np.sin(x) + 0.02 * rng.standard_normal(3000))
    np.savez(tmp_path / "batch.npz", a=rng.uniform(-3.5, 3.5, 2000), t=rng.standard_normal(2000))
    for source, store in (("src.npz", "d.zarr"), ("batch.npz", "b.zarr")):
        assert main(["stage", str(tmp_path / source), "--x", "a", "--y", "t", "--out", str(tmp_path / store),
                     "--chunk-size", "700"]) == 0
    assert main(["fit", str(tmp_path / "d.zarr"), "--out", str(tmp_path / "m.zarr"), "--lengthscale-x", "0.02",
                 "--lengthscale-y", "0.03", "--reg", "1e-8"]) == 0
    model = load_model(tmp_path / "m.zarr")
    record = model.diagnostics_["projection"]
    assert record["rows"] == 2000 and record["failed"] == 0.0
    assert main(["inspect", str(tmp_path / "m.zarr")]) == 0
    assert f"at 2,000 training x rows: mass, mean and second moment {100 * record['levels']['2']:.3g}%" in \
        capsys.readouterr().out
    levels = model.law_levels(zarr.open_group(tmp_path / "b.zarr", mode="r")["x"][:])
    expected = {str(v): int(c) for v, c in zip(*np.unique(levels, return_counts=True))}
    assert expected.get("1", 0) > 0 and "-2" not in expected  # rows that lost the second moment, none failed
    for name, scheduler in (("s.zarr", "memory"), ("s-dask.zarr", dask_client.scheduler.address)):
        assert main(["score", str(tmp_path / "m.zarr"), str(tmp_path / "b.zarr"), "--out", str(tmp_path / name),
                     "--function", "mean", "--function", "quantile:0.1,0.9", "--scheduler", scheduler]) == 0
        attrs = zarr.open_group(tmp_path / name, mode="r").attrs
        assert json.loads(attrs["projection_levels"]) == expected and attrs["projection_full_level"] == 2
        out = capsys.readouterr().out
        assert f"projection: {expected['2']:,} of 2,000 rows kept mass, mean and second moment, " \
               f"{expected['1']:,} of 2,000 rows kept mass and mean" in out
        assert "projection_failed" not in out
