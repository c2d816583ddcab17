"""The Prefect flows on a temporary Prefect API: outputs, resume, validation, retries, artifacts, Dask,
crash-and-resume and concurrent scoring (subprocesses against the same API)."""
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("prefect")
zarr = pytest.importorskip("zarr")

from flows import jdl_flows  # noqa: E402
from flows.jdl_flows import fit_flow, score_flow, stage_flow, train_and_score_flow, tune_flow  # noqa: E402
from flows.stages import is_transient  # noqa: E402
from pipeline.model_store import load_model  # noqa: E402
from jdlcore.features.summaries import with_summaries  # noqa: E402
from pipeline.tuning import load_tuning  # noqa: E402

from .conftest import write_table  # noqa: E402

pytestmark = pytest.mark.usefixtures("prefect_api")

REPO = Path(__file__).resolve().parents[1]


def modified_times(store: Path) -> dict:
    return {p: p.stat().st_mtime_ns for p in store.rglob("*") if p.is_file()}


def test_train_and_score_writes_consistent_stores_and_resumes(tmp_path):
    source = write_table(tmp_path / "train.npz", 1200, 0)
    batch = write_table(tmp_path / "batch.npz", 300, 1)
    work = tmp_path / "work"
    arguments = dict(source=str(source), workdir=str(work), x=["x"], y=["y"], score_source=str(batch),
                     functions=["mean", "quantile:0.25,0.75"], lengthscales_x=[0.3, 0.6], lengthscales_y=[0.2, 0.4],
                     regs=[1e-5, 1e-3], tol=1e-3, positivity="tightening", chunk_size=500, scheduler="memory")
    first = train_and_score_flow(**arguments)
    assert {name: r["reused"] for name, r in first.items()} == dict.fromkeys(
        ["stage", "stage_batch", "tune", "fit", "score"], False)

    table = load_tuning(first["tune"]["path"])
    loss = table["validation_loss"]
    assert loss.shape == (2, 2, 2) and np.all(np.isfinite(loss.values))
    best = json.loads(table.attrs["best"])
    assert best["score"] <= float(loss.min())  # with boosted summaries of x, searched per feature from the grid's best
    model = load_model(first["fit"]["path"])
    summaries = model.view_.summaries  # None where the tuning kept x alone
    assert np.size(best["lengthscale_x"]) == 1 + (len(summaries.kept) if summaries else 0)
    np.testing.assert_array_equal(model.basis_x_.kernel.lengthscale, best["lengthscale_x"])
    assert (model.basis_y_.kernel.lengthscale, model.reg) == (best["lengthscale_y"], best["reg"])
    assert model.provenance_["tuning"]["best"] == best
    import xarray as xr

    with xr.open_zarr(first["fit"]["path"], consolidated=False) as stored:  # the table is in the model store
        np.testing.assert_array_equal(stored["tuning_validation_loss"].values, loss.values)
    x_batch = with_summaries(summaries, zarr.open_group(first["stage_batch"]["path"], mode="r")["x"][:])
    scores = zarr.open_group(first["score"]["path"], mode="r")
    np.testing.assert_allclose(scores["mean"][:], model.law_.conditional_expectation(x_batch), rtol=0, atol=1e-12)
    np.testing.assert_array_equal(scores["quantile:0.25,0.75"][:], model.law_.conditional_quantile(x_batch, [0.25, 0.75]))
    png = Path(first["fit"]["path"] + ".diagnostics.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    before = {name: modified_times(Path(r["path"])) for name, r in first.items()}
    again = train_and_score_flow(**arguments)
    assert all(r["reused"] for r in again.values())
    assert {name: modified_times(Path(r["path"])) for name, r in again.items()} == before

    changed = train_and_score_flow(**{**arguments, "positivity": "clip"})  # only fit and score depend on it
    assert {name: r["reused"] for name, r in changed.items()} == {
        "stage": True, "stage_batch": True, "tune": True, "fit": False, "score": False}
    assert load_model(changed["fit"]["path"]).positivity == "clip"


def test_fit_artifacts_are_published(tmp_path, prefect_api):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey, ArtifactFilterFlowRunId

    source = write_table(tmp_path / "t.npz", 400, 2)
    data = stage_flow(str(source), str(tmp_path / "d.zarr"), ["x"], ["y"])["path"]
    state = fit_flow(data, str(tmp_path / "m.zarr"), lengthscale_x=0.5, lengthscale_y=0.3, reg=1e-4,
                     return_state=True)
    flow_run_id = state.state_details.flow_run_id
    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(artifact_filter=ArtifactFilter(
            flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id])))
        by_key = {a.key: a for a in artifacts}
        assert set(by_key) == {"jdl-fit-summary", "jdl-fit-diagnostics"}
        summary = by_key["jdl-fit-summary"].data
        model = load_model(tmp_path / "m.zarr")
        assert f"m_X = {model.diagnostics_['rank_x']}, m_Y = {model.diagnostics_['rank_y']}" in summary
        assert model.provenance_["data_fingerprint"][:16] in summary
        assert by_key["jdl-fit-diagnostics"].data == (tmp_path / "m.zarr.diagnostics.png").resolve().as_uri()
        latest = client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["jdl-fit-summary"])))
        assert latest


