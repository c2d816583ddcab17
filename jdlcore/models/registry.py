"""The registry of jdlcore's methods: ``METHODS`` maps each method's name to its estimator class.

Everything that lists methods reads it: the ``jdl`` command's ``--method`` choices and help, the
flows' settings, the model store's schema and its loader. Each class declares what the rest needs
(``jdlcore.models.estimator.Estimator``): its positivity rules (the first is what "auto" means), whether its
laws live on support atoms, whether it fits from chunked reductions, its bases and its state's
arrays. Adding a method means writing its class and adding it here.
"""
from __future__ import annotations

from typing import Any

from .cme import CME
from .estimator import Estimator
from .greedy import GreedyJDL
from .jdl import JDL
from .klr import KLR
from .polynomial import PolynomialJDL
from .psd_jdl import PSDJDL

__all__ = ["METHODS", "estimator_class", "method_of", "POSITIVITY_CHOICES"]

METHODS: dict[str, type[Estimator]] = {cls.method: cls for cls in (JDL, PolynomialJDL, CME, KLR, GreedyJDL, PSDJDL)}

# "auto" and every rule of every method, in registry order: what a --positivity flag may say
POSITIVITY_CHOICES: tuple[str, ...] = tuple(dict.fromkeys(
    ("auto",) + tuple(rule for cls in METHODS.values() for rule in cls.positivity_rules)))


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
