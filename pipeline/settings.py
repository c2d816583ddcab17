"""Each stage's settings, declared once: their defaults and rules, validated where a value enters.

``StageSettings``, ``TuneSettings``, ``FitSettings``, ``ScoreSettings`` and ``CompressSettings`` are
frozen pydantic models. The ``jdl`` command line builds its flags' defaults from them, the Prefect
flows their signatures, and a flow validates its parameters into one of them (``validated``) before
any work and passes it whole to its stages.

A violation raises one ``ValueError`` naming the parameter, the rule and the offending value, e.g.
``fit: parameter tol: must be in [0, 1) (got 2.0)``. The fit's options are not listed here: they are
the estimators' declarations (``jdlcore.models.registry.FIT_OPTIONS``), checked by the chosen
method's own rules, and the tune options are ``jdlcore.tuning.TuneOptions``' (``TUNE_PARAMETERS``). Path parameters
may hold environment variables (``${JDL_HOME}/model.zarr``, as in deploy/prefect.yaml); they are
expanded where the flow runs, and an unset variable is an error rather than a literal path. An
output path (``out``) is refused when the directory that would hold it cannot be written to.
"""
from __future__ import annotations

import contextlib
import math
import os
import re
import tempfile
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, StrictInt, ValidationError, create_model,
    field_validator,
)

from data_schemas.data import UNSEEN_RULES
from jdlcore.compression import LEARNING_RATE, N_INIT
from jdlcore.kernels import DEFAULT_KERNEL, LENGTHSCALE_KERNELS
from jdlcore.lowrank.cholesky import DEFAULT_TOL
from jdlcore.models.registry import FIT_OPTIONS, METHODS, estimator_class, method_options
from jdlcore.params import AutoOr, Numbers, ParameterError
from jdlcore.scaling import SCALINGS
from jdlcore.tuning import TUNE_PARAMETERS, TuneOptions, resolve_folds

from .evaluation import DEFAULT_COVERAGE, DEFAULT_LEVELS
from .fitting import make_estimator
from .scoring import parse_function
from .staging import CHUNK_SIZE
from .versions import DEFAULT_KEEP_VERSIONS, check_keep

__all__ = ["StageSettings", "TuneSettings", "FitSettings", "ScoreSettings", "CompressSettings", "validated",
           "expand_path", "writable_parent", "check_home"]

_UNSET = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?")


def expand_path(value: str) -> str:
    """``value`` with ~ and environment variables expanded; ``ValueError`` if a variable is unset."""
    expanded = os.path.expanduser(os.path.expandvars(value))
    missing = _UNSET.search(expanded)
    if missing:
        raise ValueError(f"environment variable {missing.group(1)} is not set (in {value!r})")
    if not expanded.strip():
        raise ValueError("must not be empty")
    return expanded


def writable_parent(path: str) -> str:
    """``path`` if the directory that will hold it (its nearest existing ancestor) can be written to,
    tried by creating and removing a temporary file there; else ``ValueError`` naming the directory."""
    parent = Path(path).absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise ValueError(f"{parent} is not a directory")
    try:
        with tempfile.TemporaryFile(dir=parent):
            pass
    except OSError as error:
        raise ValueError(f"directory {parent} is not writable ({error.strerror or error})") from None
    return path


def check_home() -> None:
    """Refuse a ``JDL_HOME`` (the deployments' data directory) that is not a writable directory."""
    home = os.environ.get("JDL_HOME")
    if home is None:
        return
    if not Path(home).is_dir():
        raise ValueError(f"JDL_HOME: {home} is not a directory")
    try:
        writable_parent(str(Path(home) / "probe"))
    except ValueError as error:
        raise ValueError(f"JDL_HOME: {error}") from None


def _scheduler(value: str | None) -> str | None:
    if value is None:
        return os.environ.get("JDL_SCHEDULER") or None
    if value in ("auto", "memory", "local") or "://" in value:
        return value
    raise ValueError(f"{value!r} is not auto, memory, local or an address like tcp://HOST:PORT")


def _meets(rule: Any) -> AfterValidator:
    """A validator of a declared rule (``jdlcore.params.Rule``), stated alone (``validated`` adds the
    name and the value)."""

    def check(value):
        if rule.violation(value) is not None:
            raise ValueError(rule.clause(value))
        return value

    return AfterValidator(check)


def _declared_type(rule: Any) -> Any:
    """The settings type of a declared rule (``jdlcore.params``): its kind (a ``Literal`` of its choices; a
    list of floats for ``Numbers``; "auto" or the kind for ``AutoOr``), None allowed where it is optional,
    checked by the rule itself (``_meets``)."""
    if isinstance(rule, Numbers):
        kind: Any = list[float]
    elif isinstance(rule, AutoOr):
        kind = Annotated[StrictInt | str, BeforeValidator(_number_in_text)]
    else:
        kind = Literal[rule.choices] if rule.choices else rule.kind  # type: ignore[valid-type]
    return Annotated[kind | None if rule.optional else kind, _meets(rule)]


