"""Tuning by proper scores: the CRPS and pinball criteria against brute-force computations from the
conditional weights, the CRPS as twice the integrated pinball loss, an explicit validation set (in
memory and as a staged store), and the refusals."""
import numpy as np
import pytest

from jdl.cli import main
from jdlcore import JDL, GaussianKernel
from jdlcore.conditional.losses import CRPSLoss, PinballLoss
from jdlcore.tuning import DEFAULT_REGS, REG_LADDER, as_regs, resolve_criterion, tune, walk_ladder


@pytest.fixture(scope="module")
def skewed():
    """A heteroscedastic, right-skewed conditional law: y = x + (0.2 + |x|/2) * Exp(1)."""
    rng = np.random.default_rng(11)
    X = rng.uniform(-2, 2, size=(900, 1))
    Y = X + (0.2 + 0.5 * np.abs(X)) * rng.exponential(size=(900, 1))
    return X, Y


@pytest.fixture(scope="module")
def model(skewed):
    X, Y = skewed
    return JDL(GaussianKernel(0.4), GaussianKernel(0.3), reg=1e-4, support_size=128).fit(X[:700], Y[:700])


def test_crps_and_pinball_match_brute_force_from_the_weights(model, skewed):
    X, Y = skewed[0][700:760], skewed[1][700:760, 0]
    W = model.conditional_weights(X)  # (q, N) probability vectors on the law's atoms
    atoms = model.law_atoms_[:, 0]
    assert np.all(W >= 0) and np.allclose(W.sum(axis=1), 1, atol=1e-12)
    order = np.argsort(atoms)
    z, P = atoms[order], W[:, order]
    # CRPS = integral of (F(t) - 1[t >= y])^2 dt, exact for a step CDF: sum over the intervals between
    # the sorted atoms and the observation
    crps = []
    for p, y in zip(P, Y):
        knots = np.sort(np.append(z, y))
        F = np.array([p[z <= t].sum() for t in knots[:-1]])
        H = (knots[:-1] >= y).astype(float)
        crps.append(np.sum((F - H) ** 2 * np.diff(knots)))
    assert CRPSLoss()(model, X, Y[:, None]) == pytest.approx(np.mean(crps), rel=1e-10)

    levels = np.array([0.05, 0.5, 0.95])
    cumulative = np.cumsum(P, axis=1)
    quantiles = np.array([[z[np.argmax(c >= level - 1e-12)] for level in levels] for c in cumulative])
    residual = Y[:, None] - quantiles
    pinball = np.mean(np.maximum(levels * residual, (levels - 1) * residual))
    assert PinballLoss(levels)(model, X, Y[:, None]) == pytest.approx(pinball, rel=1e-10)

    # CRPS = 2 * integral over tau of the pinball loss: the midpoint rule over 4000 levels
    fine = (np.arange(4000) + 0.5) / 4000
    assert 2 * PinballLoss(fine)(model, X, Y[:, None]) == pytest.approx(np.mean(crps), rel=2e-3)


