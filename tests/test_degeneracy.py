"""Degenerate fits speak up: each finding warns, is kept in the diagnostics (and the model store),
and reaches ``jdl fit``'s output and ``jdl inspect``; the budget and the marginal comparison are
checked against independent computations."""
import warnings

import numpy as np
import pytest

from jdlcore import PSDJDL, JDL, DegeneracyWarning, GaussianKernel, GridBudgetWarning
from jdlcore.models.degeneracy import NEAR_MARGINAL, RANK_FLOOR, rank_budget
from jdl.cli import main
from pipeline.model_card import card_rows
from pipeline.model_store import load_model


def fit_recording(estimator, X, Y):
    """Fit, returning the model and the DegeneracyWarnings it raised, by kind."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = estimator.fit(X, Y)
    found = [w for w in caught if issubclass(w.category, DegeneracyWarning)]
    return model, {str(w.message).split(":")[0]: w for w in found}


def dependent(n, d=1, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, (n, d))
    return X, np.sin(X[:, :1]) + 0.2 * rng.standard_normal((n, 1))


def test_rank_budget_follows_n_and_memory():
    assert rank_budget(100) == 100  # small problems keep their full rank
    assert rank_budget(2_000) == RANK_FLOOR
    assert rank_budget(80_000, memory_bytes=1 << 40) == 10_000  # n / 8
    assert rank_budget(1_000_000, memory_bytes=8 << 30) == (2 << 30) // 8_000_000  # a quarter of memory holds L
    assert rank_budget(10**7, holds_factor=False) == 1_250_000


def test_rank_at_the_budget_warns_and_is_stored():
    """Twenty features at lengthscale 1: K_X is nearly diagonal, and without a budget the factor grows
    to about n (measured: rank 1,998 of 2,000)."""
    rng = np.random.default_rng(1)
    X = rng.standard_normal((2000, 20))
    Y = X[:, :1] + 0.5 * rng.standard_normal((2000, 1))
    model, found = fit_recording(JDL(reg=1e-6, tol=1e-3), X, Y)
    assert model.diagnostics_["rank_x"] == RANK_FLOOR and model.diagnostics_["stop_reason_x"] == "max_rank"
    assert model.diagnostics_["rank_budget"] == RANK_FLOOR
    assert "rank_budget_x" in found and "rank_budget_y" not in found  # m_Y stays small: y is 1-D
    assert "longer lengthscale_x" in model.diagnostics_["degeneracies"]["rank_budget_x"]
    capped, found = fit_recording(JDL(reg=1e-6, tol=1e-3, max_rank=40), X, Y)  # a cap the user chose: no warning
    assert capped.diagnostics_["rank_x"] == 40 and "rank_budget_x" not in found


def test_rank_near_n_and_rank_one_warn():
    X, Y = dependent(200)
    short, found = fit_recording(JDL(GaussianKernel(0.005), GaussianKernel(0.3), reg=1e-6, tol=1e-6), X, Y)
    assert short.diagnostics_["rank_x"] >= 100 and "rank_near_n_x" in found
    long, found = fit_recording(JDL(GaussianKernel(1e4), GaussianKernel(0.3), reg=1e-6, tol=1e-3), X, Y)
    assert long.diagnostics_["rank_x"] == 1 and {"rank_one_x", "near_marginal"} <= set(found)
    good, found = fit_recording(JDL(GaussianKernel(0.5), GaussianKernel(0.3), reg=1e-6, tol=1e-3), X, Y)
    assert found == {} and good.diagnostics_["degeneracies"] == {}


def brute_force_crps(atoms, weights, y):
    """E|Z - y| - E|Z - Z'| / 2 for Z, Z' drawn from the weighted atoms, by all pairs."""
    p = weights / weights.sum()
    pairs = np.abs(atoms[:, None] - atoms[None, :])
    return np.abs(atoms[None, :] - y[:, None]) @ p - 0.5 * p @ pairs @ p


def test_marginal_ratio_against_brute_force_crps():
    X, Y = dependent(600, seed=2)
    model = JDL(GaussianKernel(0.5), GaussianKernel(0.3), reg=1e-6, tol=1e-4).fit(X, Y)
    ratio, score = model.marginal_ratio(X[:150], Y[:150])
    atoms, weights = model.support_.atoms[:, 0], model.support_.weights
    P = model.conditional_weights(X[:150])
    conditional = [brute_force_crps(atoms, P[i], Y[i:i + 1, 0])[0] for i in range(150)]
    marginal = brute_force_crps(atoms, weights, Y[:150, 0])
    assert score == "CRPS"
    assert ratio == pytest.approx(np.mean(conditional) / np.mean(marginal), rel=1e-10)
    assert ratio < 0.6 and model.diagnostics_["marginal_ratio"] < 0.6


def test_independent_y_is_reported_close_to_the_marginal():
    rng = np.random.default_rng(3)
    X, Y = rng.uniform(-2, 2, (1500, 1)), rng.standard_normal((1500, 1))
    model, found = fit_recording(JDL(GaussianKernel(0.5), GaussianKernel(0.5), reg=1e-4, tol=1e-3), X, Y)
    assert model.diagnostics_["marginal_ratio"] >= NEAR_MARGINAL and "near_marginal" in found
    # a vector y: the squared error of the conditional mean against the marginal mean's
    Y2 = np.hstack([Y, rng.standard_normal((1500, 1))])
    vector, found = fit_recording(JDL(GaussianKernel(0.5), GaussianKernel(0.7), reg=1e-4, tol=1e-3), X, Y2)
    ratio, score = vector.marginal_ratio(X, Y2)
    atoms, weights = vector.support_.atoms, vector.support_.weights
    conditional_mean = vector.conditional_weights(X) @ atoms  # by hand, not through conditional_expectation
    marginal_mean = sum(w * atom for w, atom in zip(weights, atoms)) / weights.sum()
    expected = np.sum((Y2 - conditional_mean) ** 2) / np.sum((Y2 - marginal_mean) ** 2)
    assert score.startswith("squared error") and ratio == pytest.approx(expected, rel=1e-10)
    assert "near_marginal" in found


def test_unconverged_psd_solver_warns_and_is_stored():
    X, Y = dependent(300, seed=4)
    model, found = fit_recording(PSDJDL(GaussianKernel(0.8), GaussianKernel(0.8), reg=1e-4, tol=1e-2, max_iter=3),
                                 X, Y)
    assert model.diagnostics_["converged"] is False and "solver_unconverged" in found
    assert "max_iter = 3" in model.diagnostics_["degeneracies"]["solver_unconverged"]


def test_grid_budget_hit_is_a_degeneracy():
    X, Y = dependent(400, seed=5)
    model, found = fit_recording(JDL(GaussianKernel(0.3), GaussianKernel(0.3), reg=1e-6, tol=1e-8, positivity="grid",
                                     grid_rounds=1), X, Y)
    assert issubclass(found["grid_budget"].category, GridBudgetWarning)
    assert "raise grid_rounds" in model.diagnostics_["degeneracies"]["grid_budget"]


def test_degeneracies_reach_the_store_the_fit_line_and_inspect(tmp_path, capsys):
    rng = np.random.default_rng(6)
    x = rng.uniform(-2, 2, 800)
    np.savez(tmp_path / "t.npz", a=x, b=rng.standard_normal(800))  # y independent of x
    assert main(["stage", str(tmp_path / "t.npz"), "--x", "a", "--y", "b", "--out", str(tmp_path / "d.zarr")]) == 0
    capsys.readouterr()
    assert main(["fit", str(tmp_path / "d.zarr"), "--out", str(tmp_path / "m.zarr"), "--lengthscale-x", "1e4",
                 "--lengthscale-y", "0.5", "--reg", "1e-4", "--scheduler", "memory"]) == 0
    out = capsys.readouterr().out
    assert "warning: rank_one_x:" in out and "warning: near_marginal:" in out
    model = load_model(tmp_path / "m.zarr")
    assert set(model.diagnostics_["degeneracies"]) == {"rank_one_x", "near_marginal"}
    assert model.diagnostics_["marginal_ratio"] >= NEAR_MARGINAL
    rows = dict(card_rows(tmp_path / "m.zarr"))
    assert "standardise x" in rows["warning rank_one_x"] and "vs marginal" in rows


def test_a_tuned_fit_at_the_rank_budget_does_not_advise_against_the_tuned_lengthscale(tmp_path, capsys, monkeypatch):
    """Where the tuning chose a lengthscale whose fit stops at the rank budget, the finding keeps its
    facts and advises what does not undo the choice (max_rank=, tol); a lengthscale given by hand
    is still told to be too short. (The budget is lowered to 50, so that 400 rows reach it.)"""
    import jdlcore.models.degeneracy as degeneracy

    monkeypatch.setattr(degeneracy, "RANK_FLOOR", 40)  # rank_budget(400) = max(40, 400 / 8) = 50
    rng = np.random.default_rng(3)
    x = rng.uniform(-2, 2, 400)
    np.savez(tmp_path / "t.npz", x=x, y=np.sin(3 * x) + 0.1 * rng.standard_normal(400))
    data, tuning = str(tmp_path / "d.zarr"), str(tmp_path / "t.zarr")
    assert main(["stage", str(tmp_path / "t.npz"), "--x", "x", "--y", "y", "--out", data]) == 0
    assert main(["tune", data, "--out", tuning, "--lengthscales-x", "0.002,0.004", "--lengthscales-y", "0.3",
                 "--regs", "1e-4", "--summaries", "none", "--no-search", "--folds", "1", "--scaling", "none"]) == 0
    capsys.readouterr()
    assert main(["fit", data, "--out", str(tmp_path / "tuned.zarr"), "--tuning", tuning, "--scheduler", "memory"]) == 0
    tuned = load_model(tmp_path / "tuned.zarr").diagnostics_["degeneracies"]["rank_budget_x"]
    assert tuned.startswith("the pivoted Cholesky of K_X stopped at the rank budget m_X = 50 (n = 400)")
    assert "The tuning chose lengthscale_x" in tuned and "longer lengthscale" not in tuned
    assert f"warning: rank_budget_x: {tuned}" in capsys.readouterr().out
    assert main(["fit", data, "--out", str(tmp_path / "given.zarr"), "--lengthscale-x", "0.004", "--lengthscale-y",
                 "0.3", "--reg", "1e-4", "--scaling", "none", "--scheduler", "memory"]) == 0
    given = load_model(tmp_path / "given.zarr").diagnostics_["degeneracies"]["rank_budget_x"]
    assert "Change: a longer lengthscale_x" in given and "The tuning chose" not in given
