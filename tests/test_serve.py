"""A served deployment on a real `prefect server start` (127.0.0.1, own PREFECT_HOME): the deployments
of deploy/prefect.yaml register, the server's scheduler creates runs, and a run writes a valid model.
The fit is scheduled every second, far faster than it runs: the deployment's concurrency limit skips
the runs that come while one runs, and none of them fails."""
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

yaml = pytest.importorskip("yaml")
pytest.importorskip("prefect")

from .conftest import stopped_on_exit  # noqa: E402
from pipeline.model_store import load_model  # noqa: E402
from pipeline.staging import stage  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def project_with_fast_schedule(tmp_path: Path) -> Path:
    """deploy/prefect.yaml with the nightly fit on a 1 s interval and fixed hyperparameters."""
    project = yaml.safe_load((REPO / "deploy" / "prefect.yaml").read_text())
    fit = next(d for d in project["deployments"] if d["name"] == "nightly-fit")
    fit["schedules"] = [{"interval": 1}]
    fit["parameters"].pop("tuning")
    fit["parameters"].update(lengthscale_x=0.5, lengthscale_y=0.4, reg=1e-4)
    path = tmp_path / "prefect.yaml"
    path.write_text(yaml.safe_dump(project))
    return path


def test_served_deployment_is_scheduled_and_writes_a_model(tmp_path, prefect_server):
    api, env = prefect_server
    home = tmp_path / "home"
    home.mkdir()
    rng = np.random.default_rng(0)
    x = rng.uniform(-2, 2, 800)
    np.savez(tmp_path / "t.npz", x=x, y=np.cos(x) + 0.2 * rng.standard_normal(800))
    stage(tmp_path / "t.npz", home / "staged.zarr", ["x"], ["y"])
    binary = shutil.which("jdl", path=os.path.dirname(sys.executable)) or shutil.which("jdl")
    assert binary, "the jdl console script is not installed"
    log = open(tmp_path / "serve.log", "w")
    serving = subprocess.Popen(
        [binary, "serve", "--config", str(project_with_fast_schedule(tmp_path))], cwd=REPO, stdout=log,
        stderr=subprocess.STDOUT, start_new_session=True,
        env={**env, "JDL_HOME": str(home), "JDL_SCHEDULER": "memory", "PREFECT_RUNNER_POLL_FREQUENCY": "2"})
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with stopped_on_exit(serving), temporary_settings({PREFECT_API_URL: api}), get_client(sync_client=True) as client:
        deadline = time.monotonic() + 600  # a bound for a loaded machine; the loop ends on the runs' states
        runs = []
        while sum(run.state is not None and run.state.is_final() for run in runs) < 4 or not [
                run for run in runs if run.state.is_completed()]:
            assert serving.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
            assert time.monotonic() < deadline, (tmp_path / "serve.log").read_text()[-3000:]
            time.sleep(1)
            try:
                deployment = client.read_deployment_by_name("jdl-fit/nightly-fit")
            except Exception:  # not registered yet
                continue
            runs = client.read_flow_runs(deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment.id])))
        final = [run for run in runs if run.state is not None and run.state.is_final()]
        failed = [(run.name, run.state.type.value, run.state.message) for run in final
                  if run.state.is_failed() or run.state.is_crashed()]
        assert not failed, (failed, (tmp_path / "serve.log").read_text()[-3000:])
        assert all(run.state.is_completed() or run.state.is_cancelled() for run in final)  # done, or skipped
        assert deployment.global_concurrency_limit.limit == 1
        assert deployment.concurrency_options.collision_strategy.value == "CANCEL_NEW"
        score = client.read_deployment_by_name("jdl-score/hourly-score")
        assert [s.schedule.cron for s in score.schedules] == ["15 * * * *"]
        run = next(run for run in final if run.state.is_completed())
        assert run.auto_scheduled, "the run was not created by the server's scheduler"
        assert run.parameters["data"] == "${JDL_HOME}/staged.zarr"  # expanded where the flow runs
    model = load_model(home / "model.zarr")
    assert model.reg == 1e-4 and model.n_samples_ == 800
    assert model.provenance_["data"] == str((home / "staged.zarr").resolve())
    log.close()


def test_prefect_deploy_registers_the_deployments_on_the_process_pool(prefect_server):
    """`prefect deploy --all` accepts deploy/prefect.yaml as it is: both deployments land on the
    process work pool with their cron schedules (their runs need the image's /opt/jdl: not run here)."""
    api, env = prefect_server
    binary = shutil.which("prefect", path=os.path.dirname(sys.executable)) or shutil.which("prefect")
    run = dict(cwd=REPO, env={**env, "JDL_HOME": "/data"}, capture_output=True, text=True, timeout=300)
    created = subprocess.run([binary, "work-pool", "create", "jdl-process", "--type", "process"], **run)
    assert created.returncode == 0, created.stdout[-2000:] + created.stderr[-2000:]
    deployed = subprocess.run([binary, "--no-prompt", "deploy", "--all", "--prefect-file", "deploy/prefect.yaml"],
                              **run)
    assert deployed.returncode == 0, deployed.stdout[-3000:] + deployed.stderr[-3000:]
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: api}), get_client(sync_client=True) as client:
        fit = client.read_deployment_by_name("jdl-fit/nightly-fit")
        score = client.read_deployment_by_name("jdl-score/hourly-score")
    assert fit.work_pool_name == score.work_pool_name == "jdl-process"
    assert [s.schedule.cron for s in fit.schedules] == ["0 2 * * *"]
    assert [s.schedule.cron for s in score.schedules] == ["15 * * * *"]
    assert fit.entrypoint == "flows/jdl_flows.py:fit_flow"
    assert fit.global_concurrency_limit.limit == score.global_concurrency_limit.limit == 1
    assert fit.concurrency_options.collision_strategy.value == "CANCEL_NEW"
    assert fit.parameters["out"] == "${JDL_HOME}/model.zarr"
