"""scikit-learn's estimator protocol for the jdlcore estimators, written to its documented contract so
that scikit-learn stays optional (nothing here imports it at import time).

* Parameters: ``get_params(deep=True)`` lists each kernel's own parameters as ``kernel_x__lengthscale``
  and so on; ``set_params`` takes those nested names too (a kernel left at None, the default Gaussian
  of lengthscale 1, becomes a ``GaussianKernel`` with the parameter set). The constructor keeps its
  arguments as given, so ``sklearn.base.clone`` works; the rules are checked when ``fit`` starts.
* Inputs: ``fit`` records ``n_features_in_``, ``feature_names_in_`` (for a table with string column
  names) and whether y was 1-D; the query methods check the feature count and names as scikit-learn
  does (``_checked_queries``), and ``predict`` returns (q,) for a 1-D y.
* ``score(X, y)``: higher is better, as scikit-learn's model selection expects: the negative mean exact
  CRPS of the conditional laws for a scalar y (``crps``), the negative mean energy score (its
  multivariate form, Euclidean norm) for a vector y (``energy_score``). Both are proper scoring
  rules, in y's units.
* An unfitted model raises ``NotFittedError``: a ``RuntimeError``, ``ValueError`` and
  ``AttributeError``, and scikit-learn's ``NotFittedError`` when scikit-learn is loaded.
* ``__sklearn_tags__`` (scikit-learn >= 1.6, which calls it) states what the estimator is: a
  regressor of a scalar or vector y (a classifier for KLR), with a poor ``score`` by scikit-learn's
  R^2 yardstick (a CRPS is never positive) and no missing values accepted.
"""
from __future__ import annotations

import sys
import warnings
from typing import Any, ClassVar

import numpy as np

from ..conditional.laws import crps as law_crps, energy_score as law_energy_score
from ..kernels import GaussianKernel
from ..validation import as_samples, check_paired

__all__ = ["NotFittedError", "ScikitLearnProtocol", "not_fitted", "SCORE_ROWS"]

SCORE_ROWS = 4096  # query rows per block of a score: the laws of a block are held at once (rows x atoms)


class NotFittedError(RuntimeError, ValueError, AttributeError):
    """A query or state of an estimator that was not fitted (or loaded from a state)."""


_SKLEARN_NOT_FITTED: dict[str, type] = {}


def not_fitted(message: str) -> NotFittedError:
    """The ``NotFittedError`` to raise: also scikit-learn's ``NotFittedError`` where scikit-learn is loaded
    (its checks and ``check_is_fitted`` callers catch that class), without importing it otherwise."""
    exceptions = sys.modules.get("sklearn.exceptions")
    if exceptions is None:
        return NotFittedError(message)
    if "class" not in _SKLEARN_NOT_FITTED:
        _SKLEARN_NOT_FITTED["class"] = type("NotFittedError", (NotFittedError, exceptions.NotFittedError),
                                            {"__module__": __name__})
    return _SKLEARN_NOT_FITTED["class"](message)


