"""The JDL estimator: fit a normalized (and positive) joint model, query its conditionals.

Model (paper eq. (5), (26)): with the double-orthogonal bases Psi_X, Psi_Y and coefficients H
(m_Y x m_X), 1 + h(x, y_j) = 1 + A_Y[j] H Psi_X(x)^T on the training atoms y_j, and

    Q(Y = y_j | X = x) = (1 + h(x, y_j)) / (n + s_Y^T H Psi_X(x)^T).

Conditional expectations of f are (sum_j f(y_j) + (F^T A_Y) H Psi_X(x)^T) / (n + s_Y^T H Psi_X(x)^T):
for registered test functions the n-sized sums are computed once at registration, so scoring costs
O(m_X (d_X + p)) per query, independent of n.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from .atoms import Atoms, FunctionSums, block_sums, evaluate_function
from .basis import (
    JDLReductions, SpectralBasis, column_extremes, factor_partials, reductions_from_partials, spectral_basis,
)
from .cholesky import PivotedCholesky, pivoted_cholesky
from .estimator import Estimator
from .kernels import Kernel, kernel_from_dict
from .queries import below_thresholds, check_levels, class_indicator, quantiles_from_weights
from .solvers import (
    grid_minimum, pointwise_bounds, solve_grid_positivity, solve_normalized, solve_tightened, solve_unconstrained,
)
from .validation import as_samples, check_choice, check_nonnegative

__all__ = ["JDL", "JDLProblem", "build_problem", "problem_from_factors", "factor_diagnostics", "CONSTRAINTS", "POSITIVITY"]

CONSTRAINTS = ("none", "normalization", "positivity")
POSITIVITY = ("grid", "tightening", "pointwise", "clip")
_QUERY_SLAB = 1 << 15  # queries per slab when scoring registered functions
_QUERY_ELEMENTS = 1 << 22  # (queries x atoms) entries per batch when weights over all atoms are needed


@dataclass
class JDLProblem:
    """Everything a solve needs, independent of ``reg`` and the constraints.

    basis_x, basis_y: double-orthogonal bases; A_x (n, m_X), A_y (n, m_Y): their values at the
    training samples (both may be None when no grid-positivity solve is needed); reductions: the
    m x m sums of the problem; factor diagnostics in ``factors``; function_sums: sums of test
    functions over the atoms, registered with the fitted model under their names.
    """

    basis_x: SpectralBasis
    basis_y: SpectralBasis
    A_x: np.ndarray | None
    A_y: np.ndarray | None
    reductions: JDLReductions
    factors: dict
    function_sums: dict[str, FunctionSums] = field(default_factory=dict)


def build_problem(
    X: np.ndarray,
    Y: np.ndarray,
    kernel_x: Kernel,
    kernel_y: Kernel,
    *,
    tol: float,
    max_rank: int | None = None,
    pivoting: str = "random",
    seed: int | None = 0,
    block_size: int | None = None,
    test_functions: dict[str, Callable] | None = None,
) -> JDLProblem:
    """Pivoted Cholesky of K_X and K_Y, double-orthogonal bases and the reductions (in memory).

    ``test_functions`` (name -> f, row-wise on the atoms) are summed here and registered with
    models fitted on the problem.
    """
    started = time.perf_counter()
    factor_x = pivoted_cholesky(kernel_x, X, tol=tol, max_rank=max_rank, pivoting=pivoting, seed=seed, block_size=block_size)
    factor_y = pivoted_cholesky(kernel_y, Y, tol=tol, max_rank=max_rank, pivoting=pivoting, seed=seed, block_size=block_size)
    return problem_from_factors(factor_x, factor_y, kernel_x, kernel_y, Y, test_functions=test_functions,
                                started=started)


def problem_from_factors(
    factor_x: PivotedCholesky,
    factor_y: PivotedCholesky,
    kernel_x: Kernel,
    kernel_y: Kernel,
    Y: np.ndarray,
    *,
    test_functions: dict[str, Callable] | None = None,
    started: float | None = None,
) -> JDLProblem:
    """``build_problem`` from given in-memory factorisations of K_X and K_Y (n rows each, Y the
    atoms (n, d_y)): a lengthscale search factorises each side once per lengthscale and pairs them
    here. ``started``: the perf_counter time the factorisations began (for ``factor_seconds``)."""
    started = time.perf_counter() if started is None else started
    partials = factor_partials(factor_x.L, factor_y.L)
    basis_x = spectral_basis(factor_x, kernel_x, gram=partials.gram_x)
    basis_y = spectral_basis(factor_y, kernel_y, gram=partials.gram_y)
    A_x = factor_x.L @ basis_x.rotation
    A_y = factor_y.L @ basis_y.rotation
    reductions = reductions_from_partials(partials, basis_x, basis_y, column_extremes(A_x), column_extremes(A_y))
    sums = {name: block_sums(f, Y, A_y) for name, f in (test_functions or {}).items()}
    return JDLProblem(basis_x, basis_y, A_x, A_y, reductions, factor_diagnostics(factor_x, factor_y, started), sums)


def factor_diagnostics(factor_x: PivotedCholesky, factor_y: PivotedCholesky, started: float) -> dict:
    """Ranks, residual traces and stop reasons of the two factorisations."""
    return {
        "rank_x": factor_x.rank,
        "rank_y": factor_y.rank,
        "trace_error_x": factor_x.trace_error,
        "trace_error_y": factor_y.trace_error,
        "relative_error_x": factor_x.relative_error,
        "relative_error_y": factor_y.relative_error,
        "stop_reason_x": factor_x.stop_reason,
        "stop_reason_y": factor_y.stop_reason,
        "pivots_x": factor_x.pivots,
        "pivots_y": factor_y.pivots,
        "factor_seconds": time.perf_counter() - started,
    }


class JDL(Estimator):
    """Adaptive joint distribution learner (Filipovic, Multerer & Schneider).

    Parameters
    ----------
    kernel_x, kernel_y: kernels on X and Y (default Gaussian with lengthscale 1).
    reg: lambda of the regularised loss (8), >= 0.
    tol: relative tolerance of the pivoted Cholesky decompositions (residual trace / trace K).
    constraints: "none", "normalization" or "positivity" (normalization and positivity).
    positivity: how positivity is imposed when constraints="positivity":
        "grid" (default): exact 1 + h >= 0 on the whole training grid (cutting planes);
        "tightening": the paper's single inequality (33) (much stronger than needed);
        "pointwise": Lemma 4.2's (29) with whole-domain bounds of the basis functions (bounded
        kernels): 1 + h >= 0 at every (x, y), not only on the grid; the most conservative rule;
        "clip": normalization only; negative conditional weights are clipped to 0 and the rest
        renormalised at query time.
    pivoting: "random" (default) or "greedy" pivoted Cholesky; seed for random pivoting.
    max_rank: cap on each rank m_X, m_Y.

    Fitted attributes end in ``_``: basis_x_, basis_y_, coef_ (H, m_Y x m_X), atoms_ (the training
    atoms y_j and their basis values, see ``jdlcore.atoms``), y_atoms_ (n, d_y), reductions_,
    diagnostics_.
    """

    def __init__(
        self,
        kernel_x: Kernel | None = None,
        kernel_y: Kernel | None = None,
        reg: float = 1e-3,
        tol: float = 1e-3,
        constraints: str = "positivity",
        positivity: str = "grid",
        pivoting: str = "random",
        max_rank: int | None = None,
        seed: int | None = 0,
        block_size: int | None = None,
    ):
        self.kernel_x = kernel_x
        self.kernel_y = kernel_y
        self.reg = reg
        self.tol = tol
        self.constraints = constraints
        self.positivity = positivity
        self.pivoting = pivoting
        self.max_rank = max_rank
        self.seed = seed
        self.block_size = block_size

    # -- fitting ----------------------------------------------------------------------------------
    def _check_params(self) -> None:
        check_nonnegative(self.reg, "reg")
        check_choice(self.constraints, "constraints", CONSTRAINTS)
        check_choice(self.positivity, "positivity", POSITIVITY)
        self._check_factorisation()

    def fit(self, X: Any, Y: Any) -> "JDL":
        """Fit on paired samples X (n, d_X) and Y (n, d_Y); returns self."""
        self._check_params()
        problem, X, Y = self._kernel_problem(X, Y)
        return self.fit_problem(problem, Y)

    def fit_problem(self, problem: JDLProblem, Y: Any) -> "JDL":
        """Solve for ``coef_`` on a prepared problem (reused across ``reg`` values when tuning).

        Y: the training atoms (n, d_y), in memory or a lazily read array (a zarr array).
        """
        self._check_params()
        reg = float(self.reg)
        red = problem.reductions
        if reg == 0 and np.min(red.lam_x) * np.min(red.lam_y) <= 0:
            raise ValueError("reg: must be > 0 when a basis function has zero empirical norm")
        started = time.perf_counter()
        H, solver_info = self._solve(problem, reg)
        self.basis_x_ = problem.basis_x
        self.basis_y_ = problem.basis_y
        self.coef_ = H
        self.atoms_ = Atoms(np.ascontiguousarray(Y) if isinstance(Y, np.ndarray) else Y, problem.basis_y)
        self.reductions_ = red
        self.n_samples_ = red.n
        self.diagnostics_ = {
            **{k: v for k, v in problem.factors.items() if not k.startswith("pivots")},
            "objective": red.objective(H, reg),
            "normalization_defect": red.total_mass_defect(H) / red.n**2,
            "solve_seconds": time.perf_counter() - started,
            **solver_info,
        }
        self._registered: dict[str, FunctionSums] = dict(problem.function_sums)
        return self

    def _solve(self, problem: JDLProblem, reg: float) -> tuple[np.ndarray, dict[str, Any]]:
        """H (m_Y, m_X) for the constraints and positivity rule, and the solver's diagnostics."""
        red = problem.reductions
        if self.constraints == "none":
            return solve_unconstrained(red, reg), {}
        if self.constraints == "normalization" or self.positivity == "clip":
            return solve_normalized(red, reg), {}
        if self.positivity == "tightening":
            if not all(np.all(np.isfinite(v)) for v in (red.min_x, red.max_x, red.min_y, red.max_y)):
                raise ValueError("positivity: 'tightening' needs the column extremes of the problem, which were not computed")
            return solve_tightened(red, reg)
        if self.positivity == "pointwise":
            return solve_tightened(red, reg, bounds=pointwise_bounds(problem.basis_x, problem.basis_y))
        if problem.A_x is None or problem.A_y is None:
            raise ValueError("positivity: 'grid' needs the basis values A_x and A_y of the problem, which were not kept")
        solution = solve_grid_positivity(red, reg, problem.A_x, problem.A_y)
        return solution.H, {"grid_min": solution.grid_min, "rounds": solution.rounds,
                            "constraints": solution.constraints, "active": solution.active}

    @property
    def y_atoms_(self) -> Any:
        """The training atoms (n, d_y): a NumPy array, or a lazily read array for a loaded store."""
        self._fitted()
        return self.atoms_.values

    @property
    def registered_(self) -> dict[str, FunctionSums]:
        """Registered test functions by name (their sums over the atoms)."""
        self._fitted()
        return dict(self._registered)

    # -- state (for stores) -----------------------------------------------------------------------
    _PARAMS = ("reg", "tol", "constraints", "positivity", "pivoting", "max_rank", "seed", "block_size")

    def state(self) -> dict[str, Any]:
        """Everything a fitted model needs, as NumPy arrays and JSON-able values (no pickles).

        ``from_state(state())`` rebuilds a model whose queries are bit-identical. The atoms are
        passed through as they are (a lazily read array stays lazy); registered test functions
        are kept as ``registered_{k}_moments`` / ``registered_{k}_totals`` with names and shapes
        under "registered".
        """
        self._fitted()
        red = self.reductions_
        arrays = {
            "coef": self.coef_, "y_atoms": self.y_atoms_,
            **{f"reduction_{name}": getattr(red, name) for name in red.__dataclass_fields__ if name != "n"},
        }
        registered = []
        for k, (name, sums) in enumerate(self._registered.items()):
            arrays[f"registered_{k}_moments"], arrays[f"registered_{k}_totals"] = sums.moments, sums.totals
            registered.append({"name": name, "shape": list(sums.shape)})
        for side, basis in (("x", self.basis_x_), ("y", self.basis_y_)):
            arrays.update(basis.to_arrays(side))
            arrays[f"{side}_trace_error"] = np.asarray(self.diagnostics_[f"trace_error_{side}"], dtype=np.float64)
        diagnostics = {
            k: (v.item() if isinstance(v, np.generic) else v)
            for k, v in self.diagnostics_.items() if not isinstance(v, np.ndarray)
        }
        return {
            "arrays": arrays,
            "kernel_x": self._basis_spec(self.basis_x_),
            "kernel_y": self._basis_spec(self.basis_y_),
            "params": {name: getattr(self, name) for name in self._PARAMS},
            "n_samples": int(self.n_samples_),
            "diagnostics": diagnostics,
            "registered": registered,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> "JDL":
        """Rebuild a fitted model from ``state()``; raises ``ValueError`` on missing or inconsistent parts."""
        try:
            y_atoms = state["arrays"]["y_atoms"]
            arrays = {k: np.asarray(v, dtype=np.float64) for k, v in state["arrays"].items() if k != "y_atoms"}
            model = cls._from_params(state)
            n = int(state["n_samples"])
            bases = {side: cls._basis_from_state(side, arrays, state) for side in ("x", "y")}
            reductions = JDLReductions(n=n, **{
                name: arrays[f"reduction_{name}"] for name in JDLReductions.__dataclass_fields__ if name != "n"
            })
            coef = arrays["coef"]
            registered = {
                entry["name"]: FunctionSums(arrays[f"registered_{k}_moments"], arrays[f"registered_{k}_totals"],
                                            tuple(int(s) for s in entry["shape"]))
                for k, entry in enumerate(state.get("registered", []))
            }
        except KeyError as missing:
            raise ValueError(f"state: missing part {missing}") from None
        m_y, m_x = coef.shape
        shapes = {name: array.shape for name, array in arrays.items()}
        shapes["y_atoms"] = tuple(y_atoms.shape)
        if (bases["x"].size, bases["y"].size) != (m_x, m_y):
            raise ValueError(f"state: coef has shape {coef.shape}, the bases have {bases['y'].size} x {bases['x'].size}")
        expected = {"y_atoms": (n, bases["y"].width), "reduction_cross": (m_y, m_x)}
        for k, (name, sums) in enumerate(registered.items()):
            p = int(np.prod(sums.shape))
            expected[f"registered_{k}_moments"], expected[f"registered_{k}_totals"] = (m_y, p), (p,)
        for name, shape in expected.items():
            if shapes[name] != shape:
                raise ValueError(f"state: {name} has shape {shapes[name]}, expected {shape}")
        model._check_params()
        model.basis_x_, model.basis_y_ = bases["x"], bases["y"]
        model.coef_ = coef
        model.atoms_ = Atoms(y_atoms, bases["y"])
        model.reductions_, model.n_samples_ = reductions, n
        model.diagnostics_ = {
            **state.get("diagnostics", {}),
            "trace_error_x": arrays["x_trace_error"], "trace_error_y": arrays["y_trace_error"],
        }
        model._registered = registered
        return model

    @staticmethod
    def _basis_spec(basis: Any) -> dict[str, Any]:
        """JSON description of what generates a basis (here: its kernel), stored as ``kernel_{side}``."""
        return basis.kernel.to_dict()

    @classmethod
    def _from_params(cls, state: dict[str, Any]) -> "JDL":
        """An unfitted estimator with the stored hyperparameters."""
        return cls(kernel_x=kernel_from_dict(state["kernel_x"]), kernel_y=kernel_from_dict(state["kernel_y"]),
                   **state["params"])

    @classmethod
    def _basis_from_state(cls, side: str, arrays: dict[str, np.ndarray], state: dict[str, Any]) -> Any:
        """The basis of one side ("x" or "y") from ``state()``'s arrays (subclasses with other bases override)."""
        return SpectralBasis.from_arrays(kernel_from_dict(state[f"kernel_{side}"]), arrays, side)

    # -- queries ----------------------------------------------------------------------------------
    def _fitted(self) -> None:
        if not hasattr(self, "coef_"):
            raise RuntimeError("JDL: call fit(X, Y) before querying the model")

    def _queries(self, Xq: Any) -> np.ndarray:
        self._fitted()
        Xq = as_samples(Xq, "Xq")
        width = self.basis_x_.width
        if Xq.shape[1] != width:
            raise ValueError(f"Xq: has {Xq.shape[1]} features, the model was fitted on {width}")
        return Xq

    @property
    def uses_grid(self) -> bool:
        """True when fitting solves exact positivity on the training grid."""
        return self.constraints == "positivity" and self.positivity == "grid"

    @property
    def uses_tightening(self) -> bool:
        """True when fitting solves the tightening (33), which needs the column extremes of A."""
        return self.constraints == "positivity" and self.positivity == "tightening"

    @property
    def clips(self) -> bool:
        return self.constraints == "positivity" and self.positivity == "clip"

    def _directions(self, Xq: np.ndarray) -> np.ndarray:
        """g(x_q) = H Psi_X(x_q)^T as rows (q, m_Y): 1 + h(x_q, y_j) = 1 + A_Y[j] . g(x_q)."""
        return self.basis_x_.features(Xq) @ self.coef_.T

    def radon_nikodym(self, Xq: Any) -> np.ndarray:
        """1 + h(x_q, y_j) for queries x_q and every training atom y_j, shape (q, n)."""
        Xq = self._queries(Xq)
        g = self._directions(Xq)
        values = np.empty((Xq.shape[0], self.n_samples_))
        for rows, _, A in self.atoms_.blocks():
            np.matmul(g, A.T, out=values[:, rows])
        values += 1.0
        return values

    def conditional_weights(self, Xq: Any) -> np.ndarray:
        """Weights of Q(Y | X = x_q) on the training atoms y_j, shape (q, n); rows sum to 1."""
        values = self.radon_nikodym(Xq)
        if self.clips:
            np.maximum(values, 0.0, out=values)
        values /= values.sum(axis=1, keepdims=True)
        return values

    def negative_mass(self, Xq: Any) -> np.ndarray:
        """Total negative weight of Q(Y | X = x_q) before any clipping, shape (q,); 0 for a positive model."""
        Xq = self._queries(Xq)
        negative, totals = np.zeros(Xq.shape[0]), np.zeros(Xq.shape[0])
        g = self._directions(Xq)
        for _, _, A in self.atoms_.blocks():  # atoms outside: one pass over them for all queries
            for sl in _batches(Xq.shape[0], A.shape[0]):
                values = g[sl] @ A.T
                values += 1.0
                negative[sl] += np.minimum(values, 0.0).sum(axis=1)
                totals[sl] += values.sum(axis=1)
        return negative / -totals

    def negative_share(self, Xq: Any, tol: float = 1e-12) -> np.ndarray:
        """Share of training atoms y_j with 1 + h(x_q, y_j) < -tol (a negative Radon-Nikodym value, before
        any clipping), shape (q,); computed block by block, so never (q, n) in memory."""
        Xq = self._queries(Xq)
        counts = np.zeros(Xq.shape[0])
        g = self._directions(Xq)
        for _, _, A in self.atoms_.blocks():
            for sl in _batches(Xq.shape[0], A.shape[0]):
                counts[sl] += np.count_nonzero(g[sl] @ A.T < -1.0 - tol, axis=1)
        return counts / self.n_samples_

    def conditional_expectation(self, Xq: Any, f: Callable[[np.ndarray], np.ndarray] | None = None) -> np.ndarray:
        """E_Q[f(Y) | X = x_q] for each query; f maps atoms (b, d_y) row by row to (b, ...).

        Returns shape (q, ...); f defaults to the identity (the conditional mean, (q, d_y)).
        """
        Xq = self._queries(Xq)
        if not self.clips:
            sums = self.atoms_.function_sums(f)
            return self._project_queries(Xq, sums).reshape((Xq.shape[0],) + sums.shape)
        return self._clipped_expectation(Xq, f)

    def register(self, name: str, f: Callable[[np.ndarray], np.ndarray]) -> None:
        """Precompute the n-sized sums of a test function so ``expectation(name, Xq)`` costs O(m_X) per query."""
        self._fitted()
        self._registered[name] = self.atoms_.function_sums(f)

    def expectation(self, name: str, Xq: Any) -> np.ndarray:
        """E_Q[f(Y) | X = x_q] for a registered test function, shape (q, ...)."""
        Xq = self._queries(Xq)
        if name not in self._registered:
            raise ValueError(f"name: no test function {name!r} registered; have {sorted(self._registered)}")
        if self.clips:
            raise ValueError("expectation: clipped models need all atoms; use conditional_expectation")
        sums = self._registered[name]
        return self._project_queries(Xq, sums).reshape((Xq.shape[0],) + sums.shape)

    def expectations(self, names: list[str], Xq: Any) -> dict[str, np.ndarray]:
        """``expectation(name, Xq)`` for several registered functions at once (one kernel block)."""
        Xq = self._queries(Xq)
        missing = [name for name in names if name not in self._registered]
        if missing:
            raise ValueError(f"names: no test function {missing[0]!r} registered; have {sorted(self._registered)}")
        if self.clips:
            raise ValueError("expectations: clipped models need all atoms; use conditional_expectation")
        parts = [self._registered[name] for name in names]
        joint = FunctionSums(np.hstack([p.moments for p in parts]), np.concatenate([p.totals for p in parts]),
                             (sum(p.totals.size for p in parts),))
        values = self._project_queries(Xq, joint)
        out, offset = {}, 0
        for name, part in zip(names, parts):
            out[name] = values[:, offset:offset + part.totals.size].reshape((Xq.shape[0],) + part.shape)
            offset += part.totals.size
        return out

    def conditional_cdf(self, Xq: Any, thresholds: Any) -> np.ndarray:
        """Q(Y <= t | X = x_q) for thresholds t, shape (q, T).

        ``thresholds`` is (T,) for scalar Y, or (T, d_y) for the joint CDF of a vector Y
        (every component below its threshold).
        """
        self._fitted()
        return self.conditional_expectation(Xq, below_thresholds(thresholds, self.atoms_.d))

    def conditional_quantile(self, Xq: Any, levels: Any, component: int = 0) -> np.ndarray:
        """Quantiles of Q(Y_component | X = x_q) at ``levels`` in (0, 1], shape (q, len(levels)).

        The quantile is the smallest atom y with Q(Y <= y | x) >= level (the generalised inverse of
        the conditional CDF, which stays well defined where weights are negative). Costs O(n m_Y)
        per query: the weights on all atoms are needed.
        """
        Xq = self._queries(Xq)
        levels = check_levels(levels)
        d_y = self.atoms_.d
        if not 0 <= component < d_y:
            raise ValueError(f"component: must be in [0, {d_y}), got {component}")
        column = self.atoms_.column(component)
        order = np.argsort(column, kind="stable")
        atoms = column[order]
        out = np.empty((Xq.shape[0], levels.size))
        for sl in self._batches(Xq.shape[0]):
            out[sl] = quantiles_from_weights(self.conditional_weights(Xq[sl])[:, order], atoms, levels)
        return out

    def predict_proba(self, Xq: Any, classes: Any | None = None) -> np.ndarray:
        """Q(Y = c | X = x_q) for each class c of a discrete scalar Y, shape (q, C).

        ``classes`` defaults to the sorted distinct training values (available as ``classes_``).
        """
        self._fitted()
        if self.atoms_.d != 1:
            raise ValueError("predict_proba: needs a scalar (discrete) Y")
        classes = self.classes_ if classes is None else np.asarray(classes, dtype=np.float64).ravel()
        return self.conditional_expectation(Xq, class_indicator(classes))

    @property
    def classes_(self) -> np.ndarray:
        """Sorted distinct training values of a scalar Y (the classes of ``predict_proba``)."""
        self._fitted()
        return np.unique(self.atoms_.column(0))

    def grid_minimum(self, X: Any) -> float:
        """min over training samples x_t and atoms y_s of 1 + h(x_t, y_s) (X: the training inputs)."""
        X = self._queries(X)
        psi = self.basis_x_.features(X)
        return min(grid_minimum(self.coef_, psi, A) for _, _, A in self.atoms_.blocks())

    # -- internals --------------------------------------------------------------------------------
    def _batches(self, q: int):
        return _batches(q, self.n_samples_)

    def _project_queries(self, Xq: np.ndarray, sums: FunctionSums) -> np.ndarray:
        """E[f(Y) | x] = (totals + k(x, pivots_X) W)[:p] / (...)[p] for the test function's sums, where
        W = coefficients_X H^T [moments, s_Y] (m_X, p + 1) and raw_X(x) = k(x, pivots_X) for a kernel basis;
        computed in cache-sized slabs, (q, p)."""
        moments = np.column_stack([sums.moments, self.reductions_.sum_y])  # (m_Y, p + 1)
        weights = self.basis_x_.coefficients @ (self.coef_.T @ moments)  # (m_X, p + 1)
        totals = np.append(sums.totals, float(self.n_samples_))
        p = weights.shape[1] - 1
        out = np.empty((Xq.shape[0], p))
        for start in range(0, Xq.shape[0], _QUERY_SLAB):
            stop = min(start + _QUERY_SLAB, Xq.shape[0])
            numerator = self.basis_x_.raw(Xq[start:stop]) @ weights
            numerator += totals
            np.divide(numerator[:, :p], numerator[:, p:], out=out[start:stop])
        return out

    def _clipped_expectation(self, Xq: np.ndarray, f: Callable | None) -> np.ndarray:
        """E[f(Y) | x] under the clipped weights max(1 + h, 0) / sum, streamed over atom blocks."""
        numerator: np.ndarray | None = None
        denominator = np.zeros(Xq.shape[0])
        shape: tuple = ()
        g = self._directions(Xq)
        for _, y, A in self.atoms_.blocks():  # atoms outside: one pass over them for all queries
            values, shape = evaluate_function(f, y)
            for sl in _batches(Xq.shape[0], A.shape[0]):
                weights = g[sl] @ A.T
                weights += 1.0
                np.maximum(weights, 0.0, out=weights)
                if numerator is None:
                    numerator = np.zeros((Xq.shape[0], values.shape[1]))
                numerator[sl] += weights @ values
                denominator[sl] += weights.sum(axis=1)
        return (numerator / denominator[:, None]).reshape((Xq.shape[0],) + shape)


def _batches(q: int, atoms: int) -> list[slice]:
    """Query slices whose (queries x atoms) temporaries stay near ``_QUERY_ELEMENTS`` entries."""
    step = max(1, _QUERY_ELEMENTS // max(atoms, 1))
    return [slice(start, min(start + step, q)) for start in range(0, q, step)]
