"""Feature scaling: robust estimates by hand, kernels that standardise their inputs against kernels on
hand-standardised data, and the pipeline's scaling stored, round-tripped and applied at scoring."""
import json

import numpy as np
import pytest

from jdlcore import JDL, GaussianKernel, LaplaceKernel, Matern32Kernel, Matern52Kernel, kernel_from_dict, tune
from jdlcore.kernels import DeltaKernel
from jdlcore.scaling import NORMAL_IQR, robust_scaling

zarr = pytest.importorskip("zarr")


def mixed_units(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """x: a column in thousands around 10,000 and a column in thousandths; y depends on both."""
    rng = np.random.default_rng(seed)
    big, small = 1e4 + 2e3 * rng.standard_normal(n), 1e-3 * rng.uniform(size=n)
    y = (big - 1e4) / 2e3 + np.sin(6e3 * small) + 0.3 * rng.standard_normal(n)
    return np.c_[big, small], 50.0 + 20.0 * y[:, None]


# -- the estimates ---------------------------------------------------------------------------------
def test_robust_scaling_is_the_median_and_the_normal_consistent_iqr():
    column = np.arange(1.0, 101.0)  # 1..100: quartiles 25.75 and 75.25 (linear interpolation), median 50.5
    tied = np.r_[np.zeros(80), np.ones(20)]  # over half tied: IQR 0, so the standard deviation 0.4
    location, scale = robust_scaling(np.c_[column, tied])
    np.testing.assert_array_equal(location, [50.5, 0.0])
    assert scale[0] == pytest.approx((75.25 - 25.75) / NORMAL_IQR, rel=1e-15)
    assert scale[1] == pytest.approx(0.4, rel=1e-15)
    normal = np.random.default_rng(3).standard_normal((200_000, 1))  # consistent for the normal's sigma
    assert robust_scaling(3.0 * normal + 7.0)[1][0] == pytest.approx(3.0, rel=0.01)
    heavy = np.random.default_rng(3).standard_cauchy((200_000, 1))  # the IQR of a Cauchy is 2
    assert robust_scaling(heavy)[1][0] == pytest.approx(2.0 / NORMAL_IQR, rel=0.02)


def test_robust_scaling_refuses_a_constant_column_by_name():
    with pytest.raises(ValueError, match=r"^x column 'b': is constant \(2.5\)"):
        robust_scaling(np.c_[np.arange(5.0), np.full(5, 2.5)], ["a", "b"])


# -- kernels ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("family", [GaussianKernel, LaplaceKernel, Matern32Kernel, Matern52Kernel])
@pytest.mark.parametrize("lengthscale", [0.7, np.array([0.5, 2.0])])
def test_a_scaled_kernel_is_the_kernel_on_hand_standardised_inputs(family, lengthscale):
    X, _ = mixed_units(300)
    location, scale = robust_scaling(X)
    scaled = family(lengthscale, location=location, scale=scale)
    standard = (X - location) / scale
    np.testing.assert_array_equal(scaled(X[:40], X[100:170]), family(lengthscale)(standard[:40], standard[100:170]))
    np.testing.assert_array_equal(scaled.data_lengthscale, lengthscale * scale)
    assert scaled.with_lengthscale(0.3) == family(0.3, location=location, scale=scale)
    assert family(lengthscale).standardised(X) == scaled


def test_the_scaled_distance_gradient_matches_finite_differences():
    X, _ = mixed_units(30)
    kernel = GaussianKernel(np.array([0.8, 1.3])).standardised(X)
    A, B = X[:4].copy(), X[10:16]
    weights = np.random.default_rng(1).uniform(size=(4, 6))

    def objective(points):
        diff = (kernel.standard(points)[:, None, :] - kernel.standard(B)[None, :, :]) / kernel.lengthscale
        return float(np.sum(weights * np.sum(diff ** 2, axis=2)))

    gradient = kernel.distance_gradient(A, B, weights)
    for i, k in np.ndindex(A.shape):
        step = 1e-6 * kernel.data_lengthscale[k]
        up, down = A.copy(), A.copy()
        up[i, k] += step
        down[i, k] -= step
        assert gradient[i, k] == pytest.approx((objective(up) - objective(down)) / (2 * step), rel=1e-6)


def test_a_kernels_scaling_round_trips_through_json_bit_for_bit():
    X, _ = mixed_units(500, seed=4)
    kernel = GaussianKernel(np.array([0.3, 1.7])).standardised(X)
    back = kernel_from_dict(json.loads(json.dumps(kernel.to_dict())))
    assert back == kernel
    for part in ("lengthscale", "location", "scale"):
        assert np.asarray(getattr(back, part)).tobytes() == np.asarray(getattr(kernel, part)).tobytes()
    assert "location" not in GaussianKernel(0.5).to_dict()  # no scaling, the old spec


def test_kernel_scaling_rules():
    with pytest.raises(ValueError, match="a scaling needs both location and scale"):
        GaussianKernel(1.0, location=[0.0, 0.0])
    with pytest.raises(ValueError, match="scale: must be finite and > 0"):
        GaussianKernel(1.0, location=[0.0], scale=[0.0])
    with pytest.raises(ValueError, match="lengthscale: has 3 entries but the scaling has 2"):
        GaussianKernel(np.ones(3), location=[0.0, 1.0], scale=[1.0, 2.0])
    with pytest.raises(ValueError, match="scale: has 2 entries but A has 3 features"):
        GaussianKernel(1.0, location=[0.0, 1.0], scale=[1.0, 2.0])(np.ones((2, 3)))
    labels = np.c_[[0.0, 1.0, 1.0, 2.0]]
    assert DeltaKernel().standardised(labels) == DeltaKernel()  # levels are compared as they are


# -- estimators: the scaling equals a fit on hand-standardised data ---------------------------------
def test_a_jdl_with_scaled_kernels_equals_a_jdl_on_hand_standardised_data():
    X, Y = mixed_units(800, seed=2)
    (lx, sx), (ly, sy) = robust_scaling(X), robust_scaling(Y)
    params = dict(reg=1e-4, tol=1e-4)
    scaled = JDL(GaussianKernel(0.6, location=lx, scale=sx), GaussianKernel(0.4, location=ly, scale=sy),
                 **params).fit(X, Y)
    by_hand = JDL(GaussianKernel(0.6), GaussianKernel(0.4), **params).fit((X - lx) / sx, (Y - ly) / sy)
    Xq = mixed_units(50, seed=9)[0]
    np.testing.assert_allclose(scaled.conditional_weights(Xq), by_hand.conditional_weights((Xq - lx) / sx),
                               rtol=0, atol=1e-10)
    np.testing.assert_allclose(scaled.predict(Xq), ly + sy * by_hand.predict((Xq - lx) / sx), rtol=1e-10)
    thresholds = np.array([30.0, 50.0, 70.0])
    np.testing.assert_allclose(scaled.conditional_cdf(Xq, thresholds),
                               by_hand.conditional_cdf((Xq - lx) / sx, (thresholds - ly) / sy), atol=1e-10)


def test_tune_standardises_by_default_and_helps_on_mixed_units():
    X, Y = mixed_units(700, seed=5)
    scaled, raw = tune(X, Y, refit=False, summaries="none"), tune(X, Y, scaling="none", refit=False, summaries="none")
    location, scale = robust_scaling(X)
    assert scaled.model.kernel_x.location.tobytes() == location.tobytes()
    assert scaled.model.kernel_x.scale.tobytes() == scale.tobytes()
    assert raw.model.kernel_x.scale is None
    # one lengthscale on the raw columns cannot serve a column in thousands and one in thousandths
    assert scaled.best["score"] < 0.8 * raw.best["score"]
    with pytest.raises(ValueError, match="scaling: unknown value 'zscore'"):
        tune(X, Y, scaling="zscore", summaries="none")


# -- the pipeline: stored with the model, applied at scoring ---------------------------------------
@pytest.fixture(scope="module")
def staged_mixed(tmp_path_factory):
    from jdl.cli import main

    root = tmp_path_factory.mktemp("scaling")
    X, Y = mixed_units(900, seed=6)
    Y = np.round(Y)  # whole dollars: under 512 distinct prices, so the support is the training values themselves
    np.savez(root / "src.npz", carats=X[:, 0], thou=X[:, 1], price=Y[:, 0])
    assert main(["stage", str(root / "src.npz"), "--x", "carats,thou", "--y", "price",
                 "--out", str(root / "d.zarr")]) == 0
    assert main(["tune", str(root / "d.zarr"), "--out", str(root / "t.zarr"), "--regs", "1e-5,1e-4",
                 "--summaries", "none"]) == 0  # the columns alone: their scaling is compared by hand
    for name, extra in (("m.zarr", []), ("c.zarr", ["--positivity", "clip"])):
        assert main(["fit", str(root / "d.zarr"), "--out", str(root / name), "--tuning", str(root / "t.zarr"),
                     *extra]) == 0
    return root, X, Y


def test_the_tuned_scaling_is_stored_in_the_model_and_applied_at_scoring(staged_mixed):
    from jdl.cli import main
    from pipeline.model_store import load_model
    from pipeline.tuning import load_tuning

    root, X, Y = staged_mixed
    table = load_tuning(root / "t.zarr")
    assert table.attrs["scaling"] == "robust"
    best = json.loads(table.attrs["best"])
    (lx, sx), (ly, sy) = robust_scaling(X), robust_scaling(Y)
    for name, positivity in (("m.zarr", "project"), ("c.zarr", "clip")):
        model = load_model(root / name)
        for side, kernel in (("x", model.basis_x_.kernel), ("y", model.basis_y_.kernel)):
            # bit for bit: the tuning store's scaling, through the model store's JSON and back
            assert kernel.location.tobytes() == np.asarray(table[f"{side}_location"].values).tobytes()
            assert kernel.scale.tobytes() == np.asarray(table[f"{side}_scale"].values).tobytes()
            np.testing.assert_array_equal(kernel.lengthscale, best[f"lengthscale_{side}"])  # per feature: searched
        assert model.provenance_["scaling"] == "robust" and model.support_.construction == "distinct"
        # the tuning used a subsample of all 900 rows, so its scaling is the whole table's
        np.testing.assert_array_equal(model.basis_x_.kernel.location, lx)
        assert main(["score", str(root / name), str(root / "d.zarr"), "--out", str(root / f"s-{name}"),
                     "--function", "mean", "--function", "cdf:40,50,60"]) == 0
        scores = zarr.open_group(root / f"s-{name}", mode="r")
        by_hand = JDL(GaussianKernel(np.asarray(best["lengthscale_x"])), GaussianKernel(best["lengthscale_y"]),
                      reg=best["reg"], tol=model.tol, positivity=positivity).fit((X - lx) / sx, (Y - ly) / sy)
        standard = (X - lx) / sx
        # every law keeps the signed law's mean, so the means agree whatever the positivity rule (to the
        # rounding of the change of units, relative to y's size: a mean near 0 has no relative digits to spare)
        np.testing.assert_allclose(scores["mean"][:], ly + sy * by_hand.predict(standard), rtol=1e-10,
                                   atol=1e-12 * np.abs(Y).max())
        if positivity == "clip":  # clipping commutes with the change of units exactly; the projection decides
            # which moments it keeps by a numerical test, which may come out otherwise on a few rows in other units
            np.testing.assert_allclose(model.conditional_weights(X), by_hand.conditional_weights(standard), atol=1e-10)
            np.testing.assert_allclose(scores["cdf:40,50,60"][:],
                                       by_hand.conditional_cdf(standard, (np.array([40.0, 50, 60]) - ly) / sy),
                                       atol=1e-10)
        np.testing.assert_allclose(scores["cdf:40,50,60"][:], model.conditional_cdf(X, [40.0, 50, 60]), atol=1e-12)


def test_inspect_shows_each_features_scaling(staged_mixed, capsys):
    from jdl.cli import main

    root, X, _ = staged_mixed
    capsys.readouterr()
    assert main(["inspect", str(root / "m.zarr")]) == 0
    card = capsys.readouterr().out
    location, scale = robust_scaling(X)
    for k, name in enumerate(("carats", "thou")):
        line = next(line for line in card.splitlines() if line.strip().startswith(f"x feature {name}"))
        assert f"location {location[k]:.6g}, scale {scale[k]:.6g}; lengthscale" in line


def test_fit_without_tuning_standardises_by_the_data_and_none_keeps_raw_columns(staged_mixed):
    from pipeline.fitting import fit_store

    root, X, _ = staged_mixed
    _, model = fit_store(root / "d.zarr", root / "robust.zarr", lengthscale_x=0.5, lengthscale_y=0.5, reg=1e-4)
    assert model.basis_x_.kernel.location.tobytes() == robust_scaling(X)[0].tobytes()
    _, raw = fit_store(root / "d.zarr", root / "raw.zarr", lengthscale_x=500.0, lengthscale_y=5.0, reg=1e-4,
                       scaling="none")
    assert raw.basis_x_.kernel.scale is None and raw.provenance_["scaling"] == "none"


@pytest.mark.parametrize("arguments, message", [
    (["--tuning", "t.zarr", "--scaling", "none"], "scaling: the tuning store was tuned with scaling 'robust'"),
    (["--lengthscale-x", "1,2,3", "--lengthscale-y", "0.5", "--reg", "1e-4"],
     r"lengthscale_x: has 3 entries but the data has 2 x features \(carats, thou\)"),
])
def test_bad_fits_fail_in_one_line_and_write_nothing(staged_mixed, capsys, arguments, message):
    import re

    from jdl.cli import main

    root, _, _ = staged_mixed
    arguments = [str(root / a) if a.endswith(".zarr") else a for a in arguments]
    capsys.readouterr()
    assert main(["fit", str(root / "d.zarr"), "--out", str(root / "bad.zarr"), *arguments]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and re.search(message, err[0]), err
    assert not (root / "bad.zarr").exists()
