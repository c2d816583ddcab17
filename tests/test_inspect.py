"""pipeline.model_card: the model card, the diagnostic plots and the smoothed conditional densities."""
import hashlib
import json
import math
import shutil
import struct
import sys

import numpy as np
import pytest

from jdlcore.conditional.laws import LEVELS

xr = pytest.importorskip("xarray")
zarr = pytest.importorskip("zarr")
pytest.importorskip("matplotlib")
from pipeline.model_card import (  # noqa: E402
    conditional_curves, conditional_density, default_x_values, density_bandwidth, diagnostics_figure, model_card,
    read_tuning, write_plots,
)
from jdlcore import JDL, GaussianKernel  # noqa: E402
from pipeline.fitting import fit_store  # noqa: E402
from pipeline.model_store import load_model, save_model  # noqa: E402
from pipeline.staging import stage  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
LX, LY, REG = 0.6, 0.4, 3e-4


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A model store fitted in memory on 600 staged rows of a bivariate Gaussian (1-D x and y)."""
    root = tmp_path_factory.mktemp("inspect")
    generator = np.random.default_rng(3)
    x = generator.standard_normal(600)
    y = 0.8 * x + 0.6 * generator.standard_normal(600)
    np.savez(root / "src.npz", a=x, t=y)
    data = stage(root / "src.npz", root / "d.zarr", ["a"], ["t"], chunk_size=250)
    path, _ = fit_store(data, root / "m.zarr", lengthscale_x=LX, lengthscale_y=LY, reg=REG, tol=1e-4,
                        scheduler="memory")
    return path


@pytest.fixture(scope="module")
def tuned(store, tmp_path_factory):
    """A copy of the store with a 3 x 2 x 3 tuning table (one failed candidate) appended by xarray."""
    path = tmp_path_factory.mktemp("tuned") / "m.zarr"
    shutil.copytree(store, path)
    lx, ly, reg = np.array([0.3, 0.6, 1.2]), np.array([0.2, 0.4]), np.array([1e-5, 3e-4, 1e-2])
    loss = 1.0 + np.add.outer(np.add.outer((np.log(lx / LX)) ** 2, np.log(ly / LY) ** 2), np.log10(reg / REG) ** 2)
    loss[0, 0, 0] = np.nan
    ranks = np.array([[4.0, 5.0], [6.0, 7.0], [8.0, 9.0]])
    dims = ("tuning_lengthscale_x", "tuning_lengthscale_y", "tuning_reg")
    table = xr.Dataset(
        {"tuning_validation_loss": (dims, loss), "tuning_rank_x": (dims[:2], ranks),
         "tuning_rank_y": (dims[:2], ranks + 10)},
        coords={"tuning_lengthscale_x": lx, "tuning_lengthscale_y": ly, "tuning_reg": reg},
    )
    attrs = dict(zarr.open_group(path, mode="r", zarr_format=3).attrs)
    table.to_zarr(path, mode="a", zarr_format=3, consolidated=False)  # replaces the group's attributes
    checksums = json.loads(attrs["checksums"])  # the store checksums every data variable
    for name in table.data_vars:
        checksums[name] = hashlib.sha256(np.ascontiguousarray(table[name].values, dtype=np.float64).tobytes()).hexdigest()
    zarr.open_group(path, mode="r+", zarr_format=3).attrs.update({**attrs, "checksums": json.dumps(checksums)})
    return path


def png_size(path):
    """(width, height) of a PNG from its IHDR chunk, after checking the magic bytes."""
    head = path.read_bytes()[:24]
    assert head[:8] == PNG_MAGIC, path
    return struct.unpack(">II", head[16:24])


def card_line(card, label):
    """The card row whose label is ``label`` (a prefix of several words, e.g. "trace error x")."""
    return next(line for line in card.splitlines()
                if line.strip().startswith(label) and line.strip()[len(label):][:1] in (" ", ""))


def test_card_reports_what_the_store_holds(store):
    card = model_card(store)
    model = load_model(store)
    d = model.diagnostics_
    assert d["rank_x"] == model.basis_x_.size and d["rank_y"] == model.basis_y_.size
    assert f"m_X = {d['rank_x']}, m_Y = {d['rank_y']}" in card_line(card, "ranks")
    fingerprint = zarr.open_group(store.parent / "d.zarr", mode="r").attrs["fingerprint"]
    assert card_line(card, "fingerprint").endswith(f"sha256 {fingerprint}")
    with xr.open_zarr(store, consolidated=False, zarr_format=3) as ds:
        params, kernels = json.loads(ds.attrs["params"]), [json.loads(ds.attrs[k]) for k in ("kernel_x", "kernel_y")]
        assert f"v{ds.attrs['schema_version']}, written by jdl {ds.attrs['jdl_version']}" in card
    assert card_line(card, "reg").split()[-1] == repr(params["reg"]) == repr(REG)
    for side, kernel in zip("xy", kernels):  # the fit standardised both sides (scaling robust, the default)
        data_units = f"{kernel['lengthscale'] * kernel['scale'][0]:.4g}"
        assert card_line(card, f"kernel {side}").endswith(
            f"gaussian, lengthscale {kernel['lengthscale']!r} in standard units ({data_units} in the data's units)")
        location, scale = kernel["location"][0], kernel["scale"][0]
        name = {"x": "a", "y": "t"}[side]
        assert card_line(card, f"{side} feature {name}").endswith(
            f"location {location:.6g}, scale {scale:.6g}; lengthscale {kernel['lengthscale']:.4g} (standard units; "
            f"{data_units} in the data's), relevance 1.000")
    assert kernels[1]["lengthscale"] == LY
    assert card_line(card, "tol").split()[-1] == "0.0001"
    assert card_line(card, "samples").endswith("n = 600")
    assert card_line(card, "x features").split()[-1] == "a" and card_line(card, "y features").split()[-1] == "t"
    relative_x = d["trace_error_x"][-1] / d["trace_error_x"][0]
    assert f"{relative_x:.3e} of trace K after {d['rank_x']} pivots" in card_line(card, "trace error x")
    assert f"{d['objective']:.8g}" in card_line(card, "objective")
    timing = card_line(card, "timing")
    assert "solve" in timing and "fit" in timing and "factor" in timing
    assert f"max {abs(d['negative_mass_max']):.3e}" in card_line(card, "negative mass")
    assert "mean (1,)" in card_line(card, "registered") and "second_moment (1, 1)" in card
    assert "positivity" in card_line(card, "constraints") and card_line(card, "positivity").endswith("project")
    assert card_line(card, "law").split(None, 1)[1].startswith("projected (positive;")
    support = model.support_
    assert support.construction == "bins"  # 600 distinct values > 512
    assert card_line(card, "support").split(None, 1)[1] == (
        f"M = {support.size} atoms (bins; 512 requested), sums kept exactly up to: {support.exact} "
        f"(relative defect {support.defect:.1e})")
    record = d["projection"]  # on the training rows check_degeneracies samples (all 600 here)
    assert record["rows"] == 600 and sum(record["levels"].values()) == pytest.approx(1.0, abs=1e-12)
    shares = ", ".join(f"{LEVELS[int(level)]} {100 * share:.3g}%" for level, share in
                       sorted(record["levels"].items(), key=lambda kv: -int(kv[0])))
    assert card_line(card, "projection").split(None, 1)[1] == (
        f"at 600 training x rows: {shares}; exact path {100 * record['exact_path']:.3g}%, "
        f"failed {100 * record['failed']:.3g}%")
    assert "tuning" not in card


def test_card_with_tuning_table(tuned):
    table = read_tuning(tuned)
    assert table is not None and table["tuning_validation_loss"].shape == (3, 2, 3)
    card = model_card(tuned)
    assert "3 lengthscale_x x 2 lengthscale_y x 3 reg = 18 candidates, 17 with a finite" in card
    best = card_line(card, "tuning best")
    assert "validation loss 1 at lengthscale_x = 0.6, lengthscale_y = 0.4, reg = 0.0003 (m_X = 7, m_Y = 17)" in best
    assert "the fitted setting is the best candidate" in card


def test_plots_are_pngs_and_the_validation_surface_needs_a_tuning_table(store, tuned, tmp_path):
    written = write_plots(store, tmp_path / "plain")
    assert [p.name for p in written] == ["residual_trace.png", "conditional_density.png"]
    assert sorted(p.name for p in (tmp_path / "plain").iterdir()) == ["conditional_density.png", "residual_trace.png"]
    assert png_size(written[0]) == (600, 400) and png_size(written[1]) == (1100, 420)
    assert all(p.stat().st_size > 10_000 for p in written)
    with_tuning = write_plots(tuned, tmp_path / "tuned", x_values=[-1.0, 0.0, 1.0])
    assert [p.name for p in with_tuning] == ["residual_trace.png", "conditional_density.png", "validation_surface.png"]
    assert png_size(with_tuning[2]) == (1100, 420) and with_tuning[2].stat().st_size > 10_000
    png = diagnostics_figure(store, tmp_path / "fig.png")
    assert png == tmp_path / "fig.png" and png_size(png) == (1000, 360)
    if "matplotlib.pyplot" in sys.modules:  # the plots never go through pyplot's global figure list
        assert sys.modules["matplotlib.pyplot"].get_fignums() == []


def brute_force_density(model, x, grid, h, component=0):
    weights = model.conditional_weights(x)
    atoms = model.support_atoms_[:, component]
    density = np.zeros((x.shape[0], grid.size))
    for j in range(atoms.size):
        density += weights[:, j, None] * np.exp(-0.5 * ((grid - atoms[j]) / h) ** 2) / (h * math.sqrt(2 * math.pi))
    return density, weights.sum(axis=1)


def test_density_slices_match_brute_force_and_integrate_to_the_weights(store):
    model = load_model(store)
    h = density_bandwidth(model)
    kernel_y = model.basis_y_.kernel  # lengthscale LY in y's standard units (the fit's robust scaling)
    assert kernel_y.lengthscale == LY and h == LY * kernel_y.scale[0] / 2
    x = default_x_values(model, 5)
    pivots = model.basis_x_.pivot_points[:, 0]
    np.testing.assert_allclose(x[:, 0], np.quantile(pivots, [0.1, 0.3, 0.5, 0.7, 0.9]))
    atoms = np.asarray(model.y_atoms_[:])[:, 0]
    grid = np.linspace(atoms.min() - 10 * h, atoms.max() + 10 * h, 4001)
    density, cdf = conditional_curves(model, x, grid)
    expected, total = brute_force_density(model, x, grid, h)
    assert density.shape == cdf.shape == (5, grid.size)
    np.testing.assert_allclose(density, expected, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(np.trapezoid(density, grid, axis=1), total, rtol=0, atol=1e-9)  # +-10 h: no mass lost
    np.testing.assert_allclose(cdf, model.conditional_cdf(x, grid), rtol=0, atol=1e-10)
    np.testing.assert_array_equal(conditional_density(model, x, grid), density)


@pytest.mark.parametrize("constraints, positivity", [("none", "project"), ("positivity", "clip"),
                                                     ("positivity", "project")])
def test_density_of_signed_and_clipped_weights(constraints, positivity):
    """Unconstrained weights may be negative, clipped and projected ones are probability vectors:
    either way the smoothed density is sum_k w_k N(y; z_k, h^2) with the model's own weights."""
    generator = np.random.default_rng(5)
    X = generator.standard_normal((300, 1))
    Y = np.sin(2 * X) + 0.3 * generator.standard_normal((300, 1))
    model = JDL(GaussianKernel(0.3), GaussianKernel(0.3), reg=1e-6, tol=1e-6, constraints=constraints,
                positivity=positivity).fit(X, Y)
    x, h = np.array([-1.5, 0.0, 2.0]), density_bandwidth(model)
    grid = np.linspace(Y.min() - 10 * h, Y.max() + 10 * h, 3001)
    density = conditional_density(model, x, grid)
    expected, total = brute_force_density(model, x[:, None], grid, h)
    np.testing.assert_allclose(density, expected, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(np.trapezoid(density, grid, axis=1), total, rtol=0, atol=1e-9)


def test_multivariate_x_and_y(tmp_path):
    generator = np.random.default_rng(8)
    X = generator.standard_normal((300, 2))
    Y = np.column_stack([X[:, 0] + 0.5 * generator.standard_normal(300), generator.standard_normal(300)])
    model = JDL(GaussianKernel(np.array([0.7, 0.9])), GaussianKernel(np.array([0.5, 0.8])), reg=1e-4, tol=1e-4,
                constraints="normalization", scaling="none").fit(X, Y)  # lengthscales in y's units: h = 0.8 / 2
    path = save_model(model, tmp_path / "m.zarr")
    x = default_x_values(model, 3)
    np.testing.assert_allclose(x[:, 1], np.median(model.basis_x_.pivot_points[:, 1]))
    h = density_bandwidth(model, 1)
    assert h == 0.4
    grid = np.linspace(-6, 6, 1201)
    density = conditional_density(model, x, grid, component=1)
    expected, _ = brute_force_density(model, x, grid, h, component=1)
    np.testing.assert_allclose(density, expected, rtol=1e-9, atol=1e-12)
    assert "lengthscale [0.5, 0.8]" in model_card(path)
    assert [p.name for p in write_plots(path, tmp_path / "plots", n_slices=2)] == ["residual_trace.png",
                                                                                    "conditional_density.png"]
    with pytest.raises(ValueError, match="x_values: have 1 features"):
        conditional_density(model, [[0.0], [1.0]], grid)


def test_missing_and_foreign_stores_are_refused(tmp_path):
    plain = tmp_path / "plain.zarr"  # a plain zarr group: not even an xarray Dataset
    zarr.open_group(plain, mode="w", zarr_format=3).create_array("a", shape=(3,), dtype="float64")
    foreign = tmp_path / "foreign.zarr"  # a Dataset without the model attributes
    xr.Dataset({"a": ("x", np.arange(3.0))}).to_zarr(foreign, zarr_format=3, consolidated=False)
    for call in (lambda p: model_card(p), lambda p: write_plots(p, tmp_path / "plots"),
                 lambda p: diagnostics_figure(p, tmp_path / "f.png")):
        with pytest.raises(ValueError, match="plain.zarr: not a readable zarr v3 store"):
            call(plain)
        with pytest.raises(ValueError, match="foreign.zarr: not a jdl model store"):
            call(foreign)
        with pytest.raises(ValueError, match="does not exist"):
            call(tmp_path / "missing.zarr")
    assert not (tmp_path / "plots").exists() and not (tmp_path / "f.png").exists()


def test_figures_show_the_central_range_of_a_heavy_tailed_y(tmp_path):
    """A heavy-tailed y (departure delays: most near 0, a few hours late) drawn on its full range makes
    every density a spike; the figures' grid spans the 1st to 99th percentile of the marginal, padded."""
    from jdlcore.conditional.curves import CENTRAL_SHARE, central_grid, default_grid, density_bandwidth

    rng = np.random.default_rng(12)
    X = rng.standard_normal((3000, 1))
    Y = np.exp(1.5 * rng.standard_normal((3000, 1)) + 0.3 * X)  # log-normal: a long right tail
    model = JDL(reg=1e-4).fit(X, Y)
    grid, cut = central_grid(model)
    atoms, weights = model.law_atoms_[:, 0], model.support_.weights
    order = np.argsort(atoms)
    cumulative = np.cumsum(weights[order])
    low = atoms[order][np.argmax(cumulative >= (1 - CENTRAL_SHARE) / 2)]  # by hand: the first atom reaching 1%
    high = atoms[order][np.argmax(cumulative >= (1 + CENTRAL_SHARE) / 2)]
    pad = 4 * density_bandwidth(model)
    full = default_grid(model)
    assert cut and grid[0] == pytest.approx(max(low - pad, full[0])) and grid[-1] == pytest.approx(high + pad)
    assert grid[-1] - grid[0] < 0.3 * (full[-1] - full[0])
    normal = JDL(reg=1e-4).fit(X, X + 0.1 * rng.standard_normal((3000, 1)))  # light tails: the padding reaches the ends
    assert np.ptp(central_grid(normal)[0]) > 0.6 * np.ptp(default_grid(normal))
    path = save_model(model, tmp_path / "m.zarr")
    assert [p.name for p in write_plots(path, tmp_path / "plots", n_slices=2)][:2] == ["residual_trace.png",
                                                                                     "conditional_density.png"]
