"""The ``jdl`` command line. Errors print as one line on stderr with a non-zero exit code.

``stage``, ``tune``, ``fit``, ``score``, ``compress``, ``reproduce`` and ``demo`` run jdl's flows
(``flows.pipelines``). By default they run in this process, with no server. With ``--prefect``, or
when a Prefect API is configured (PREFECT_API_URL), each run is a recorded Prefect flow run
(``flows.jdl_flows``; a temporary local API when none is configured). Either way a command re-run
with the same inputs reuses its output store instead of recomputing it, and a store from other
inputs is replaced. Parameters are validated before any work starts.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import typing
from typing import Callable

from . import reports
from .console import console_logging, progress_bar

_SCHEDULER_HELP = ("where to run: auto (default: an embedded Dask cluster above 200,000 rows), memory, local "
                   "(embedded Dask cluster) or tcp://HOST:PORT; environment variable JDL_SCHEDULER")
_PREFECT_HELP = ("record the run in Prefect: on PREFECT_API_URL, or a temporary local Prefect API when none is "
                 "configured (slower to start). Default: run in this process, with no server, unless a Prefect "
                 "API is configured (PREFECT_API_URL in the environment or the active Prefect profile)")
_REUSE_NOTE = ("If OUT already holds the result of the same inputs it is reused; a store of the same kind made "
               "from other inputs is replaced; anything else at OUT is refused.")


def _columns(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError("name at least one column")
    return names


def _floats(text: str) -> list[float]:
    try:
        return [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def _lengthscale(text: str) -> float | list[float]:
    """One lengthscale, or a comma-separated list of one per feature."""
    values = _floats(text)
    if not values:
        raise argparse.ArgumentTypeError(f"expected a number or comma-separated numbers, got {text!r}")
    return values[0] if len(values) == 1 and "," not in text else values


@contextlib.contextmanager
def _session(args: argparse.Namespace, title: str):
    """Console and progress bar for one command; yields whether its runs are recorded in Prefect."""
    from flows.runner import prefect_requested

    prefect = prefect_requested(args.prefect)
    console_logging(verbose=args.verbose, prefect=prefect)
    with progress_bar(title):
        yield prefect


def _execute(args: argparse.Namespace, name: str, title: str | None = None, **parameters):
    """Run the flow ``name`` in-process or, if asked or configured, as a recorded Prefect run."""
    from flows.runner import execute

    with _session(args, title or name) as prefect:
        return execute(name, prefect=prefect, **parameters)


def _run_flow(args: argparse.Namespace, name: str, settings_class, **parameters):
    """Validate first (nothing starts for bad arguments), then run the flow. Its parameters are the
    arguments named as the settings' fields (the flags' destinations), then ``parameters``. The values
    are validated once in each process: by the flow before its first stage, and here too when the run is
    recorded in Prefect (whose API would otherwise start first)."""
    from flows.pipelines import given
    from flows.runner import prefect_requested
    from pipeline.settings import validated

    parameters = {**{field: getattr(args, field) for field in settings_class.model_fields if hasattr(args, field)},
                  **parameters}
    if prefect_requested(args.prefect):  # before a Prefect API starts; in this process the flow validates first
        validated(settings_class, name, **given(parameters))
    return _execute(args, name, **parameters)


def _reused(result: dict) -> str:
    return " (reused: inputs unchanged)" if result["reused"] else ""


def _flow_command(name: str, settings: str, report: Callable[[argparse.Namespace, dict], str],
                  **renamed: str) -> Callable[[argparse.Namespace], int]:
    """The command that runs the flow ``name`` (its settings: the class ``settings`` of ``pipeline.settings``;
    ``renamed``: settings fields read from differently named arguments) and prints ``report(args, result)``."""

    def run(args: argparse.Namespace) -> int:
        import pipeline.settings

        result = _run_flow(args, name, getattr(pipeline.settings, settings),
                           **{field: getattr(args, argument) for field, argument in renamed.items()})
        lines = report(args, result).split("\n")
        print("\n".join([lines[0] + _reused(result)] + lines[1:]))
        return 0

    return run


_stage = _flow_command("stage", "StageSettings", reports.staged)
_tune = _flow_command("tune", "TuneSettings", reports.tuned)
_fit = _flow_command("fit", "FitSettings", reports.fitted)
_score = _flow_command("score", "ScoreSettings", reports.scored, functions="function")
_evaluate = _flow_command("evaluate", "EvaluateSettings", reports.evaluated)
_compress = _flow_command("compress", "CompressSettings", reports.compressed)


def _reproduce(args: argparse.Namespace) -> int:
    from experiments.report import structural_checks
    from experiments.runner import load, plan

    if args.max_n < 10:
        raise ValueError(f"max-n: must be >= 10, got {args.max_n}")
    if not plan(args.experiment, args.quick, args.max_n, args.min_n, args.part):
        raise ValueError(f"max-n, min-n: [{args.min_n}, {args.max_n}] leaves no cell of the {args.experiment} "
                         "experiment" + (f" ({', '.join(args.part)})" if args.part else ""))
    result = _execute(args, "reproduce", f"reproduce {args.experiment}", kind=args.experiment, out=args.out,
                      quick=args.quick, report=args.report, max_n=args.max_n, min_n=args.min_n, parts=args.part,
                      resume=args.resume)
    print(f"{result['cells']} cells -> {', '.join(result['datasets'])}; report {result['report']}")
    failed = 0
    for name, (holds, evidence) in structural_checks(load(args.out)).items():
        print(f"{'PASS' if holds else 'FAIL'}  {name} ({evidence})")
        failed += not holds
    return 1 if failed else 0


def _inspect(args: argparse.Namespace) -> int:
    from pipeline.model_card import model_card, write_plots

    print(model_card(args.model))
    if args.plots:
        for path in write_plots(args.model, args.plots):
            print(f"wrote {path}")
    return 0


def _versions(args: argparse.Namespace) -> int:
    """List a model store's versions (* the current one), or make ``--use VERSION`` current."""
    from pathlib import Path

    from pipeline.locks import store_lock
    from pipeline.model_store import load_model
    from pipeline.versions import being_read, current_version, list_versions, published, use_version, versions_dir

    target = Path(args.model)
    kept = list_versions(target)
    if not kept:
        state = "is not a versioned model store (the next jdl fit on it makes it one)" if target.exists() else \
            "does not exist"
        raise ValueError(f"model: {target} {state}")
    if args.use is not None:
        with store_lock(target):  # not while a fit publishes
            if args.use in kept:
                load_model(versions_dir(target) / args.use)  # checked whole before it becomes current
            previous = use_version(target, args.use)
        print(f"{target} -> version {args.use} (was {previous})")
        return 0
    current = current_version(target)
    for name in kept:
        when, tag = published(name)
        notes = ["current"] * (name == current) + ["being read"] * being_read(target, name)
        origin = "written before versioning" if tag == "unversioned" else f"run key {tag}"
        print(f"{'*' if name == current else ' '} {name}  published {when:%Y-%m-%d %H:%M:%S} UTC, {origin}"
              + (f" ({', '.join(notes)})" if notes else ""))
    return 0


