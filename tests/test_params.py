"""Hyperparameter declarations (jdlcore.params): the rules against a brute-force reading of their
clauses, every method's declarations against its constructor, and the pipeline's fit options (CLI
flags, flow settings, the fit flow's signature and Prefect schema) derived from them."""
import inspect
import math

import numpy as np
import pytest

from jdlcore import JDL, METHODS
from jdlcore.models.registry import FIT_OPTIONS, method_options
from jdlcore.params import Choice, Flag, Integer, Number, Param, ParameterError
from jdlcore.validation import TOL_RULE

PROBES = [None, True, False, -2, -1, 0, 1, 2, 7, 8, 9, 0.5, 1.0, -0.0, 1e-3, math.inf, -math.inf, math.nan, "a",
          "random", [1.0], np.int64(3), np.float64(0.25), np.array(2.0), np.array([1.0, 2.0])]


def _number(value):
    """The reading of "a finite real number" by hand: not None/bool/str/sequence, float() finite."""
    if value is None or isinstance(value, (bool, np.bool_, str, list)) or np.ndim(value) != 0:
        return None
    x = float(value)
    return x if math.isfinite(x) else None


@pytest.mark.parametrize("rule, meets, text", [
    (Number(0.0, 1.0, high_open=True), lambda v: (x := _number(v)) is not None and 0 <= x < 1, "must be in [0, 1)"),
    (Number(low=0), lambda v: (x := _number(v)) is not None and x >= 0, "must be finite and >= 0"),
    (Number(low=0, low_open=True), lambda v: (x := _number(v)) is not None and x > 0, "must be finite and > 0"),
    (Number(optional=True), lambda v: v is None or _number(v) is not None, "must be None or a finite number"),
    (Integer(), lambda v: isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 1,
     "must be an integer >= 1"),
    (Integer(low=0, optional=True), lambda v: v is None or (isinstance(v, (int, np.integer))
                                                            and not isinstance(v, bool) and v >= 0),
     "must be an integer >= 0 or None"),
    (Integer(1, 8), lambda v: isinstance(v, (int, np.integer)) and not isinstance(v, bool) and 1 <= v <= 8,
     "must be an integer in [1, 8]"),
    (Choice(("greedy", "random")), lambda v: isinstance(v, str) and v in ("greedy", "random"),
     "must be one of 'greedy', 'random'"),
    (Flag(), lambda v: isinstance(v, (bool, np.bool_)), "must be True or False"),
])
def test_each_rule_says_what_it_checks(rule, meets, text):
    assert rule.text == text
    for value in PROBES:
        assert (rule.violation(value) is None) == meets(value), value
        if not meets(value):
            with pytest.raises(ParameterError) as raised:
                Param(rule, "").check("p", value)
            assert raised.value.name == "p" and raised.value.rule is rule and raised.value.value is value
            assert str(raised.value).startswith("p: ") and "\n" not in str(raised.value)


def test_the_one_tol_rule_and_choice_messages():
    assert TOL_RULE == "must be in [0, 1)"
    with pytest.raises(ValueError, match=r"^pivoting: unknown value 'best'; choose one of 'greedy', 'random'$"):
        Param(Choice(("greedy", "random")), "").check("pivoting", "best")


BAD = "not-a-value"  # every rule refuses a string that is not one of its choices


@pytest.mark.parametrize("cls", list(METHODS.values()), ids=lambda cls: cls.__name__)
def test_declarations_match_the_constructor_and_refuse_bad_values(cls):
    defaults = cls.defaults()
    assert list(defaults) == list(cls.parameters)
    for name, param in cls.parameters.items():
        assert param.help and "\n" not in param.help, name
        assert param.rule.violation(defaults[name]) is None, (name, defaults[name])  # every default is valid
    if "positivity" in cls.parameters:  # "auto" (the method's first rule) is the default
        assert defaults["positivity"] == cls.positivity_rules[0]
    kernels = {name: None for name in cls.KERNELS}
    for name in cls.parameters:
        model = cls(**kernels)
        setattr(model, name, BAD)
        with pytest.raises(ValueError, match=rf"^{name}: ") as raised:
            model.check_params()
        assert "\n" not in str(raised.value)
    cls(**kernels).check_params()  # the defaults pass together