def _number_in_text(value: Any) -> Any:
    """A command line's "3" as 3; any other value as it is (for the rule to judge)."""
    return int(value) if isinstance(value, str) and value.isdigit() else value


def _option_type(option) -> Any:
    """The settings type of a fit option: its kind (a ``Literal`` of its choices), or None (the method's default)."""
    kind = Literal[option.choices] if option.choices else option.kind  # type: ignore[valid-type]
    return kind | None


Path_ = Annotated[str, AfterValidator(expand_path)]
Out_ = Annotated[str, AfterValidator(expand_path), AfterValidator(writable_parent)]  # a store to write
Method = Literal[tuple(METHODS)]  # type: ignore[valid-type] - the registry's names
Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Scheduler = Annotated[str | None, AfterValidator(_scheduler)]
Scaling = Literal[SCALINGS]  # type: ignore[valid-type] - jdlcore.scaling's choices


def _lengthscale(value: float | list[float]) -> float | list[float]:
    values = value if isinstance(value, list) else [value]
    if not values or not all(math.isfinite(v) and v > 0 for v in values):
        raise ValueError("must be finite and > 0: one number, or one per feature")
    return value


Lengthscale = Annotated[float | list[float], AfterValidator(_lengthscale)]  # one, or one per feature


class _Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    def check(self) -> None:
        """Rules across parameters; raise ``ValueError`` "parameter NAME: RULE"."""


class StageSettings(_Settings):
    source: Path_
    out: Out_
    x: list[str] = Field(min_length=1)
    y: list[str] = []  # none: a batch of rows to score, without y
    categorical: list[str] = []  # x columns only: ``pipeline.staging.stage`` refuses others before it reads
    chunk_size: int = Field(CHUNK_SIZE, ge=1)
    drop_missing_y: bool = False  # rows with a missing y: refused (one error counting them) or dropped


class _TuneFields(_Settings):
    """The tuning's own fields; ``TuneSettings`` adds one field per tune option (``TUNE_PARAMETERS``)."""

    data: Path_
    out: Out_
    validation: Path_ | None = None
    scheduler: Scheduler = Field(None, validate_default=True)

    def options(self) -> TuneOptions:
        """The tune options given (``TuneOptions``; its rules across fields are checked here)."""
        return TuneOptions(**{name: getattr(self, name) for name in TUNE_PARAMETERS})

    def check(self) -> None:
        if self.validation is not None and os.path.abspath(self.validation) == os.path.abspath(self.data):
            raise ValueError(f"parameter validation: must differ from data (got {self.validation!r})")
        try:
            self.options()
        except ValueError as error:
            raise ValueError(f"parameter {error}") from None
        if self.validation is not None:
            resolve_folds(self.folds, 0, self.validation_fraction, held_out=True)


TuneSettings = create_model(
    "TuneSettings", __base__=_TuneFields, __doc__="The tuning's parameters: its own and the tune options.",
    **{name: (_declared_type(param.rule), getattr(TuneOptions(), name)) for name, param in TUNE_PARAMETERS.items()})


class _FitHyperparameters(_Settings):
    """The fit's own fields; ``FitSettings`` adds one field per fit option (``FIT_OPTIONS``), None
    meaning the method's default."""

    data: Path_
    out: Out_
    tuning: Path_ | None = None
    lengthscale_x: Lengthscale | None = None
    lengthscale_y: Lengthscale | None = None
    reg: float | None = None
    method: Method = "jdl"
    scaling: Scaling | None = None  # None: the tuning store's, else "robust"
    # None: the tuning store's, else gaussian
    kernel_x: Literal[LENGTHSCALE_KERNELS] | None = None  # type: ignore[valid-type]
    keep_versions: Annotated[int, AfterValidator(check_keep)] = DEFAULT_KEEP_VERSIONS
    scheduler: Scheduler = Field(None, validate_default=True)

    def check(self) -> None:
        with self._method_rules():
            options = method_options(self.method, self.fit_options())
        explicit = self.explicit()
        if explicit is not None:  # every rule of the method, across parameters too
            with self._method_rules():
                make_estimator(self.method, **explicit, kernel_x=self.kernel_x or DEFAULT_KERNEL, **options)

    @contextlib.contextmanager
    def _method_rules(self):
        """The method's errors ("NAME: RULE, got VALUE") as settings errors ("parameter NAME: RULE (got VALUE)")."""
        try:
            yield
        except ParameterError as error:
            if error.rule.choices and error.value in FIT_OPTIONS[error.name].choices:  # another method's choice
                raise ValueError(f"parameter {error.name}: {error.value!r} is not a choice of method {self.method}; "
                                 f"{error.rule.text}") from None
            raise ValueError(f"parameter {error.name}: {error.rule.text} (got {error.value!r})") from None
        except ValueError as error:
            raise ValueError(f"parameter {error}") from None

    def fit_options(self) -> dict[str, Any]:
        """The fit options that were given (None: the method's default)."""
        return {name: getattr(self, name) for name in FIT_OPTIONS if getattr(self, name) is not None}

    def explicit(self) -> dict[str, float | list[float]] | None:
        """The hyperparameters given directly, or None when they come from ``tuning``."""
        given = {"lengthscale_x": self.lengthscale_x, "lengthscale_y": self.lengthscale_y, "reg": self.reg}
        kernels = estimator_class(self.method).KERNELS
        for side in ("x", "y"):  # a lengthscale of a kernel the method does not have defaults to 1 (unused)
            name = f"lengthscale_{side}"
            if f"kernel_{side}" not in kernels and given[name] is None:
                given[name] = 1.0
        if all(v is not None for v in given.values()):
            return given
        if self.tuning is None:
            missing = [k for k, v in given.items() if v is None]
            raise ValueError(f"parameter {missing[0]}: give lengthscale_x, lengthscale_y and reg, or a tuning store")
        if any(v is not None for v in given.values()):
            raise ValueError("parameter tuning: give either a tuning store or all of lengthscale_x, lengthscale_y, "
                             "reg, not both")
        return None


