"""Hyperparameter declarations: each parameter's rule and meaning, stated once.

An estimator declares its parameters as ``{name: Param}`` (``Estimator.parameters``); its
``check_params`` applies the rules, and the pipeline reads the same declarations to build the
``jdl fit`` flags, the flow settings and the fit flow's signature. A rule knows

* whether a value meets it (``violation(value)``: None, or the clause that it broke),
* its value kind for a command line or a settings schema (``kind``: float, int, str or bool, and
  ``choices`` for a choice),

so the message a user sees is the same wherever the value entered: ``"tol: must be in [0, 1), got 2.0"``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Param", "Rule", "Number", "Numbers", "Integer", "Choice", "AutoOr", "Flag", "ParameterError"]


class ParameterError(ValueError):
    """A hyperparameter that breaks its rule: ``name``, the ``rule`` (a clause such as "must be in [0, 1)")
    and the offending ``value``; its message is "NAME: CLAUSE, got VALUE" (a choice: "NAME: unknown
    value VALUE; choose one of ...")."""

    def __init__(self, name: str, rule: "Rule", value: Any):
        self.name, self.rule, self.value = name, rule, value
        super().__init__(f"{name}: {rule.message(value)}")


class Rule:
    """What a value of one parameter must be (subclasses state it)."""

    kind: type = object
    choices: tuple[str, ...] | None = None
    optional: bool = False

    @property
    def text(self) -> str:  # pragma: no cover - every rule states itself
        raise NotImplementedError

    def violation(self, value: Any) -> str | None:
        """None when ``value`` meets the rule (None itself does when the rule is ``optional``), else ``text``."""
        if value is None:
            return None if self.optional else self.text
        return None if self._meets(value) else self.text

    def _meets(self, value: Any) -> bool:  # pragma: no cover - every rule defines it
        raise NotImplementedError

    def clause(self, value: Any) -> str:
        """What ``value`` breaks, without the value: ``text`` unless a rule says more."""
        return self.text

    def message(self, value: Any) -> str:
        """The clause after "NAME: " in the error for ``value``."""
        return f"{self.clause(value)}, got {value!r}"


def _is_bool(value: Any) -> bool:
    return isinstance(value, (bool, np.bool_))


@dataclass(frozen=True)
class Number(Rule):
    """A finite real number (not a bool), optionally bounded: ``low`` <= (or < when ``low_open``) value
    <= (or < when ``high_open``) ``high``."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    optional: bool = False
    kind = float

    @property
    def text(self) -> str:
        if self.low is not None and self.high is not None:
            clause = (f"must be in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}"
                      f"{')' if self.high_open else ']'}")
        elif self.low is not None:
            clause = f"must be finite and {'>' if self.low_open else '>='} {self.low:g}"
        elif self.high is not None:
            clause = f"must be finite and {'<' if self.high_open else '<='} {self.high:g}"
        else:
            return "must be None or a finite number" if self.optional else "must be a finite number"
        return clause + (" or None" if self.optional else "")

    def _meets(self, value: Any) -> bool:
        if _is_bool(value):
            return False
        try:
            number = float(value)
        except (TypeError, ValueError):
            return False
        if not math.isfinite(number) or np.ndim(value) != 0:
            return False
        if self.low is not None and (number <= self.low if self.low_open else number < self.low):
            return False
        return self.high is None or (number < self.high if self.high_open else number <= self.high)


@dataclass(frozen=True)
class Integer(Rule):
    """An integer (a Python or NumPy int, not a bool) >= ``low`` and, when given, <= ``high``."""

    low: int = 1
    high: int | None = None
    optional: bool = False
    kind = int

    @property
    def text(self) -> str:
        bound = f" in [{self.low}, {self.high}]" if self.high is not None else f" >= {self.low}"
        return f"must be an integer{bound}" + (" or None" if self.optional else "")

    def _meets(self, value: Any) -> bool:
        if _is_bool(value) or not isinstance(value, (int, np.integer)):
            return False
        return value >= self.low and (self.high is None or value <= self.high)


@dataclass(frozen=True)
class Choice(Rule):
    """One of the strings ``options`` (or None, where ``optional``)."""

    options: tuple[str, ...]
    optional: bool = False
    kind = str

    @property
    def choices(self) -> tuple[str, ...]:  # type: ignore[override]
        return self.options

    @property
    def text(self) -> str:
        return f"must be one of {', '.join(map(repr, self.options))}"

    def _meets(self, value: Any) -> bool:
        return isinstance(value, str) and value in self.options

    def message(self, value: Any) -> str:
        return f"unknown value {value!r}; choose one of {', '.join(map(repr, self.options))}"


@dataclass(frozen=True)
class Numbers(Rule):
    """A non-empty sequence (list, tuple or 1-d array) of numbers, each meeting ``each`` (a ``Number``)."""

    each: Number
    optional: bool = False
    kind = list

    @property
    def text(self) -> str:
        clause = self.each.text.removeprefix("must be ")
        return f"must be one or more numbers, each {clause}" + (", or None" if self.optional else "")

    def _meets(self, value: Any) -> bool:
        if isinstance(value, (str, bytes)) or np.ndim(value) != 1:
            return False
        return len(value) > 0 and all(self.each.violation(v) is None for v in value)


@dataclass(frozen=True)
class AutoOr(Rule):
    """The word "auto" (decided from the data), or a value meeting ``rule``."""

    rule: Rule
    kind = str  # as a command line gives it: the settings read a number in it

    @property
    def text(self) -> str:
        return f"must be 'auto' or {self.rule.text.removeprefix('must be ')}"

    def _meets(self, value: Any) -> bool:
        return (isinstance(value, str) and value == "auto") or self.rule.violation(value) is None


@dataclass(frozen=True)
class Flag(Rule):
    """True or False."""

    kind = bool

    @property
    def text(self) -> str:
        return "must be True or False"

    def _meets(self, value: Any) -> bool:
        return _is_bool(value)


@dataclass(frozen=True)
class Param:
    """One hyperparameter: its ``rule``, what it means (``help``, one line) and whether the pipeline offers
    it as a fit option (``option``: a ``jdl fit --NAME`` flag, a field of the fit settings and a
    parameter of the fit flow). Its default is the estimator constructor's."""

    rule: Rule
    help: str
    option: bool = False

    def check(self, name: str, value: Any) -> None:
        """``ParameterError`` unless ``value`` meets the rule."""
        if self.rule.violation(value) is not None:
            raise ParameterError(name, self.rule, value)
