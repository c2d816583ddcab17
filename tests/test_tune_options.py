"""The tune options (``jdlcore.tuning.TuneOptions``) are declared once: the settings, the ``jdl tune``
flags, the tune flow and the tuning store's record are theirs; a bad value gets the rule's one line;
the x kernel's family goes through ``jdl tune`` and ``jdl fit`` as through ``jdlcore.tune``."""
import json
from pathlib import Path

import numpy as np
import pytest

from jdlcore import JDL, GaussianKernel, LaplaceKernel, Matern52Kernel
from jdlcore.params import ParameterError
from jdlcore.tuning import TUNE_PARAMETERS, TuneOptions, tune

# a small search: one fold, the columns alone, one reg and one lengthscale per side (no per-feature search)
SMALL = dict(folds=1, summaries="none", regs=[1e-4], lengthscales_x=[0.8], lengthscales_y=[0.5], search=False)


def _flags(options: dict) -> list[str]:
    """``options`` as ``jdl tune`` flags."""
    flags = []
    for name, value in options.items():
        flag = f"--{name.replace('_', '-')}"
        if isinstance(value, bool):
            flags.append(flag if value else f"--no-{name.replace('_', '-')}")
        else:
            flags += [flag, ",".join(map(str, value)) if isinstance(value, list) else str(value)]
    return flags


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    """A staged table of 600 rows (x: a, b; y: t whose law depends on a), its arrays (X, y)."""
    from jdl.cli import main

    tmp = tmp_path_factory.mktemp("tune-options")
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (600, 2))
    y = np.abs(X[:, 0]) + 0.3 * rng.standard_normal(600)
    np.savez(tmp / "t.npz", a=X[:, 0], b=X[:, 1], t=y)
    assert main(["stage", str(tmp / "t.npz"), "--x", "a,b", "--y", "t", "--out", str(tmp / "d.zarr")]) == 0
    return tmp, X, y


def test_every_tune_option_is_a_setting_a_flag_a_flow_parameter_and_recorded(staged):
    """Each field of ``TuneOptions`` is a field of the tune settings with its default, a ``jdl tune`` flag
    that defaults to it and states its meaning, a parameter of the tune flow, and an attribute of the
    tuning store (tol, constraints, scaling and the x kernel as the tuning ran: jdl's where left out)."""
    from jdl.cli import build_parser
    from pipeline.settings import TuneSettings
    from pipeline.tuning import load_tuning, tune_store

    defaults = TuneOptions()
    assert set(TUNE_PARAMETERS) <= set(TuneSettings.model_fields)
    assert set(TuneSettings.model_fields) - set(TUNE_PARAMETERS) == {"data", "out", "validation", "scheduler"}
    parser = build_parser()
    parsed = parser.parse_args(["tune", "d.zarr", "--out", "t.zarr"])
    tune_parser = next(action for action in parser._subparsers._group_actions[0].choices.items()
                       if action[0] == "tune")[1]
    helps = {action.dest: action.help for action in tune_parser._actions}
    for name, param in TUNE_PARAMETERS.items():
        assert TuneSettings.model_fields[name].default == getattr(defaults, name), name
        assert getattr(parsed, name) == getattr(defaults, name), name
        assert helps[name].startswith(param.help.replace("%", "%%")[:40]), name
    pytest.importorskip("prefect")
    from flows.jdl_flows import tune_flow

    assert set(TUNE_PARAMETERS) <= set(tune_flow.parameters.properties)
    tmp, _, _ = staged
    attrs = load_tuning(tune_store(tmp / "d.zarr", tmp / "record.zarr", **SMALL)).attrs
    settled = TuneOptions(**SMALL).replace(tol=JDL().tol, constraints=JDL().constraints, scaling="robust",
                                           kernel_x="gaussian", folds=1).record()
    assert {name: attrs[name] for name in TUNE_PARAMETERS if name != "criterion"} == \
        {name: value for name, value in settled.items() if name != "criterion"}
    assert attrs["criterion"] == "crps"  # "auto" as it resolved for a scalar y


@pytest.mark.parametrize("name, value, clause", [
    ("regs", [], "must be one or more numbers, each finite and > 0"),
    ("lengthscales_x", [1.0, -1.0], "must be one or more numbers, each finite and > 0"),
    ("folds", 0, "must be 'auto' or an integer >= 1"),
    ("kernel_x", "delta", "unknown value 'delta'; choose one of 'gaussian', 'laplace', 'matern32', 'matern52'"),
    ("criterion", "pinball:2", "levels"),
    ("search_rows", 10, "must be an integer >= 100"),
    ("search", 1, "must be True or False"),
    ("validation_fraction", 1.0, "must be in (0, 1)"),
])
def test_a_bad_option_gets_its_rule(name, value, clause):
    """A value that breaks its rule: one ``ParameterError`` naming the option, its rule and the value, from
    ``TuneOptions`` and through ``jdlcore.tune`` alike (before any work)."""
    with pytest.raises(ParameterError, match=f"^{name}: ") as raised:
        TuneOptions(**{name: value})
    assert clause in str(raised.value) and repr(value) in str(raised.value)
    X = np.zeros((10, 1))
    with pytest.raises(ParameterError, match=f"^{name}: "):
        tune(X, X, **{name: value})


