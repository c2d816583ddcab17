"""scikit-learn's estimator protocol (jdlcore.models.protocol): every registered method passes
scikit-learn's own estimator checks, except those listed below with the reason each cannot apply; the
estimators work inside clone, Pipeline, cross_val_score and GridSearchCV; ``score`` is the negative
mean exact CRPS (energy score for a vector y), checked against a brute-force double sum; and a
setting means the same in Python and on the command line (``scaling``)."""
import numpy as np
import pytest

sklearn = pytest.importorskip("sklearn")
from sklearn.base import clone  # noqa: E402
from sklearn.exceptions import NotFittedError as SklearnNotFitted  # noqa: E402
from sklearn.model_selection import GridSearchCV, KFold, cross_val_score  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402
from sklearn.utils.estimator_checks import parametrize_with_checks  # noqa: E402

from jdlcore import CME, JDL, KLR, METHODS, PSDJDL, GaussianKernel, GreedyJDL, PolynomialJDL  # noqa: E402
from jdlcore.models.protocol import NotFittedError  # noqa: E402
from jdlcore.scaling import robust_scaling  # noqa: E402

# -- scikit-learn's checks ------------------------------------------------------------------------
ONE_D_X = "jdl reads a 1-D X as one feature, shape (n,) -> (n, 1), by design (the paper's examples are 1-D)"
PROBA = ("jdl's regressors answer predict_proba: the class probabilities of a law over a discrete y's values "
         "(a conditional law answers every query)")
LABELS = "GreedyJDL's x is one column of class labels; the check passes several continuous columns"
STRING_CLASSES = "KLR's classes are numbers (a law's atoms); the check passes string labels"
MONOMIALS = ("at its default degree 4, the check's few rows (10-200, of up to 10 columns; a y of 3 distinct values) "
             "cannot determine PolynomialJDL's monomials (35 in 3 columns, 1001 in 10), and the fit refuses them "
             "with their numerical rank, naming the degree to lower")
COMMON = {"check_fit1d": ONE_D_X, "check_fit2d_predict1d": ONE_D_X}


def expected_failures(estimator) -> dict[str, str]:
    """The checks that cannot apply to ``estimator``, each with its reason (xfail in the run below)."""
    failures = dict(COMMON)
    if not isinstance(estimator, KLR):
        failures["check_regressors_no_decision_function"] = PROBA
    if isinstance(estimator, GreedyJDL):
        failures.update({name: LABELS for name in GREEDY_MULTI_COLUMN})
    if isinstance(estimator, KLR):
        failures.update({name: STRING_CLASSES for name in KLR_STRING_CLASSES})
        failures["check_supervised_y_2d"] = KLR_COLUMN_Y
    if isinstance(estimator, PolynomialJDL) and estimator.degree > 1:
        failures.update({name: MONOMIALS for name in POLYNOMIAL_FEW_ROWS})
        del failures["check_fit1d"]  # the error it expects comes: the refusal of the monomials
    return failures


GREEDY_MULTI_COLUMN = (
    "check_fit_score_takes_y", "check_estimators_overwrite_params", "check_dont_overwrite_parameters",
    "check_estimators_fit_returns_self", "check_readonly_memmap_input", "check_n_features_in_after_fitting",
    "check_positive_only_tag_during_fit", "check_estimators_dtypes", "check_dtype_object", "check_pipeline_consistency",
    "check_estimators_nan_inf", "check_estimators_pickle", "check_f_contiguous_array_estimator",
    "check_regressors_train",
    "check_regressor_data_not_an_array", "check_regressor_multioutput", "check_supervised_y_2d", "check_regressors_int",
    "check_methods_sample_order_invariance", "check_methods_subset_invariance", "check_dict_unchanged",
    "check_fit_idempotent", "check_fit_check_is_fitted", "check_n_features_in", "check_requires_y_none",
)
KLR_STRING_CLASSES = ("check_classifiers_classes",)
KLR_COLUMN_Y = "KLR reads y of shape (n, 1) as one column of labels, as every jdl method reads y; no warning"
POLYNOMIAL_FEW_ROWS = (
    "check_fit_score_takes_y", "check_estimators_overwrite_params", "check_dont_overwrite_parameters",
    "check_estimators_fit_returns_self", "check_readonly_memmap_input", "check_n_features_in_after_fitting",
    "check_positive_only_tag_during_fit", "check_estimators_dtypes", "check_dtype_object", "check_pipeline_consistency",
    "check_estimators_nan_inf", "check_estimators_pickle", "check_f_contiguous_array_estimator",
    "check_regressors_train", "check_regressor_data_not_an_array", "check_regressor_multioutput",
    "check_regressors_no_decision_function", "check_supervised_y_2d", "check_regressors_int",
    "check_methods_sample_order_invariance", "check_methods_subset_invariance", "check_fit2d_1feature",
    "check_dict_unchanged", "check_fit2d_predict1d",
)

