"""The JDL estimator: fit a normalized joint model, and read its conditional laws on support atoms.

Model (paper eq. (5), (26)): with the double-orthogonal bases Psi_X, Psi_Y and coefficients H
(m_Y x m_X), the Radon-Nikodym derivative is 1 + h(x, y) = 1 + Psi_Y(y) H Psi_X(x)^T, and the
conditional law of Y given x weights an atom y by (1 + h(x, y)) relative to the marginal of Y.

The marginal of Y lives on M weighted support atoms (``jdlcore.conditional.support``) that reproduce the
training sums the model depends on, so every query costs O(M m_Y) per row, whatever n is. The
signed law on the support becomes a probability vector by the estimator's rule (``jdlcore.conditional.laws``):
"project" (default) keeps its mass, mean and second moment, "clip" discards the negative mass;
without positivity ("none", "normalization") the signed weights are returned as they are.

Positivity can also be imposed in the fit: "grid" (1 + h >= 0 on the support atoms times a sample
of the training x, by budgeted cutting planes), "tightening" (the paper's (33)) and "pointwise"
(Lemma 4.2's (29), every (x, y)). These shrink the model toward independence (measured in
docs/positivity.md); their laws are still projected at query time wherever a fresh x breaks the constraint.
"""
from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

from ..conditional.atoms import STANDARD_FUNCTIONS, Atoms, FunctionSums, evaluate_function
from ..conditional.location_scale import LocationScale, own_law_crps
from ..conditional.laws import MomentBasis, apply_rule, crps as law_crps, map_rows, project, quantiles
from ..conditional.queries import below_thresholds, check_levels
from ..conditional.support import (
    Support, build_support, check_support_rows, sample_rows, support_size_for, value_range,
)
from ..kernels import Kernel
from ..lowrank.cholesky import FACTORISATION_PARAMS
from ..params import Choice, Integer, Number, Param
from ..solvers import (
    pointwise_bounds, solve_grid_positivity, solve_normalized, solve_tightened, solve_unconstrained,
)
from ..scaling import DEFAULT_SCALING
from ..validation import as_samples
from .atom_diagnostics import TrainingAtomDiagnostics
from .degeneracy import MARGINAL_ROWS, announce, factor_degeneracies, marginal_degeneracy, projection_degeneracy
from .estimator import SCALING_PARAMS, Estimator, paired_samples
from .jdl_state import JDLState
from .problem import GRID_POINTS, JDLProblem, kernel_problem, marginal_sums, support_resolution

__all__ = ["JDL", "CONSTRAINTS", "POSITIVITY", "SUPPORT_PARAMS", "TOL"]

# the relative tolerance of a JDL fit's two factorisations: a hundred times finer than the paper's 1e-3
# (the factorisations' own default, ``DEFAULT_TOL``). With the boosted summaries the x kernel often reads
# two or three features, the trace then falls fast and 1e-3 stopped at a few dozen basis functions per
# side; the finer tolerance lowered crps_99 on 10 of 12 peer-table and seed pairs at 40,000 rows (by
# 0.52% on average; docs/peers.md, "A finer trace tolerance"). Where the rank budget binds, it changes nothing.
TOL = 1e-5
CONSTRAINTS = ("none", "normalization", "positivity")
POSITIVITY = ("project", "clip", "grid", "tightening", "pointwise")
ON_Y_KINDS = ("mean", "second_moment", "cdf", "quantile")  # the requests a model of a standardised y answers
# the declarations of the laws' support and of the grid positivity budget (JDL and the polynomial JDL)
SUPPORT_PARAMS: dict[str, Param] = {
    "support_size": Param(Integer(optional=True), "support atoms M asked for the conditional laws (unset: 4 "
                          "per sum they reproduce, at least 512; at most n); the law keeps those that hold weight",
                          option=True),
    "grid_points": Param(Integer(), "training x rows of the grid positivity constraints"),
    "grid_rounds": Param(Integer(), "cutting-plane rounds of the grid positivity"),
    "grid_seconds": Param(Number(low=0, low_open=True), "wall-clock budget of the grid positivity, in seconds"),
}


