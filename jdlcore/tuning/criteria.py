"""The validation criteria of a tuning: each candidate is scored by a criterion (model, X_val, Y_val) ->
float, the mean of a loss over the validation rows (``jdlcore.conditional.losses``), lower is better."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..conditional.losses import ClippedLogisticLoss, CRPSLoss, LogLoss, PinballLoss, SecondMomentLoss, pinball_losses

__all__ = ["CRITERIA", "resolve_criterion", "OnYScale"]

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


class OnYScale:
    """A criterion ``score`` (crps or pinball) of a model of a standardised y, r = (y - location) / scale,
    read on y's scale: the loss of the law of y the model answers with (the law of r moved by each row's
    location and scale and clipped to y's range, ``jdlcore.conditional.location_scale``) at
    y = location + scale r. ``law_of``: validation x rows (q, d) -> their ``LocationScale``."""

    scalar_y = True

    def __init__(self, score: Callable, law_of: Callable[[np.ndarray], Any]):
        if not self.applies(score):
            raise ValueError(f"criterion: {getattr(score, 'name', score)!r} is not read on y's scale by a location "
                             "and a scale per row; standardising y needs crps or pinball")
        self.score, self.law_of, self.name = score, law_of, score.name

    @staticmethod
    def applies(score: Any) -> bool:
        """Whether ``score`` is one of the criteria this reads on y's scale (crps, pinball)."""
        return isinstance(score, (CRPSLoss, PinballLoss))

    def __call__(self, model: Any, X: np.ndarray, Y: np.ndarray) -> float:
        on = self.law_of(X)
        y = on.location + on.scale * np.asarray(Y, dtype=np.float64).reshape(len(X), -1)[:, 0]
        if isinstance(self.score, CRPSLoss):
            return float(np.mean(model.crps(X, y, on=on)))
        levels = self.score.levels
        quantiles = model.answer_requests({"q": ("quantile", levels)}, X, on=on)["q"]
        return float(np.mean(pinball_losses(quantiles, y, levels)))
