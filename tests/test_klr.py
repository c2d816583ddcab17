"""Low-rank kernel logistic regression (jdlcore.models.klr) against independent computations."""
import json

import numpy as np
import pytest
from scipy.optimize import minimize
from scipy.stats import norm

from jdlcore import GaussianKernel
from jdlcore.models.klr import KLR, _objective

from .conftest import bivariate_gaussian


# -- independent references ------------------------------------------------------------------------
def softmax_with_reference(Z):
    """Probabilities (q, C) for logits Z (q, C-1) against a reference class with logit 0."""
    full = np.column_stack([np.zeros(len(Z)), Z])
    full -= full.max(axis=1, keepdims=True)
    expo = np.exp(full)
    return expo / expo.sum(axis=1, keepdims=True)


def dense_klr(K, labels, n_classes, reg, fit_intercept):
    """Minimise the dense objective sum_i loss(K c + b) + reg tr(c^T K c) over c (n, C-1) and b with BFGS.

    c is searched in the eigenspace of K (eigenvalues above 1e-12 of the largest) through
    c = U D^{-1/2} v, so K c = U D^{1/2} v and c^T K c = |v|^2: the same objective, well conditioned.
    Returns c (n, C-1), b (C-1,) and the dense objective evaluated at (c, b).
    """
    n, k = K.shape[0], n_classes - 1
    targets = (labels[:, None] == np.arange(1, n_classes)).astype(float)
    D, U = np.linalg.eigh(K)
    keep = D > 1e-12 * D.max()
    U, D = U[:, keep], D[keep]
    G = U * np.sqrt(D)
    r = G.shape[1]

    def split(theta):
        v = theta[: r * k].reshape(r, k)
        return v, (theta[r * k:] if fit_intercept else np.zeros(k))

    def loss(Z):
        log_z = np.logaddexp.reduce(np.column_stack([np.zeros(n), Z]), axis=1)
        return log_z.sum() - np.sum(targets * Z), np.exp(Z - log_z[:, None]) - targets

    def objective(theta):
        v, b = split(theta)
        value, residual = loss(G @ v + b)
        grad_v = G.T @ residual + 2 * reg * v
        gradient = np.concatenate([grad_v.ravel(), residual.sum(axis=0)]) if fit_intercept else grad_v.ravel()
        return value + reg * np.sum(v * v), gradient

    x0 = np.zeros(r * k + (k if fit_intercept else 0))
    result = minimize(objective, x0, jac=True, method="BFGS", options={"gtol": 1e-10, "maxiter": 20000})
    v, b = split(result.x)
    c = U @ (v / np.sqrt(D)[:, None])
    dense_value = loss(K @ c + b)[0] + reg * np.sum(c * (K @ c))
    return c, b, dense_value


def labelled_data(d, n_classes, n=70, seed=1):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, (n, d))
    if n_classes == 2:
        signal = 1.5 * np.sin(2 * X[:, 0]) + (X[:, 1] if d > 1 else 0.0)
        y = (rng.random(n) < 1 / (1 + np.exp(-signal))).astype(float)
    else:  # classes -1, 1, 3: arbitrary label values
        P = softmax_with_reference(np.column_stack([2 * X[:, 0], 1 - 2 * X[:, -1]]))
        y = 2.0 * np.array([rng.choice(3, p=p) for p in P]) - 1.0
    return X, y, rng.uniform(-2, 2, (200, d))