def test_parameters_are_validated_with_one_clear_message(tmp_path):
    source = write_table(tmp_path / "t.npz", 200, 3)
    data = stage_flow(str(source), str(tmp_path / "d.zarr"), ["x"], ["y"])["path"]
    with pytest.raises(ValueError, match=r"^fit: parameter tol: must be in \[0, 1\) \(got 2\.0\)$"):
        fit_flow(data, str(tmp_path / "m.zarr"), lengthscale_x=1.0, lengthscale_y=1.0, reg=1e-4, tol=2.0)
    with pytest.raises(ValueError, match="fit: parameter lengthscale_x: give lengthscale_x, lengthscale_y and reg"):
        fit_flow(data, str(tmp_path / "m.zarr"), reg=1e-4)
    with pytest.raises(ValueError, match=r"parameter lengthscale_x: must be finite and > 0: one number, or one per feature \(got -1.0\)"):
        fit_flow(data, str(tmp_path / "m.zarr"), lengthscale_x=-1.0, lengthscale_y=1.0, reg=1e-4)
    with pytest.raises(ValueError, match="score: parameter functions: function 'median': unknown"):
        score_flow(str(tmp_path / "m.zarr"), data, str(tmp_path / "s.zarr"), functions=["median"])
    with pytest.raises(ValueError, match="parameter scheduler: 'nowhere' is not auto, memory, local"):
        tune_flow(data, str(tmp_path / "t.zarr"), scheduler="nowhere")
    with pytest.raises(ValueError, match="environment variable JDL_NOT_SET_ANYWHERE is not set"):
        stage_flow("${JDL_NOT_SET_ANYWHERE}/t.npz", str(tmp_path / "e.zarr"), ["x"], ["y"])
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("not a store")
    with pytest.raises(ValueError, match="exists and is not a jdl.data store; refusing to replace it"):
        stage_flow(str(source), str(foreign), ["x"], ["y"])
    assert (foreign / "keep.txt").read_text() == "not a store"
    assert not (tmp_path / "m.zarr").exists() and not (tmp_path / "s.zarr").exists()


def test_environment_variables_in_paths_and_the_scheduler_default(tmp_path, monkeypatch):
    write_table(tmp_path / "t.npz", 200, 4)
    monkeypatch.setenv("JDL_HOME", str(tmp_path))
    monkeypatch.setenv("JDL_SCHEDULER", "memory")
    result = stage_flow("${JDL_HOME}/t.npz", "${JDL_HOME}/d.zarr", ["x"], ["y"])
    assert result["path"] == str(tmp_path / "d.zarr")
    from pipeline.settings import TuneSettings

    assert TuneSettings(data="a", out="b").scheduler == "memory"


def test_transient_failures_are_retried_and_bad_input_is_not(tmp_path, monkeypatch):
    import flows.stages as stages

    source = write_table(tmp_path / "t.npz", 300, 5)
    data = stage_flow(str(source), str(tmp_path / "d.zarr"), ["x"], ["y"])["path"]
    real, calls = stages.fit_store, []

    def flaky(*args, **kwargs):
        calls.append(kwargs["reg"])
        if len(calls) == 1:
            raise ConnectionResetError("scheduler connection lost")
        return real(*args, **kwargs)

    monkeypatch.setattr(stages, "fit_store", flaky)
    result = fit_flow(data, str(tmp_path / "m.zarr"), lengthscale_x=0.5, lengthscale_y=0.5, reg=1e-4)
    assert len(calls) == 2 and load_model(result["path"]).reg == 1e-4

    def broken(*args, **kwargs):
        calls.append("bad")
        raise ValueError("y: column 'y' is constant")

    monkeypatch.setattr(stages, "fit_store", broken)
    calls.clear()
    with pytest.raises(ValueError, match="column 'y' is constant"):
        fit_flow(data, str(tmp_path / "n.zarr"), lengthscale_x=0.5, lengthscale_y=0.5, reg=1e-4)
    assert calls == ["bad"]
    assert is_transient(TimeoutError()) and is_transient(OSError("connection refused"))
    assert not is_transient(FileNotFoundError("x")) and not is_transient(ValueError("x"))