FitSettings = create_model(
    "FitSettings", __base__=_FitHyperparameters, __doc__="The fit's parameters: its own and the methods' fit options.",
    **{name: (_option_type(option), None) for name, option in FIT_OPTIONS.items()})


class ScoreSettings(_Settings):
    model: Path_
    data: Path_
    out: Out_
    functions: list[str] = Field(["mean", "second_moment"], min_length=1)
    unseen: Literal[UNSEEN_RULES] = "refuse"  # type: ignore[valid-type] - data_schemas.data's rules
    scheduler: Scheduler = Field(None, validate_default=True)

    @field_validator("functions")
    @classmethod
    def _known(cls, functions: list[str]) -> list[str]:
        for spec in functions:
            parse_function(spec)
        if len(set(functions)) != len(functions):
            raise ValueError(f"functions must be distinct, got {functions}")
        return functions


class EvaluateSettings(_Settings):
    model: Path_
    data: Path_
    out: Out_
    levels: list[float] = Field(list(DEFAULT_LEVELS), min_length=1)  # of the pinball loss
    coverage: list[float] = Field(list(DEFAULT_COVERAGE), min_length=1)  # nominal, of central intervals
    unseen: Literal[UNSEEN_RULES] = "refuse"  # type: ignore[valid-type] - data_schemas.data's rules
    scheduler: Scheduler = Field(None, validate_default=True)

    @field_validator("levels", "coverage")
    @classmethod
    def _in_unit_interval(cls, values: list[float]) -> list[float]:
        if not all(0 < value < 1 for value in values) or len(set(values)) != len(values):
            raise ValueError(f"must be distinct numbers in (0, 1), got {values}")
        return sorted(values)


class CompressSettings(_Settings):
    data: Path_
    out: Out_
    m: int = Field(100, ge=1)
    method: Literal["ackip", "ackh", "jkip", "jkh", "random"] = "ackip"
    lengthscale_x: Positive | None = None
    lengthscale_y: Positive | None = None
    kernel_y: Literal["gaussian", "delta"] = "gaussian"
    reg: Positive | None = None
    seed: int = 0
    steps: int | None = Field(None, ge=0)
    optimizer: Literal["adam", "lbfgs"] = "adam"
    learning_rate: Positive = LEARNING_RATE
    n_init: int = Field(N_INIT, ge=1)
    amcmd_tol: float = Field(DEFAULT_TOL, gt=0, lt=1)
    scheduler: Scheduler = Field(None, validate_default=True)

    def check(self) -> None:
        if self.kernel_y == "delta" and self.lengthscale_y is not None:
            raise ValueError("parameter lengthscale_y: the delta kernel of a class label has no lengthscale")
        if os.path.abspath(self.out) == os.path.abspath(self.data):
            raise ValueError(f"parameter out: must differ from data (got {self.out!r})")


def validated(settings: type[_Settings], flow: str, **parameters) -> _Settings:
    """``settings(**parameters)`` after its ``check``, or one ``ValueError`` "flow: parameter NAME: RULE ..."."""
    try:
        result = settings(**parameters)
    except ValidationError as error:
        errors = error.errors()
        # a field of several types (a number, or a list of them) fails once per type: the deepest
        # location is the one that matched the value's shape; the type tags are left out of the name
        first = max((e for e in errors if e["loc"][:1] == errors[0]["loc"][:1]), key=lambda e: len(e["loc"]))
        name = ".".join(str(part) for k, part in enumerate(first["loc"]) if k == 0 or isinstance(part, int)) or "parameters"
        message = first["msg"].removeprefix("Value error, ")
        raise ValueError(f"{flow}: parameter {name}: {message} (got {first.get('input')!r})") from None
    try:
        result.check()
    except ValueError as error:
        raise ValueError(f"{flow}: {error}") from None
    return result
