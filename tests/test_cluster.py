"""Where the work runs (``pipeline.cluster``): the clients jdl opens leave dask's configuration as they
found it, however they overlap, so that a run of several stages in one process (``jdl demo``, the
train-and-score flow) works on one shared embedded cluster and on a real ``dask scheduler`` address.
The embedded cluster is run by the demo's test (tests/test_cli.py)."""
import threading

import numpy as np
import pytest

dask = pytest.importorskip("dask")
da = pytest.importorskip("dask.array")
pytest.importorskip("distributed")
xr = pytest.importorskip("xarray")
from pipeline import cluster  # noqa: E402

from .conftest import write_table  # noqa: E402


@pytest.fixture
def address(dask_client):
    """The address of the session's real ``dask scheduler`` with its ``dask worker`` processes."""
    return dask_client.scheduler.address


def configured_scheduler():
    return dask.config.get("scheduler", None)


def test_clients_open_at_once_and_closed_out_of_order_leave_dask_as_found(address):
    """Two threads' clients: the first opened closes first. A default client would restore the
    configuration the second found on entry, which names the distributed scheduler."""
    before = configured_scheduler()
    first_open, second_open, first_closed = threading.Event(), threading.Event(), threading.Event()
    seen = []

    def first():
        with cluster.dask_client(address) as client:
            seen.append(client.submit(sum, [1, 2]).result())
            first_open.set()
            second_open.wait(60)
        first_closed.set()

    def second():
        first_open.wait(60)
        with cluster.dask_client(address) as client:
            second_open.set()
            first_closed.wait(60)
            seen.append(client.submit(sum, [3, 4]).result())

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert seen == [3, 7]
    assert configured_scheduler() == before
    assert int(da.ones(4, chunks=2).sum().compute()) == 4  # no client asked for


def test_stage_tune_fit_and_score_share_a_real_scheduler_in_one_process(tmp_path, address):
    """The train-and-score flow as ``jdl demo --scheduler tcp://...`` runs it: the default tuning (whose
    searches run side by side, each with its client) and then the fit, which reads the tuning store,
    and the scoring, all in this process."""
    from flows.pipelines import train_and_score
    from pipeline.model_store import load_model
    from pipeline.tuning import load_tuning

    before = configured_scheduler()
    source = write_table(tmp_path / "train.npz", 2000, 3)
    batch = write_table(tmp_path / "batch.npz", 500, 4)
    results = train_and_score(str(source), str(tmp_path / "run"), ["x"], ["y"], score_source=str(batch),
                              functions=["mean"], lengthscales_x=[0.3, 0.6], lengthscales_y=[0.3], regs=[1e-4],
                              scheduler=address)
    assert configured_scheduler() == before
    assert load_model(results["fit"]["path"]).provenance_["scheduler"] == address
    assert np.isfinite(load_tuning(results["tune"]["path"])["validation_loss"].values).any()
    with xr.open_zarr(results["score"]["path"], consolidated=False) as scores:
        assert scores["mean"].shape == (500, 1) and np.isfinite(scores["mean"].values).all()


def test_auto_runs_small_data_in_this_process_and_a_bad_value_is_named():
    assert cluster.resolve_scheduler("auto", 1000) is None and cluster.resolve_scheduler(None, 10**6) == "local"
    with pytest.raises(ValueError, match="scheduler: 'nowhere' is not auto, memory, local or an address"):
        cluster.resolve_scheduler("nowhere", 10)
