"""Tuning on folds: the splits (disjoint validation blocks, the first one the single split), the
default's rule, the scores of the staged pipeline against the in-memory tuning, and the refusals."""
import re

import numpy as np
import pytest

from jdl.cli import main
from jdlcore import JDL
from jdlcore.tuning import MIN_VALIDATED_ROWS, fold_rows, resolve_folds, split_rows, tune


def test_the_folds_validate_disjoint_blocks_and_the_first_is_the_single_split():
    n = 1003
    splits = fold_rows(n, 0.2, 5, seed=4)
    validated = np.concatenate([val for _, val in splits])
    assert len(splits) == 5 and [val.size for _, val in splits] == [201, 200, 201, 200, 201]
    assert np.array_equal(np.sort(validated), np.arange(n))  # 5-fold cross-validation: each row validated once
    for train, val in splits:
        assert np.array_equal(np.sort(np.concatenate([train, val])), np.arange(n))  # the other rows train
    first = split_rows(n, 0.2, 4)
    assert first[1].size == round(0.2 * n) and all(np.array_equal(a, b) for a, b in zip(splits[0], first))
    assert all(np.array_equal(a, b) for a, b in zip(fold_rows(n, 0.2, 2, seed=4)[1], splits[1]))
    # a fraction that is not 1 / K: as many blocks as fit, the rest of the rows never validated
    blocks = fold_rows(n, 0.3, "auto", seed=4)
    assert [val.size for _, val in blocks] == [301, 301, 301]


def test_auto_cross_validates_where_one_split_validates_fewer_than_two_thousand_rows():
    assert MIN_VALIDATED_ROWS == 2_000
    assert resolve_folds("auto", 10_000, 0.2) == 1  # 2,000 validation rows
    assert resolve_folds("auto", 9_997, 0.2) == 5  # 1,999
    assert resolve_folds("auto", 5_000, 0.2) == 5 and resolve_folds("auto", 40, 0.2) == 5
    assert resolve_folds("auto", 5_000, 0.3) == 3 and resolve_folds("auto", 1_000, 0.5) == 2
    assert resolve_folds("auto", 5_000, 0.5) == 1  # 2,500
    assert resolve_folds(3, 5_000, 0.2) == 3


@pytest.mark.parametrize("folds", [0, 6, "two", True, 2.0])
def test_a_bad_number_of_folds_is_refused_naming_folds(folds):
    """Not "auto" or a positive integer: the option's rule; more folds than the rows hold: the bound."""
    X = np.random.default_rng(0).normal(size=(500, 1))
    message = (f"folds: must be 'auto' or an integer >= 1, got {folds!r}" if folds != 6 else
               "folds: must be 'auto' or an integer from 1 to 5 (the disjoint validation blocks of "
               f"validation_fraction 0.2 in 500 rows), got {folds!r}")
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        tune(X, X ** 2, folds=folds, summaries="none")


def test_folds_with_a_validation_set_are_refused_and_one_is_taken():
    X = np.random.default_rng(1).normal(size=(300, 1))
    with pytest.raises(ValueError, match=r"^folds: the candidates are scored on the validation set given \(one "
                                         r"fold\), got 3$"):
        tune(X[:200], X[:200] ** 2, validation=(X[200:], X[200:] ** 2), folds=3, summaries="none")
    result = tune(X[:200], X[:200] ** 2, validation=(X[200:], X[200:] ** 2), lengthscales_x=[0.5],
                  lengthscales_y=[0.5], regs=[1e-4], refit=False, summaries="none")
    assert result.folds == 1


def test_jdl_tune_on_folds_equals_the_in_memory_tuning_and_records_them(tmp_path, capsys):
    from pipeline.tuning import load_tuning

    rng = np.random.default_rng(3)
    x = rng.uniform(-2, 2, size=600)
    y = np.sin(2 * x) + (0.2 + 0.2 * np.abs(x)) * rng.normal(size=600)
    np.savez(tmp_path / "t.npz", x=x, y=y)
    assert main(["stage", str(tmp_path / "t.npz"), "--x", "x", "--y", "y", "--out", str(tmp_path / "d.zarr")]) == 0
    grid = ["--lengthscales-x", "0.3,0.8", "--lengthscales-y", "0.2,0.5", "--regs", "1e-5,1e-3"]
    capsys.readouterr()
    assert main(["tune", str(tmp_path / "d.zarr"), "--out", str(tmp_path / "t.zarr"), *grid, "--folds", "3",
                 "--summaries", "none"]) == 0  # the columns alone, as jdlcore.tune reads them
    assert "on 600 rows (3 folds)" in capsys.readouterr().out
    table = load_tuning(tmp_path / "t.zarr")
    assert table.attrs["folds"] == 3 and table.attrs["validation_rows"] == 360
    reference = tune(x[:, None], y[:, None], lengthscales_x=[0.3, 0.8], lengthscales_y=[0.2, 0.5],
                     regs=[1e-5, 1e-3], folds=3, refit=False, summaries="none")
    assert reference.folds == 3
    assert np.array_equal(table["validation_loss"].values.ravel(), reference.scores())
    # the default on 600 rows: all five folds
    assert main(["tune", str(tmp_path / "d.zarr"), "--out", str(tmp_path / "a.zarr"), *grid]) == 0
    assert "(5 folds)" in capsys.readouterr().out and load_tuning(tmp_path / "a.zarr").attrs["validation_rows"] == 600
    bad = [(["--folds", "6"], "folds: must be 'auto' or an integer from 1 to 5 (the disjoint validation blocks of "
                              "validation_fraction 0.2 in 600 rows), got 6"),
           (["--folds", "two"], "parameter folds: "),
           (["--folds", "2", "--validation", str(tmp_path / "d2.zarr")],
            "folds: the candidates are scored on the validation set given (one fold), got 2")]
    assert main(["stage", str(tmp_path / "t.npz"), "--x", "x", "--y", "y", "--out", str(tmp_path / "d2.zarr")]) == 0
    capsys.readouterr()
    for extra, message in bad:
        assert main(["tune", str(tmp_path / "d.zarr"), "--out", str(tmp_path / "bad.zarr"), *grid, *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], (extra, err)
        assert not (tmp_path / "bad.zarr").exists()


def test_a_five_fold_score_is_the_mean_of_the_folds_scores():
    """A candidate's score on five folds against the same candidate scored on each fold alone (the
    single-fold path, itself checked against independent refits in test_jdl and test_search)."""
    from jdlcore import GaussianKernel
    from jdlcore.conditional.losses import CRPSLoss
    from jdlcore.tuning import make_folds, score_grid

    rng = np.random.default_rng(8)
    X = rng.normal(size=(700, 2))
    Y = X[:, :1] + 0.3 * rng.normal(size=(700, 1))
    folds = make_folds(X, Y, fold_rows(700, 0.2, 5, 0))
    kernels = [GaussianKernel(0.7)], [GaussianKernel(0.4)]
    together = score_grid(folds, JDL(seed=0), *kernels, [1e-6, 1e-4], CRPSLoss())
    alone = [score_grid([fold], JDL(seed=0), *kernels, [1e-6, 1e-4], CRPSLoss()) for fold in folds]
    for k, row in enumerate(together):  # the folds together run on the pool's threads, BLAS at one thread, so
        # the factorisations' sums are rounded in another order than alone: equal to rounding, not to the bit
        assert row["score"] == pytest.approx(np.mean([rows[k]["score"] for rows in alone]), rel=1e-7)
        assert row["rank_x"] == max(rows[k]["rank_x"] for rows in alone)
