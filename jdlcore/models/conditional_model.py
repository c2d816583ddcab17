"""The fitted model as one object: the view of x (``jdlcore.features.view.XView``) composed with a law.

A law estimator (JDL, CME, KLR, ...) answers at rows as its x kernel reads them; the default model
reads x through the missing-value rule and the boosted summaries, and may model a y standardised by
the summaries. ``ConditionalModel`` holds both parts, so that every query takes x rows as the user has
them (category codes, NaN for a missing value) and answers on y's scale: no caller reads x or y
through the view itself, and a model loaded from a store answers exactly as scoring does.
"""
from __future__ import annotations

import warnings
from typing import Any, Callable

import numpy as np

from ..conditional.location_scale import LocationScale
from ..conditional.row_laws import RowLaws
from ..conditional.support import sample_rows
from ..features.levels import XColumns
from ..features.missing import MissingValues
from ..features.summaries import BoostedSummaries
from ..features.view import XView
from ..validation import as_samples
from .degeneracy import MARGINAL_ROWS, DegeneracyWarning
from .estimator import Estimator, UnsupportedQuery
from .jdl import ON_Y_KINDS
from .protocol import SCORE_ROWS, not_fitted
from .registry import estimator_class

__all__ = ["ConditionalModel", "fit_law", "comparing_categories"]

OWN_ATTRIBUTES = ("law_", "view_", "columns_", "provenance_", "store_path_", "store_version_")


def fit_law(law: Estimator, view: XView, X: Any, Y: Any) -> Estimator:
    """``law`` fitted on the rows ``view`` reads from staged x rows X (n, d) and y rows Y (n, q); returns
    it. For a y read standardised, the comparison with the marginal (``check_degeneracies``) is made on
    y's scale: the law of the standardised y is near its own marginal by design."""
    Z, R = view.pair(X, Y)
    if not view.standardises:
        return law.fit(Z, R)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DegeneracyWarning)  # announced below, on y's scale
        law.fit(Z, R)
    rows = sample_rows(len(Z), law.seed, MARGINAL_ROWS)
    law.check_degeneracies(Z[rows], R[rows], on=view.location_scale(Z[rows]))
    return law


def comparing_categories(kernel: Any, categorical: list[int]) -> Any:
    """A copy of the x ``kernel`` (lengthscales and scaling kept) that compares the columns ``categorical``
    (indices; none where empty) as categories."""
    return type(kernel)(kernel.lengthscale, location=kernel.location, scale=kernel.scale,
                        categorical=categorical or None)


