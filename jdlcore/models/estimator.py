"""The contract every jdlcore estimator follows, in the spirit of scikit-learn's.

* Hyperparameters: the constructor's arguments, keyword-only after the kernels, listed in
  ``KERNELS`` (jdlcore Kernels or None) and declared in ``parameters`` (``{name: jdlcore.params.Param}``:
  each one's rule and meaning; JSON values, what ``state()`` stores); the constructor holds the
  defaults and ``_keep_params`` keeps the values. ``get_params`` / ``set_params`` follow, and
  ``check_params`` validates them when ``fit`` starts (each rule, then ``_check_together`` and the
  kernels). The pipeline reads the same declarations (``Param.option``) for its fit options.
* Fitted attributes end in ``_``; ``_fitted()`` is the one fitted check, ``_queries(Xq)`` the one
  validation of query points.
* One query surface, with the same names and shapes for every method: ``conditional_weights``,
  ``conditional_expectation``, ``register`` / ``expectations``, ``conditional_cdf``,
  ``conditional_quantile``, ``predict_proba``, ``negative_share``, ``predict`` (the conditional mean),
  ``total_mass``; a query a method cannot answer raises ``UnsupportedQuery`` naming the method, and
  ``answers(query)`` says so beforehand. ``law_atoms_`` are the atoms the weights are on;
  ``prepare_requests`` / ``answer_requests`` answer the pipeline's named requests through it.
* Class declarations, read by the registry (``jdlcore.models.registry``) and everything derived from it
  (CLI choices, flow settings, the model store's schema): ``method`` (the registry name), ``summary``
  (one line), ``positivity_rules`` (the first is what "auto" means), ``laws_on_atoms`` (conditional
  laws are weights on support atoms, with the training atoms stored), ``fits_from_reductions``
  (fitted from the m x m reductions, which Dask computes chunk by chunk), ``bases`` (the kinds of
  the x and y bases, None where there is none), ``state_dims`` (the state's own arrays' dims) and
  ``reads_x_values`` (the fit reads the n x m_X x basis values, which a kernel problem computes
  only then).
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, ClassVar

import numpy as np

from ..conditional.atoms import STANDARD_FUNCTIONS
from ..conditional.queries import below_thresholds, check_levels, class_indicator
from ..kernels import GaussianKernel, Kernel, kernel_from_dict
from ..lowrank.basis import SpectralBasis
from ..params import Choice, Param
from ..scaling import SCALINGS
from ..validation import as_samples, check_choice, check_paired
from .protocol import ScikitLearnProtocol, not_fitted

__all__ = ["Estimator", "UnsupportedQuery", "paired_samples", "REQUEST_KINDS", "PARAMETRISED_KINDS", "SCALING_PARAMS"]

REQUEST_KINDS = ("mean", "second_moment", "cdf", "quantile", "proba")
PARAMETRISED_KINDS = ("cdf", "quantile")  # requests that carry numbers: thresholds, levels
# the declaration of ``scaling``, which every estimator with kernels takes (default DEFAULT_SCALING)
SCALING_PARAMS: dict[str, Param] = {
    "scaling": Param(Choice(SCALINGS), "robust: each kernel's inputs standardised by the median and interquartile "
                     "range of the training columns (a kernel given with a scaling keeps it); none: the raw columns"),
}


_QUERIES = ("conditional_weights", "conditional_expectation", "register", "expectations", "conditional_cdf",
            "conditional_quantile", "predict_proba", "negative_share")
_BUILT_ON = {"predict": "conditional_expectation", "total_mass": "conditional_expectation",
             "predict_proba": "conditional_expectation", "expectation": "expectations"}


class UnsupportedQuery(ValueError):
    """A query the estimator's method cannot answer."""


