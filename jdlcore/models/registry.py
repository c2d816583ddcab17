"""The registry of jdlcore's methods: ``METHODS`` maps each method's name to its estimator class.

Everything that lists methods reads it: the ``jdl`` command's ``--method`` choices and help, the
flows' settings, the model store's schema and its loader. Each class declares what the rest needs
(``jdlcore.models.estimator.Estimator``): its parameters, its positivity rules (the first is what
"auto" means), whether its laws live on support atoms, whether it fits from chunked reductions, its
bases and its state's arrays. Adding a method means writing its class and adding it here.

``FIT_OPTIONS`` gathers the parameters the methods offer the pipeline (``Param.option``): each
becomes a ``jdl fit`` flag, a field of the fit settings and a parameter of the fit flow, and
``method_options`` gives a method the ones it declares.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .cme import CME
from .estimator import Estimator
from .greedy import GreedyJDL
from .jdl import JDL
from .klr import KLR
from .polynomial import PolynomialJDL
from .psd_jdl import PSDJDL

__all__ = ["METHODS", "estimator_class", "method_of", "FitOption", "FIT_OPTIONS",
           "method_options"]

METHODS: dict[str, type[Estimator]] = {cls.method: cls for cls in (JDL, PolynomialJDL, CME, KLR, GreedyJDL, PSDJDL)}

@dataclass(frozen=True)
class FitOption:
    """A parameter the pipeline offers for a fit, gathered from the methods that declare it.

    kind: float, int or str (what a command line parses); choices: the values a choice may take across
    the methods (for positivity, "auto" first: each method's own default, its first rule), else None;
    help: the declaration's meaning (the first method's); defaults: each declaring method's default.
    """

    name: str
    kind: type
    choices: tuple[str, ...] | None
    help: str
    defaults: dict[str, Any]

    def describe(self) -> str:
        """One line for a command line's help: the meaning, and the default of each method that has it."""
        values = set(map(repr, self.defaults.values()))
        if values == {"None"}:
            default = ""
        elif len(values) == 1:
            default = f"; default {next(iter(self.defaults.values()))}"
        else:
            default = "; default " + ", ".join(f"{m} {v}" for m, v in self.defaults.items() if v is not None)
        auto = "auto: the method's default; " if self.choices and self.choices[0] == "auto" else ""
        methods = "" if len(self.defaults) == len(METHODS) else f" [{', '.join(self.defaults)}]"
        return f"{auto}{self.help}{methods}{default}"


def _fit_options() -> dict[str, FitOption]:
    options: dict[str, FitOption] = {}
    for method, cls in METHODS.items():
        defaults = cls.defaults()
        for name, param in cls.parameters.items():
            if not param.option:
                continue
            known = options.get(name)
            if known is not None and known.kind is not param.rule.kind:
                raise TypeError(f"{cls.__name__}.{name}: declared as {param.rule.kind.__name__}, "
                                f"other methods declare {known.kind.__name__}")
            choices = param.rule.choices
            if choices is not None:
                first = known.choices if known else ("auto",) if name == "positivity" else ()
                choices = tuple(dict.fromkeys(first + choices))
            options[name] = FitOption(name, param.rule.kind, choices, known.help if known else param.help,
                                      {**(known.defaults if known else {}), method: defaults[name]})
    return options


FIT_OPTIONS: dict[str, FitOption] = _fit_options()


def method_options(method: str, options: dict[str, Any]) -> dict[str, Any]:
    """The fit options ``options`` given for ``method`` (None values dropped: the method's default, as is
    positivity "auto"), each checked against the method's declaration: ``ParameterError`` for a value
    that breaks its rule, ``ValueError`` for an option ``method`` does not have."""
    cls = estimator_class(method)
    given = {}
    for name, value in options.items():
        if value is None or (name == "positivity" and value == "auto"):
            continue
        if name not in cls.parameters or not cls.parameters[name].option:
            having = FIT_OPTIONS[name].defaults if name in FIT_OPTIONS else {}
            raise ValueError(f"{name}: method {method} has no such option"
                             + (f" (only {', '.join(having)})" if having else ""))
        cls.parameters[name].check(name, value)
        given[name] = value
    return given


def estimator_class(method: str) -> type[Estimator]:
    """The estimator class registered as ``method``; ``ValueError`` naming the known ones."""
    if method not in METHODS:
        raise ValueError(f"method: unknown value {method!r}; choose one of {', '.join(map(repr, METHODS))}")
    return METHODS[method]


def method_of(model: Any) -> str:
    """The registry name of a fitted estimator (its exact class); ``ValueError`` for an unregistered one."""
    for name, cls in METHODS.items():
        if type(model) is cls:
            return name
    raise ValueError(f"model: {type(model).__name__} is not a registered method; known estimators: "
                     f"{', '.join(cls.__name__ for cls in METHODS.values())}")