# -- 1. full rank equals dense KLR -----------------------------------------------------------------
@pytest.mark.parametrize("d, n_classes, lengthscale, reg", [(1, 2, 0.5, 1e-3), (2, 2, 0.7, 1e-2), (2, 3, 0.7, 1e-2)])
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_full_rank_equals_dense_klr(d, n_classes, lengthscale, reg, fit_intercept):
    X, y, Xq = labelled_data(d, n_classes)
    kernel = GaussianKernel(lengthscale)
    model = KLR(kernel, reg=reg, tol=0.0, fit_intercept=fit_intercept, scaling="none").fit(X, y)  # the dense kernel
    classes, labels = np.unique(y, return_inverse=True)
    c, b, dense_value = dense_klr(kernel(X), labels, n_classes, reg, fit_intercept)
    expected = softmax_with_reference(kernel(Xq, X) @ c + b)
    probabilities = model.predict_proba(Xq)
    np.testing.assert_array_equal(model.classes_, classes)
    assert probabilities.shape == (len(Xq), n_classes)
    assert np.max(np.abs(probabilities - expected)) < 1e-6
    assert model.diagnostics_["loss"] == pytest.approx(dense_value, rel=1e-9, abs=1e-9)
    if not fit_intercept:
        np.testing.assert_array_equal(model.intercept_, np.zeros(n_classes - 1))


# -- 2. derivatives against finite differences -----------------------------------------------------
@pytest.mark.parametrize("n_classes", [2, 4])
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_gradient_and_hessian_match_central_differences(n_classes, fit_intercept):
    rng = np.random.default_rng(7)
    n, m, k = 40, 5, n_classes - 1
    features = rng.standard_normal((n, m))
    targets = (rng.integers(0, n_classes, n)[:, None] == np.arange(1, n_classes)).astype(float)
    theta = 0.5 * rng.standard_normal(m * k + (k if fit_intercept else 0))
    reg = 0.3
    value, gradient, hessian = _objective(theta, features, targets, reg, fit_intercept)
    h = 1e-5
    steps = np.eye(theta.size) * h
    fd_gradient = np.array([
        (_objective(theta + e, features, targets, reg, fit_intercept, derivatives=False)[0]
         - _objective(theta - e, features, targets, reg, fit_intercept, derivatives=False)[0]) / (2 * h)
        for e in steps
    ])
    fd_hessian = np.array([
        (_objective(theta + e, features, targets, reg, fit_intercept)[1]
         - _objective(theta - e, features, targets, reg, fit_intercept)[1]) / (2 * h)
        for e in steps
    ])
    np.testing.assert_allclose(gradient, fd_gradient, rtol=1e-7, atol=1e-7 * max(1.0, abs(value)))
    np.testing.assert_allclose(hessian, fd_hessian, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(hessian, hessian.T)
    # The objective itself, written out directly for the binary case.
    if n_classes == 2:
        z = features @ theta[:m] + (theta[m] if fit_intercept else 0.0)
        direct = np.sum(np.logaddexp(0, z) - targets[:, 0] * z) + reg * np.sum(theta[:m] ** 2)
        assert value == pytest.approx(direct, rel=1e-13)


# -- 3. optimality ---------------------------------------------------------------------------------
@pytest.mark.parametrize("n_classes", [2, 3])
def test_solution_is_a_minimum(n_classes):
    X, y, _ = labelled_data(2, n_classes, n=300, seed=3)
    model = KLR(GaussianKernel(0.8), reg=1e-2, tol=1e-6).fit(X, y)
    features = model.basis_x_.features(X)  # Psi(X) from the kernel, not from the factor
    targets = (np.unique(y, return_inverse=True)[1][:, None] == np.arange(1, n_classes)).astype(float)
    theta = np.concatenate([model.coef_.ravel(), model.intercept_])
    value, gradient, _ = _objective(theta, features, targets, 1e-2)
    assert value == pytest.approx(model.diagnostics_["loss"], rel=1e-10)
    assert np.max(np.abs(gradient)) <= 1e-8 * value
    assert model.diagnostics_["gradient_norm"] <= 1e-10 * value
    rng = np.random.default_rng(0)
    for scale in (1e-4, 1e-2, 1.0):
        for _ in range(10):
            perturbed = theta + scale * rng.standard_normal(theta.size)
            assert _objective(perturbed, features, targets, 1e-2, derivatives=False)[0] > value


# -- 4. threshold events ---------------------------------------------------------------------------
def test_event_probability_matches_the_gaussian_conditional():
    X, Y = bivariate_gaussian(2000, rho=0.8, seed=5)
    q = 0.3
    model = KLR(GaussianKernel(0.5), reg=1e-2, tol=1e-3, threshold=q).fit(X, Y)
    np.testing.assert_array_equal(model.classes_, [0.0, 1.0])
    xs = np.linspace(-1.5, 1.5, 61)[:, None]
    truth = norm.cdf((q - 0.8 * xs[:, 0]) / np.sqrt(1 - 0.8**2))
    event = model.event_probability(xs)
    assert np.mean(np.abs(event - truth)) < 0.05
    probabilities = model.predict_proba(xs)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=0, atol=1e-14)
    assert np.all((probabilities >= 0) & (probabilities <= 1))
    np.testing.assert_array_equal(probabilities[:, 1], event)
    np.testing.assert_array_equal(model.predict(xs), np.where(event >= 0.5, 1.0, 0.0))
    logits = model.logits(xs)
    assert logits.shape == (61, 1)
    np.testing.assert_allclose(event, 1 / (1 + np.exp(-logits[:, 0])), rtol=1e-13)
    np.testing.assert_array_equal(model.decision_function(xs), logits[:, 0])  # scikit-learn's shape for 2 classes
    assert model.diagnostics_["rank_x"] < 100 and model.diagnostics_["relative_error_x"] <= 1e-3