def test_fit_tunes_first_when_the_tuning_store_is_missing_or_stale(tmp_path):
    data = stage_flow(str(write_table(tmp_path / "a.npz", 500, 6)), str(tmp_path / "d.zarr"), ["x"], ["y"])["path"]
    tuning = tmp_path / "tuning.zarr"
    result = fit_flow(data, str(tmp_path / "m.zarr"), tuning=str(tuning), tol=1e-2, scheduler="memory")
    best = json.loads(load_tuning(tuning).attrs["best"])
    assert load_model(result["path"]).reg == best["reg"]
    stamp = modified_times(tuning)
    fit_flow(data, str(tmp_path / "m.zarr"), tuning=str(tuning), tol=1e-2, scheduler="memory")
    assert modified_times(tuning) == stamp  # same data: the tuning store is used as it is
    before = load_tuning(tuning).attrs["data_fingerprint"]
    stage_flow(str(write_table(tmp_path / "b.npz", 500, 7)), str(tmp_path / "d.zarr"), ["x"], ["y"])
    fit_flow(data, str(tmp_path / "m.zarr"), tuning=str(tuning), tol=1e-2, scheduler="memory")
    after = load_tuning(tuning).attrs["data_fingerprint"]
    assert after != before and modified_times(tuning) != stamp  # other data: tuned again
    assert after == load_model(tmp_path / "m.zarr").provenance_["data_fingerprint"]


def test_flows_run_their_dask_work_on_a_real_scheduler(tmp_path, dask_client):
    address = dask_client.scheduler.address
    source = write_table(tmp_path / "t.npz", 2000, 8)
    data = stage_flow(str(source), str(tmp_path / "d.zarr"), ["x"], ["y"], chunk_size=512)["path"]
    grid = dict(lengthscales_x=[0.4, 0.8], lengthscales_y=[0.3], regs=[1e-4, 1e-3], summaries="boosted", folds=1)
    tuned = tune_flow(data, str(tmp_path / "t.zarr"), **grid, scheduler=address)
    in_process = tune_flow(data, str(tmp_path / "t-mem.zarr"), **grid, scheduler="memory")
    # equal to rounding: the workers' BLAS runs one thread, this process's several (other partial sums)
    np.testing.assert_allclose(load_tuning(tuned["path"])["validation_loss"].values,
                               load_tuning(in_process["path"])["validation_loss"].values, rtol=1e-12, atol=0)
    on_dask = fit_flow(data, str(tmp_path / "m.zarr"), tuning=tuned["path"], constraints="normalization",
                       scheduler=address)
    model = load_model(on_dask["path"])
    assert model.provenance_["scheduler"] == address
    reference = load_model(fit_flow(data, str(tmp_path / "m-mem.zarr"), tuning=tuned["path"],
                                    constraints="normalization", scheduler="memory")["path"])
    augment = model.view_.summaries.augment  # the tuning's boosted summaries, read after x
    Xq = augment(np.linspace(-3, 3, 17)[:, None])
    # support weights agree to ~1e-5 relative (an ill-conditioned reweighting of sums taken in another
    # order), the moments they keep to rounding
    np.testing.assert_allclose(model.law_.conditional_weights(Xq), reference.law_.conditional_weights(Xq), rtol=0,
                               atol=1e-6)
    np.testing.assert_allclose(model.law_.conditional_expectation(Xq), reference.law_.conditional_expectation(Xq), rtol=0,
                               atol=1e-10)
    scores = score_flow(on_dask["path"], data, str(tmp_path / "s.zarr"), functions=["mean"], scheduler=address)
    x = augment(zarr.open_group(data, mode="r")["x"][:])
    np.testing.assert_allclose(zarr.open_group(scores["path"], mode="r")["mean"][:],
                               model.law_.conditional_expectation(x), rtol=0, atol=1e-12)


RUNNER = textwrap.dedent("""
    import json, sys
    from flows.jdl_flows import {flow}
    from flows.progress import displayed
    with displayed(lambda line: print(line, file=sys.stderr, flush=True)):  # whatever Prefect's log config
        result = {flow}(**json.loads(sys.argv[1]))
    print(json.dumps(result))
""")


def run_flow_process(flow: str, arguments: dict, api: str, **popen) -> subprocess.Popen:
    env = {**os.environ, "PREFECT_API_URL": api, "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-c", RUNNER.format(flow=flow), json.dumps(arguments)], cwd=REPO,
                            env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, **popen)