class ScikitLearnProtocol:
    """The protocol's methods, mixed into ``jdlcore.models.estimator.Estimator`` (see the module)."""

    KERNELS: ClassVar[tuple[str, ...]]
    parameters: ClassVar[dict]
    estimator_kind: ClassVar[str] = "regressor"  # scikit-learn's estimator type ("classifier" for KLR)

    # -- parameters -------------------------------------------------------------------------------
    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor parameters by name; with ``deep``, each kernel's own parameters as well
        (``kernel_x__lengthscale``, ...)."""
        params = {name: getattr(self, name) for name in self.KERNELS + tuple(self.parameters)}
        if deep:
            for name in self.KERNELS:
                if params[name] is not None:
                    params.update({f"{name}__{key}": value for key, value in params[name].get_params().items()})
        return params

    def set_params(self, **params: Any) -> Any:
        """Set constructor parameters by name, and a kernel's by ``KERNEL__NAME`` (a kernel that is None,
        the default, becomes a ``GaussianKernel`` first); returns self. ``ValueError`` for a name the
        estimator does not have. Values are checked when ``fit`` starts, as in scikit-learn."""
        own = self.KERNELS + tuple(self.parameters)
        nested: dict[str, dict[str, Any]] = {}
        for key, value in params.items():
            name, _, inner = key.partition("__")
            if name not in own or (inner and name not in self.KERNELS):
                raise ValueError(f"{key}: not a parameter of {type(self).__name__}; it has {', '.join(own)}")
            if inner:
                nested.setdefault(name, {})[inner] = value
            else:
                setattr(self, name, value)
        for name, inner in nested.items():
            kernel = getattr(self, name)
            setattr(self, name, (GaussianKernel() if kernel is None else kernel).set_params(**inner))
        return self

    def __repr__(self) -> str:
        """The class and the parameters that differ from their defaults, as scikit-learn shows estimators."""
        defaults = {**{name: None for name in self.KERNELS}, **self.defaults()}
        changed = [f"{name}={value!r}" for name, value in self.get_params(deep=False).items()
                   if not _same(value, defaults.get(name))]
        return f"{type(self).__name__}({', '.join(changed)})"

    # -- inputs -----------------------------------------------------------------------------------
    def _note_inputs(self, X: Any, Y: Any) -> None:
        """Record what scikit-learn's protocol keeps of the training inputs: ``n_features_in_``,
        ``feature_names_in_`` (only for string column names; removed otherwise) and whether y was 1-D."""
        shape = _shape(X)
        self.n_features_in_ = int(shape[1]) if len(shape) == 2 else 1
        names = _feature_names(X)
        if names is None:
            self.__dict__.pop("feature_names_in_", None)
        else:
            self.feature_names_in_ = names
        self._y_1d = len(_shape(Y)) == 1

    def _checked_queries(self, Xq: Any, width: int) -> np.ndarray:
        """Query points (q, width) as float64, their feature names checked against the fit's as
        scikit-learn does (different names: ``ValueError``; names on one side only: a warning)."""
        fitted = getattr(self, "feature_names_in_", None)
        names = _feature_names(Xq)
        kind = type(self).__name__
        if fitted is not None and names is not None and not np.array_equal(fitted, names):
            raise ValueError(f"Xq: the feature names should match those that were passed during fit: {kind} was "
                             f"fitted on {list(fitted)}, got {list(names)}")
        if fitted is not None and names is None:
            warnings.warn(f"X does not have valid feature names, but {kind} was fitted with feature names",
                          UserWarning, stacklevel=3)
        if fitted is None and names is not None and hasattr(self, "n_features_in_"):
            warnings.warn(f"X has feature names, but {kind} was fitted without feature names", UserWarning,
                          stacklevel=3)
        Xq = as_samples(Xq, "Xq")
        if Xq.shape[1] != width:
            raise ValueError(f"Xq: X has {Xq.shape[1]} features, but {kind} is expecting {width} features as input")
        return Xq

    def _as_fitted_y(self, values: np.ndarray) -> np.ndarray:
        """Per-row values (q, 1) as (q,) where the model was fitted on a 1-D y (scikit-learn's shapes)."""
        return values[:, 0] if getattr(self, "_y_1d", False) and values.ndim == 2 and values.shape[1] == 1 else values

    # -- scores -----------------------------------------------------------------------------------
    def score(self, X: Any, y: Any) -> float:
        """The negative mean score of the conditional laws at the rows (X, y): the exact CRPS for a
        scalar y (``crps``), the energy score for a vector y (``energy_score``); in y's units, higher is
        better (0 only for a law that is one atom at each observation). A method whose laws are signed
        (CME) is scored on its signed weights as they are, where the score is no longer proper."""
        shape = _shape(y)
        y_width = 1 if len(shape) == 1 else shape[1]
        losses = self.crps(X, y) if y_width == 1 else self.energy_score(X, y)
        return -float(np.mean(losses))

    def _law_blocks(self, Xq: Any, Yq: Any):
        """(the law's atoms (N, d_Y); for each block of at most ``SCORE_ROWS`` rows: the laws' weights
        (b, N) and the block's y (b, d_Y)), the rows checked against the model."""
        Xq, Yq = self._queries(Xq), as_samples(Yq, "y")
        check_paired(Xq, Yq, "X", "y")
        if self.answers("conditional_weights"):
            atoms, weights = np.asarray(self.law_atoms_, dtype=np.float64), self.conditional_weights
        else:  # a classifier's law: its class probabilities on the classes
            atoms, weights = np.asarray(self.classes_, dtype=np.float64)[:, None], self.predict_proba
        if Yq.shape[1] != atoms.shape[1]:
            raise ValueError(f"y: has {Yq.shape[1]} features, the model's laws are over {atoms.shape[1]}")
        blocks = ((weights(Xq[rows]), Yq[rows]) for rows in
                  (slice(start, start + SCORE_ROWS) for start in range(0, Xq.shape[0], SCORE_ROWS)))
        return atoms, blocks

    def crps(self, Xq: Any, y: Any) -> np.ndarray:
        """The continuous ranked probability score of the conditional law at each (x_q, y_q), shape (q,):
        E|Y - y| - E|Y - Y'| / 2 under the law on its atoms, exact (scalar y). Lower is better."""
        atoms, blocks = self._law_blocks(Xq, y)
        if atoms.shape[1] != 1:
            raise ValueError(f"crps: needs a scalar y, the model has {atoms.shape[1]} y features; see energy_score")
        return np.concatenate([law_crps(W, atoms[:, 0], Y[:, 0]) for W, Y in blocks])

    def energy_score(self, Xq: Any, Y: Any) -> np.ndarray:
        """The energy score of the conditional law at each (x_q, y_q), shape (q,): E||Y - y|| - E||Y - Y'|| / 2
        (Euclidean norm) under the law on its atoms, exact; the CRPS for a scalar y. Lower is better."""
        atoms, blocks = self._law_blocks(Xq, Y)
        return np.concatenate([law_energy_score(W, atoms, block) for W, block in blocks])

    # -- scikit-learn's hooks -----------------------------------------------------------------------
    def __sklearn_is_fitted__(self) -> bool:
        return hasattr(self, self._FITTED)

    def __sklearn_tags__(self) -> Any:
        from sklearn.utils import ClassifierTags, InputTags, RegressorTags, Tags, TargetTags  # called by scikit-learn

        classifier = self.estimator_kind == "classifier"
        return Tags(estimator_type=self.estimator_kind,
                    target_tags=TargetTags(required=True, one_d_labels=classifier, multi_output=not classifier,
                                           single_output=True),
                    input_tags=InputTags(allow_nan=False),
                    classifier_tags=ClassifierTags(poor_score=True, multi_class=True) if classifier else None,
                    regressor_tags=None if classifier else RegressorTags(poor_score=True))

    _FITTED: ClassVar[str]


def _feature_names(X: Any) -> np.ndarray | None:
    """The column names of a table (an object with ``columns``, such as a pandas DataFrame) when they are
    all strings, as an object array; else None (scikit-learn's rule)."""
    columns = getattr(X, "columns", None)
    if columns is None:
        return None
    names = np.asarray(list(columns), dtype=object)
    return names if names.size and all(isinstance(name, str) for name in names) else None


def _shape(values: Any) -> tuple[int, ...]:
    """The shape of an array-like, read without NumPy's array functions (which some array-likes refuse)."""
    shape = getattr(values, "shape", None)
    return tuple(shape) if shape is not None else np.asarray(values).shape


def _same(value: Any, default: Any) -> bool:
    """Whether a parameter's value is its default (arrays and kernels compared by value)."""
    try:
        return bool(value is default or (type(value) is type(default) and value == default))
    except (TypeError, ValueError):  # arrays: no single truth value
        return False