def test_predict_returns_class_values_and_extreme_logits_stay_finite():
    X, y, Xq = labelled_data(2, 3)
    model = KLR(GaussianKernel(0.7), reg=1e-2).fit(X, y)
    predicted = model.predict(Xq)
    assert set(np.unique(predicted)) <= {-1.0, 1.0, 3.0}
    np.testing.assert_array_equal(predicted, model.classes_[np.argmax(model.predict_proba(Xq), axis=1)])
    model.intercept_ = model.intercept_ + np.array([800.0, -800.0])  # exp would overflow without the shift
    probabilities = model.predict_proba(Xq)
    assert np.all(np.isfinite(probabilities))
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=1e-14)


# -- 5. state round trip ---------------------------------------------------------------------------
@pytest.mark.parametrize("n_classes", [2, 3])
def test_state_round_trip_is_bit_identical(n_classes):
    X, y, Xq = labelled_data(2, n_classes)
    model = KLR(GaussianKernel(0.7), reg=1e-2, tol=1e-4, fit_intercept=n_classes == 2).fit(X, y)
    state = model.state()
    m = model.diagnostics_["rank_x"]
    shapes = {name: array.shape for name, array in state["arrays"].items()}
    assert shapes == {
        "x_pivot_points": (m, 2), "x_coefficients": (m, m), "x_eigenvalues": (m,), "x_rotation": (m, m),
        "x_trace_error": (m + 1,), "coef": (m, n_classes - 1), "intercept": (n_classes - 1,), "classes": (n_classes,),
    }
    assert all(array.dtype == np.float64 for array in state["arrays"].values())
    json.dumps({key: state[key] for key in ("kernel_x", "params", "n_samples", "diagnostics")})
    rebuilt = KLR.from_state(state)
    assert np.array_equal(rebuilt.predict_proba(Xq), model.predict_proba(Xq))
    np.testing.assert_array_equal(rebuilt.predict(Xq), model.predict(Xq))
    assert rebuilt.get_params()["fit_intercept"] == (n_classes == 2) and rebuilt.n_samples_ == 70

    missing = {**state, "arrays": {k: v for k, v in state["arrays"].items() if k != "coef"}}
    with pytest.raises(ValueError, match="state: missing part 'coef'"):
        KLR.from_state(missing)
    wrong = {**state, "arrays": {**state["arrays"], "intercept": np.zeros(n_classes + 1)}}
    with pytest.raises(ValueError, match="state: intercept has shape"):
        KLR.from_state(wrong)


