"""Flow signatures read from the stages' settings (``pipeline.settings``), so that a Prefect flow's
parameters, their defaults and its deployment schema are the settings' own, declared once."""
from __future__ import annotations

import functools
import inspect
from typing import Any, Callable

from pydantic import BaseModel

__all__ = ["settings_signature"]


def settings_signature(settings: type[BaseModel], keyword_only: tuple[str, ...] = ()) -> Callable:
    """A decorator that gives a function of ``**parameters`` the signature of ``settings``' fields, in
    their order, each with its annotation and default (a field without one is required); the fields
    named in ``keyword_only`` come last, keyword-only. Prefect reads this signature for the flow's
    parameters and its deployment schema. The function is called with the arguments given, by name
    (positional ones named by the signature); the settings supply the rest."""

    def parameter(name: str, kind: Any) -> inspect.Parameter:
        field = settings.model_fields[name]
        default = inspect.Parameter.empty if field.is_required() else field.get_default(call_default_factory=True)
        return inspect.Parameter(name, kind, default=default, annotation=field.annotation)

    def decorate(function: Callable) -> Callable:
        names = [name for name in settings.model_fields if name not in keyword_only]
        signature = inspect.signature(function).replace(
            parameters=[parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for name in names]
            + [parameter(name, inspect.Parameter.KEYWORD_ONLY) for name in keyword_only])

        @functools.wraps(function)
        def call(*args: Any, **kwargs: Any) -> Any:
            return function(**signature.bind(*args, **kwargs).arguments)

        call.__signature__ = signature
        return call

    return decorate
