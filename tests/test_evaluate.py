"""jdl evaluate: a model's laws judged on held-out rows. Every figure equals an independent computation
from the model's own queries; the store opens in xarray with no warning; the figure is written beside
it; the command reuses an unchanged run; bad input is refused with nothing on disk; and the flow runs
on a real Prefect API."""
import warnings

import numpy as np
import pytest

xr = pytest.importorskip("xarray")
pytest.importorskip("zarr")
from jdl.cli import main  # noqa: E402
from pipeline.evaluation import evaluate_store, open_evaluation  # noqa: E402
from pipeline.model_store import load_model  # noqa: E402

LEVELS = [0.1, 0.5, 0.9]
COVERAGE = [0.5, 0.9]


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """A heteroscedastic law: 3,000 training rows, 2,000 held-out rows, a model fitted on the first."""
    root = tmp_path_factory.mktemp("evaluate")
    rng = np.random.default_rng(2)
    x = rng.uniform(-3, 3, 5000)
    y = np.sin(x) + (0.2 + 0.2 * np.abs(x)) * rng.standard_normal(5000)
    np.savez(root / "train.npz", x=x[:3000], y=y[:3000])
    np.savez(root / "test.npz", x=x[3000:], y=y[3000:], w=rng.standard_normal(2000))
    for name, ys in (("train", "y"), ("test", "y"), ("vector", "y,w")):
        source = root / ("train.npz" if name == "train" else "test.npz")
        assert main(["stage", str(source), "--x", "x", "--y", ys, "--out", str(root / f"{name}.zarr")]) == 0
    assert main(["fit", str(root / "train.zarr"), "--out", str(root / "m.zarr"), "--lengthscale-x", "0.3",
                 "--lengthscale-y", "0.3", "--reg", "1e-4"]) == 0
    return root, x[3000:, None], y[3000:]


def test_every_figure_equals_the_model_read_by_hand(stores):
    root, X, y = stores
    evaluate_store(root / "m.zarr", root / "test.zarr", root / "e.zarr", levels=LEVELS, coverage=COVERAGE)
    ds = open_evaluation(root / "e.zarr")
    model = load_model(root / "m.zarr")
    np.testing.assert_allclose(ds["crps"].values, model.crps(X, y), rtol=1e-12, atol=1e-14)
    assert float(ds["crps_mean"]) == pytest.approx(model.crps(X, y).mean(), rel=1e-12)
    quantiles = model.conditional_quantile(X, LEVELS)
    residual = y[:, None] - quantiles
    pinball = np.maximum(np.array(LEVELS) * residual, (np.array(LEVELS) - 1) * residual).mean(axis=0)
    np.testing.assert_allclose(ds["pinball"].sel(level=0.9).values, pinball[2], rtol=1e-12)
    np.testing.assert_allclose(ds["pinball"].values, pinball, rtol=1e-12)
    bounds = model.conditional_quantile(X, [0.25, 0.75, 0.05, 0.95])
    covered = [np.mean((y >= bounds[:, 0]) & (y <= bounds[:, 1])), np.mean((y >= bounds[:, 2]) & (y <= bounds[:, 3]))]
    np.testing.assert_allclose(ds["coverage"].values, covered, rtol=0, atol=0)
    assert float(ds["rmse"]) == pytest.approx(np.sqrt(np.mean((y - model.predict(X)[:, 0]) ** 2)), rel=1e-12)
    # the randomised PIT lies between F(y-) and F(y) of each row's law (checked on 200 rows)
    for i in range(200):
        at = model.conditional_cdf(X[i:i + 1], [y[i]])[0, 0]
        below = model.conditional_cdf(X[i:i + 1], [np.nextafter(y[i], -np.inf)])[0, 0]
        assert below - 1e-12 <= float(ds["pit"][i]) <= at + 1e-12
    assert float(ds["pit_density"].mean()) == pytest.approx(1.0)
    # a fair model of a smooth law: calibrated within sampling error on 2,000 rows
    assert np.all(np.abs(ds["coverage"].values - COVERAGE) < 0.05)
    assert np.max(np.abs(ds["pit_density"].values - 1.0)) < 0.5


