"""Compression in the pipeline: ``DaskSource`` on a real Dask cluster, ``compress_store`` writing a
compressed set that is itself a staged data store, fitting on it, bad input, and ``jdl compress``."""
import shutil

import numpy as np
import pytest

zarr = pytest.importorskip("zarr")
xr = pytest.importorskip("xarray")

from jdlcore.compression import ArraySource  # noqa: E402
from jdlcore.compression.objectives import ACKIPObjective  # noqa: E402
from jdlcore.compression.synthetic import HeteroscedasticModel  # noqa: E402
from jdlcore.kernels import GaussianKernel  # noqa: E402
from pipeline.compression import DaskSource, compress_store, open_compressed  # noqa: E402
from pipeline.staging import arrays_fingerprint, open_staged, stage  # noqa: E402

from .conftest import dask_cluster  # noqa: E402

N, CHUNK = 3000, 700  # five chunks, the last one short
SMALL = dict(m=15, steps=20, seed=3)


@pytest.fixture(scope="module")
def cluster():
    with dask_cluster(2) as client:
        yield client


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    """The heteroscedastic toy data (n = 3000, one x, one y) staged in chunks of 700 rows; (path, X, Y)."""
    root = tmp_path_factory.mktemp("compression")
    X, Y = HeteroscedasticModel().sample(N, 0)
    np.save(root / "t.npy", np.column_stack([X, Y]))
    path = stage(root / "t.npy", root / "d.zarr", ["0"], ["1"], chunk_size=CHUNK)
    return path, X, Y


@pytest.fixture(scope="module")
def in_memory(staged, tmp_path_factory):
    """The data compressed in this process with ``SMALL`` settings."""
    return compress_store(staged[0], tmp_path_factory.mktemp("memory") / "c.zarr", **SMALL, scheduler="memory")


def test_dask_source_matches_array_source(staged, cluster):
    path, X, Y = staged
    dask_source = DaskSource.from_store(cluster, path)
    memory = ArraySource(X, Y, chunk_rows=CHUNK)  # the same sums in the same order
    assert (dask_source.n, dask_source.x_width, dask_source.y_width) == (N, 1, 1)
    rng = np.random.default_rng(0)
    indices = rng.choice(N, 12, replace=False)  # unsorted, across chunks
    Xc, Yc = memory.rows(indices)
    for got, want in zip(dask_source.rows(indices), (Xc, Yc)):
        np.testing.assert_array_equal(got, want)
    Xc, Yc = Xc + 0.05 * rng.standard_normal(Xc.shape), Yc + 0.05 * rng.standard_normal(Yc.shape)
    objective = ACKIPObjective(GaussianKernel(0.8), GaussianKernel(0.6), reg=1e-3)
    on_dask, reference = objective.evaluate(Xc, Yc, dask_source), objective.evaluate(Xc, Yc, memory)
    assert on_dask.value == pytest.approx(reference.value, rel=0, abs=1e-10)
    np.testing.assert_allclose(on_dask.grad_x, reference.grad_x, rtol=0, atol=1e-10)
    np.testing.assert_allclose(on_dask.grad_y, reference.grad_y, rtol=0, atol=1e-10)
    for got, want in zip(dask_source.column_scale(), memory.column_scale()):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    np.testing.assert_array_equal(dask_source.classes(), memory.classes())
    labelled = DaskSource(cluster, dask_source.x_chunks, dask_source.x_chunks, N, 1, 1)
    np.testing.assert_array_equal(labelled.classes(), np.unique(X))
    with pytest.raises(ValueError, match="indices"):
        dask_source.rows(np.array([N]))


def test_compress_store_on_dask_equals_in_memory(staged, in_memory, cluster, tmp_path):
    on_dask = compress_store(staged[0], tmp_path / "c.zarr", **SMALL, scheduler=cluster.scheduler.address)
    got, want = open_compressed(on_dask), open_compressed(in_memory)
    for role in ("x", "y", "objective_trace"):
        np.testing.assert_allclose(got[role][:], want[role][:], rtol=0, atol=1e-8)
    for name in ("value", "amcmd", "amcmd_random"):
        assert got.attrs["compression"][name] == pytest.approx(want.attrs["compression"][name], rel=0, abs=1e-8)


def test_compressed_set_is_a_staged_store_with_its_summary(staged, in_memory):
    path, X, Y = staged
    group = open_staged(in_memory)
    attrs = dict(group.attrs)
    data = zarr.open_group(path, mode="r")
    assert attrs["n_samples"] == 15 and attrs["x_features"] == ["0"] and attrs["y_features"] == ["1"]
    assert attrs["source"] == str(path.resolve())
    assert attrs["fingerprint"] == arrays_fingerprint(group["x"][:], group["y"][:])
    for role in ("x", "y"):
        assert group[role].dtype == np.float64
        assert group[role].metadata.dimension_names == data[role].metadata.dimension_names
    c = open_compressed(in_memory).attrs["compression"]
    assert set(c) == {"method", "m", "n_data", "objective", "value", "initial_value", "seconds", "amcmd",
                      "amcmd_random", "data_fingerprint", "reg", "reg_from", "seed", "steps", "optimizer", "learning_rate",
                      "n_init", "kernel_x", "kernel_y", "amcmd_tol"}
    assert (c["method"], c["m"], c["n_data"], c["steps"], c["objective"]) == ("ackip", 15, N, 20, "ackip")
    assert c["data_fingerprint"] == data.attrs["fingerprint"] and c["kernel_x"]["name"] == "gaussian"
    assert c["value"] < c["initial_value"] - 1e-3 * abs(c["initial_value"])  # the descent moved the set
    assert group["objective_trace"].shape == (21,)
    assert np.isfinite(c["amcmd"]) and 0 <= c["amcmd"] < c["amcmd_random"]
    ds = xr.open_zarr(in_memory, consolidated=False)
    assert ds["x"].dims == ("sample", "x_feature") and ds["objective_trace"].dims == ("step",)
    with pytest.raises(ValueError, match="not a compressed set"):
        open_compressed(path)