# every method at its defaults, and PolynomialJDL also at degree 1, where the checks' rows determine its monomials
CHECKED = [JDL(), CME(), KLR(), GreedyJDL(), PolynomialJDL(), PolynomialJDL(degree=1), PSDJDL(max_rank=5)]


def test_every_registered_method_is_checked():
    assert sorted({type(estimator).method for estimator in CHECKED}) == sorted(METHODS)


@parametrize_with_checks(CHECKED, expected_failed_checks=expected_failures)
def test_scikit_learn_checks(estimator, check):
    check(estimator)


# -- the protocol in scikit-learn's tools ---------------------------------------------------------
def regression_rows(n: int = 300, seed: int = 0, width: int = 2) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, width)) * [1.0, 1000.0][:width]  # mixed units
    y = np.sin(X[:, 0]) + 0.3 * rng.standard_normal(n) * (1 + (X[:, -1] > 0))
    return X, y


def brute_force_crps(weights: np.ndarray, atoms: np.ndarray, observed: np.ndarray) -> np.ndarray:
    """E|A - y| - E|A - A'| / 2 by the double sum over the atoms (atoms (M, d): the energy score)."""
    out = np.empty(len(observed))
    spread = np.linalg.norm(atoms[:, None, :] - atoms[None, :, :], axis=2)
    for i, (w, y) in enumerate(zip(weights, observed)):
        out[i] = w @ np.linalg.norm(atoms - y, axis=1) - 0.5 * w @ spread @ w
    return out


def test_clone_get_params_and_nested_set_params():
    model = JDL(GaussianKernel(0.5), reg=1e-4)
    params = model.get_params(deep=True)
    assert params["kernel_x__lengthscale"] == 0.5 and params["reg"] == 1e-4 and params["scaling"] == "robust"
    assert "kernel_y__lengthscale" not in params  # kernel_y is None: the default Gaussian of lengthscale 1
    twin = clone(model)
    assert twin.kernel_x is not model.kernel_x and twin.kernel_x == model.kernel_x and twin.reg == 1e-4
    twin.set_params(kernel_x__lengthscale=0.25, kernel_y__lengthscale=2.0, reg=1e-3)
    assert model.kernel_x.lengthscale == 0.5  # the original is untouched
    assert twin.kernel_x == GaussianKernel(0.25) and twin.kernel_y == GaussianKernel(2.0) and twin.reg == 1e-3
    with pytest.raises(ValueError, match="kernel_z: not a parameter of JDL"):
        twin.set_params(kernel_z=None)
    with pytest.raises(ValueError, match="reg__x: not a parameter of JDL"):
        twin.set_params(reg__x=1)
    with pytest.raises(ValueError, match="width: not a parameter of GaussianKernel"):
        twin.set_params(kernel_x__width=3)
    assert repr(JDL()) == "JDL()" and repr(model) == "JDL(kernel_x=GaussianKernel(lengthscale=0.5), reg=0.0001)"


def test_score_is_the_negative_mean_exact_crps_and_energy_score():
    X, y = regression_rows()
    model = JDL(reg=1e-3, support_size=64).fit(X[:200], y[:200])
    Xq, yq = X[200:], y[200:]
    by_hand = brute_force_crps(model.conditional_weights(Xq), model.law_atoms_, yq[:, None])
    np.testing.assert_allclose(model.crps(Xq, yq), by_hand, rtol=1e-10, atol=1e-12)
    assert model.score(Xq, yq) == pytest.approx(-by_hand.mean(), rel=1e-10)
    Y = np.column_stack([y, y**2 + np.random.default_rng(1).standard_normal(len(y))])
    vector = JDL(reg=1e-3, support_size=64).fit(X[:200], Y[:200])
    by_hand = brute_force_crps(vector.conditional_weights(Xq), vector.law_atoms_, Y[200:])
    np.testing.assert_allclose(vector.energy_score(Xq, Y[200:]), by_hand, rtol=1e-10, atol=1e-12)
    assert vector.score(Xq, Y[200:]) == pytest.approx(-by_hand.mean(), rel=1e-10)
    klr = KLR(reg=1e-3).fit(X[:200], (y[:200] > 0).astype(float))
    labels = (yq > 0).astype(float)
    by_hand = brute_force_crps(klr.predict_proba(Xq), klr.classes_[:, None], labels[:, None])
    assert klr.score(Xq, labels) == pytest.approx(-by_hand.mean(), rel=1e-10)