class ConditionalModel:
    """A law read through an x view: ``law`` (an unfitted jdlcore estimator; default JDL) fitted on x
    rows read through the missing-value rule that ``fit`` learns (``categorical``: the positions of the
    category-code columns of X). ``jdlcore.TunedModel`` is the default model of the command line: a
    ``ConditionalModel`` whose fit tunes the law and the view of x first, as ``jdl tune`` does.

    Fitted attributes: ``law_`` (the fitted law), ``view_`` (the ``XView``), ``columns_`` (the x columns
    by name and the levels of the categorical ones, ``XColumns``; None for a model fitted on an array
    without names), ``provenance_`` (what the pipeline recorded: features, levels, data; {} for a model
    fitted here). A query's X is an array of rows as the model was fitted on (category codes), or,
    where ``columns_`` is known, a table (a pandas DataFrame) with those columns: categorical cells
    by level name. The law's own fitted attributes and parameters read through (``model.diagnostics_``
    is ``model.law_.diagnostics_``); its query methods do not, since they read rows as the kernel does.
    A model assembled from fitted parts (the pipeline's fit, ``load_model``) is made by ``of``.
    """

    PARAMETERS: dict[str, Any] = {"law": None, "categorical": ()}  # each parameter and its default

    def __init__(self, law: Estimator | None = None, *, categorical: tuple[int, ...] = ()):
        self.law = law
        self.categorical = categorical

    # -- the estimator contract -----------------------------------------------------------------
    def get_params(self, deep: bool = True) -> dict[str, Any]:
        params: dict[str, Any] = {key: getattr(self, key) for key in self.PARAMETERS}
        if deep and self.law is not None:
            params.update({f"law__{key}": value for key, value in self.law.get_params(deep=True).items()})
        return params

    def set_params(self, **params: Any) -> "ConditionalModel":
        inner = {key.partition("__")[2]: value for key, value in params.items() if key.startswith("law__")}
        for key, value in params.items():
            if key.startswith("law__"):
                continue
            if key not in self.PARAMETERS:
                raise ValueError(f"{key}: not a parameter of {type(self).__name__}; it has {', '.join(self.PARAMETERS)}")
            setattr(self, key, value)
        if inner:
            self.law = self._law().set_params(**inner)
        return self

    def __repr__(self) -> str:
        shown = "".join(f", {key}={getattr(self, key)!r}" for key, default in self.PARAMETERS.items()
                        if key != "law" and getattr(self, key) != default)
        return f"{type(self).__name__}(law={self.law!r}{shown})"

    def _law(self) -> Estimator:
        if self.law is None:
            from .jdl import JDL

            return JDL()
        return self.law

    def fit(self, X: Any, Y: Any) -> "ConditionalModel":
        """Learn the missing-value rule from X (n, d) (NaN where a value is missing; ``categorical``
        columns hold codes) and fit a copy of ``law`` on the rows it reads, its x kernel comparing the
        category codes and the missingness indicators as categories. A table X (a pandas DataFrame)
        gives the model its column names and categories (``columns_``, ``XColumns.learn``: the columns of
        a categorical dtype or holding text; columns of codes are ``categorical``), so that it is queried by
        them."""
        columns = XColumns.learn(X) if hasattr(X, "columns") else None
        X = columns.codes(X) if columns is not None else np.asarray(X, dtype=np.float64)
        if X.ndim != 2:
            raise ValueError(f"X: must be 2-D (n, d), got shape {X.shape}")
        law = self._law().with_params()
        kernel = law._kernel("kernel_x") if "kernel_x" in law.KERNELS else None
        categorical = sorted({int(j) for j in self.categorical} | set(getattr(kernel, "categorical", None) or ())
                             | set(columns.categorical if columns is not None else ()))
        law, view = self._fitted_parts(law, kernel, categorical, X, Y)
        return self._assembled(law, view, {}, columns)

    def _fitted_parts(self, law: Estimator, kernel: Any, categorical: list[int], X: np.ndarray, Y: Any
                      ) -> tuple[Estimator, XView]:
        """The fitted law and the view it reads x through, from X (n, d) with ``categorical`` code columns
        (the law's x ``kernel`` may be None); a subclass that chooses the view (``TunedModel``) replaces it."""
        view = XView(MissingValues.learn(X, categorical))
        width = len(view.columns([str(j) for j in range(X.shape[1])]))
        if kernel is not None:
            if np.ndim(kernel.lengthscale) == 1 and np.size(kernel.lengthscale) != width:
                raise ValueError(f"kernel_x: has {np.size(kernel.lengthscale)} lengthscales for the {width} columns "
                                 f"the model reads ({X.shape[1]} of X, then an indicator per column that misses "
                                 f"values: {list(view.missing.flagged)}); give {width} or one")
            codes = view.categorical(categorical)
            if codes:
                law.set_params(kernel_x=comparing_categories(kernel, codes))
        return law.fit(*view.pair(X, Y)), view

    @classmethod
    def of(cls, law: Estimator, view: XView | None = None, provenance: dict[str, Any] | None = None
           ) -> "ConditionalModel":
        """The model of a fitted ``law`` that reads x through ``view`` (None: rows as they are);
        ``provenance``: the pipeline's record, whose ``x_features`` and ``x_levels`` name its columns."""
        provenance = provenance or {}
        names = provenance.get("x_features")
        columns = XColumns.of(names, provenance.get("x_levels")) if names else None
        categorical = tuple(columns.categorical) if columns is not None else ()
        return cls(law.with_params(), categorical=categorical)._assembled(law, view or XView(), provenance, columns)

    def state(self) -> dict[str, Any]:
        """The fitted model as arrays and JSON-able values (no pickles): the law's ``state()`` and its
        ``method``, the view (the missing-value rule's record, the summaries' JSON record), the x columns
        (names, and the levels of the categorical ones) and the provenance. ``from_state`` rebuilds it."""
        law = self._fitted_law()
        view, columns = self.view_, self.columns_
        return {"method": law.method, "law": law.state(), "categorical": list(self.categorical),
                "missing": None if view.missing is None else view.missing.to_dict(),
                "summaries": None if view.summaries is None else view.summaries.to_bytes().decode(),
                "columns": None if columns is None else {"names": list(columns.names),
                                                         "levels": {k: list(v) for k, v in columns.levels.items()}},
                "provenance": self.provenance_}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> "ConditionalModel":
        """Rebuild a fitted model from ``state()``; ``ValueError`` on a missing part."""
        missing = [part for part in ("method", "law", "missing", "summaries", "columns", "provenance")
                   if part not in state]
        if missing:
            raise ValueError(f"state: missing part {missing[0]!r}")
        law = estimator_class(state["method"]).from_state(state["law"])
        view = XView(None if state["missing"] is None else MissingValues.from_dict(state["missing"]),
                     None if state["summaries"] is None else BoostedSummaries.from_bytes(state["summaries"].encode()))
        spec = state["columns"]
        columns = None if spec is None else XColumns.of(spec["names"], spec["levels"])
        model = cls(law.with_params(), categorical=tuple(state.get("categorical", ())))
        return model._assembled(law, view, dict(state["provenance"]), columns)

    def _assembled(self, law: Estimator, view: XView, provenance: dict[str, Any], columns: XColumns | None
                   ) -> "ConditionalModel":
        law._fitted()
        if view.standardises and not hasattr(law, "_answers_on_y"):
            raise ValueError(f"view: reads y standardised, which a {law.method} law does not answer on y's scale")
        self.law_, self.view_, self.provenance_, self.columns_ = law, view, provenance, columns
        return self

    def __getattr__(self, name: str) -> Any:
        """The law's fitted attributes (ending in ``_``) and parameters; anything else is an AttributeError."""
        if name.startswith("__"):
            raise AttributeError(name)
        if "law_" not in self.__dict__:  # a NotFittedError is an AttributeError too
            raise not_fitted(f"ConditionalModel: call fit(X, Y) before reading {name}")
        law = self.__dict__["law_"]
        if name.endswith("_") or name in law.KERNELS or name in law.parameters:
            return getattr(law, name)
        raise AttributeError(f"ConditionalModel has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        """A fitted attribute of the law is set on ``law_``: set here it would shadow the law's and
        change no answer, so it is refused."""
        law = self.__dict__.get("law_")
        if law is not None and name.endswith("_") and name not in OWN_ATTRIBUTES and hasattr(law, name):
            raise AttributeError(f"{name}: an attribute of the law; set it on model.law_")
        object.__setattr__(self, name, value)

    @property
    def method(self) -> str:
        return self._fitted_law().method

    @property
    def law_rule(self) -> str | None:
        return getattr(self._fitted_law(), "law_rule", None)

    def answers(self, query: str) -> bool:
        """Whether the model answers ``query`` (``Estimator.answers``; a model of a standardised y answers
        no registered function and no class probabilities)."""
        law = self.__dict__.get("law_")
        law = self._law() if law is None else law
        if "view_" in self.__dict__ and self.standardises and query in ("register", "expectations", "expectation",
                                                                         "predict_proba"):
            return False
        return law.answers(query)

    def _fitted_law(self) -> Estimator:
        if "law_" not in self.__dict__:
            raise not_fitted("ConditionalModel: call fit(X, Y) before querying the model")
        return self.law_

    def score(self, X: Any, y: Any) -> float:
        """The negative mean CRPS (energy score for a vector y) of the laws at the rows (X, y), in y's
        units; higher is better (scikit-learn's ``score``)."""
        Y = as_samples(y, "y")
        losses = self.crps(X, Y) if Y.shape[1] == 1 else self.energy_score(X, Y)
        return -float(np.mean(losses))

    def __sklearn_is_fitted__(self) -> bool:
        return "law_" in self.__dict__

    def __sklearn_tags__(self) -> Any:
        """The law's tags (scikit-learn >= 1.6 calls this), with missing values allowed in X."""
        from dataclasses import replace

        tags = self._law().__sklearn_tags__()
        return replace(tags, input_tags=replace(tags.input_tags, allow_nan=True))

    @property
    def n_features_in_(self) -> int:
        """The number of x columns a query's rows have (before the view adds indicators and summaries)."""
        self._fitted_law()
        view = self.view_
        if view.missing is not None:
            return view.missing.width
        return view.summaries.width if view.summaries is not None else int(self.law_.n_features_in_)

    # -- rows -------------------------------------------------------------------------------------
    @property
    def standardises(self) -> bool:
        """Whether the law is of y standardised by the summaries (its answers moved to y's scale)."""
        return self.view_.standardises

    def rows(self, X: Any, unseen: str = "refuse") -> np.ndarray:
        """x rows (q, d) as the user has them (an array, or a table with the model's columns), as the law's
        x kernel reads them (q, d'). ``unseen``: a table's categorical level the model was not fitted on
        is refused ("refuse") or matches no level ("other")."""
        self._fitted_law()
        if hasattr(X, "columns") and self.columns_ is not None:
            X = self.columns_.codes(X, unseen)
        return self.view_.rows(as_samples(X, "X", missing=True))

    def _read(self, X: Any) -> tuple[np.ndarray, LocationScale | None]:
        Z = self.rows(X)
        return Z, self.view_.location_scale(Z)

    # -- queries ----------------------------------------------------------------------------------
    def conditional_law(self, X: Any) -> RowLaws:
        """The conditional law of y at each x row, on y's scale (``RowLaws``): every other query is read
        from it."""
        return self._laws(self.rows(X))

    def _laws(self, Z: np.ndarray) -> RowLaws:
        """The laws at kernel rows Z (q, d'), on y's scale."""
        return RowLaws(self.law_.conditional_weights(Z), np.asarray(self.law_.law_atoms_, dtype=np.float64),
                       self.view_.location_scale(Z))

    def conditional_weights(self, X: Any) -> np.ndarray:
        """The law's weights at each x row, (q, N), on ``law_atoms_`` (for a standardised y, each row's
        atoms on y's scale are ``conditional_law(X).atoms_on_y()``)."""
        return self.law_.conditional_weights(self.rows(X))

    def answer_requests(self, requests: dict[str, tuple[str, np.ndarray | None]], X: Any,
                        kept: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """The prepared requests (``prepare_requests``) at the x rows, by name, on y's scale. ``kept`` (q,)
        int8 receives each row's projection level for a law whose rule is "project"."""
        Z, on = self._read(X)
        options = {} if kept is None else {"kept": kept}
        if on is not None:
            options["on"] = on
        return self.law_.answer_requests(requests, Z, **options)

    def prepare_requests(self, requests: dict[str, tuple[str, np.ndarray | None]]
                         ) -> dict[str, tuple[str, np.ndarray | None]]:
        """Check the named requests against what the model answers (``Estimator.prepare_requests``)."""
        unknown = [name for name, (kind, _) in requests.items() if self.standardises and kind not in ON_Y_KINDS]
        if unknown:
            raise ValueError(f"function {unknown[0]!r}: a model of a standardised y answers "
                             f"{', '.join(ON_Y_KINDS)} on y's scale")
        return self._fitted_law().prepare_requests(requests)

    def _one(self, kind: str, X: Any, parameters: np.ndarray | None = None) -> np.ndarray:
        """One request of a standardised law, read on y's scale (nothing registered at the law's atoms)."""
        return self.answer_requests({kind: (kind, parameters)}, X)[kind]

    def conditional_expectation(self, X: Any, f: Callable[[np.ndarray], np.ndarray] | None = None) -> np.ndarray:
        """E[f(y) | x] at each x row, (q, ...); f maps atoms (b, d_y) to (b, ...), default the identity
        (the conditional mean, (q, d_y))."""
        if not self.standardises:
            return self.law_.conditional_expectation(self.rows(X), f)
        if f is None:
            return self._one("mean", X)

        def expected(laws: RowLaws) -> np.ndarray:  # f at each row's own atoms
            on_y = laws.atoms_on_y()
            values = np.asarray(f(on_y.reshape(-1, on_y.shape[2])), dtype=np.float64)
            return np.einsum("ik,ik...->i...", laws.weights, values.reshape(on_y.shape[:2] + values.shape[1:]))

        return np.concatenate([expected(laws) for laws in self._laws_in_blocks(X)])

    def predict(self, X: Any) -> np.ndarray:
        """The conditional mean E[y | x], (q, d_y); (q,) where the fit's y was 1-D (a classifier's law: its
        most probable class)."""
        if not self.standardises:
            return self.law_.predict(self.rows(X))
        return self.law_._as_fitted_y(self.conditional_expectation(X))

    def conditional_cdf(self, X: Any, thresholds: Any) -> np.ndarray:
        """Q(y <= t | x) at each x row for thresholds t ((T,), or (T, d_y) for the joint CDF), (q, T)."""
        if not self.standardises:
            return self.law_.conditional_cdf(self.rows(X), thresholds)
        return self._one("cdf", X, np.asarray(thresholds, dtype=np.float64).reshape(-1))

    def conditional_quantile(self, X: Any, levels: Any, component: int = 0) -> np.ndarray:
        """Quantiles of y_component given x at ``levels`` in (0, 1], (q, L)."""
        if not self.standardises:
            return self.law_.conditional_quantile(self.rows(X), levels, component)
        if component != 0:
            raise ValueError(f"component: a model of a standardised y has one y feature, got {component}")
        return self._one("quantile", X, np.asarray(levels, dtype=np.float64))

    def predict_proba(self, X: Any, classes: Any | None = None) -> np.ndarray:
        """Q(y = c | x) for each class c of a discrete scalar y, (q, C)."""
        if self.standardises:
            raise UnsupportedQuery("predict_proba: a model of a standardised y has no classes")
        Z = self.rows(X)
        return self.law_.predict_proba(Z) if classes is None else self.law_.predict_proba(Z, classes)

    def crps(self, X: Any, y: Any) -> np.ndarray:
        """The CRPS of the conditional law at each (x, y) row, (q,), on y's scale; lower is better."""
        Z, on = self._read(X)
        return self.law_.crps(Z, y) if on is None else self.law_.crps(Z, y, on=on)

    def energy_score(self, X: Any, Y: Any) -> np.ndarray:
        """The energy score of the conditional (joint) law at each (x, y) row, (q,); the CRPS for a scalar y."""
        if not self.standardises:
            return self.law_.energy_score(self.rows(X), Y)
        return self.crps(X, Y)  # a standardised y is scalar

    def sample(self, X: Any, draws: int, seed: int = 0) -> np.ndarray:
        """``draws`` independent draws of y from the law at each x row, (q, draws, d_y), seeded."""
        rng = np.random.default_rng(seed)
        return np.concatenate([laws.sample(int(draws), rng) for laws in self._laws_in_blocks(X)])

    def _laws_in_blocks(self, X: Any):
        """``conditional_law`` of the rows of X, ``SCORE_ROWS`` at a time (each block's weights are b x N)."""
        Z = self.rows(X)
        for start in range(0, Z.shape[0], SCORE_ROWS):
            yield self._laws(Z[start:start + SCORE_ROWS])

    def register(self, name: str, f: Callable[[np.ndarray], np.ndarray]) -> None:
        """Keep f at the law's atoms, so that ``expectations([name], X)`` needs no evaluation of f (a law
        of y itself: a standardised one moves its atoms row by row)."""
        self._on_y_itself("register").register(name, f)

    def expectations(self, names: list[str], X: Any) -> dict[str, np.ndarray]:
        """E[f(y) | x] of registered functions at each x row, by name."""
        return self._on_y_itself("expectations").expectations(names, self.rows(X))

    def expectation(self, name: str, X: Any) -> np.ndarray:
        """E[f(y) | x] of one registered function at each x row."""
        return self.expectations([name], X)[name]

    def negative_mass(self, X: Any) -> np.ndarray:
        """Negative weight of the law at each x row relative to its total, (q,): 0 for a probability vector."""
        return self.law_.negative_mass(self.rows(X))

    def law_levels(self, X: Any) -> np.ndarray:
        """Each x row's projection level (a law whose rule is "project"), (q,) int8."""
        return self._fitted_law().law_levels(self.rows(X))

    def _on_y_itself(self, query: str) -> Estimator:
        if self.standardises:
            raise UnsupportedQuery(f"{query}: a model of a standardised y answers registered functions through "
                                   "conditional_expectation(X, f)")
        return self._fitted_law()

    def event_probability(self, X: Any) -> np.ndarray:
        """A KLR law's Q(y <= threshold | x) at each x row, (q,)."""
        return self._fitted_law().event_probability(self.rows(X))

    def total_mass(self, X: Any) -> np.ndarray:
        """E[1 | x] at each x row, (q,)."""
        return self.law_.total_mass(self.rows(X))

    def negative_share(self, X: Any, tol: float = 1e-12) -> np.ndarray:
        """Share of the law's atoms with a weight below -tol at each x row, (q,)."""
        return self.law_.negative_share(self.rows(X), tol)
