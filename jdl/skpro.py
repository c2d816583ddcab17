"""jdl's conditional laws as skpro probabilistic regressors (``pip install 'jdl[skpro]'``).

``JDLProbaRegressor(estimator)`` wraps any jdlcore estimator whose conditional laws are weights on
atoms (``conditional_weights``: jdl, jpdl, cme, greedy, psd) for a scalar y, read through
``jdlcore.ConditionalModel`` (so x may miss values, read by its missing-value rule). By default
(``tune=True``) it is the command line's default model: a jdl tuned, with its view of x, as ``jdl tune``
tunes (``jdlcore.TunedModel``); ``tune=False`` fits the estimator as it is given.

* ``predict_proba`` returns skpro's ``Empirical`` distribution, per row the law's M support atoms
  with the law's weights, so every skpro metric reads the exact law (its CRPS is jdl's exact CRPS);
* ``predict_quantiles`` and ``predict_interval`` come from the law's quantiles
  (``conditional_quantile``: the smallest atom whose cumulative weight reaches the level),
  ``predict_var`` from its first two moments and ``predict`` is its mean.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from skpro.distributions import Empirical
from skpro.regression.base import BaseProbaRegressor

from jdlcore import JDL, ConditionalModel, TunedModel

__all__ = ["JDLProbaRegressor"]


class JDLProbaRegressor(BaseProbaRegressor):
    """A jdlcore estimator (default ``JDL()``) as an skpro ``BaseProbaRegressor`` of a scalar y.

    Parameters
    ----------
    estimator: an unfitted jdlcore estimator whose laws are on atoms (cloned at fit; default ``JDL()``).
    tune: tune the estimator (a jdl) and the view of x first, as ``jdl tune`` does (default True).

    Fitted attributes: ``estimator_`` (a ``jdlcore.ConditionalModel`` of the fitted clone).

    Examples
    --------
    >>> import numpy as np, pandas as pd
    >>> from jdl.skpro import JDLProbaRegressor
    >>> rng = np.random.default_rng(0)
    >>> X = pd.DataFrame({"x": rng.standard_normal(300)})
    >>> y = pd.DataFrame({"y": X["x"] + 0.5 * rng.standard_normal(300)})
    >>> law = JDLProbaRegressor().fit(X, y).predict_proba(X.head(3))  # skpro's Empirical, one law per row
    """

    _tags = {
        "authors": ["jdl"],
        "capability:multioutput": False,
        "capability:missing": True,
        "X_inner_mtype": "pd_DataFrame_Table",
        "y_inner_mtype": "pd_DataFrame_Table",
        "python_dependencies": ["scikit-learn"],
    }

    def __init__(self, estimator: Any = None, tune: bool = True):
        self.estimator = estimator
        self.tune = tune
        super().__init__()

    def _fit(self, X: pd.DataFrame, y: pd.DataFrame, C: Any = None) -> "JDLProbaRegressor":
        from sklearn.base import clone

        estimator = clone(self.estimator) if self.estimator is not None else JDL()
        if not estimator.answers("conditional_weights"):
            raise ValueError(f"estimator: a {type(estimator).__name__} has no law on atoms (conditional_weights); "
                             "use jdl, jpdl, cme, greedy or psd")
        model = TunedModel(estimator) if self.tune else ConditionalModel(estimator)
        self.estimator_ = model.fit(_values(X), _values(y))
        self._y_name = y.columns[0]
        return self

    def _predict(self, X: pd.DataFrame) -> pd.DataFrame:
        mean = self.estimator_.conditional_expectation(_values(X))[:, :1]
        return pd.DataFrame(mean, index=X.index, columns=[self._y_name])

    def _predict_proba(self, X: pd.DataFrame) -> Empirical:
        """Per row, the law's atoms with its weights: an ``Empirical`` whose sample index counts the atoms."""
        laws = self.estimator_.conditional_law(_values(X))  # weights (q, M), >= 0, rows summing to 1
        atoms = laws.atoms_on_y()[:, :, 0]  # (q, M): each row's atoms on y's scale
        index = pd.MultiIndex.from_product([np.arange(atoms.shape[1]), X.index])
        spl = pd.DataFrame(atoms.T.ravel(), index=index, columns=[self._y_name])
        return Empirical(spl=spl, weights=pd.Series(laws.weights.T.ravel(), index=index), index=X.index,
                         columns=pd.Index([self._y_name]))

    def _predict_quantiles(self, X: pd.DataFrame, alpha: list[float]) -> pd.DataFrame:
        levels = np.asarray(alpha, dtype=np.float64)
        quantiles = self.estimator_.conditional_quantile(_values(X), levels)
        columns = pd.MultiIndex.from_product([[self._y_name], list(alpha)])
        return pd.DataFrame(quantiles, index=X.index, columns=columns)

    def _predict_interval(self, X: pd.DataFrame, coverage: list[float]) -> pd.DataFrame:
        cover = np.asarray(coverage, dtype=np.float64)
        levels = np.column_stack([(1 - cover) / 2, (1 + cover) / 2]).ravel()
        quantiles = self.estimator_.conditional_quantile(_values(X), levels)
        columns = pd.MultiIndex.from_product([[self._y_name], list(coverage), ["lower", "upper"]])
        return pd.DataFrame(quantiles, index=X.index, columns=columns)

    def _predict_var(self, X: pd.DataFrame) -> pd.DataFrame:
        moments = self.estimator_.conditional_expectation(_values(X), lambda y: np.column_stack([y[:, 0], y[:, 0] ** 2]))
        variance = np.maximum(moments[:, 1] - moments[:, 0] ** 2, 0.0)
        return pd.DataFrame(variance[:, None], index=X.index, columns=[self._y_name])

    @classmethod
    def get_test_params(cls, parameter_set: str = "default") -> list[dict[str, Any]]:
        """Parameter sets for skpro's estimator checks: a jdl as given, and a small, fast one (the tuned
        default is checked against ``jdlcore.TunedModel`` by jdl's own tests)."""
        return [{"tune": False}, {"estimator": JDL(reg=1e-4, support_size=32, positivity="clip"), "tune": False}]


def _values(frame: pd.DataFrame) -> np.ndarray:
    """A table's values as float64 (n, d), NaN where a value is missing."""
    return np.asarray(frame, dtype=np.float64)