def test_options_the_tuning_does_not_have_and_rules_across_options():
    with pytest.raises(TypeError, match=r"^unknown tune option 'lengthscale_x'; the options are lengthscales_x, "):
        tune(np.zeros((10, 1)), np.zeros((10, 1)), lengthscale_x=[1.0])
    with pytest.raises(ValueError, match=r"^threshold: the criterion logistic scores the event y <= threshold"):
        TuneOptions(criterion="logistic")
    assert TuneOptions(criterion="logistic", threshold=0.5).threshold == 0.5


def test_the_estimator_keeps_what_the_options_leave(staged):
    """tol, constraints, scaling and the x kernel's family are the estimator's where the options leave
    them (None), the options' where given; the result records what the tuning ran with."""
    _, X, y = staged
    kept = tune(X, y, estimator=JDL(tol=1e-4, kernel_x=LaplaceKernel(1.0)), refit=False, **SMALL)
    assert (kept.model.tol, type(kept.model.kernel_x), kept.options.tol, kept.options.kernel_x) == \
        (1e-4, LaplaceKernel, 1e-4, "laplace")
    given = tune(X, y, estimator=JDL(tol=1e-4, kernel_x=LaplaceKernel(1.0)), tol=1e-3, kernel_x="matern52",
                 refit=False, **SMALL)
    assert (given.model.tol, type(given.model.kernel_x), given.options.kernel_x) == (1e-3, Matern52Kernel, "matern52")


def test_the_x_kernel_family_goes_through_tune_and_fit(staged, capsys):
    """``jdl tune --kernel-x laplace`` tunes the Laplace x kernel (another validation score than the
    Gaussian's), records it, and ``jdl fit --tuning`` fits it; ``jdlcore.tune(kernel_x="laplace")`` on the
    same rows scores the same and answers as the stored model. A fit that names another family than its
    tuning store's is refused in one line; a fit given its lengthscales takes any family."""
    from jdl.cli import main
    from pipeline.model_store import load_model
    from pipeline.tuning import load_tuning

    tmp, X, y = staged
    data = str(tmp / "d.zarr")
    scores = {}
    for family in ("gaussian", "laplace"):
        assert main(["tune", data, "--out", str(tmp / f"{family}.zarr"), "--kernel-x", family, *_flags(SMALL)]) == 0
        tuning = load_tuning(tmp / f"{family}.zarr")
        assert tuning.attrs["kernel_x"] == family
        scores[family] = json.loads(tuning.attrs["best"])["score"]
    assert abs(scores["laplace"] - scores["gaussian"]) > 1e-6 * abs(scores["gaussian"])
    model_path = str(tmp / "laplace-model.zarr")
    assert main(["fit", data, "--tuning", str(tmp / "laplace.zarr"), "--out", model_path]) == 0
    stored = load_model(model_path)
    assert isinstance(stored.law_.kernel_x, LaplaceKernel) and isinstance(stored.law_.kernel_y, GaussianKernel)
    result = tune(X, y, kernel_x="laplace", **SMALL)
    assert result.best["score"] == pytest.approx(scores["laplace"], rel=1e-12)
    levels = np.arange(1, 100) / 100
    np.testing.assert_allclose(result.model.conditional_quantile(X, levels), stored.conditional_quantile(X, levels),
                               rtol=1e-9, atol=1e-9)
    capsys.readouterr()
    assert main(["fit", data, "--tuning", str(tmp / "laplace.zarr"), "--kernel-x", "gaussian",
                 "--out", str(tmp / "refused.zarr")]) == 2
    assert capsys.readouterr().err.strip() == (
        "jdl fit: error: kernel_x: the tuning store was tuned with the laplace x kernel, and its lengthscales are "
        "that family's; fit with kernel_x 'laplace' or leave it out (got 'gaussian')")
    assert not Path(tmp / "refused.zarr").exists()
    assert main(["fit", data, "--kernel-x", "matern52", "--lengthscale-x", "1", "--lengthscale-y", "0.5",
                 "--reg", "1e-4", "--out", str(tmp / "matern.zarr")]) == 0
    assert isinstance(load_model(tmp / "matern.zarr").law_.kernel_x, Matern52Kernel)


def test_logistic_tunes_on_the_command_line_with_a_threshold(staged):
    """``jdl tune --criterion logistic --threshold T`` scores the clipped logistic loss of y <= T."""
    from jdl.cli import main
    from pipeline.tuning import load_tuning

    tmp, _, _ = staged
    out = tmp / "logistic.zarr"
    assert main(["tune", str(tmp / "d.zarr"), "--out", str(out), "--criterion", "logistic", "--threshold", "1.0",
                 *_flags(SMALL)]) == 0
    attrs = load_tuning(out).attrs
    assert attrs["criterion"].startswith("logistic") and attrs["threshold"] == 1.0