def test_shapes_feature_names_and_unfitted_errors():
    pandas = pytest.importorskip("pandas")
    X, y = regression_rows()
    model = JDL(support_size=64).fit(X, y)
    assert model.predict(X[:5]).shape == (5,) and model.n_features_in_ == 2
    assert not hasattr(model, "feature_names_in_")
    assert JDL(support_size=64).fit(X, y[:, None]).predict(X[:5]).shape == (5, 1)
    table = pandas.DataFrame(X, columns=["carats", "price"])
    named = JDL(support_size=64).fit(table, y)
    np.testing.assert_array_equal(named.feature_names_in_, ["carats", "price"])
    np.testing.assert_array_equal(named.predict(table), model.predict(X))
    with pytest.raises(ValueError, match="feature names should match"):
        named.predict(table.rename(columns={"price": "cost"}))
    with pytest.warns(UserWarning, match="X does not have valid feature names"):
        named.predict(X)
    with pytest.raises(ValueError, match="X has 3 features, but JDL is expecting 2 features as input"):
        model.predict(np.ones((4, 3)))
    for unfitted in (JDL(), KLR()):
        with pytest.raises(SklearnNotFitted, match="call fit"):
            unfitted.predict(X)
        with pytest.raises(NotFittedError):  # also jdlcore's own class, a RuntimeError
            unfitted.predict_proba(X)


def test_pipeline_cross_val_score_and_grid_search():
    X, y = regression_rows(240)
    folds = KFold(3, shuffle=True, random_state=0)
    scores = cross_val_score(make_pipeline(StandardScaler(), JDL(support_size=64)), X, y, cv=folds)
    by_hand = []
    for train, test in folds.split(X):
        scaler = StandardScaler().fit(X[train])
        model = JDL(support_size=64).fit(scaler.transform(X[train]), y[train])
        by_hand.append(model.score(scaler.transform(X[test]), y[test]))
    np.testing.assert_allclose(scores, by_hand, rtol=1e-12)
    assert np.all(scores < 0)
    search = GridSearchCV(JDL(support_size=64), {"kernel_x__lengthscale": [0.05, 1.0], "reg": [1e-4, 1e-2]},
                          cv=folds).fit(X, y)
    assert set(search.best_params_) == {"kernel_x__lengthscale", "reg"}
    assert search.best_estimator_.kernel_x.lengthscale == search.best_params_["kernel_x__lengthscale"]
    assert search.best_score_ == pytest.approx(np.max(search.cv_results_["mean_test_score"]))


# -- one meaning per setting: scaling ---------------------------------------------------------------
def test_the_default_scaling_standardises_each_kernel_as_a_given_scaling_does():
    X, y = regression_rows(400)
    default = JDL(GaussianKernel(0.7), GaussianKernel(0.5), reg=1e-4).fit(X, y)
    (lx, sx), (ly, sy) = robust_scaling(X), robust_scaling(y[:, None])
    given = JDL(GaussianKernel(0.7, location=lx, scale=sx), GaussianKernel(0.5, location=ly, scale=sy),
                reg=1e-4, scaling="none").fit(X, y)
    raw = JDL(GaussianKernel(0.7), GaussianKernel(0.5), reg=1e-4, scaling="none").fit(X, y)
    assert default.basis_x_.kernel == given.basis_x_.kernel and default.basis_y_.kernel == given.basis_y_.kernel
    np.testing.assert_array_equal(default.predict(X[:50]), given.predict(X[:50]))
    assert raw.basis_x_.kernel.scale is None
    assert np.max(np.abs(raw.predict(X[:50]) - default.predict(X[:50]))) > 1e-3  # the units matter
    # a column constant in a fold (a rare level) gets scale 1 instead of stopping a cross-validation
    constant = np.column_stack([X, np.ones(len(X))])
    fitted = JDL(reg=1e-4, support_size=64).fit(constant, y)
    assert fitted.basis_x_.kernel.scale[-1] == 1.0
    with pytest.raises(ValueError, match="scaling: unknown value 'zscore'"):
        JDL(scaling="zscore").fit(X, y)


def test_python_and_the_command_line_give_one_model_for_one_setting(tmp_path):
    """`jdl fit --lengthscale-x 0.7 --lengthscale-y 0.5` and JDL(GaussianKernel(0.7), GaussianKernel(0.5)) agree."""
    pytest.importorskip("zarr")
    from jdl.cli import main
    from pipeline.model_store import load_model

    X, y = regression_rows(600, seed=3)
    np.savez(tmp_path / "src.npz", a=X[:, 0], b=X[:, 1], t=y)
    assert main(["stage", str(tmp_path / "src.npz"), "--x", "a,b", "--y", "t", "--out", str(tmp_path / "d.zarr")]) == 0
    assert main(["fit", str(tmp_path / "d.zarr"), "--out", str(tmp_path / "m.zarr"), "--lengthscale-x", "0.7",
                 "--lengthscale-y", "0.5", "--reg", "1e-4"]) == 0
    stored = load_model(tmp_path / "m.zarr")
    python = JDL(GaussianKernel(0.7), GaussianKernel(0.5), reg=1e-4).fit(X, y)
    assert stored.basis_x_.kernel == python.basis_x_.kernel and stored.scaling == python.scaling == "robust"
    np.testing.assert_allclose(stored.predict(X[:100])[:, 0], python.predict(X[:100]), rtol=0, atol=1e-12)
