"""The estimator contract (jdlcore.models.estimator), checked for every method of the registry (jdlcore.METHODS):
parameters round-trip, a fit returns self and sets the fitted attributes (ending in _) only then,
every query of the surface answers with its documented shape or raises UnsupportedQuery, the
state round-trips bit for bit, and bad input is refused with one line."""
import inspect

import numpy as np
import pytest

from jdlcore import METHODS, Estimator, GaussianKernel, UnsupportedQuery, estimator_class
from jdlcore.models.registry import method_of

N, Q = 160, 7
LEVELS = np.array([0.1, 0.5, 0.9])
THRESHOLDS = np.array([-0.5, 0.0, 0.5])


def training_data(method: str) -> tuple[np.ndarray, np.ndarray]:
    """Paired rows for the method: greedy reads class labels in x, klr class labels in y; y is on a
    grid of step 0.25 (fewer distinct values than support atoms), so class probabilities exist."""
    rng = np.random.default_rng(7)
    X = rng.standard_normal((N, 2))
    Y = np.round(4 * (np.sin(X[:, :1]) + 0.3 * rng.standard_normal((N, 1)))) / 4
    if method == "greedy":
        X = rng.integers(0, 3, size=(N, 1)).astype(float)
        Y = np.round(4 * (X + 0.3 * rng.standard_normal((N, 1)))) / 4
    if method == "klr":
        Y = (Y > 0).astype(float)
    return X, Y


def unfitted(method: str) -> Estimator:
    cls = estimator_class(method)
    kernels = {"kernel_x": GaussianKernel(1.0), "kernel_y": GaussianKernel(0.7)}
    options = {"reg": 1e-3, "degree": 2, "support_size": 64, "max_rank": 5 if method == "psd" else None}
    return cls(**{k: v for k, v in kernels.items() if k in cls.KERNELS},
               **{k: v for k, v in options.items() if k in tuple(cls.parameters)})


@pytest.fixture(scope="module")
def fitted() -> dict[str, tuple[Estimator, np.ndarray, np.ndarray]]:
    out = {}
    for method in METHODS:
        X, Y = training_data(method)
        model = unfitted(method)
        assert model.fit(X, Y) is model  # a fit returns self
        out[method] = (model, X, Y)
    return out


def test_the_registry_names_each_class_by_its_own_declaration():
    assert list(METHODS) == ["jdl", "jpdl", "cme", "klr", "greedy", "psd"]
    for name, cls in METHODS.items():
        assert cls.method == name and cls.summary and issubclass(cls, Estimator)
        assert cls.resolve_positivity("auto") == (cls.positivity_rules[0] if cls.positivity_rules else "none")
        with pytest.raises(ValueError, match="method: unknown value 'nope'"):
            estimator_class("nope")


@pytest.mark.parametrize("cls", list(METHODS.values()), ids=lambda cls: cls.__name__)
def test_the_constructor_takes_exactly_the_declared_parameters(cls):
    """``__init__``'s arguments are the declared ``KERNELS`` + ``parameters`` (what get_params, the
    model store and the pipeline read), each kept as it was given."""
    parameters = {name: p for name, p in inspect.signature(cls.__init__).parameters.items() if name != "self"}
    names = list(parameters)
    assert sorted(names) == sorted(cls.KERNELS + tuple(cls.parameters))
    assert all(parameters[name].kind is inspect.Parameter.KEYWORD_ONLY for name in cls.parameters)  # hyperparameters
    sentinels = {name: object() for name in names}
    model = cls(**sentinels)
    assert all(getattr(model, name) is value for name, value in sentinels.items())


@pytest.mark.parametrize("method", list(METHODS))
def test_parameters_round_trip_and_unknown_names_are_refused(method):
    model = unfitted(method)
    params = model.get_params(deep=False)
    assert set(params) == set(model.KERNELS + tuple(model.parameters))
    clone = type(model)(**params)
    assert clone.get_params(deep=False) == params
    assert model.set_params(seed=3) is model and model.get_params()["seed"] == 3
    with pytest.raises(ValueError, match=f"^colour: not a parameter of {type(model).__name__}; it has "):
        model.set_params(colour="red")


@pytest.mark.parametrize("method", list(METHODS))
def test_fitted_attributes_appear_only_after_the_fit(method, fitted):
    model = unfitted(method)
    assert [name for name in vars(model) if name.endswith("_")] == []
    X, _ = training_data(method)
    with pytest.raises(RuntimeError, match="call fit"):
        model.predict_proba(X[:2]) if method == "klr" else model.conditional_weights(X[:2])
    trained = fitted[method][0]
    assert "coef_" in vars(trained) and "basis_x_" in vars(trained)
    assert method_of(trained) == method


def _answers(model: Estimator, method: str, Xq: np.ndarray) -> dict[str, object]:
    """Each query of the surface: its result, or the UnsupportedQuery it raised."""
    queries = {
        "predict": lambda: model.predict(Xq),
        "conditional_expectation": lambda: model.conditional_expectation(Xq),
        "conditional_cdf": lambda: model.conditional_cdf(Xq, THRESHOLDS if method != "klr" or model.threshold is None
                                                         else [model.threshold]),
        "conditional_quantile": lambda: model.conditional_quantile(Xq, LEVELS),
        "predict_proba": lambda: model.predict_proba(Xq),
        "negative_share": lambda: model.negative_share(Xq),
        "total_mass": lambda: model.total_mass(Xq),
        "conditional_weights": lambda: model.conditional_weights(Xq),
    }
    out = {}
    for name, run in queries.items():
        try:
            out[name] = run()
        except UnsupportedQuery as error:
            assert "\n" not in str(error) and method in str(error)
            out[name] = error
    return out


