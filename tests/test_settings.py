"""Each stage's settings are declared once (``pipeline.settings``): the command line's flags and the
Prefect flows' signatures read their defaults there, no default is written twice in the tree, and a bad
value is refused with the same line from the command line, a flow or Python."""
import ast
import functools
import inspect
import re
from pathlib import Path

import pytest

from pipeline.settings import CompressSettings, FitSettings, ScoreSettings, StageSettings, TuneSettings

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = {"stage": StageSettings, "tune": TuneSettings, "fit": FitSettings, "score": ScoreSettings,
            "compress": CompressSettings}
REQUIRED = {"stage": ["s.csv", "--x", "a", "--out", "o"], "tune": ["d", "--out", "o"],
            "fit": ["d", "--out", "o"], "score": ["m", "d", "--out", "o", "--function", "mean"],
            "compress": ["d", "--out", "o"]}
# the command line's own: the scheduler defaults to JDL_SCHEDULER or "auto" there (None in the settings
# also reads JDL_SCHEDULER, at validation); a flag without a default (None) leaves the value to the settings
COMMAND_LINE_ONLY = {"scheduler"}


def _parsed_defaults(command: str) -> dict:
    from jdl.cli import build_parser

    return vars(build_parser().parse_args([command, *REQUIRED[command]]))


@pytest.mark.parametrize("command", COMMANDS)
def test_every_flag_defaults_to_its_setting(command):
    """A flag that names a setting is unset (None: the settings decide) or has the settings' default."""
    settings = COMMANDS[command]
    parsed = _parsed_defaults(command)
    checked = 0
    for name, field in settings.model_fields.items():
        if name in parsed and name not in COMMAND_LINE_ONLY and not field.is_required() and parsed[name] is not None:
            assert parsed[name] == field.get_default(call_default_factory=True), name
            checked += 1
    assert command in ("fit", "score") or checked >= 2  # the test reads real flags


def _calls(tree: ast.AST, name: str) -> list[ast.Call]:
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute) and node.func.attr == name]


def test_the_parser_source_writes_no_default_of_a_setting():
    """In jdl/cli.py no ``add_argument`` of a setting's flag passes a ``default=``: the flags of a stage's
    settings are added by ``_settings_flags``, which reads them from ``pipeline.settings``."""
    functions = {node.name: node for node in ast.parse((ROOT / "jdl" / "cli.py").read_text()).body
                 if isinstance(node, ast.FunctionDef)}
    offending = []
    for command, settings in COMMANDS.items():
        for call in _calls(functions[f"_add_{command}"], "add_argument"):
            flags = [arg.value for arg in call.args if isinstance(arg, ast.Constant) and isinstance(arg.value, str)]
            dest = flags[0].lstrip("-").replace("-", "_") if flags else None
            defaults = [kw for kw in call.keywords if kw.arg == "default"]
            if dest in set(settings.model_fields) - COMMAND_LINE_ONLY and defaults:
                offending.append(f"{command} {flags[0]} = {ast.unparse(defaults[0].value)}")
    assert not offending, offending


def test_the_flows_take_their_signatures_from_the_settings():
    """Each stage flow is written as ``def NAME_flow(**parameters)``: its parameters and defaults are its
    settings' (``flows.signatures.settings_signature``), none written in the flow's source."""
    pytest.importorskip("prefect")
    from flows import jdl_flows

    tree = ast.parse((ROOT / "flows" / "jdl_flows.py").read_text())
    defined = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    for command, settings in COMMANDS.items():
        node = defined[f"{command}_flow"]
        assert not node.args.args and not node.args.kwonlyargs and node.args.kwarg is not None, command
        signature = inspect.signature(getattr(jdl_flows, f"{command}_flow").fn).parameters
        assert list(signature) == list(settings.model_fields) or set(signature) == set(settings.model_fields)
        for name, field in settings.model_fields.items():
            expected = inspect.Parameter.empty if field.is_required() else field.get_default(call_default_factory=True)
            assert signature[name].default == expected, (command, name)


# each default that was written in several places, and the one place it is declared now
ONE_DEFINITION = {r"\b(20_000|20000)\b": "jdlcore/tuning/constants.py", r"\b(65_536|65536)\b": "pipeline/staging.py",
                  r"(?<![\w.])0\.01\b": "jdlcore/compression/compress.py"}
SETTINGS_USES = {"max_rows", "tune_rows", "chunk_size", "learning_rate"}