def test_the_log_criterion_is_the_smoothed_laws_density_by_brute_force(model, skewed):
    from jdlcore.conditional.losses import LogLoss, smoothed_log_density
    from jdlcore.kernels import DeltaKernel

    X, Y = skewed[0][700:730], skewed[1][700:730]
    W, atoms = model.conditional_weights(X), model.law_atoms_[:, 0]
    h = model.basis_y_.kernel.data_lengthscale
    # the mixture of normals N(atom, h^2) with the law's weights, term by term
    by_hand = [np.log(sum(w * np.exp(-0.5 * ((y - a) / h) ** 2) / (h * np.sqrt(2 * np.pi))
                          for w, a in zip(weights, atoms))) for weights, y in zip(W, Y[:, 0])]
    np.testing.assert_allclose(smoothed_log_density(model, X, Y), by_hand, rtol=1e-12)
    assert LogLoss()(model, X, Y) == pytest.approx(-np.mean(by_hand), rel=1e-12)
    assert isinstance(resolve_criterion("log", y_width=3), LogLoss)  # a density in any dimension
    # a true density: it integrates to 1 (trapezoids on a fine grid over the atoms' range and beyond)
    grid = np.linspace(atoms.min() - 8 * h, atoms.max() + 8 * h, 20001)
    for x in X[:3]:
        density = np.exp(smoothed_log_density(model, np.repeat(x[None, :], grid.size, axis=0), grid[:, None]))
        assert np.trapezoid(density, grid) == pytest.approx(1.0, abs=1e-6)
    # far from every atom the log density stays finite (no underflow to -inf)
    assert np.isfinite(smoothed_log_density(model, X[:2], np.full((2, 1), 1e4))).all()
    # a discrete y (delta kernel): the law is a mass function and the loss -log Q(Y = y | x)
    rng = np.random.default_rng(3)
    Xc = rng.standard_normal((300, 1))
    Yc = np.clip(np.round(Xc + 1 + 0.5 * rng.standard_normal((300, 1))), 0, 2)  # classes 0, 1, 2
    discrete = JDL(GaussianKernel(0.5), DeltaKernel(), reg=1e-3).fit(Xc, Yc)
    P = discrete.conditional_weights(Xc[:20])
    expected = np.log([P[i, np.flatnonzero(discrete.law_atoms_[:, 0] == Yc[i, 0])].sum() for i in range(20)])
    np.testing.assert_allclose(smoothed_log_density(discrete, Xc[:20], Yc[:20]), expected, rtol=1e-12)


def test_tune_by_the_log_criterion(skewed):
    from jdlcore.conditional.losses import LogLoss

    X, Y = skewed
    result = tune(X[:600], Y[:600], estimator=JDL(support_size=128), lengthscales_x=[0.3, 0.8],
                  lengthscales_y=[0.2, 0.5], regs=[1e-5, 1e-3], criterion="log", validation=(X[600:], Y[600:]), summaries="none")
    assert all(np.isfinite(row["score"]) for row in result.table)
    # the candidates trained on all of X[:600]: the refitted best model scores its own table entry
    assert LogLoss()(result.model, X[600:], Y[600:]) == pytest.approx(result.best["score"], rel=1e-10)
    assert result.best["score"] == min(row["score"] for row in result.table)


def test_criteria_are_parsed_and_refused_in_one_line():
    assert isinstance(resolve_criterion("crps"), CRPSLoss)
    assert resolve_criterion("pinball:0.1, 0.9").levels.tolist() == [0.1, 0.9]
    assert resolve_criterion("pinball:0.1,0.9").name == "pinball:0.1,0.9"
    with pytest.raises(ValueError, match="^criterion: crps needs a scalar y, the data has 2 y features$"):
        resolve_criterion("crps", y_width=2)
    with pytest.raises(ValueError, match=r"^criterion: 'pinball:0,0.5': levels: the pinball criterion needs levels "
                                         r"in \(0, 1\)"):
        resolve_criterion("pinball:0,0.5")
    with pytest.raises(ValueError, match="^criterion: 'pinball:a': "):
        resolve_criterion("pinball:a")
    with pytest.raises(ValueError, match="^criterion: unknown value 'mae'; choose one of auto, second_moment, crps"):
        resolve_criterion("mae")
    assert resolve_criterion("second_moment", y_width=2).name == "second_moment"
    # the default: a proper score of the whole law for a scalar y, the paper's loss (40) for a vector y
    assert isinstance(resolve_criterion("auto", y_width=1), CRPSLoss)
    assert resolve_criterion("auto", y_width=3).name == "second_moment"
    with pytest.raises(ValueError, match="^criterion: 'auto' needs the number of y features$"):
        resolve_criterion("auto")