def test_fit_options_gather_the_declared_options_of_every_method():
    expected = {}
    for method, cls in METHODS.items():
        for name, param in cls.parameters.items():
            if param.option:
                expected.setdefault(name, {})[method] = cls.defaults()[name]
    assert {name: option.defaults for name, option in FIT_OPTIONS.items()} == expected
    assert set(FIT_OPTIONS) == {"tol", "max_rank", "pivoting", "seed", "constraints", "positivity", "support_size",
                                "degree", "threshold"}
    assert FIT_OPTIONS["positivity"].choices[0] == "auto"
    for method, cls in METHODS.items():  # each method's choices are among the option's
        for name, param in cls.parameters.items():
            if param.option and param.rule.choices:
                assert set(param.rule.choices) <= set(FIT_OPTIONS[name].choices)
    assert FIT_OPTIONS["constraints"].defaults == {"jdl": "positivity", "jpdl": "positivity", "cme": "none"}
    assert "default jdl positivity, jpdl positivity, cme none" in FIT_OPTIONS["constraints"].describe()


def test_method_options_keep_the_methods_own_and_refuse_the_rest():
    assert method_options("jdl", {"tol": 0.01, "seed": None, "positivity": "auto"}) == {"tol": 0.01}
    assert method_options("cme", {"positivity": "auto", "constraints": "normalization"}) == {
        "constraints": "normalization"}
    with pytest.raises(ValueError, match=r"^degree: method jdl has no such option \(only jpdl\)$"):
        method_options("jdl", {"degree": 3})
    with pytest.raises(ValueError, match=r"^tol: method jpdl has no such option \(only jdl, cme, klr, greedy, psd\)$"):
        method_options("jpdl", {"tol": 0.01})
    with pytest.raises(ParameterError, match=r"^positivity: unknown value 'sos'"):
        method_options("jdl", {"positivity": "sos"})
    with pytest.raises(ValueError, match="method: unknown value 'nope'"):
        method_options("nope", {})


def test_the_cli_settings_and_fit_flow_offer_exactly_the_fit_options():
    from jdl.cli import build_parser
    from pipeline.settings import FitSettings

    parser = build_parser()
    fit = parser.parse_args(["fit", "d.zarr", "--out", "m.zarr"])
    assert all(getattr(fit, name) is None for name in FIT_OPTIONS)  # None: the method's default
    given = parser.parse_args(["fit", "d.zarr", "--out", "m.zarr", "--max-rank", "40", "--tol", "0.01",
                               "--positivity", "clip"])
    assert (given.max_rank, given.tol, given.positivity) == (40, 0.01, "clip")
    assert set(FIT_OPTIONS) <= set(FitSettings.model_fields)
    assert set(FitSettings.model_fields) - set(FIT_OPTIONS) == {"data", "out", "tuning", "lengthscale_x",
                                                                 "lengthscale_y", "reg", "method", "scaling", "kernel_x",
                                                                 "keep_versions", "scheduler"}

    pytest.importorskip("prefect")
    from flows.jdl_flows import fit_flow

    signature = inspect.signature(fit_flow.fn).parameters
    assert all(signature[name].kind is inspect.Parameter.KEYWORD_ONLY and signature[name].default is None
               for name in FIT_OPTIONS)
    assert not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.values())
    assert set(FIT_OPTIONS) <= set(fit_flow.parameters.properties)  # the Prefect deployment schema
    assert fit_flow.parameters.properties["positivity"]["anyOf"][0]["enum"] == list(FIT_OPTIONS["positivity"].choices)


def test_a_default_given_explicitly_is_the_same_fit(tmp_path, rng):
    """The fit's run key holds the estimator's parameters, so spelling out a default reuses the model."""
    from flows import pipelines
    from pipeline.staging import stage

    x = rng.standard_normal(300)
    path = tmp_path / "t.npz"
    np.savez(path, a=x, b=x + 0.3 * rng.standard_normal(300))
    data = str(stage(path, tmp_path / "d.zarr", x=["a"], y=["b"]))
    hyper = dict(data=data, out=str(tmp_path / "m.zarr"), lengthscale_x=0.5, lengthscale_y=0.5, reg=1e-4,
                 scheduler="memory")
    assert not pipelines.fit(**hyper)["reused"]
    assert pipelines.fit(**hyper, tol=JDL.defaults()["tol"], positivity="auto", constraints="positivity",
                         seed=0)["reused"]
    assert not pipelines.fit(**hyper, tol=1e-2)["reused"]