@pytest.mark.parametrize("pattern, home", ONE_DEFINITION.items())
def test_a_default_is_written_once_in_the_product(pattern, home):
    """The code of jdlcore, data_schemas, pipeline, flows and jdl (comments and docstrings aside) writes the
    tuning's subsample size, the staging's chunk size and the compression's learning rate once each,
    as a constant of the module that uses it; every other default refers to it."""
    found = [where for where, written in numeric_constants() if re.fullmatch(pattern, written)]
    assert len(found) == 1 and found[0].startswith(home), found


@functools.lru_cache(maxsize=1)
def numeric_constants() -> tuple[tuple[str, str], ...]:
    """("path:line", the constant as written) of every numeric constant in the product's code."""
    constants = []
    for package in ("jdlcore", "data_schemas", "pipeline", "flows", "jdl"):
        for path in sorted((ROOT / package).rglob("*.py")):
            source = path.read_text()
            lines = [line.encode() for line in source.splitlines()]  # offsets are in UTF-8 bytes
            for node in ast.walk(ast.parse(source)):
                if isinstance(node, ast.Constant) and not isinstance(node.value, (str, bytes)):
                    written = (lines[node.lineno - 1][node.col_offset:node.end_col_offset].decode()
                               if node.end_lineno == node.lineno else ast.get_source_segment(source, node) or "")
                    constants.append((f"{path.relative_to(ROOT)}:{node.lineno}", written))
    return tuple(constants)


def test_a_default_is_read_by_every_entry(tmp_path):
    """The demo, train-and-score and the staging and tuning functions default to the settings' values."""
    import pipeline.staging
    from flows.pipelines import train_and_score
    from jdlcore.tuning import TUNING_ROWS, TuneOptions

    parameters = inspect.signature(train_and_score).parameters
    assert parameters["tune_rows"].default == TuneSettings.model_fields["max_rows"].default
    assert parameters["chunk_size"].default == StageSettings.model_fields["chunk_size"].default
    assert TuneSettings.model_fields["max_rows"].default == TuneOptions().max_rows == TUNING_ROWS
    assert inspect.signature(pipeline.staging.stage).parameters["chunk_size"].default == pipeline.staging.CHUNK_SIZE


def test_a_bad_value_gets_the_same_line_from_every_entry(tmp_path, capsys):
    """``max_rows=5`` through the command line, the in-process flow and the recorded flow's function."""
    from flows import pipelines
    from jdl.cli import main

    expected = "tune: parameter max_rows: must be an integer >= 10 (got 5)"
    data, out = str(tmp_path / "d.zarr"), str(tmp_path / "t.zarr")
    assert main(["tune", data, "--out", out, "--max-rows", "5"]) == 2
    assert capsys.readouterr().err.strip() == f"jdl tune: error: {expected}"
    with pytest.raises(ValueError) as raised:
        pipelines.tune(data=data, out=out, max_rows=5)
    assert str(raised.value) == expected
    pytest.importorskip("prefect")
    from flows.jdl_flows import tune_flow

    with pytest.raises(ValueError) as raised:
        tune_flow.fn(data=data, out=out, max_rows=5)
    assert str(raised.value) == expected
    assert not Path(out).exists()


def test_search_rows_reaches_the_tuning_and_its_default_keeps_the_run_key(tmp_path, capsys):
    """``jdl tune --search-rows``: recorded in the tuning store; given at its default it is the same run
    (reused), another value is another run (replaced)."""
    import numpy as np

    from jdl.cli import main
    from pipeline.tuning import load_tuning

    rng = np.random.default_rng(0)
    x = rng.uniform(-2, 2, (600, 2))
    np.savez(tmp_path / "t.npz", a=x[:, 0], b=x[:, 1], c=np.sin(x[:, 0]) + 0.2 * rng.standard_normal(600))
    data, out = str(tmp_path / "d.zarr"), str(tmp_path / "t.zarr")
    assert main(["stage", str(tmp_path / "t.npz"), "--x", "a,b", "--y", "c", "--out", data]) == 0
    tune = ["tune", data, "--out", out, "--lengthscales-x", "1", "--lengthscales-y", "1", "--regs", "1e-4", "--folds", "1"]
    assert main(tune) == 0
    assert load_tuning(out).attrs["search_rows"] == TuneSettings.model_fields["search_rows"].default
    capsys.readouterr()
    assert main(tune + ["--search-rows", str(TuneSettings.model_fields["search_rows"].default)]) == 0
    assert "(reused: inputs unchanged)" in capsys.readouterr().out
    assert main(tune + ["--search-rows", "200"]) == 0
    assert "reused" not in capsys.readouterr().out and load_tuning(out).attrs["search_rows"] == 200