def _serve(args: argparse.Namespace) -> int:
    from flows.serve import serve_deployments

    serve_deployments(args.config, limit=args.limit)
    return 0


def _demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    if args.rows < 100:
        raise ValueError(f"rows: the demo needs at least 100 rows, got {args.rows}")
    with _session(args, "demo") as prefect:
        report = run_demo(n=args.rows, workdir=args.workdir, seed=args.seed, scheduler=args.scheduler,
                          prefect=prefect)
    print("\n".join(report.lines()))
    return 0


def _add_scheduler(parser: argparse.ArgumentParser, default: str | None = None) -> None:
    parser.add_argument("--scheduler", default=default or os.environ.get("JDL_SCHEDULER", "auto"), help=_SCHEDULER_HELP)
    _add_prefect(parser)


def _add_prefect(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prefect", action="store_true", help=_PREFECT_HELP)


class _Parser(argparse.ArgumentParser):
    """An argument parser that may add some of its arguments only when it is used (``deferred``: functions
    of the parser, run before it parses or shows help). The arguments read from the method registry and
    the defaults read from a stage's settings use it, since importing jdlcore (and SciPy with it) takes
    most of a second that every other command (and ``jdl --help``) would pay."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.deferred: list = []

    def _complete(self) -> None:
        while self.deferred:
            self.deferred.pop(0)(self)

    def parse_known_args(self, args=None, namespace=None):
        self._complete()
        return super().parse_known_args(args, namespace)

    def format_help(self) -> str:
        self._complete()
        return super().format_help()


def _settings_flags(parser: _Parser, settings: str) -> Callable[..., argparse.Action]:
    """A function adding flags whose defaults are the fields of the same names of ``settings`` (a class of
    ``pipeline.settings``, where each default is declared): read when the command is used, and written
    into the help wherever it says {default}; a field declared as a ``Literal`` has its choices written
    wherever the help says {choices}."""
    actions: list[argparse.Action] = []

    def add(*flags: str, help: str, **kwargs) -> argparse.Action:
        actions.append(parser.add_argument(*flags, help=help, **kwargs))
        return actions[-1]

    def read_defaults(parser: argparse.ArgumentParser) -> None:
        import pipeline.settings

        fields = getattr(pipeline.settings, settings).model_fields
        for action in actions:
            field = fields[action.dest]
            action.default = field.get_default(call_default_factory=True)
            literal = next((kind for kind in (field.annotation, *typing.get_args(field.annotation))
                            if typing.get_origin(kind) is typing.Literal), None)  # a choice, or None
            if literal is not None:  # checked by the settings, with their error
                action.help = action.help.replace("{choices}", ", ".join(map(str, typing.get_args(literal))))
            action.help = action.help.replace("{default}", str(action.default))

    parser.deferred.append(read_defaults)
    return add


def _add_method_options(parser: argparse.ArgumentParser) -> None:
    """``--method`` and a flag per fit option the methods declare (``jdlcore.models.registry.FIT_OPTIONS``),
    each defaulting to the method's own value."""
    from jdlcore.models.registry import FIT_OPTIONS, METHODS
    from pipeline.settings import FitSettings

    methods = "; ".join(f"{name}: {cls.summary}" for name, cls in METHODS.items())
    default = FitSettings.model_fields["method"].default
    parser.add_argument("--method", default=default, help=f"{methods} (default {default})")
    for name, option in FIT_OPTIONS.items():
        metavar = "{" + ",".join(option.choices) + "}" if option.choices else name.upper()
        parser.add_argument(f"--{name.replace('_', '-')}", type=option.kind, metavar=metavar, help=option.describe())


def _add_scaling(settings: str) -> Callable[[argparse.ArgumentParser], None]:
    """``--scaling`` (``jdlcore.scaling.SCALINGS``): how the kernels standardise their inputs, with the
    default of ``settings`` (a class of ``pipeline.settings``; None: the tuning store's, else robust)."""

    def add(parser: argparse.ArgumentParser) -> None:
        import pipeline.settings
        from jdlcore.scaling import SCALINGS

        default = getattr(pipeline.settings, settings).model_fields["scaling"].default
        parser.add_argument("--scaling", choices=SCALINGS, default=default,
                            help="robust: standardise each feature by its median and interquartile range, so "
                                 "lengthscales are in standard units; none: the raw columns (default: "
                                 + (f"{default})" if default else "the tuning store's, else robust)"))

    return add


def _add_unseen(parser: argparse.ArgumentParser) -> None:
    """``--unseen`` (``data_schemas.data.UNSEEN_RULES``): what scoring does with a level the model lacks."""
    from data_schemas.data import UNSEEN_RULES
    from pipeline.settings import ScoreSettings

    default = ScoreSettings.model_fields["unseen"].default
    parser.add_argument("--unseen", choices=UNSEEN_RULES, default=default,
                        help=f"a categorical level the model was not fitted on: refuse the batch (default {default}), "
                             "or let it match no level (the row is then equally far from every training row along "
                             "that column)")


def _add_demo(commands) -> None:
    demo = commands.add_parser("demo", help="stage, tune, fit and score a synthetic heteroscedastic data set on an "
                                            "embedded Dask cluster, and report")
    demo.add_argument("--rows", type=int, default=100_000, help="training rows (default 100000)")
    demo.add_argument("--workdir", default="jdl-demo", help="where the data and stores go (default ./jdl-demo)")
    demo.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    _add_scheduler(demo, "local")
    demo.set_defaults(run=_demo)


def _add_stage(commands) -> None:
    stage = commands.add_parser("stage", help="validate a CSV/Parquet/NumPy/NetCDF/zarr table into a zarr data store",
                                epilog=_REUSE_NOTE)
    setting = _settings_flags(stage, "StageSettings")
    stage.add_argument("source", help="source file (.csv, .parquet, .npy, .npz, .nc, .zarr)")
    stage.add_argument("--x", type=_columns, required=True, help="comma-separated input columns (numbers for .npy)")
    stage.add_argument("--y", type=_columns, help="comma-separated output columns; leave it out to stage "
                       "a batch of new rows to score (jdl score reads it; tune, fit and evaluate need y)")
    stage.add_argument("--out", required=True, help="the zarr store to write")
    setting("--categorical", type=_columns,
            help="comma-separated x columns holding categories (integer-coded ones, say); text x columns, and "
                 "those mixing text with a few distinct numbers (K, 1, 2, 3), are categorical anyway. They are stored as codes with their levels, and the x kernel "
                 "compares them as equal or not")
    setting("--chunk-size", type=int, help="rows per chunk (default {default})")
    setting("--drop-missing-y", action="store_true",
            help="leave out the rows whose y is missing (NaN or empty); without it such rows are refused, with one "
                 "error counting them")
    _add_prefect(stage)
    stage.set_defaults(run=_stage)


def _add_tune(commands) -> None:
    tune = commands.add_parser("tune", help="score a grid of lengthscales and reg on a staged store (a validation "
                                            "criterion on 4:1 splits of a subsample, or on a validation store)",
                               epilog=_REUSE_NOTE)
    tune.add_argument("data", help="staged data store (from jdl stage)")
    tune.add_argument("--out", required=True, help="the tuning store to write")
    tune.add_argument("--validation", help="a staged store of held-out rows to score on (default: seeded fifths of "
                                           "the subsample, --folds)")
    tune.deferred.append(_add_tune_options)
    _add_scheduler(tune)
    tune.set_defaults(run=_tune)


def _add_tune_options(parser: argparse.ArgumentParser) -> None:
    """A flag per tune option (``jdlcore.tuning.TUNE_PARAMETERS``): its meaning, its default and its kind
    from the declaration; the values are checked by the settings, with their errors."""
    from jdlcore.params import Flag, Numbers
    from jdlcore.tuning import TUNE_PARAMETERS, TuneOptions

    defaults = TuneOptions()
    for name, param in TUNE_PARAMETERS.items():
        rule, default = param.rule, getattr(defaults, name)
        help = param.help.replace("%", "%%")
        if isinstance(rule, Flag):  # argparse states the default
            kwargs: dict = {"action": argparse.BooleanOptionalAction}
        else:
            kwargs = ({"type": _floats, "metavar": "X,..."} if isinstance(rule, Numbers)
                      else {"metavar": "{" + ",".join(rule.choices) + "}"} if rule.choices
                      else {"type": rule.kind} if rule.kind in (int, float) else {})
            help += "" if default is None else f" (default {default})"
        parser.add_argument(f"--{name.replace('_', '-')}", default=default, help=help, **kwargs)


def _add_fit(commands) -> None:
    fit = commands.add_parser("fit", help="fit a model (JDL or a baseline/variant, --method) on a staged data store "
                                          "and write a model store",
                              epilog=_REUSE_NOTE)
    setting = _settings_flags(fit, "FitSettings")
    fit.add_argument("data", help="staged data store (from jdl stage)")
    fit.add_argument("--out", required=True, help="the model store to write")
    fit.add_argument("--tuning", help="a tuning store to take the best hyperparameters from (tuned first if missing)")
    fit.add_argument("--lengthscale-x", type=_lengthscale, help="the x kernel's lengthscale, or one per x feature "
                                                                "(comma-separated), in the scaling's units")
    fit.add_argument("--lengthscale-y", type=_lengthscale, help="the Gaussian y kernel's lengthscale (or one per y "
                                                                "feature)")
    setting("--kernel-x", help="the x kernel's family: {choices} (default: the tuning store's, else gaussian)")
    fit.add_argument("--reg", type=float, help="regularisation lambda")
    setting("--keep-versions", type=int, help="model versions kept at OUT, the new one included (default {default}; "
                                              "a version being read is kept until it is free)")
    fit.deferred.append(_add_scaling("FitSettings"))
    fit.deferred.append(_add_method_options)
    _add_scheduler(fit)
    fit.set_defaults(run=_fit)


def _add_score(commands) -> None:
    score = commands.add_parser("score", help="score a staged data store with a model store", epilog=_REUSE_NOTE)
    score.add_argument("model", help="model store (from jdl fit)")
    score.add_argument("data", help="staged data store")
    score.add_argument("--out", required=True, help="the scores store to write")
    score.add_argument("--function", action="append", default=[], required=True,
                       help="mean | second_moment | cdf:t1,t2,... | quantile:l1,l2,... (repeatable)")
    score.deferred.append(_add_unseen)
    _add_scheduler(score)
    score.set_defaults(run=_score)


def _add_evaluate(commands) -> None:
    evaluate = commands.add_parser("evaluate", help="judge a model's conditional laws on held-out rows of a staged "
                                                    "store with y (a scalar y): CRPS, pinball loss, interval "
                                                    "coverage, RMSE and the PIT, with a calibration figure",
                                   epilog=_REUSE_NOTE)
    setting = _settings_flags(evaluate, "EvaluateSettings")
    evaluate.add_argument("model", help="model store (from jdl fit)")
    evaluate.add_argument("data", help="staged data store with y (rows the model was not fitted on)")
    evaluate.add_argument("--out", required=True, help="the evaluation store to write; the calibration figure goes "
                                                       "beside it (report.zarr -> report.png)")
    setting("--levels", type=_floats, help="comma-separated levels of the pinball loss (default 0.05, 0.1, ..., 0.95)")
    setting("--coverage", type=_floats, help="comma-separated nominal coverages of the central intervals "
                                             "(default {default})")
    evaluate.deferred.append(_add_unseen)
    _add_scheduler(evaluate)
    evaluate.set_defaults(run=_evaluate)


def _add_compress(commands) -> None:
    compress = commands.add_parser("compress", help="compress a staged data store to m points whose conditional "
                                                    "mean embedding matches the data's (ACKIP and friends); the "
                                                    "result is a staged data store", epilog=_REUSE_NOTE)
    setting = _settings_flags(compress, "CompressSettings")
    compress.add_argument("data", help="staged data store (from jdl stage)")
    compress.add_argument("--out", required=True, help="the compressed set to write (a staged data store)")
    setting("--m", type=int, help="points in the compressed set (default {default})")
    setting("--method", help="ackip (default: average conditional kernel inducing points) | ackh (herding) | "
                             "jkip | jkh (joint kernel) | random (a uniform subsample)")
    compress.add_argument("--lengthscale-x", type=float, help="Gaussian kernel lengthscale on x (default: median "
                                                              "heuristic)")
    compress.add_argument("--lengthscale-y", type=float, help="Gaussian kernel lengthscale on y (default: median "
                                                              "heuristic)")
    setting("--kernel-y", help="gaussian (default) | delta (y is a class label)")
    compress.add_argument("--reg", type=float, help="the compressed KCME's lambda (default: chosen by validation "
                          "for KCMEs of m points)")
    setting("--seed", type=int, help="seed of the starts and the steps (default {default})")
    compress.add_argument("--steps", type=int, help="Adam steps or L-BFGS iterations (default 500 for the set, 50 "
                                                    "per point for herding)")
    setting("--optimizer", help="adam (default) | lbfgs")
    setting("--learning-rate", type=float, help="Adam's, in column standard deviations (default {default})")
    setting("--n-init", type=int, help="random starts compared (default {default})")
    setting("--amcmd-tol", type=float,
            help="pivoted-Cholesky tolerance of the data's KCME in the reported AMCMD (default {default})")
    _add_scheduler(compress)
    compress.set_defaults(run=_compress)


def _add_reproduce(commands) -> None:
    reproduce = commands.add_parser("reproduce", help="run the paper's experiments (Sec. 5): results as xarray "
                                                      "datasets, PNG figures and a markdown report")
    reproduce.add_argument("experiment", choices=["moments", "classification"],
                           help="moments: conditional second moments on simulated data; classification: tail "
                                "events of real daily returns (needs the reproduce extra)")
    reproduce.add_argument("--out", required=True, help="directory for the result datasets (zarr) and the report")
    reproduce.add_argument("--quick", action="store_true", help="the smoke run: few cells, a few minutes")
    reproduce.add_argument("--report", help="the markdown report to (re)write (default OUT/results.md)")
    reproduce.add_argument("--max-n", type=int, default=1_000_000, help="leave out larger n (default 1e6; 10000000 "
                                                                        "adds the chunked 1e7 point)")
    reproduce.add_argument("--min-n", type=int, default=0, help="leave out smaller n (results in OUT are kept)")
    reproduce.add_argument("--part", action="append", help="only this case (moments: gaussian, uniform, cauchy) or "
                           "event level (classification: 0.01, 0.05); repeat for several (default all)")
    reproduce.add_argument("--resume", action="store_true", help="skip the cells whose results are already in OUT "
                           "(a stopped run keeps every finished cell)")
    _add_prefect(reproduce)
    reproduce.set_defaults(run=_reproduce)


def _add_model_commands(commands) -> None:
    """``inspect``, ``versions`` and ``serve``."""
    inspect = commands.add_parser("inspect", help="print a model store's card; optionally write diagnostic plots")
    inspect.add_argument("model", help="model store")
    inspect.add_argument("--plots", metavar="DIR", help="write residual_trace.png, conditional_density.png and "
                                                        "(for tuned models) validation_surface.png to DIR")
    inspect.set_defaults(run=_inspect)

    versions = commands.add_parser("versions", help="list a model store's versions, or make an earlier one current")
    versions.add_argument("model", help="model store (from jdl fit)")
    versions.add_argument("--use", metavar="VERSION", help="make VERSION the current version (checked first; "
                                                           "readers keep the version they opened)")
    versions.set_defaults(run=_versions)

    serve = commands.add_parser("serve", help="serve the deployments of a prefect.yaml (schedules included) from "
                                              "this process; needs PREFECT_API_URL")
    serve.add_argument("--config", default=os.path.join("deploy", "prefect.yaml"),
                       help="the Prefect project file (default deploy/prefect.yaml)")
    serve.add_argument("--limit", type=int, default=None, help="most flow runs at once (default unlimited)")
    serve.set_defaults(run=_serve)


def build_parser() -> argparse.ArgumentParser:
    """The ``jdl`` parser: one sub-command per flow, plus inspect, versions and serve. The flags of a stage's
    settings take their defaults from ``pipeline.settings`` when the command is used."""
    parser = _Parser(prog="jdl", description="Adaptive joint distribution learning at scale.")
    parser.add_argument("-v", "--verbose", action="store_true", help="show the runs' log lines on the console")
    commands = parser.add_subparsers(dest="command", required=True)
    for add in (_add_demo, _add_stage, _add_tune, _add_fit, _add_score, _add_evaluate, _add_compress, _add_reproduce,
                _add_model_commands):
        add(commands)
    return parser


@contextlib.contextmanager
def _terminate_as_interrupt():
    """SIGTERM ends the command as Ctrl-C does (``KeyboardInterrupt``), so that every ``with`` block
    unwinds: the embedded Dask cluster and a temporary Prefect API are shut down and a store being
    written is removed (``pipeline.atomic``). The previous handler is restored on exit."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: list[str] | None = None) -> int:
    """Run one ``jdl`` command; returns 0, 2 for bad input or a failed run (one line on stderr), or 130
    when stopped by Ctrl-C or SIGTERM (the output is left absent, or as the previous run wrote it)."""
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")  # read by Prefect when a command loads it
    args = build_parser().parse_args(argv)  # before the numerical stack loads: --help stays quick
    from pipeline.locks import LockTimeout

    with _terminate_as_interrupt():
        try:
            return args.run(args)
        except (ValueError, RuntimeError, LockTimeout) as error:
            print(f"jdl {args.command}: error: {error}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print(f"jdl {args.command}: stopped; the output is absent or as the previous run left it",
                  file=sys.stderr)
            return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