class JDL(TrainingAtomDiagnostics, JDLState, Estimator):
    """Adaptive joint distribution learner (Filipovic, Multerer & Schneider).

    Parameters
    ----------
    kernel_x, kernel_y: kernels on X and Y (default Gaussian with lengthscale 1).
    reg: lambda of the regularised loss (8), >= 0 (> 0 with constraints="positivity").
    tol: relative tolerance of the pivoted Cholesky decompositions (residual trace / trace K; default
        ``TOL``, 1e-5).
    constraints: "none", "normalization" or "positivity" (normalization, and a positive law).
    positivity: how the conditional laws are made probability vectors when constraints="positivity":
        "project" (default): at every x, the probability vector on the support atoms closest to the
            signed law that keeps its mass, mean and second moment (``jdlcore.conditional.laws``); the fit is
            the normalized one;
        "clip": negative weights set to 0 and the rest renormalised at every x (discards mass);
        "grid": 1 + h >= 0 in the fit, on the support atoms times ``grid_points`` training x, by
            cutting planes; stops at ``grid_rounds`` rounds or ``grid_seconds`` (then warns with a
            ``GridBudgetWarning`` and falls back to "project");
        "tightening": the paper's single inequality (33) in the fit (much stronger than needed);
        "pointwise": Lemma 4.2's (29) in the fit: 1 + h >= 0 at every (x, y) (bounded kernels);
        the last three shrink the model toward independence; at a fresh x where their constraint
        does not reach, the law is projected as for "project".
    pivoting: "random" (default) or "greedy" pivoted Cholesky; seed for random pivoting and samples.
    scaling: "robust" (default): each kernel's inputs standardised by the median and interquartile
        range of the training columns when the fit starts (a kernel given with a scaling keeps it), so
        lengthscales are in standard units, as in ``jdl fit``; "none": the raw columns.
    max_rank: cap on each rank m_X, m_Y (None: the default budget, max(512, n / 8) within a quarter of
        the machine's memory for L, ``jdlcore.models.degeneracy.rank_budget``; a fit stopped there warns).
    support_size: M, the number of support atoms of the Y marginal (default: ``default_support_size``,
        4 atoms per sum the weights reproduce, 12 (1 + m_Y) for a scalar Y, at least 512; at most n), the
        number asked for: empty bins and atoms the reweighting leaves without weight are dropped, so
        ``support_atoms_`` may hold fewer. Fewer distinct training values: those values, exactly.
    grid_points, grid_rounds, grid_seconds: the budget of positivity="grid" (training x rows,
        cutting-plane rounds, wall-clock seconds).

    Fitted attributes end in ``_``: basis_x_, basis_y_, coef_ (H, m_Y x m_X), support_ (the support
    atoms and weights, ``jdlcore.conditional.support.Support``), atoms_ (the n training atoms, for the paper's
    diagnostics on the training grid), reductions_, diagnostics_.

    The problem a fit solves: ``jdlcore.models.problem``; ``state`` / ``from_state``:
    ``jdlcore.models.jdl_state``; the diagnostics on the n training atoms (``radon_nikodym``,
    ``negative_mass``, ``negative_share``, ``density_ratio``, ``grid_minimum``): ``jdlcore.models.atom_diagnostics``.
    """

    method = "jdl"
    summary = "adaptive joint distribution learner on kernel bases"
    positivity_rules = POSITIVITY
    laws_on_atoms = True
    fits_from_reductions = True
    state_dims = {"coef": ("basis_y", "basis_x")}
    parameters = {
        "reg": Param(Number(low=0), "regularisation lambda of the loss (> 0 with constraints positivity)"),
        **FACTORISATION_PARAMS,
        **SCALING_PARAMS,
        "constraints": Param(Choice(CONSTRAINTS), "normalization: laws of mass 1; positivity: also positive",
                             option=True),
        "positivity": Param(Choice(POSITIVITY), "how each conditional law is made a probability vector",
                            option=True),
        **SUPPORT_PARAMS,
    }

    def __init__(
        self,
        kernel_x: Kernel | None = None,
        kernel_y: Kernel | None = None,
        *,
        reg: float = 1e-3,
        tol: float = TOL,
        constraints: str = "positivity",
        positivity: str = "project",
        pivoting: str = "random",
        max_rank: int | None = None,
        seed: int | None = 0,
        block_size: int | None = None,
        support_size: int | None = None,
        grid_points: int = GRID_POINTS,
        grid_rounds: int = 200,
        grid_seconds: float = 120.0,
        scaling: str = DEFAULT_SCALING,
    ):
        self._keep_params(locals())

    # -- fitting ----------------------------------------------------------------------------------
    def _check_together(self) -> None:
        if self.constraints == "positivity" and float(self.reg) == 0:
            raise ValueError("reg: must be > 0 with constraints='positivity' (at reg = 0 the coefficients are "
                             "unbounded and no positivity guarantee survives rounding)")

    def fit(self, X: Any, Y: Any) -> "JDL":
        """Fit on paired samples X (n, d_X) and Y (n, d_Y); returns self. A degenerate fit warns
        (``jdlcore.models.degeneracy.DegeneracyWarning``) and lists why in ``diagnostics_["degeneracies"]``."""
        self.check_params()
        problem, X, Y = kernel_problem(self, X, Y)
        self.fit_problem(problem, Y)
        rows = sample_rows(X.shape[0], self.seed, MARGINAL_ROWS)
        self.check_degeneracies(X[rows], Y[rows], stacklevel=4)
        return self

    def fit_problem(self, problem: JDLProblem, Y: Any) -> "JDL":
        """Solve for ``coef_`` on a prepared problem (reused across ``reg`` values when tuning).

        The rank and solver degeneracies are listed in ``diagnostics_["degeneracies"]`` without a
        warning; ``check_degeneracies`` adds the comparison with the marginal and announces them.

        Y: the training atoms (n, d_y), in memory or a lazily read array (a zarr array).
        """
        self.check_params()
        reg = float(self.reg)
        red = problem.reductions
        if reg == 0 and np.min(red.lam_x) * np.min(red.lam_y) <= 0:
            raise ValueError("reg: must be > 0 when a basis function has zero empirical norm")
        atoms = Atoms(np.ascontiguousarray(Y) if isinstance(Y, np.ndarray) else Y, problem.basis_y)
        if atoms.n != red.n:
            raise ValueError(f"Y: has {atoms.n} rows, the problem was built on {red.n}")
        support, sums = self._support(problem, atoms)
        started = time.perf_counter()
        H, solver_info = self._solve(problem, reg)
        self.basis_x_ = problem.basis_x
        self.basis_y_ = problem.basis_y
        self.coef_ = H
        self.atoms_ = atoms
        self.reductions_ = red
        self.n_samples_ = red.n
        self._set_support(support)
        self.diagnostics_ = {
            **{k: v for k, v in problem.factors.items() if not k.startswith("pivots")},
            "objective": red.objective(H, reg),
            "normalization_defect": red.total_mass_defect(H) / red.n**2,
            "solve_seconds": time.perf_counter() - started,
            "law": self.law_rule,
            "support_size": support.size,
            "support_construction": support.construction,
            "support_exact": support.exact,
            "support_defect": support.defect,
            **solver_info,
        }
        budget_hit = self.diagnostics_.pop("grid_budget", None)  # the solver's message, a finding
        self.diagnostics_["degeneracies"] = {
            **factor_degeneracies(self.diagnostics_, red.n, float(getattr(self, "tol", 0.0))),
            **({"grid_budget": budget_hit} if budget_hit else {}),
        }
        self._training_sums: dict[str, FunctionSums] = sums
        self._support_values = {name: evaluate_function(f, support.atoms) for name, f in STANDARD_FUNCTIONS.items()}
        return self

    def _support(self, problem: JDLProblem, atoms: Atoms) -> tuple[Support, dict[str, FunctionSums]]:
        """The support of the requested size (the problem's, else one built in a pass over the atoms)
        and the problem's function sums completed with the standard ones."""
        check_support_rows(self.support_size, atoms.n)
        size = support_size_for(self.support_size, atoms.d, problem.basis_y.size, atoms.n)
        sums = dict(problem.function_sums)
        for name, f in STANDARD_FUNCTIONS.items():
            if name not in sums:
                sums[name] = atoms.function_sums(f)
        support = problem.support
        if support is None or support.requested != size:
            support = build_support(atoms.value_blocks(), atoms.take(sample_rows(atoms.n, self.seed)), size,
                                    problem.basis_y.features, marginal_sums(problem.reductions, sums), self.seed,
                                    support_resolution(getattr(problem.basis_y, "kernel", None)),
                                    value_range(atoms.value_blocks()))
            problem.support = support
        return support, sums

    def _set_support(self, support: Support) -> None:
        """The support and what queries read from it; also folds the x basis into the coefficients
        (every basis has Psi_X(x) = raw(x) @ coefficients), so a query's directions take one product."""
        self.support_ = support
        self._direction_map = np.ascontiguousarray(self.basis_x_.coefficients @ self.coef_.T)
        self._support_psi = np.ascontiguousarray(self.basis_y_.features(support.atoms))
        self._moments = MomentBasis(support)
        self._orders: dict[int, np.ndarray] = {}

    def _solve(self, problem: JDLProblem, reg: float) -> tuple[np.ndarray, dict[str, Any]]:
        """H (m_Y, m_X) for the constraints and positivity rule, and the solver's diagnostics."""
        red = problem.reductions
        if self.constraints == "none":
            return solve_unconstrained(red, reg), {}
        if self.constraints == "normalization" or self.positivity in ("project", "clip"):
            return solve_normalized(red, reg), {}
        if self.positivity == "tightening":
            if not all(np.all(np.isfinite(v)) for v in (red.min_x, red.max_x, red.min_y, red.max_y)):
                raise ValueError("positivity: 'tightening' needs the column extremes of the problem, which were not computed")
            return solve_tightened(red, reg)
        if self.positivity == "pointwise":
            return solve_tightened(red, reg, bounds=pointwise_bounds(problem.basis_x, problem.basis_y))
        return self._solve_grid(problem, reg)

    def _solve_grid(self, problem: JDLProblem, reg: float) -> tuple[np.ndarray, dict[str, Any]]:
        """1 + h >= 0 on the support atoms x a sample of the training x, evaluated exactly as queries
        evaluate it (the bases' features), by budgeted cutting planes; past the budget, the normalized
        fit with a ``GridBudgetWarning``."""
        if problem.grid_x is None or problem.support is None:
            raise ValueError("positivity: 'grid' needs the problem's support and sample of training x (grid_x)")
        support = problem.support
        grid_x = problem.grid_x[: int(self.grid_points)]
        values_x = problem.basis_x.features(grid_x)
        values_y = problem.basis_y.features(support.atoms)
        solution = solve_grid_positivity(problem.reductions, reg, values_x, values_y, max_rounds=int(self.grid_rounds),
                                         max_seconds=float(self.grid_seconds))
        info = {"grid_min": solution.grid_min, "rounds": solution.rounds, "constraints": solution.constraints,
                "active": solution.active, "grid_points": int(grid_x.shape[0]), "grid_converged": solution.converged}
        if solution.converged:
            return solution.H, info
        info["grid_budget"] = (
            f"positivity 'grid' stopped at its budget ({solution.rounds} rounds, {solution.seconds:.1f} s; grid "
            f"minimum of 1 + h {solution.grid_min:.2e}): using the normalized fit, projected at query time. "
            "Change: raise grid_rounds / grid_seconds, raise reg, or use positivity='project'")
        return solve_normalized(problem.reductions, reg), info

    @property
    def law_rule(self) -> str:
        """How the signed law becomes the law queries read: "signed", "clip" or "project" (``jdlcore.conditional.laws``)."""
        if self.constraints != "positivity":
            return "signed"
        return "clip" if self.positivity == "clip" else "project"

    @property
    def uses_tightening(self) -> bool:
        """True when fitting solves the tightening (33), which needs the column extremes of A."""
        return self.constraints == "positivity" and self.positivity == "tightening"

    @property
    def reads_x_values(self) -> bool:
        """True when fitting reads the x basis values at the training rows (``JDLProblem.A_x``)."""
        return self.uses_tightening

    @property
    def y_atoms_(self) -> Any:
        """The training atoms (n, d_y): a NumPy array, or a lazily read array for a loaded store."""
        self._fitted()
        return self.atoms_.values

    @property
    def support_atoms_(self) -> np.ndarray:
        """The support atoms (M, d_y) on which ``conditional_weights`` are given."""
        self._fitted()
        return self.support_.atoms

    law_atoms_ = support_atoms_  # the atoms the conditional weights are on

    @property
    def registered_(self) -> dict[str, tuple[np.ndarray, tuple]]:
        """Registered test functions by name: (values at the support atoms (M, p), shape of one value)."""
        self._fitted()
        return dict(self._support_values)

    # -- the conditional law ------------------------------------------------------------------------
    def _directions(self, Xq: np.ndarray) -> np.ndarray:
        """g(x_q) = H Psi_X(x_q)^T as rows (q, m_Y): 1 + h(x_q, y) = 1 + Psi_Y(y) . g(x_q)."""
        return self.basis_x_.raw(Xq) @ self._direction_map

    def _signed_values(self, g: np.ndarray) -> np.ndarray:
        """R = 1 + h(x_q, z_k) at every support atom for directions g (q, m_Y) (``_directions``), (q, M)."""
        R = g @ self._support_psi.T
        R += 1.0
        return R

    def _map_law(self, Xq: Any, read: Callable[[np.ndarray, slice], np.ndarray], width: int,
                 kept: np.ndarray | None = None) -> np.ndarray:
        """``read(P, rows)`` -> (rows, width) for the laws P of every query, block by block; (q, width).
        ``kept`` (q,) int8, if given, receives each row's projection level (``law_levels``)."""
        return self._map_checked_law(self._queries(Xq), read, width, kept)

    def _map_checked_law(self, Xq: np.ndarray, read: Callable[[np.ndarray, slice], np.ndarray], width: int,
                         kept: np.ndarray | None = None) -> np.ndarray:
        """``_map_law`` at queries already checked (``_queries``): (q, d_X) float64."""
        out = np.empty((Xq.shape[0], width))
        if kept is not None and (self.law_rule != "project" or kept.shape != (Xq.shape[0],)
                                 or kept.dtype != np.int8):
            raise ValueError(f"kept: needs the 'project' rule and an int8 array of shape ({Xq.shape[0]},); the law "
                             f"is {self.law_rule!r}, the array {kept.dtype} {kept.shape}")

        def work(rows: slice) -> None:
            R = self._signed_values(self._directions(Xq[rows]))
            P, level = apply_rule(R, self.support_.weights, self.law_rule, self._moments)
            if kept is not None:
                kept[rows] = level
            out[rows] = read(P, rows)

        map_rows(Xq.shape[0], self.support_.size, work)
        return out

    def conditional_weights(self, Xq: Any) -> np.ndarray:
        """The conditional law at each query: weights (q, M) on ``support_atoms_``, rows summing to 1
        (non-negative under constraints="positivity")."""
        self._fitted()
        return self._map_law(Xq, lambda P, rows: P, self.support_.size)

    def law_levels(self, Xq: Any) -> np.ndarray:
        """What the projection kept at each query, (q,) int: 2 mass, mean and second moment; 1 mass and
        mean (the second moment is outside the moment set of the atoms); 0 mass (the mean is outside
        their hull); -1 the signed law had no positive mass; -2 failed: no solver certified what could
        be kept, and the row has the vector of a lower level (``jdlcore.conditional.laws.LEVELS``)."""
        return self._projection(Xq)[1].astype(np.int64)

    def _projection(self, Xq: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``jdlcore.conditional.laws.project`` at the queries: (P, level, exact passes)."""
        if self.law_rule != "project":
            raise ValueError(f"law_levels: only the 'project' rule keeps moments; this model's law is "
                             f"{self.law_rule!r}")
        R = self._signed_values(self._directions(self._queries(Xq)))
        return project(R, self.support_.weights, self._moments)

    def projection_record(self, Xq: Any) -> dict[str, Any]:
        """What the projection did at the queries Xq (q, d_X): {"rows": q, "levels": {level: share}
        (levels as strings, ``law_levels``), "failed": the share at level -2, "exact_path": the share
        the exact path solved (``jdlcore.conditional._law_kernels``)}."""
        _, level, exact = self._projection(Xq)
        values, counts = np.unique(level, return_counts=True)
        return {"rows": int(level.size), "levels": {str(int(v)): float(c / level.size) for v, c in zip(values, counts)},
                "failed": float(np.mean(level == -2)), "exact_path": float(np.mean(exact > 0))}

    def negative_support_mass(self, Xq: Any) -> np.ndarray:
        """Negative mass of the signed law on the support at each query, relative to its total, (q,)."""
        R = self._signed_values(self._directions(self._queries(Xq)))
        R *= self.support_.weights
        return -np.minimum(R, 0.0).sum(axis=1) / R.sum(axis=1)

    def conditional_expectation(self, Xq: Any, f: Callable[[np.ndarray], np.ndarray] | None = None) -> np.ndarray:
        """E[f(Y) | X = x_q] under the conditional law; f maps atoms (b, d_y) row by row to (b, ...).

        Returns shape (q, ...); f defaults to the identity (the conditional mean, (q, d_y)).
        """
        self._fitted()
        values, shape = evaluate_function(f, self.support_.atoms)
        return self._map_law(Xq, lambda P, rows: P @ values, values.shape[1]).reshape((-1,) + shape)

    def register(self, name: str, f: Callable[[np.ndarray], np.ndarray]) -> None:
        """Keep f at the support atoms (O(M)) so ``expectation(name, Xq)`` needs no evaluation of f.
        ``state()`` keeps the functions registered at the fit (the mean and second moment, and a
        problem's test functions); register others again after loading a store."""
        self._fitted()
        self._support_values[name] = evaluate_function(f, self.support_.atoms)

    def expectations(self, names: list[str], Xq: Any) -> dict[str, np.ndarray]:
        """``expectation(name, Xq)`` for several registered functions at once (one law per query)."""
        return self.answer_requests({name: ("expectation", None) for name in names}, Xq)

    def answer_requests(self, requests: dict[str, tuple[str, np.ndarray | None]], Xq: Any,
                        kept: np.ndarray | None = None, on: LocationScale | None = None) -> dict[str, np.ndarray]:
        """The prepared requests at the queries, by name, all read from one law per row: the
        registered functions' expectations and every quantile request. ``kept`` (q,) int8, if given
        (rule "project"), receives each row's projection level (``law_levels``). ``on``: for a model of
        a standardised y, r = (y - location) / scale, the answers on y's scale (``_answers_on_y``)."""
        self._fitted()
        if on is not None:
            return self._answers_on_y(requests, Xq, kept, on)
        registered = [name for name, (kind, _) in requests.items() if kind != "quantile"]
        missing = [name for name in registered if name not in self._support_values]
        if missing:
            raise ValueError(f"names: no test function {missing[0]!r} registered; have {sorted(self._support_values)}")
        values = [self._support_values[name] for name in registered]
        asked = {name: check_levels(v) for name, (kind, v) in requests.items() if kind == "quantile"}
        if asked and self.support_.d != 1:
            raise ValueError(f"quantile: needs a scalar y, the model has {self.support_.d} y features")
        column = self.support_.atoms[:, 0]
        order = self._order(0) if asked else None
        stacked = np.hstack([v for v, _ in values]) if values else np.empty((column.size, 0))

        def read(P: np.ndarray, rows: slice) -> np.ndarray:
            return np.hstack([P @ stacked] + [quantiles(P, column, levels, order) for levels in asked.values()])

        width = stacked.shape[1] + sum(levels.size for levels in asked.values())
        table = self._map_law(Xq, read, width, kept)
        out, offset = {}, 0
        for name, (part, shape) in zip(registered, values):
            out[name] = table[:, offset:offset + part.shape[1]].reshape((-1,) + shape)
            offset += part.shape[1]
        for name, levels in asked.items():
            out[name] = table[:, offset:offset + levels.size]
            offset += levels.size
        return out

    def _answers_on_y(self, requests: dict[str, tuple[str, np.ndarray | None]], Xq: Any, kept: np.ndarray | None,
                      on: LocationScale) -> dict[str, np.ndarray]:
        """``answer_requests`` for a model of r = (y - location) / scale (a scalar y), read on y's scale
        through ``on`` (one location and scale per query; ``jdlcore.conditional.location_scale``): the
        mean, the second moment, CDFs (each row's thresholds moved to r's scale) and quantiles."""
        unknown = sorted(name for name, (kind, _) in requests.items() if kind not in ON_Y_KINDS)
        if unknown:
            raise ValueError(f"function {unknown[0]!r}: a model of a standardised y answers "
                             f"{', '.join(ON_Y_KINDS)} on y's scale")
        if self.support_.d != 1:
            raise ValueError(f"on: standardises a scalar y, the model has {self.support_.d} y features")
        Xq = self._queries(Xq)
        _check_rows(on, Xq.shape[0])
        column, order = self.support_.atoms[:, 0], self._order(0)
        asked = {name: (kind, np.asarray(v, dtype=np.float64).reshape(-1) if kind == "cdf" else check_levels(v))
                 for name, (kind, v) in requests.items() if kind in ("cdf", "quantile")}

        def read(P: np.ndarray, block: slice) -> np.ndarray:
            part = on.rows(block)
            return np.hstack([np.column_stack(part.moments(P, column))] + [
                part.cdf(P, column, order, v) if kind == "cdf"
                else part.quantiles(quantiles(P, column, v, order)) for kind, v in asked.values()])

        table = self._map_checked_law(Xq, read, 2 + sum(v.size for _, v in asked.values()), kept)
        out = {name: table[:, :1] if kind == "mean" else table[:, 1, None, None]
               for name, (kind, _) in requests.items() if kind in STANDARD_FUNCTIONS}
        offset = 2
        for name, (_, v) in asked.items():
            out[name] = table[:, offset:offset + v.size]
            offset += v.size
        return out

    def conditional_cdf(self, Xq: Any, thresholds: Any) -> np.ndarray:
        """Q(Y <= t | X = x_q) for thresholds t, shape (q, T).

        ``thresholds`` is (T,) for scalar Y, or (T, d_y) for the joint CDF of a vector Y
        (every component below its threshold).
        """
        self._fitted()
        return self.conditional_expectation(Xq, below_thresholds(thresholds, self.support_.d))

    def conditional_quantile(self, Xq: Any, levels: Any, component: int = 0) -> np.ndarray:
        """Quantiles of Q(Y_component | X = x_q) at ``levels`` in (0, 1], shape (q, len(levels)).

        The quantile is the smallest support atom y with Q(Y <= y | x) >= level (the generalised
        inverse of the conditional CDF; for a signed law, of its running maximum). All levels in one
        pass over the sorted atoms per query: O(M + levels).
        """
        self._fitted()
        levels = check_levels(levels)
        d_y = self.support_.d
        if not 0 <= component < d_y:
            raise ValueError(f"component: must be in [0, {d_y}), got {component}")
        column, order = self.support_.atoms[:, component], self._order(component)
        return self._map_law(Xq, lambda P, rows: quantiles(P, column, levels, order), levels.size)

    def _order(self, component: int) -> np.ndarray:
        """The support atoms sorted by y component ``component`` (argsort, computed once)."""
        if component not in self._orders:
            self._orders[component] = np.argsort(self.support_.atoms[:, component], kind="stable")
        return self._orders[component]

    def crps(self, Xq: Any, y: Any, on: LocationScale | None = None) -> np.ndarray:
        """The continuous ranked probability score of the conditional law at each (x_q, y_q), shape (q,),
        exact for the weighted support atoms (scalar Y). Lower is better. ``on``: for a model of a
        standardised y, r = (y - location) / scale, y and the score on y's scale, of the law of y clipped
        to ``on``'s range (``LocationScale.crps``)."""
        self._fitted()
        if self.support_.d != 1:
            raise ValueError(f"crps: needs a scalar y, the model has {self.support_.d} y features")
        observed = as_samples(y, "y")[:, 0]
        Xq = self._queries(Xq)
        if observed.size != Xq.shape[0]:
            raise ValueError(f"y: has {observed.size} rows, Xq has {Xq.shape[0]}")
        column = self.support_.atoms[:, 0]
        if on is None:
            return self._map_law(Xq, lambda P, rows: law_crps(P, column, observed[rows])[:, None], 1)[:, 0]
        _check_rows(on, observed.size)
        order = self._order(0)
        return self._map_law(Xq, lambda P, rows: on.rows(rows).crps(P, column, order, observed[rows])[:, None],
                             1)[:, 0]

    def marginal_ratio(self, X: Any, Y: Any, on: LocationScale | None = None) -> tuple[float, str]:
        """How much x informs the model on paired rows X (q, d_X), Y (q, d_Y): the model's mean loss over
        that of the marginal law of Y (the support weights, the law at h = 0), and the loss's name.

        The loss is the CRPS for a scalar Y, the squared error of the conditional mean (summed over
        components) for a vector Y. Near 1 (or above): the model is no better than the marginal.
        ``on``: for a model of r = (y - location) / scale (Y holds r), the CRPS on y's scale, against the
        law of the rows' own y (each y weighted 1 / q).
        """
        self._fitted()
        X, Y = paired_samples(X, Y)
        marginal = self.support_.weights  # the law at h = 0; it sums to 1
        if on is not None:
            y = on.location + on.scale * Y[:, 0]
            marginal_loss = float(np.mean(own_law_crps(y)))
            model_loss = float(np.mean(self.crps(X, y, on=on)))
            return (model_loss / marginal_loss if marginal_loss > 0 else np.nan), "CRPS"
        if self.support_.d == 1:
            model_loss = float(np.mean(self.crps(X, Y)))
            marginal_loss = float(np.mean(law_crps(np.broadcast_to(marginal, (len(Y), marginal.size)),
                                                     self.support_.atoms[:, 0], Y[:, 0])))
            return (model_loss / marginal_loss if marginal_loss > 0 else np.nan), "CRPS"
        model_loss = float(np.mean(np.sum((Y - self.conditional_expectation(X)) ** 2, axis=1)))
        marginal_loss = float(np.mean(np.sum((Y - marginal @ self.support_.atoms) ** 2, axis=1)))
        return (model_loss / marginal_loss if marginal_loss > 0 else np.nan), "squared error of the mean"

    def check_degeneracies(self, X: Any, Y: Any, stacklevel: int = 3, on: LocationScale | None = None
                           ) -> dict[str, str]:
        """Compare the fitted model with the marginal on paired training rows X, Y (a sample of up to
        ``MARGINAL_ROWS``; ``on``: see ``marginal_ratio``), add the finding to
        ``diagnostics_["degeneracies"]`` with the rank and solver ones of the fit, store
        ``marginal_ratio`` and (rule "project") the ``projection_record`` at those x, a finding where any
        row failed, and warn once per finding (``DegeneracyWarning``). Returns the findings, kind -> message."""
        ratio, score = self.marginal_ratio(X, Y, on)
        earlier = {kind: message for kind, message in self.diagnostics_.get("degeneracies", {}).items()
                   if kind != "near_marginal"}  # an earlier check's finding: this comparison replaces it
        found = {**earlier, **marginal_degeneracy(ratio, len(X), score)}
        self.diagnostics_.update({"marginal_ratio": ratio, "marginal_score": score, "degeneracies": found})
        if self.law_rule == "project":
            record = self.projection_record(X)
            self.diagnostics_["projection"] = record
            found.pop("projection_failed", None)  # an earlier check's finding: this record replaces it
            found.update(projection_degeneracy(record))
        announce(found, stacklevel)
        return found

    @property
    def classes_(self) -> np.ndarray:
        """The distinct training values of a discrete scalar Y (the classes of ``predict_proba``)."""
        self._fitted()
        if self.support_.construction != "distinct":
            raise ValueError(f"classes_: Y has more than {self.support_.requested} distinct values, so it is not "
                             "treated as discrete; use conditional_cdf, or fit with a larger support_size")
        return np.unique(self.support_.atoms[:, 0])


def _check_rows(on: LocationScale, queries: int) -> None:
    """``ValueError`` unless ``on`` has one location and scale per query (each block of rows reads its own)."""
    if len(on) != queries:
        raise ValueError(f"on: has {len(on)} locations and scales for {queries:d} queries")
