"""The command line's default model as an estimator: a ``ConditionalModel`` that tunes before it fits.

``jdl tune`` + ``jdl fit --tuning`` choose a law's lengthscales and reg and the view of x (the
missing-value rule, the boosted summaries, y standardised by them), then fit on all the rows.
``TunedModel.fit`` does the same on arrays through ``jdlcore.tune``, so scikit-learn's ``clone`` and
``cross_val_score`` tune it afresh on each fold. It lives beside the tuning, not in ``models``, because
the tuning builds ``ConditionalModel``s: the model layer stays below the tuning layer.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..features.summaries import DEFAULT_SUMMARIES
from ..features.view import XView
from ..models.conditional_model import ConditionalModel, comparing_categories
from ..models.estimator import Estimator
from .tune import tune

__all__ = ["TunedModel"]


class TunedModel(ConditionalModel):
    """``law`` (an unfitted ``JDL``; default ``JDL()``) tuned as ``jdl tune`` tunes it, seeded by its
    ``seed``: its lengthscales and reg and the view of x (``summaries``: "auto", "boosted",
    "standardised" or "none", as ``jdl tune --summaries``), then fitted on all the rows. The law's kernel
    families, factorisation settings and constraints are kept. ``categorical``: the positions of the
    category-code columns of X. The fitted model is a ``ConditionalModel`` in every respect (its fitted
    attributes, queries and ``state()``)."""

    PARAMETERS: dict[str, Any] = {**ConditionalModel.PARAMETERS, "summaries": DEFAULT_SUMMARIES}

    def __init__(self, law: Estimator | None = None, *, categorical: tuple[int, ...] = (),
                 summaries: str = DEFAULT_SUMMARIES):
        super().__init__(law, categorical=categorical)
        self.summaries = summaries

    def _fitted_parts(self, law: Estimator, kernel: Any, categorical: list[int], X: np.ndarray, Y: Any
                      ) -> tuple[Estimator, XView]:
        if law.method != "jdl":
            raise ValueError(f"law: TunedModel tunes a jdl law (its lengthscales, reg and view of x); "
                             f"the law is {law.method}")
        law.set_params(kernel_x=comparing_categories(kernel, categorical))
        tuned = tune(X, Y, estimator=law, summaries=self.summaries, seed=law.seed).model
        return tuned.law_, tuned.view_
