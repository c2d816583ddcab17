"""The validation criteria of a tuning: each candidate is scored by a criterion (model, X_val, Y_val) ->
float, the mean of a loss over the validation rows (``jdlcore.conditional.losses``), lower is better."""
from __future__ import annotations

from typing import Callable

from ..conditional.losses import ClippedLogisticLoss, CRPSLoss, LogLoss, PinballLoss, SecondMomentLoss

__all__ = ["CRITERIA", "resolve_criterion"]

CRITERIA = ("auto", "second_moment", "crps", "pinball:LEVELS", "log", "logistic")


def resolve_criterion(criterion: str | Callable, threshold: float | None = None, y_width: int | None = None
                      ) -> Callable:
    """A validation criterion (model, X_val, Y_val) -> float from its name or a callable: "second_moment"
    (the paper's loss (40)), "crps" (the exact CRPS of the conditional laws), "pinball:0.05,0.5,0.95"
    (the mean pinball loss at those levels), "log" (the negative log density of the conditional laws
    smoothed by the y kernel, ``LogLoss``), "logistic" (the clipped logistic loss of the event
    Y <= threshold) or "auto" (the default: "crps" for a scalar y, a proper score of the whole law,
    else "second_moment"). ``y_width``: the data's number of y features, checked against the
    criteria that need a scalar y (and needed by "auto"). ``ValueError`` naming the criterion and the rule."""
    if callable(criterion):
        return criterion
    name, _, levels = str(criterion).partition(":")
    if name == "auto" and not levels:
        if y_width is None:
            raise ValueError("criterion: 'auto' needs the number of y features")
        name = "crps" if y_width == 1 else "second_moment"
    if name == "second_moment" and not levels:
        score = SecondMomentLoss()
    elif name == "crps" and not levels:
        score = CRPSLoss()
    elif name == "log" and not levels:
        score = LogLoss()
    elif name == "pinball":
        try:
            score = PinballLoss([float(level) for level in levels.split(",") if level.strip()])
        except ValueError as error:
            raise ValueError(f"criterion: {criterion!r}: {error}") from None
    elif name == "logistic" and not levels:
        if threshold is None:
            raise ValueError("threshold: the logistic criterion needs the event threshold (Y <= threshold)")
        score = ClippedLogisticLoss(threshold)
    else:
        raise ValueError(f"criterion: unknown value {criterion!r}; choose one of {', '.join(CRITERIA)} or a callable")
    if y_width is not None and y_width != 1 and score.scalar_y:
        raise ValueError(f"criterion: {criterion} needs a scalar y, the data has {y_width} y features")
    return score