def test_tune_scores_an_explicit_validation_set(skewed):
    X, Y = skewed
    result = tune(X[:600], Y[:600], estimator=JDL(support_size=128), lengthscales_x=[0.3, 0.8],
                  lengthscales_y=[0.2, 0.5], regs=[1e-5, 1e-3], criterion="crps", validation=(X[600:], Y[600:]), summaries="none")
    assert len(result.table) == 8 and all(np.isfinite(row["score"]) for row in result.table)
    # the candidates trained on all of X[:600]: the refitted best model scores its own table entry
    assert CRPSLoss()(result.model, X[600:], Y[600:]) == pytest.approx(result.best["score"], rel=1e-10)
    with pytest.raises(ValueError, match="X_val: has 2 features, the training rows have 1"):
        tune(X[:600], Y[:600], validation=(np.hstack([X[600:], X[600:]]), Y[600:]), criterion="crps", summaries="none")


def test_jdl_tune_takes_a_criterion_and_a_validation_store(tmp_path, skewed, capsys):
    from pipeline.tuning import load_tuning

    X, Y = skewed
    for name, rows in (("train", slice(0, 600)), ("valid", slice(600, 900))):
        np.savez(tmp_path / f"{name}.npz", a=X[rows, 0], b=Y[rows, 0], c=-Y[rows, 0])
        assert main(["stage", str(tmp_path / f"{name}.npz"), "--x", "a", "--y", "b", "--out",
                     str(tmp_path / f"{name}.zarr")]) == 0
    grid = ["--lengthscales-x", "0.3,0.8", "--lengthscales-y", "0.2,0.5", "--regs", "1e-5,1e-3"]
    assert main(["tune", str(tmp_path / "train.zarr"), "--out", str(tmp_path / "t.zarr"), "--criterion", "crps",
                 "--validation", str(tmp_path / "valid.zarr"), *grid, "--scheduler", "memory", "--summaries",
                 "none"]) == 0  # the columns alone, as jdlcore.tune reads them
    assert "validation crps" in capsys.readouterr().out
    table = load_tuning(tmp_path / "t.zarr")
    assert table.attrs["criterion"] == "crps" and table.attrs["validation_rows"] == 300
    reference = tune(X[:600], Y[:600], estimator=JDL(), lengthscales_x=[0.3, 0.8], lengthscales_y=[0.2, 0.5],
                     regs=[1e-5, 1e-3], criterion="crps", validation=(X[600:], Y[600:]), refit=False, summaries="none")
    assert np.array_equal(table["validation_loss"].values.ravel(), reference.scores())

    assert main(["stage", str(tmp_path / "train.npz"), "--x", "a", "--y", "b,c", "--out",
                 str(tmp_path / "vector.zarr")]) == 0
    capsys.readouterr()
    bad = [
        (["tune", str(tmp_path / "vector.zarr"), "--criterion", "crps"],
         "criterion: crps needs a scalar y, the data has 2 y features"),
        (["tune", str(tmp_path / "train.zarr"), "--criterion", "pinball:1.5"],
         "parameter criterion: 'pinball:1.5': levels: the pinball criterion needs levels in (0, 1)"),
        (["tune", str(tmp_path / "train.zarr"), "--validation", str(tmp_path / "vector.zarr")],
         "validation: its y features ['b', 'c'] are not the data's ['b']"),
    ]
    for argv, message in bad:
        assert main([*argv, "--out", str(tmp_path / "bad.zarr"), *grid, "--scheduler", "memory"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], (argv, err)
        assert not (tmp_path / "bad.zarr").exists()


def test_the_reg_walk_finds_the_ladders_minimum_with_few_scores():
    """``walk_ladder`` against brute force: on every unimodal sequence whose steps exceed its tolerance
    (random minima, plateaus excluded) it returns the argmin, scores each rung at most once and at most
    3 + |argmin - start| of them; a non-finite score counts as +inf."""
    rng = np.random.default_rng(5)
    for _ in range(300):
        count = int(rng.integers(1, 10))
        low, start = int(rng.integers(count)), int(rng.integers(count))
        values = np.abs(np.arange(count) - low) * rng.uniform(0.5, 2.0) + rng.uniform(0, 1e-3, count) * (
            np.arange(count) != low)
        calls = []
        best = walk_ladder(count, lambda k: calls.append(k) or values[k], start)
        assert best == int(np.argmin(values))
        assert len(calls) == len(set(calls)) <= min(count, 3 + abs(low - start))
    assert walk_ladder(4, lambda k: [np.nan, 2.0, 1.0, np.inf][k], 1) == 2
    with pytest.raises(ValueError, match="start"):
        walk_ladder(3, lambda k: 0.0, 3)


def test_the_reg_walk_crosses_a_bump_within_its_tolerance_and_stops_at_a_larger_one():
    """A rung that scores less than ``tolerance`` above the lowest score so far does not stop the walk
    (validation noise makes such bumps); one above it does, and the lowest rung scored is returned."""
    def walk(values: list[float], start: int, tolerance: float = 2e-3) -> tuple[int, list[int]]:
        calls: list[int] = []
        return walk_ladder(len(values), lambda k: calls.append(k) or values[k], start, tolerance), calls

    assert walk([0.90, 0.95, 1.0015, 1.0, 1.2], 3) == (0, [3, 2, 4, 1, 0])  # 0.15% bump crossed
    assert walk([0.90, 0.95, 1.0025, 1.0, 1.2], 3) == (3, [3, 2, 4])  # 0.25%: stopped
    assert walk([0.90, 0.95, 1.0015, 1.0, 1.2], 3, tolerance=0.0) == (3, [3, 2, 4])  # the strict walk
    # along a plateau within the tolerance it goes on to the ladder's end, and keeps the lowest
    assert walk([0.9995, 1.0005, 1.001, 1.0, 1.1], 3) == (0, [3, 2, 4, 1, 0])


def test_the_default_tuning_walks_the_reg_ladder_to_the_full_ladders_best(skewed):
    """The default regs (``DEFAULT_REGS``: ``REG_LADDER`` walked per pair) and the same ladder given
    (every rung scored): the walk's best reg is the brute-force best of each pair it scored, its
    scores are the full ladder's, and it scores fewer candidates. The walk finds the ladder's best
    where the score is unimodal in reg, as here at tol 1e-3; at tol 3e-4 the ladder of lx = 0.6 has a
    second, lower minimum at 1e-4 behind a 0.4% bump at 1e-5, which a walk from 1e-6 does not reach."""
    X, Y = skewed
    common = dict(lengthscales_x=(0.3, 0.6), lengthscales_y=(0.3,), search=False, refit=False,
                  estimator=JDL(tol=1e-3))
    walked = tune(X, Y, **common, summaries="none")
    full = tune(X, Y, regs=REG_LADDER, **common, summaries="none")
    assert as_regs(None) is DEFAULT_REGS and DEFAULT_REGS.walk and DEFAULT_REGS.values == REG_LADDER
    scores = {(row["lengthscale_x"], row["reg"]): row["score"] for row in full.table}
    assert 0 < len(walked.table) < len(full.table)
    for row in walked.table:
        assert row["score"] == pytest.approx(scores[row["lengthscale_x"], row["reg"]], rel=1e-12)
    for lx in (0.3, 0.6):
        ladder = [scores[lx, reg] for reg in REG_LADDER]
        visited = [row for row in walked.table if row["lengthscale_x"] == lx]
        assert min(row["score"] for row in visited) == pytest.approx(min(ladder), rel=1e-12)
    assert walked.best["reg"] == full.best["reg"]
    with pytest.raises(ValueError, match="regs"):
        tune(X, Y, regs=[1e-5, -1.0], **common, summaries="none")