def test_the_command_writes_a_store_xarray_opens_and_a_figure_beside_it(stores, capsys):
    root, _, _ = stores
    command = ["evaluate", str(root / "m.zarr"), str(root / "test.zarr"), "--out", str(root / "report.zarr"),
               "--coverage", "0.8,0.5"]
    assert main(command) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("evaluated 2,000 rows: CRPS ") and "coverage 50% -> " in line
    assert line.endswith("(figure report.png)")
    assert (root / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = xr.open_zarr(root / "report.zarr")
    assert ds["nominal"].values.tolist() == [0.5, 0.8] and ds.sizes["level"] == 19
    assert main(command) == 0
    assert "(reused: inputs unchanged)" in capsys.readouterr().out


@pytest.mark.parametrize("data, extra, message", [
    ("vector.zarr", [], "data: evaluate needs a scalar y; the data have y ['y', 'w']"),
    ("test.zarr", ["--coverage", "0.9,1.2"], "coverage"),
    ("test.zarr", ["--levels", "0,0.5"], "levels"),
])
def test_bad_input_is_refused_and_leaves_nothing(stores, capsys, data, extra, message):
    root, _, _ = stores
    assert main(["evaluate", str(root / "m.zarr"), str(root / data), "--out", str(root / "bad.zarr"), *extra]) == 2
    assert message in capsys.readouterr().err
    assert not (root / "bad.zarr").exists() and not (root / "bad.png").exists()


def test_the_evaluate_flow_on_a_real_prefect_api(stores, prefect_api):
    from flows.jdl_flows import evaluate_flow

    root, X, y = stores
    result = evaluate_flow(str(root / "m.zarr"), str(root / "test.zarr"), str(root / "flow.zarr"), levels=LEVELS)
    ds = open_evaluation(result["path"])
    assert ds["level"].values.tolist() == LEVELS and (root / "flow.png").exists()
    assert float(ds["crps_mean"]) == pytest.approx(load_model(root / "m.zarr").crps(X, y).mean(), rel=1e-12)


def test_evaluate_on_a_real_dask_cluster_gives_the_figures_of_this_process(stores, dask_client, capsys):
    """``--scheduler ADDRESS``: the store's chunks are judged on the workers, and every figure, the
    randomised PIT included (seeded by chunk), is the same as in this process."""
    root, _, _ = stores
    assert main(["stage", str(root / "test.npz"), "--x", "x", "--y", "y", "--chunk-size", "700", "--out",
                 str(root / "chunked.zarr")]) == 0
    common = ["evaluate", str(root / "m.zarr"), str(root / "chunked.zarr"), "--levels", "0.1,0.5,0.9"]
    assert main([*common, "--out", str(root / "here.zarr"), "--scheduler", "memory"]) == 0
    assert main([*common, "--out", str(root / "there.zarr"), "--scheduler", dask_client.scheduler.address]) == 0
    prefixes = dask_client.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.task_prefixes))
    assert "evaluate_chunk" in prefixes  # the chunks ran on the cluster
    here, there = open_evaluation(root / "here.zarr"), open_evaluation(root / "there.zarr")
    for name in ("crps", "pit", "pinball", "coverage", "pit_density", "crps_mean", "rmse"):
        np.testing.assert_allclose(there[name].values, here[name].values, rtol=1e-12, atol=0, err_msg=name)
    single = open_evaluation(evaluate_store(root / "m.zarr", root / "test.zarr", root / "single.zarr", levels=LEVELS))
    np.testing.assert_allclose(here["crps"].values, single["crps"].values, rtol=1e-12)  # the chunks change no CRPS
