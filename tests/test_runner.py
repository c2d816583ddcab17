"""Where runs execute (flows.runner): in-process without Prefect by default, recorded in Prefect on
request or when an API is configured, with the same stages, results and retry rule either way."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from jdl.cli import main
from flows.runner import configured_api_url, execute, prefect_requested, run_stage

from .conftest import processes_in_group, write_table

REPO = Path(__file__).resolve().parents[1]


def test_the_command_line_runs_without_prefect_by_default(tmp_path):
    """stage and fit in a fresh interpreter with no Prefect API configured: Prefect is never imported,
    and the stores are written."""
    script = textwrap.dedent("""
        import sys
        from jdl.cli import main
        data, model = sys.argv[2] + "/d.zarr", sys.argv[2] + "/m.zarr"
        assert main(["stage", sys.argv[1], "--x", "x", "--y", "y", "--out", data]) == 0
        assert main(["fit", data, "--out", model, "--lengthscale-x", "0.5", "--lengthscale-y", "0.3",
                     "--reg", "1e-4", "--scheduler", "memory"]) == 0
        print("prefect imported:", "prefect" in sys.modules)
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env["PREFECT_HOME"] = str(tmp_path / "prefect-home")  # no profile names an API
    result = subprocess.run([sys.executable, "-c", script, str(write_table(tmp_path / "t.npz")), str(tmp_path)],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert "prefect imported: False" in result.stdout
    assert result.stderr == ""  # no progress bar where stderr is not a terminal, so not even its empty line
    assert (tmp_path / "d.zarr").is_dir() and (tmp_path / "m.zarr").is_dir()
    assert (tmp_path / "m.zarr.diagnostics.png").is_file()


def test_in_process_and_recorded_runs_write_the_same_model(tmp_path, prefect_api, capsys):
    """The same fit in-process and with --prefect (a flow run on the session's API, which records it)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName

    from pipeline.model_store import load_model

    source = write_table(tmp_path / "t.npz")
    fit = ["--lengthscale-x", "0.5", "--lengthscale-y", "0.3", "--reg", "1e-4", "--scheduler", "memory"]
    assert main(["stage", str(source), "--x", "x", "--y", "y", "--out", str(tmp_path / "d.zarr")]) == 0
    assert main(["fit", str(tmp_path / "d.zarr"), "--out", str(tmp_path / "local.zarr"), *fit]) == 0
    with get_client(sync_client=True) as client:
        before = len(client.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(any_=["jdl-fit"]))))
        assert main(["fit", str(tmp_path / "d.zarr"), "--out", str(tmp_path / "recorded.zarr"), *fit,
                     "--prefect"]) == 0
        runs = client.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(any_=["jdl-fit"])))
    assert len(runs) == before + 1 and any(run.state.is_completed() for run in runs)
    local, recorded = load_model(tmp_path / "local.zarr"), load_model(tmp_path / "recorded.zarr")
    np.testing.assert_allclose(local.coef_, recorded.coef_, rtol=1e-12, atol=0)
    from data_schemas.model import SCHEMA_NAME
    from flows.resume import existing_key

    assert existing_key(tmp_path / "local.zarr", SCHEMA_NAME) == existing_key(tmp_path / "recorded.zarr", SCHEMA_NAME)


def test_in_process_stages_retry_transient_failures_only(tmp_path, monkeypatch):
    import flows.stages as stages

    monkeypatch.setattr(stages, "RETRY_DELAYS", (0.0, 0.0))
    calls = []

    def flaky(settings):
        calls.append(settings)
        if len(calls) < 3:
            raise ConnectionResetError("scheduler connection lost")
        return {"path": "p", "reused": False, "key": "k"}

    monkeypatch.setitem(stages.STAGES, "fit", flaky)
    assert run_stage("fit", {"a": 1}) == {"path": "p", "reused": False, "key": "k"} and len(calls) == 3
    calls.clear()

    def always_lost(settings):
        calls.append(settings)
        raise ConnectionResetError("scheduler connection lost")

    monkeypatch.setitem(stages.STAGES, "fit", always_lost)
    with pytest.raises(ConnectionResetError):
        run_stage("fit", {})
    assert len(calls) == 3  # the first try and two retries
    calls.clear()

    def bad_input(settings):
        calls.append(settings)
        raise ValueError("y: column 'y' is constant")

    monkeypatch.setitem(stages.STAGES, "fit", bad_input)
    with pytest.raises(ValueError, match="constant"):
        run_stage("fit", {})
    assert len(calls) == 1


def test_execute_validates_before_any_work(tmp_path):
    with pytest.raises(ValueError, match="fit: parameter tol"):
        execute("fit", prefect=False, data=str(tmp_path / "d.zarr"), out=str(tmp_path / "m.zarr"), tol=2.0)
    assert not (tmp_path / "m.zarr").exists()


def test_a_configured_api_is_found_in_the_environment_or_the_active_profile(tmp_path, monkeypatch):
    for name in ("PREFECT_API_URL", "PREFECT_PROFILE", "PREFECT_PROFILES_PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path))
    assert configured_api_url() is None and not prefect_requested(False) and prefect_requested(True)
    (tmp_path / "profiles.toml").write_text(
        'active = "work"\n[profiles.work]\nPREFECT_API_URL = "http://127.0.0.1:4200/api"\n[profiles.ephemeral]\n')
    assert configured_api_url() == "http://127.0.0.1:4200/api" and prefect_requested(False)
    monkeypatch.setenv("PREFECT_PROFILE", "ephemeral")
    assert configured_api_url() is None
    monkeypatch.setenv("PREFECT_API_URL", "http://elsewhere:4200/api")
    assert configured_api_url() == "http://elsewhere:4200/api"
    (tmp_path / "profiles.toml").write_text("not toml [")
    monkeypatch.delenv("PREFECT_API_URL")
    assert configured_api_url() is None


def test_help_is_fast_to_import():
    """`jdl --help` imports neither Prefect nor the numerical stack."""
    script = "import sys\nfrom jdl.cli import build_parser\nbuild_parser()\nprint(json.dumps(sorted(m for m in ('prefect', 'numpy', 'dask', 'zarr') if m in sys.modules)))"
    result = subprocess.run([sys.executable, "-c", "import json\n" + script], cwd=REPO, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []


def test_ctrl_c_stops_an_in_process_tuning_with_its_work_beside_it_at_once(tmp_path):
    """Ctrl-C (SIGINT) once the default tuning of a table of several columns runs its search on the
    columns alone beside the boosters (on a pool thread): `jdl tune` exits with 130 and one line within
    a few seconds (measured: about 1 s; 8-17 s when the pool's work ran on to its end), and leaves no
    store. The bound is generous; what it catches is the work beside it running to its end."""
    import pandas as pd

    rng = np.random.default_rng(1)
    X = rng.standard_normal((20_000, 6))
    y = np.sin(2 * X[:, 0]) * X[:, 1] + np.abs(X[:, 2]) * rng.standard_normal(20_000) + 0.5 * X[:, 3] * X[:, 4]
    columns = [f"x{k}" for k in range(6)]
    pd.DataFrame(np.column_stack([X, y]), columns=columns + ["y"]).to_parquet(tmp_path / "t.parquet")
    data = tmp_path / "d.zarr"
    assert main(["stage", str(tmp_path / "t.parquet"), "--x", ",".join(columns), "--y", "y", "--out", str(data)]) == 0
    command = [sys.executable, "-m", "jdl.cli", "-v", "tune", str(data), "--out", str(tmp_path / "tuning.zarr"),
               "--scheduler", "memory"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    process = subprocess.Popen(command, cwd=REPO, env=env, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        for line in process.stderr:  # the search on the columns alone has scored a pair, beside the boosters
            if "columns alone: tuned 1/" in line:
                break
        else:
            pytest.fail(f"tune ended before the search on the columns alone scored a pair (exit {process.wait()})")
        interrupted = time.monotonic()
        os.kill(process.pid, signal.SIGINT)
        rest = process.stderr.read()
        code = process.wait(timeout=120)
        stopped = time.monotonic() - interrupted
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert code == 130, rest[-2000:]
    assert rest.splitlines()[-1] == "jdl tune: stopped; the output is absent or as the previous run left it"
    assert stopped < 6.0, f"{stopped:.1f} s from Ctrl-C to exit"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["d.zarr", "t.parquet"]


def test_sigterm_stops_a_command_with_its_cluster_and_leaves_no_output(tmp_path):
    """`jdl tune` on an embedded Dask cluster gets SIGTERM once its first candidate pair is scored (of
    twelve): it exits with 130 and one line, the cluster's processes end, and no store or temporary
    directory is left."""
    psutil = pytest.importorskip("psutil")
    data = tmp_path / "d.zarr"
    assert main(["stage", str(write_table(tmp_path / "t.npz", 20_000)), "--x", "x", "--y", "y", "--out", str(data)]) == 0
    command = [sys.executable, "-m", "jdl.cli", "-v", "tune", str(data), "--out", str(tmp_path / "tuning.zarr"),
               "--scheduler", "local", "--lengthscales-x", "0.1,0.2,0.3,0.5,0.8,1.2", "--lengthscales-y", "0.2,0.4"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    process = subprocess.Popen(command, cwd=REPO, env=env, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        for line in process.stderr:  # the cluster is up and working once a pair is scored
            if "tuned 1/12" in line:
                break
        else:
            pytest.fail(f"tune ended before scoring a pair (exit {process.wait()})")
        os.kill(process.pid, signal.SIGTERM)
        rest = process.stderr.read()
        assert process.wait(timeout=120) == 130, rest[-2000:]
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert "jdl tune: stopped; the output is absent or as the previous run left it" in rest.splitlines()

    left = processes_in_group(process.pid)
    deadline = time.monotonic() + 60
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = processes_in_group(process.pid)
    assert not left, [(pid, psutil.Process(pid).cmdline()) for pid in left]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["d.zarr", "t.npz"]