# -- 6. bad input ----------------------------------------------------------------------------------
_X = np.linspace(-1, 1, 20)
_Y = np.tile([0.0, 1.0], 10)


def _fit(params=None, X=_X, Y=_Y):
    return KLR(GaussianKernel(0.5), **(params or {})).fit(X, Y)


@pytest.mark.parametrize("call, error, message", [
    (lambda: _fit(X=np.where(_X > 0.5, np.nan, _X)), ValueError, r"X: contains NaN or inf"),
    (lambda: _fit(Y=np.where(_X > 0.5, np.inf, _Y)), ValueError, r"Y: contains NaN or inf"),
    (lambda: _fit(Y=_Y[:-1]), ValueError, r"X and Y: must have the same number of rows, got 20 and 19"),
    (lambda: _fit(X=_X[:1], Y=_Y[:1]), ValueError, r"X: needs at least 2 row\(s\), got 1"),
    (lambda: _fit(Y=np.ones(20)), ValueError, r"Y: needs at least 2 classes"),
    (lambda: _fit(Y=np.column_stack([_Y, _Y])), ValueError, r"Y: must be one column"),
    (lambda: _fit(X=np.arange(60.0), Y=np.arange(60.0)), ValueError, r"Y: has 60 distinct values.*at most 50.*threshold"),
    (lambda: _fit({"threshold": -5.0}, Y=_X), ValueError, r"Y: threshold=-5.0 makes no sample an event"),
    (lambda: _fit({"threshold": 5.0}, Y=_X), ValueError, r"Y: threshold=5.0 makes every sample an event"),
    (lambda: _fit({"threshold": np.nan}, Y=_X), ValueError, r"threshold: must be None or a finite number"),
    (lambda: _fit({"reg": 0.0}), ValueError, r"reg: must be finite and > 0, got 0.0"),
    (lambda: _fit({"reg": -1e-3}), ValueError, r"reg: must be finite and > 0, got -0.001"),
    (lambda: _fit({"tol": 1.0}), ValueError, r"tol: must be in \[0, 1\), got 1.0"),
    (lambda: _fit({"tol": -0.1}), ValueError, r"tol: must be in \[0, 1\), got -0.1"),
    (lambda: _fit({"pivoting": "best"}), ValueError, r"pivoting: unknown value 'best'; choose one of 'greedy', 'random'"),
    (lambda: _fit({"max_iter": 0}), ValueError, r"max_iter: must be an integer >= 1, got 0"),
    (lambda: _fit({"max_rank": 0}), ValueError, r"max_rank: must be an integer >= 1 or None, got 0"),
    (lambda: _fit({"fit_intercept": "yes"}), ValueError, r"fit_intercept: must be True or False"),
    (lambda: _fit({"max_iter": 1}), RuntimeError, r"KLR: Newton's method did not converge in max_iter=1"),
    (lambda: _fit().predict_proba(np.zeros((3, 2))), ValueError,
     r"Xq: X has 2 features, but KLR is expecting 1 features as input"),
    (lambda: _fit().predict(np.array([0.0, np.nan])), ValueError, r"Xq: contains NaN or inf"),
    (lambda: _fit().event_probability(_X), ValueError, r"event_probability: the model was fitted without a threshold"),
    (lambda: KLR().predict_proba(_X), RuntimeError, r"KLR: call fit\(X, Y\) before querying the model"),
    (lambda: KLR().state(), RuntimeError, r"KLR: call fit\(X, Y\) before querying the model"),
    (lambda: KLR().set_params(lengthscale=1.0), ValueError, r"lengthscale: not a parameter of KLR"),
])
def test_bad_input_raises_one_clear_error(call, error, message):
    with pytest.raises(error, match=message):
        call()