def test_a_killed_run_resumes_and_ends_with_the_undisturbed_model(tmp_path, prefect_api):
    """SIGKILL the flow process while it fits; the re-run reuses stage and tune (untouched on disk)
    and writes a model store identical to the one an undisturbed run writes."""
    source = write_table(tmp_path / "t.npz", 2500, 9)
    arguments = dict(source=str(source), x=["x"], y=["y"], lengthscales_x=[0.3, 0.6], lengthscales_y=[0.3],
                     regs=[1e-4], tol=1e-4, chunk_size=500, scheduler="memory")
    crashed = tmp_path / "crashed"
    process = run_flow_process("train_and_score_flow", {**arguments, "workdir": str(crashed)}, prefect_api)
    seen = []
    for line in process.stderr:  # event-driven: kill the moment the fit task announces its work
        seen.append(line)
        if "fit: writing" in line:
            break
    else:
        out, _ = process.communicate()
        raise AssertionError(f"the flow ended (exit {process.returncode}) before its fit started:\n"
                             + "".join(seen[-20:]) + out[-2000:])
    os.killpg(process.pid, signal.SIGKILL)
    process.communicate()
    assert (crashed / "tuning.zarr").exists() and not (crashed / "model.zarr").exists()
    stamps = {name: modified_times(crashed / f"{name}.zarr") for name in ("data", "tuning")}

    resumed = train_and_score_flow(**arguments, workdir=str(crashed))
    assert {name: r["reused"] for name, r in resumed.items()} == {
        "stage": True, "tune": True, "fit": False, "score": False}
    assert {name: modified_times(crashed / f"{name}.zarr") for name in ("data", "tuning")} == stamps
    assert not list(crashed.glob(".*.tmp-*"))  # nothing partial left behind by the killed writer

    undisturbed = train_and_score_flow(**arguments, workdir=str(tmp_path / "clean"))
    stores = [zarr.open_group(r["fit"]["path"], mode="r") for r in (resumed, undisturbed)]
    sums = [json.loads(store.attrs["checksums"]) for store in stores]
    assert sums[0].keys() == sums[1].keys()
    # the model's own variables bit for bit; the copy of the tuning table (computed by the killed
    # process for the resumed run, by this one for the undisturbed run) to rounding: on a clean clone
    # its losses were seen to differ in the last bits between the two processes
    model = [name for name in sums[0] if not name.startswith("tuning_")]
    assert {name: sums[0][name] for name in model} == {name: sums[1][name] for name in model}
    for name in sums[0].keys() - set(model):
        a, b = (np.asarray(store[name][:]) for store in stores)
        if a.dtype.kind == "f":
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=0, err_msg=name)
        else:
            np.testing.assert_array_equal(a, b, err_msg=name)
    assert stores[0].attrs["run_key"] == stores[1].attrs["run_key"]


def test_two_concurrent_score_runs_on_one_model(tmp_path, prefect_api):
    source = write_table(tmp_path / "t.npz", 3000, 10)
    data = stage_flow(str(source), str(tmp_path / "d.zarr"), ["x"], ["y"], chunk_size=500)["path"]
    model = fit_flow(data, str(tmp_path / "m.zarr"), lengthscale_x=0.5, lengthscale_y=0.3, reg=1e-4,
                     positivity="tightening")["path"]
    functions = ["mean", "second_moment", "quantile:0.1,0.5,0.9"]
    processes = [run_flow_process("score_flow", dict(model=model, data=data, out=str(tmp_path / f"s{k}.zarr"),
                                                     functions=functions, scheduler="memory"), prefect_api)
                 for k in range(2)]
    for process in processes:
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err[-3000:]
        assert json.loads(out.strip().splitlines()[-1])["reused"] is False
    first, second = (zarr.open_group(tmp_path / f"s{k}.zarr", mode="r") for k in range(2))
    fitted = load_model(model)
    x = zarr.open_group(data, mode="r")["x"][:]
    for spec in functions:
        np.testing.assert_array_equal(first[spec][:], second[spec][:], err_msg=spec)
    np.testing.assert_allclose(first["mean"][:], fitted.conditional_expectation(x), rtol=0, atol=1e-12)


def test_flow_module_is_the_deployments_entrypoint():
    assert Path(jdl_flows.__file__).resolve() == REPO / "flows" / "jdl_flows.py"


def test_a_damaged_output_is_recomputed_not_reused(tmp_path):
    import shutil

    source = write_table(tmp_path / "t.npz", 300, 11)
    first = stage_flow(str(source), str(tmp_path / "d.zarr"), ["x"], ["y"])
    shutil.rmtree(tmp_path / "d.zarr" / "y")  # same run key recorded, but the store is broken
    again = stage_flow(str(source), str(tmp_path / "d.zarr"), ["x"], ["y"])
    assert again["reused"] is False and again["key"] == first["key"]
    from pipeline.staging import open_staged

    assert open_staged(tmp_path / "d.zarr")["y"].shape == (300, 1)