@pytest.mark.parametrize("method", ["cme", "jdl"])
def test_fit_on_the_compressed_set(in_memory, tmp_path, method):
    from pipeline.fitting import fit_store

    path, model = fit_store(in_memory, tmp_path / "m.zarr", lengthscale_x=1.0, lengthscale_y=1.0, reg=1e-3,
                            tol=1e-6, method=method, constraints="normalization", scheduler="memory")
    assert model.n_samples_ == 15 and path.is_dir()
    assert np.all(np.isfinite(model.conditional_expectation(np.linspace(-3, 3, 7)[:, None])))


def test_delta_kernel_keeps_class_labels(tmp_path):
    rng = np.random.default_rng(1)
    x = rng.standard_normal(400)
    np.savez(tmp_path / "t.npz", a=x, c=(x > 0).astype(float) + (x > 1))
    data = stage(tmp_path / "t.npz", tmp_path / "d.zarr", ["a"], ["c"])
    out = compress_store(data, tmp_path / "c.zarr", m=6, kernel_y="delta", steps=5, lengthscale_x=0.5)
    group = open_compressed(out)
    assert set(np.unique(group["y"][:])) <= {0.0, 1.0, 2.0}
    assert group.attrs["compression"]["kernel_y"] == {"name": "delta"}


@pytest.mark.parametrize("change, message", [
    (dict(method="nope"), "method"), (dict(m=0), "m: "), (dict(m=N + 1), "m: "), (dict(reg=0.0), "reg"),
    (dict(kernel_y="poisson"), "kernel_y"), (dict(kernel_y="delta", lengthscale_y=1.0), "lengthscale_y"),
    (dict(amcmd_tol=1.5), "amcmd_tol"), (dict(scheduler="nowhere"), "scheduler"),
])
def test_bad_input_leaves_nothing(staged, tmp_path, change, message):
    out = tmp_path / "c.zarr"
    with pytest.raises(ValueError, match=message):
        compress_store(staged[0], out, **{**SMALL, **change})
    assert list(tmp_path.iterdir()) == []


def test_bad_stores_are_refused(staged, in_memory, tmp_path):
    out = tmp_path / "c.zarr"
    with pytest.raises(ValueError, match="does not exist|not a readable"):
        compress_store(tmp_path / "missing.zarr", out, m=5)
    zarr.open_group(tmp_path / "foreign.zarr", mode="w", zarr_format=3)
    with pytest.raises(ValueError, match="not a jdl data store"):
        compress_store(tmp_path / "foreign.zarr", out, m=5)
    with pytest.raises(ValueError, match="already exists"):
        compress_store(staged[0], in_memory, m=5)
    with pytest.raises(ValueError, match="data store itself"):
        compress_store(staged[0], staged[0], m=5, overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["foreign.zarr"]
    assert open_staged(staged[0]).attrs["n_samples"] == N


def test_jdl_compress_through_the_cli(staged, tmp_path, capsys):
    from jdl.cli import main

    argv = ["compress", str(staged[0]), "--m", "12", "--steps", "10", "--out", str(tmp_path / "c.zarr"),
            "--scheduler", "memory"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    c = open_compressed(tmp_path / "c.zarr").attrs["compression"]
    assert f"compressed n = {N:,} to m = 12 with ackip" in out and f"AMCMD {c['amcmd']:.4g}" in out
    assert "reused" not in out and c["m"] == 12 and c["steps"] == 10
    assert open_staged(tmp_path / "c.zarr").attrs["run_key"]
    assert main(argv) == 0
    assert "(reused: inputs unchanged)" in capsys.readouterr().out
    assert main(argv[:-4] + ["--out", str(staged[0])]) == 2
    assert "must differ from data" in capsys.readouterr().err
    shutil.copytree(staged[0], tmp_path / "other.zarr")  # a plain data store is never replaced
    assert main(argv[:-4] + ["--out", str(tmp_path / "other.zarr")]) == 2
    assert "not a compressed set; refusing" in capsys.readouterr().err
    assert main(["compress", str(staged[0]), "--m", "12", "--out", str(tmp_path / "c.zarr"), "--optimizer",
                 "sgd"]) == 2
    assert capsys.readouterr().err.strip() == ("jdl compress: error: compress: parameter optimizer: Input should be "
                                               "'adam' or 'lbfgs' (got 'sgd')")