class Estimator(ScikitLearnProtocol):
    """Base class of the jdlcore estimators: parameters, fitted checks and the query surface."""

    method: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    positivity_rules: ClassVar[tuple[str, ...]] = ()
    laws_on_atoms: ClassVar[bool] = False
    fits_from_reductions: ClassVar[bool] = False
    bases: ClassVar[tuple[str | None, str | None]] = ("spectral", "spectral")
    state_dims: ClassVar[dict[str, tuple[str, ...]]] = {}
    reads_x_values: ClassVar[bool] = True

    KERNELS: ClassVar[tuple[str, ...]] = ("kernel_x", "kernel_y")
    parameters: ClassVar[dict[str, Param]] = {}
    _FITTED: ClassVar[str] = "coef_"  # the attribute a fit sets last-but-not-least; its absence means unfitted

    # -- parameters -------------------------------------------------------------------------------
    def _keep_params(self, arguments: dict[str, Any]) -> None:
        """Keep the constructor's arguments (its ``locals()``) as attributes, under the declared names
        ``KERNELS`` + ``parameters``; unvalidated until ``fit`` (``check_params``), as in scikit-learn."""
        for name in self.KERNELS + tuple(self.parameters):
            setattr(self, name, arguments[name])

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """The declared parameters' defaults, as the constructor states them."""
        signature = inspect.signature(cls.__init__).parameters
        return {name: signature[name].default for name in cls.parameters}

    def with_params(self, **params: Any) -> Any:
        """A new unfitted estimator of this class with this one's parameters, ``params`` replacing some
        (scikit-learn's ``clone`` followed by ``set_params``, the kernels shared, not copied)."""
        return type(self)(**{**self.get_params(deep=False), **params})

    def check_params(self) -> None:
        """Validate the hyperparameters: each declared rule (``ParameterError`` "NAME: RULE, got VALUE"),
        the rules across parameters (``_check_together``) and the kernels."""
        for name, param in self.parameters.items():
            param.check(name, getattr(self, name))
        self._check_together()
        for name in self.KERNELS:
            kernel = getattr(self, name)
            if kernel is not None and not isinstance(kernel, Kernel):
                raise ValueError(f"{name}: must be a jdlcore Kernel, got {type(kernel).__name__}")

    def _check_together(self) -> None:
        """The rules that relate parameters (none by default); ``ValueError`` naming the parameter."""

    @classmethod
    def resolve_positivity(cls, positivity: str) -> str:
        """What ``positivity`` means for this method: "auto" is the first of ``positivity_rules``; a
        method without rules answers "none" (its laws are what they are); a rule the method does not
        know raises ``ValueError``."""
        if not cls.positivity_rules:
            return "none"
        if positivity == "auto":
            return cls.positivity_rules[0]
        if positivity not in cls.positivity_rules:
            raise ValueError(f"positivity: {positivity!r} is not a rule of method {cls.method}; choose one of "
                             f"{', '.join(map(repr, ('auto',) + cls.positivity_rules))}")
        return positivity

    def _kernel(self, name: str) -> Kernel:
        """The kernel parameter ``name`` ("kernel_x" or "kernel_y"), or the default Gaussian of lengthscale 1."""
        kernel = getattr(self, name)
        return GaussianKernel(1.0) if kernel is None else kernel

    def _scaled_kernel(self, name: str, Z: np.ndarray) -> Kernel:
        """The kernel ``name`` a fit on the columns of ``Z`` (n, d) uses: ``_kernel(name)`` under the
        estimator's ``scaling`` (``Kernel.scaled``: "robust" standardises its inputs by the median and
        interquartile range of each column of Z unless the kernel carries a scaling of its own; a
        constant column gets scale 1, every pair of rows being at distance 0 along it)."""
        return self._kernel(name).scaled(Z, getattr(self, "scaling", "none"), role=name[-1], constant="unit")

    # -- state (for stores) -----------------------------------------------------------------------
    def _json_diagnostics(self) -> dict[str, Any]:
        """``diagnostics_`` without its arrays, NumPy scalars as Python numbers (what a state stores)."""
        return {k: (v.item() if isinstance(v, np.generic) else v)
                for k, v in self.diagnostics_.items() if not isinstance(v, np.ndarray)}

    def _two_basis_state(self, arrays: dict[str, Any]) -> dict[str, Any]:
        """``state()`` of a model on an x and a y basis: its own ``arrays`` with the bases' arrays and
        residual traces, the bases' specs, the parameters, n and the JSON-able diagnostics; no
        registered functions. Every value is an array or JSON (no pickles)."""
        arrays = dict(arrays)
        for side in ("x", "y"):
            arrays.update(getattr(self, f"basis_{side}_").to_arrays(side))
            arrays[f"{side}_trace_error"] = np.asarray(self.diagnostics_[f"trace_error_{side}"], dtype=np.float64)
        return {"arrays": arrays, "kernel_x": self.basis_x_.spec(), "kernel_y": self.basis_y_.spec(),
                "params": {name: getattr(self, name) for name in self.parameters}, "n_samples": int(self.n_samples_),
                "diagnostics": self._json_diagnostics(), "registered": []}

    @classmethod
    def _spectral_restore(cls, state: dict[str, Any]) -> tuple[Any, dict[str, np.ndarray], dict[str, SpectralBasis]]:
        """The common part of ``from_state`` for ``_two_basis_state`` with kernel bases: the estimator with its stored (and
        validated) parameters, ``n_samples_`` and ``diagnostics_`` (residual traces included), the
        arrays as float64 and the two bases by side. ``ValueError`` naming a missing part."""
        try:
            arrays = {name: np.asarray(value, dtype=np.float64) for name, value in state["arrays"].items()}
            kernels = {side: kernel_from_dict(state[f"kernel_{side}"]) for side in ("x", "y")}
            model = cls(kernel_x=kernels["x"], kernel_y=kernels["y"], **state["params"])
            bases = {side: SpectralBasis.from_arrays(kernels[side], arrays, side) for side in ("x", "y")}
            traces = {f"trace_error_{side}": arrays[f"{side}_trace_error"] for side in ("x", "y")}
            model.n_samples_ = int(state["n_samples"])
        except KeyError as missing:
            raise ValueError(f"state: missing part {missing}") from None
        model.check_params()
        model.diagnostics_ = {**state.get("diagnostics", {}), **traces}
        return model, arrays, bases

    # -- fitted state and query points ----------------------------------------------------------
    def _fitted(self) -> None:
        """``NotFittedError`` (a ``RuntimeError``; scikit-learn's too where it is loaded) unless the estimator
        was fitted (or loaded from a state)."""
        if not hasattr(self, self._FITTED):
            raise not_fitted(f"{type(self).__name__}: call fit(X, Y) before querying the model")

    def _queries(self, Xq: Any) -> np.ndarray:
        """Query points (q, d_X) as float64, with the model's number of x features (and names, where the
        fit had them: ``_checked_queries``)."""
        self._fitted()
        return self._checked_queries(Xq, self.basis_x_.width)

    def _query_pairs(self, Xq: Any, Yq: Any) -> tuple[np.ndarray, np.ndarray]:
        """Query pairs: x (q, d_X) and y (q, d_Y) with the model's feature counts and equal rows."""
        Xq = self._queries(Xq)
        Yq = as_samples(Yq, "Yq")
        width = self.basis_y_.width
        if Yq.shape[1] != width:
            raise ValueError(f"Yq: has {Yq.shape[1]} features, the model was fitted on {width}")
        check_paired(Xq, Yq, "Xq", "Yq")
        return Xq, Yq

    @property
    def law_atoms_(self) -> np.ndarray:
        """The atoms (N, d_Y) that ``conditional_weights`` weighs (default: ``y_atoms_``)."""
        return np.asarray(self.y_atoms_)

    @classmethod
    def answers(cls, query: str) -> bool:
        """Whether the method answers ``query``, a name of the query surface: the class implements it
        (or, for ``predict``, ``total_mass``, ``predict_proba`` and ``expectation``, the query they
        are built on) rather than inheriting the base's ``UnsupportedQuery``."""
        if query not in _QUERIES and query not in _BUILT_ON:
            raise ValueError(f"query: {query!r} is not a query of the estimator contract")
        if getattr(cls, query) is not getattr(Estimator, query):
            return True
        return query in _BUILT_ON and cls.answers(_BUILT_ON[query])

    @property
    def y_width_(self) -> int:
        """d_Y, the number of y features the model's laws are over."""
        self._fitted()
        return int(self.y_atoms_.shape[1])

    # -- the query surface ----------------------------------------------------------------------
    def _unsupported(self, query: str, why: str = "") -> UnsupportedQuery:
        return UnsupportedQuery(f"{query}: a {self.method or type(self).__name__} model does not answer it"
                                + (f" ({why})" if why else ""))

    def conditional_weights(self, Xq: Any) -> np.ndarray:
        """The conditional law at each query as weights on the model's atoms, (q, N)."""
        raise self._unsupported("conditional_weights")

    def conditional_expectation(self, Xq: Any, f: Callable[[np.ndarray], np.ndarray] | None = None) -> np.ndarray:
        """E[f(Y) | X = x_q], shape (q, ...); f defaults to the identity (the conditional mean, (q, d_Y))."""
        raise self._unsupported("conditional_expectation")

    def register(self, name: str, f: Callable[[np.ndarray], np.ndarray]) -> None:
        """Keep f at the model's atoms, so that ``expectations([name], Xq)`` needs no evaluation of f."""
        raise self._unsupported("register")

    def expectations(self, names: list[str], Xq: Any) -> dict[str, np.ndarray]:
        """E[f(Y) | X = x_q] of several registered functions at once, by name."""
        raise self._unsupported("expectations")

    def expectation(self, name: str, Xq: Any) -> np.ndarray:
        """E[f(Y) | X = x_q] of one registered function, shape (q, ...)."""
        return self.expectations([name], Xq)[name]

    def conditional_cdf(self, Xq: Any, thresholds: Any) -> np.ndarray:
        """Q(Y <= t | X = x_q) for thresholds t ((T,), or (T, d_Y) for a joint CDF), shape (q, T)."""
        raise self._unsupported("conditional_cdf")

    def conditional_quantile(self, Xq: Any, levels: Any, component: int = 0) -> np.ndarray:
        """Quantiles of Q(Y_component | X = x_q) at ``levels`` in (0, 1], shape (q, L)."""
        raise self._unsupported("conditional_quantile")

    def predict_proba(self, Xq: Any, classes: Any | None = None) -> np.ndarray:
        """Q(Y = c | X = x_q) for each class c of a discrete scalar Y (default ``classes_``), shape (q, C):
        the conditional expectation of the class indicators (signed and unnormalised where the law is)."""
        if not self.answers("conditional_expectation"):
            raise self._unsupported("predict_proba")
        self._fitted()
        if self.y_width_ != 1:
            raise ValueError("predict_proba: needs a scalar (discrete) Y")
        classes = self.classes_ if classes is None else np.asarray(classes, dtype=np.float64).ravel()
        return self.conditional_expectation(Xq, class_indicator(classes))

    @property
    def classes_(self) -> np.ndarray:
        """The sorted distinct values of a scalar Y among the law's atoms (the classes of ``predict_proba``)."""
        self._fitted()
        return np.unique(self.law_atoms_[:, 0])

    def negative_share(self, Xq: Any, tol: float = 1e-12) -> np.ndarray:
        """Share of the model's atoms whose signed weight (or Radon-Nikodym value) at x_q is below -tol,
        shape (q,)."""
        raise self._unsupported("negative_share")

    def negative_mass(self, Xq: Any) -> np.ndarray:
        """Negative weight of the law's weights at x_q (``conditional_weights``) relative to their total,
        shape (q,): 0 for a probability vector."""
        W = self.conditional_weights(Xq)
        return np.minimum(W, 0.0).sum(axis=1) / -W.sum(axis=1) + 0.0  # + 0.0: no -0.0

    def total_mass(self, Xq: Any) -> np.ndarray:
        """E[1 | x_q], shape (q,): measured by a pass over the atoms (1 for a normalised law)."""
        ones = lambda y: np.ones((y.shape[0], 1))  # noqa: E731 - never registered: summed afresh
        return self.conditional_expectation(Xq, ones)[:, 0]

    def predict(self, Xq: Any) -> np.ndarray:
        """The conditional mean E[Y | X = x_q], shape (q, d_Y); (q,) where the fit's y was 1-D."""
        return self._as_fitted_y(self.conditional_expectation(Xq))

    # -- named requests (the pipeline's scoring) --------------------------------------------------
    def prepare_requests(self, requests: dict[str, tuple[str, np.ndarray | None]]
                         ) -> dict[str, tuple[str, np.ndarray | None]]:
        """Check each request (name -> (kind, parameters), kind in ``REQUEST_KINDS``) against what the
        model answers; "proba" gets its classes as parameters. A model that registers functions
        keeps every non-quantile request's function at its atoms here, once. Raises ``ValueError``
        naming the request and the rule."""
        resolved = {}
        for name, (kind, values) in requests.items():
            check_choice(kind, f"function {name!r}", REQUEST_KINDS)
            if kind in ("cdf", "quantile", "proba") and self.y_width_ != 1:
                raise ValueError(f"function {name!r}: needs a scalar y, the model has {self.y_width_} y features")
            if kind == "quantile":
                values = check_levels(values)
            resolved[name] = (kind, self.classes_ if kind == "proba" else values)
        for name, (kind, values) in resolved.items():
            if kind != "quantile" and name not in self.registered_:
                self.register(name, request_function(kind, values))
        return resolved

    def answer_requests(self, requests: dict[str, tuple[str, np.ndarray | None]], Xq: Any) -> dict[str, np.ndarray]:
        """The prepared requests at the queries, by name: the registered ones share one law per row,
        quantiles read it once more for all levels."""
        registered = [name for name, (kind, _) in requests.items() if kind != "quantile"]
        out = self.expectations(registered, Xq) if registered else {}
        for name, (kind, values) in requests.items():
            if kind == "quantile":
                out[name] = self.conditional_quantile(Xq, values)
        return out


def request_function(kind: str, parameters: np.ndarray | None) -> Callable[[np.ndarray], np.ndarray]:
    """The test function f(y) (b, d_y) -> (b, ...) behind the requests mean, second_moment, cdf
    (indicators below the thresholds, scalar y) and proba (indicators of each class)."""
    if kind in STANDARD_FUNCTIONS:
        return STANDARD_FUNCTIONS[kind]
    return below_thresholds(parameters, 1) if kind == "cdf" else class_indicator(parameters)


def paired_samples(X: Any, Y: Any, x_name: str = "X", y_name: str = "Y") -> tuple[np.ndarray, np.ndarray]:
    """X (n, d_X) and Y (n, d_Y) as validated float64 arrays with at least 2 rows each and equal n."""
    X = as_samples(X, x_name, min_rows=2)
    Y = as_samples(Y, y_name, min_rows=2)
    check_paired(X, Y, x_name, y_name)
    return X, Y