@pytest.mark.parametrize("method", list(METHODS))
def test_every_query_answers_with_its_shape_or_says_it_cannot(method, fitted):
    model, X, Y = fitted[method]
    Xq = X[:Q]
    answers = _answers(model, method, Xq)
    for name, answer in answers.items():  # what the class declares it answers is what it answers
        assert model.answers(name) is not isinstance(answer, UnsupportedQuery), name
    d_y = model.y_width_
    shapes = {"conditional_expectation": (Q, d_y), "conditional_cdf": (Q, 3), "conditional_quantile": (Q, 3),
              "negative_share": (Q,), "total_mass": (Q,)}
    for name, shape in shapes.items():
        if not isinstance(answers[name], UnsupportedQuery):
            assert np.shape(answers[name]) == shape, name
    if method == "klr":  # a classifier: predict is the most probable class, its laws are over classes_
        assert set(answers) - {k for k, v in answers.items() if isinstance(v, UnsupportedQuery)} == {
            "predict", "conditional_cdf", "predict_proba"}
        assert np.isin(answers["predict"], model.classes_).all()
    else:
        np.testing.assert_array_equal(answers["predict"], answers["conditional_expectation"])
        unsupported = [k for k, v in answers.items() if isinstance(v, UnsupportedQuery)]
        assert unsupported == [], unsupported
        W = answers["conditional_weights"]
        assert W.shape[0] == Q
        np.testing.assert_allclose(answers["total_mass"], W.sum(axis=1), rtol=0, atol=1e-12)
    proba = answers["predict_proba"]
    assert proba.shape == (Q, model.classes_.size)
    if method != "cme":  # CME's weights are signed and unnormalised, as fitted
        np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=0, atol=1e-12)


@pytest.mark.parametrize("method", list(METHODS))
def test_the_state_round_trips_bit_for_bit(method, fitted):
    model, X, _ = fitted[method]
    state = model.state()
    loaded = type(model).from_state(state)
    again = loaded.state()
    assert again["params"] == state["params"] and set(again["arrays"]) == set(state["arrays"])
    for name, array in state["arrays"].items():
        np.testing.assert_array_equal(again["arrays"][name], array, err_msg=name)
    query = (lambda m: m.predict_proba(X[:Q])) if method == "klr" else (lambda m: m.conditional_weights(X[:Q]))
    np.testing.assert_array_equal(query(loaded), query(model))


@pytest.mark.parametrize("method", list(METHODS))
def test_bad_input_is_refused_in_one_line(method, fitted):
    model, X, Y = fitted[method]
    cases = [
        (lambda: unfitted(method).fit(X, Y[:-1]), "rows"),
        (lambda: unfitted(method).set_params(reg=-1.0).fit(X, Y), "reg"),
        (lambda: model.predict(np.ones((2, X.shape[1] + 1))), "features"),
        (lambda: model.predict(np.full((2, X.shape[1]), np.nan)), "Xq"),
    ]
    for run, word in cases:
        with pytest.raises(ValueError) as error:
            run()
        message = str(error.value)
        assert "\n" not in message and word in message, message


def test_requests_are_checked_against_what_each_model_answers(fitted):
    """The pipeline's named requests go through the same surface: a klr model fitted on labels
    answers proba and the CDF of its labels (exactly the summed class probabilities), not a mean."""
    model, X, _ = fitted["klr"]
    with pytest.raises(ValueError, match="^function 'mean': a klr model answers proba or cdf only$"):
        model.prepare_requests({"mean": ("mean", None)})
    requests = model.prepare_requests({"proba": ("proba", None), "cdf:0.5": ("cdf", np.array([0.5]))})
    out = model.answer_requests(requests, X[:Q])
    np.testing.assert_array_equal(out["proba"], model.predict_proba(X[:Q]))
    np.testing.assert_allclose(out["cdf:0.5"][:, 0], model.predict_proba(X[:Q])[:, 0], rtol=0, atol=1e-15)
    jdl, Xj, _ = fitted["jdl"]
    requests = jdl.prepare_requests({"mean": ("mean", None), "q": ("quantile", LEVELS)})
    out = jdl.answer_requests(requests, Xj[:Q])
    np.testing.assert_allclose(out["mean"], jdl.conditional_expectation(Xj[:Q]), rtol=0, atol=1e-12)
    np.testing.assert_array_equal(out["q"], jdl.conditional_quantile(Xj[:Q], LEVELS))


@pytest.mark.parametrize("method", list(METHODS))
def test_both_bases_follow_the_basis_protocol(method, fitted):
    """Each basis answers what the estimators, the store and the model card read (``jdlcore.lowrank.basis.Basis``):
    features = raw @ coefficients, a JSON spec, a description, a positive smoothing scale and
    slice points inside the training range."""
    import json

    model, X, Y = fitted[method]
    for side, data in (("x", X), ("y", Y)):
        basis = getattr(model, f"basis_{side}_", None)
        if basis is None:  # KLR has no y basis: its y is a class label
            continue
        np.testing.assert_array_equal(basis.features(data[:5]), basis.raw(data[:5]) @ basis.coefficients)
        assert basis.features(data[:5]).shape == (5, basis.size) and basis.eigenvalues.shape == (basis.size,)
        assert json.loads(json.dumps(basis.spec())) == basis.spec() and basis.describe()
        assert all(basis.smoothing_scale(c) > 0 for c in range(basis.width))
        points = basis.slice_points(3)
        assert points.shape[1] == basis.width and points.shape[0] >= 1
        assert np.all(points >= data.min(axis=0) - 3 * data.std(axis=0))
        assert np.all(points <= data.max(axis=0) + 3 * data.std(axis=0))
    with pytest.raises(ValueError, match="query: 'nope' is not a query"):
        model.answers("nope")
