"""jdl's laws in skpro (jdl.skpro.JDLProbaRegressor): skpro's estimator checks pass, and skpro's CRPS and
pinball loss on the adapter's predictions equal jdl's exact ones."""
import numpy as np
import pytest

pd = pytest.importorskip("pandas")
pytest.importorskip("skpro")
from skpro.metrics import CRPS, PinballLoss  # noqa: E402
from skpro.utils import check_estimator  # noqa: E402

from jdl.skpro import JDLProbaRegressor  # noqa: E402
from jdlcore import JDL, KLR  # noqa: E402

LEVELS = [0.05, 0.25, 0.5, 0.75, 0.95]


@pytest.fixture(scope="module")
def fitted():
    rng = np.random.default_rng(5)
    x = rng.uniform(-2, 2, 700)
    X = pd.DataFrame({"x": x, "z": rng.standard_normal(700)})
    y = pd.DataFrame({"y": np.sin(x) + (0.2 + 0.3 * np.abs(x)) * rng.standard_normal(700)})
    regressor = JDLProbaRegressor(JDL(reg=1e-4, support_size=128)).fit(X.iloc[:500], y.iloc[:500])
    return regressor, X.iloc[500:], y.iloc[500:]


def test_the_default_is_the_tuned_model_of_the_command_line(fitted):
    """``JDLProbaRegressor(estimator)`` tunes the estimator and the view of x as ``jdlcore.tune`` does (the
    model of ``jdl tune`` + ``jdl fit --tuning``) and answers as that model."""
    from jdlcore import tune

    regressor, X, _ = fitted
    rng = np.random.default_rng(5)  # the fixture's training rows, drawn again
    x = rng.uniform(-2, 2, 700)
    X_train = np.column_stack([x, rng.standard_normal(700)])[:500]
    y_train = (np.sin(x) + (0.2 + 0.3 * np.abs(x)) * rng.standard_normal(700))[:500]
    tuned = tune(X_train, y_train, estimator=JDL(reg=1e-4, support_size=128)).model
    np.testing.assert_array_equal(regressor.estimator_.conditional_quantile(X.to_numpy(), LEVELS),
                                  tuned.conditional_quantile(X.to_numpy(), LEVELS))
    assert regressor.estimator_.reg == tuned.reg and regressor.estimator_.view_ == tuned.view_


def test_skpro_estimator_checks_pass():
    check_estimator(JDLProbaRegressor, raise_exceptions=True)


def test_skpro_metrics_equal_jdl_exact_crps_and_pinball(fitted):
    regressor, X, y = fitted
    model = regressor.estimator_
    law = regressor.predict_proba(X)
    exact = model.crps(X.to_numpy(), y.to_numpy()[:, 0])
    assert CRPS()(y, law) == pytest.approx(exact.mean(), rel=1e-10)
    quantiles = regressor.predict_quantiles(X, alpha=LEVELS)
    np.testing.assert_array_equal(quantiles.to_numpy(), model.conditional_quantile(X.to_numpy(), LEVELS))
    residual = y.to_numpy() - quantiles.to_numpy()
    levels = np.asarray(LEVELS)
    by_hand = np.mean(np.maximum(levels * residual, (levels - 1) * residual))
    assert PinballLoss()(y, quantiles) == pytest.approx(by_hand, rel=1e-12)
    # the Empirical law's quantiles are the law's own (the smallest atom reaching the level)
    np.testing.assert_array_equal(law.ppf(0.9).to_numpy()[:, 0], model.conditional_quantile(X.to_numpy(), [0.9])[:, 0])


def test_interval_variance_and_mean_come_from_the_law(fitted):
    regressor, X, y = fitted
    model, values = regressor.estimator_, X.to_numpy()
    interval = regressor.predict_interval(X, coverage=[0.8])
    np.testing.assert_array_equal(interval.to_numpy(), model.conditional_quantile(values, [0.1, 0.9]))
    weights, atoms = model.conditional_weights(values), model.law_atoms_[:, 0]
    mean = weights @ atoms
    np.testing.assert_allclose(regressor.predict(X).to_numpy()[:, 0], mean, rtol=1e-12)
    np.testing.assert_allclose(regressor.predict_var(X).to_numpy()[:, 0], weights @ atoms**2 - mean**2,
                               rtol=1e-9, atol=1e-12)
    with pytest.raises(ValueError, match="KLR has no law on atoms"):
        JDLProbaRegressor(KLR()).fit(X, (y > 0).astype(float))


def test_rows_with_missing_values_are_read_through_the_missing_value_rule():
    rng = np.random.default_rng(8)
    x = rng.uniform(-2, 2, 600)
    gone = rng.uniform(size=600) < 0.25
    X = pd.DataFrame({"x": np.where(gone, np.nan, x)})
    y = pd.DataFrame({"y": np.where(gone, 3.0, np.sin(x)) + 0.3 * rng.standard_normal(600)})
    regressor = JDLProbaRegressor(JDL(reg=1e-4, support_size=64)).fit(X.iloc[:450], y.iloc[:450])
    assert regressor.estimator_.view_.missing.flagged == (0,)
    law, test = regressor.predict_proba(X.iloc[450:]), X.iloc[450:]
    exact = regressor.estimator_.crps(test.to_numpy(), y.iloc[450:].to_numpy()[:, 0])
    assert CRPS()(y.iloc[450:], law) == pytest.approx(exact.mean(), rel=1e-10)
    mean = regressor.predict(test).to_numpy()[:, 0]
    assert abs(np.mean(mean[gone[450:]]) - 3.0) < 0.3  # a missing x says y is near 3
