"""The reduced JDL problem: the bases, the m x m reductions and the support that a solve reads.

A kernel estimator (JDL, its variants, CME, PSDJDL) and the pipeline's chunked path work on the same
problem: pivoted Cholesky factors L_X (n, m_X), L_Y (n, m_Y) of the two kernel matrices, their
double-orthogonal bases (``jdlcore.lowrank.basis.spectral_basis``), the reductions of the paper's
objective (``JDLReductions``: m x m sums, independent of ``reg`` and the constraints), the sums of the
test functions over the training atoms, the weighted support atoms of the Y marginal
(``jdlcore.conditional.support``) and a seeded sample of training x for grid positivity. A tuning
grid pairs each x factorisation with every y one (``ProblemSide``, ``problem_from_factors``);
``build_problem`` factorises both sides itself, ``kernel_problem`` with an estimator's settings.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable

import numpy as np

from ..conditional.atoms import STANDARD_FUNCTIONS, FunctionSums, block_sums
from ..conditional.support import (
    MarginalSums, Support, build_support, check_support_rows, sample_rows, support_size_for, value_range,
)
from ..kernels import Kernel
from ..lowrank.basis import (
    JDLReductions, SpectralBasis, column_extremes, factor_partials, reductions_from_partials, spectral_basis,
    unknown_extremes,
)
from ..lowrank.cholesky import Factorisation, PivotedCholesky, pivoted_cholesky
from .degeneracy import rank_budget
from .estimator import paired_samples

__all__ = [
    "JDLProblem", "ProblemSide", "build_problem", "problem_side", "problem_from_factors", "kernel_problem",
    "marginal_sums", "support_resolution", "factor_diagnostics", "GRID_POINTS",
]

GRID_POINTS = 1000  # training x rows of the grid positivity constraints (a seeded sample above that)


@dataclass
class JDLProblem:
    """Everything a solve needs, independent of ``reg`` and the constraints.

    basis_x, basis_y: double-orthogonal bases; A_x (n, m_X), A_y (n, m_Y): their values at the
    training samples (None on the chunked path); reductions: the m x m sums of the problem; factor
    diagnostics in ``factors``; function_sums: sums of test functions over the training atoms (the
    standard mean and second moment always), by name; support: the weighted support atoms of the Y
    marginal (built by the fit when None); grid_x: training x rows for grid positivity (<= GRID_POINTS).
    """

    basis_x: SpectralBasis
    basis_y: SpectralBasis
    A_x: np.ndarray | None
    A_y: np.ndarray | None
    reductions: JDLReductions
    factors: dict
    function_sums: dict[str, FunctionSums] = field(default_factory=dict)
    support: Support | None = None
    grid_x: np.ndarray | None = None


def build_problem(
    X: np.ndarray,
    Y: np.ndarray,
    kernel_x: Kernel,
    kernel_y: Kernel,
    factorisation: Factorisation = Factorisation(),
    *,
    test_functions: dict[str, Callable] | None = None,
    support_size: int | None = None,
    grid_points: int = GRID_POINTS,
    values_x: bool = True,
) -> JDLProblem:
    """Pivoted Cholesky of K_X and K_Y, double-orthogonal bases, reductions and support (in memory).

    ``factorisation``: the settings of both decompositions (a max_rank of None is the default budget,
    ``jdlcore.models.degeneracy.rank_budget``). ``test_functions`` (name -> f, row-wise on the atoms) are
    summed here and registered with models fitted on the problem, besides the standard mean and
    second moment. ``values_x``: compute the x basis values at the rows (``JDLProblem.A_x``) and
    their column extremes; without them A_x is None and the extremes are NaN (only the tightening
    and the PSD model read them).
    """
    started = time.perf_counter()
    budget = rank_budget(len(X)) if factorisation.max_rank is None else None
    options = factorisation.cholesky_arguments(max_rank=budget or factorisation.max_rank)
    factor_x = pivoted_cholesky(kernel_x, X, **options)
    factor_y = pivoted_cholesky(kernel_y, Y, **options)
    return problem_from_factors(factor_x, factor_y, kernel_x, kernel_y, X, Y, test_functions=test_functions,
                                started=started, support_size=support_size, seed=factorisation.seed,
                                grid_points=grid_points, rank_budget=budget, values_x=values_x)


@dataclass
class ProblemSide:
    """One kernel's half of a JDL problem on n rows, shared by every problem that pairs it (a tuning
    grid pairs each x factorisation with every y one): the pivoted Cholesky factor (L (n, m)), its
    double-orthogonal basis and the Gram matrix L^T L (m, m).

    The basis values at the rows, A = L V (n, m), and their column extremes are computed on first
    use: A costs one n x m x m product, as much as the Gram matrix, and on the x side only the
    tightening and the PSD model read it (the reductions come from L itself). As the Y side, it also
    keeps what depends on Y alone (``y_marginal``: the standard functions' sums and the support)."""

    factor: PivotedCholesky
    basis: SpectralBasis
    gram: np.ndarray

    @cached_property
    def A(self) -> np.ndarray:
        return self.factor.L @ self.basis.rotation

    @cached_property
    def extremes(self) -> tuple[np.ndarray, np.ndarray]:
        return column_extremes(self.A)

    @property
    def nbytes(self) -> int:
        values = self.__dict__.get("A")
        return int(self.factor.L.nbytes + self.gram.nbytes + (0 if values is None else values.nbytes))

    def y_marginal(self, Y: np.ndarray, reductions: JDLReductions, size: int, seed: int | None,
                   resolution: float | None) -> tuple[dict[str, FunctionSums], Support]:
        """(the standard functions' sums over the rows Y (n, d_y), the support of the Y marginal) with this
        side as the Y basis (``block_sums``, ``build_support``): functions of Y and this side alone (the
        reductions' n and sum_y are), so computed once per Y array, support size (at most the rows,
        ``support_size_for``), seed and resolution and shared by every problem that pairs this side (the x
        moves of a lengthscale search)."""
        key = (id(Y), size, seed, resolution)  # each entry holds its Y, so the id stays that array's
        kept = self.__dict__.setdefault("_y_marginals", {})
        if key not in kept:
            sums = {name: block_sums(f, Y, self.A) for name, f in STANDARD_FUNCTIONS.items()}
            support = build_support([Y], Y[sample_rows(Y.shape[0], seed)], size, self.basis.features,
                                    marginal_sums(reductions, sums), seed, resolution,
                                    value_range([Y]))
            kept[key] = (Y, sums, support)
        _, sums, support = kept[key]
        return dict(sums), support


def problem_side(factor: PivotedCholesky, kernel: Kernel) -> ProblemSide:
    """The ``ProblemSide`` of a factorisation of ``kernel``'s matrix."""
    gram = factor.L.T @ factor.L
    return ProblemSide(factor, spectral_basis(factor, kernel, gram=gram), gram)


def problem_from_factors(
    factor_x: PivotedCholesky | ProblemSide,
    factor_y: PivotedCholesky | ProblemSide,
    kernel_x: Kernel,
    kernel_y: Kernel,
    X: np.ndarray,
    Y: np.ndarray,
    *,
    test_functions: dict[str, Callable] | None = None,
    started: float | None = None,
    support_size: int | None = None,
    seed: int | None = 0,
    grid_points: int = GRID_POINTS,
    rank_budget: int | None = None,
    values_x: bool = True,
) -> JDLProblem:
    """``build_problem`` from given in-memory factorisations of K_X and K_Y (n rows each; X (n, d_x) and
    Y (n, d_y) the samples): a lengthscale search factorises each side once per lengthscale and pairs
    them here (each given as its ``ProblemSide`` where that is kept between problems). ``started``: the
    perf_counter time the factorisations began (for ``factor_seconds``); ``rank_budget``: the default
    rank cap they ran under, if any (``jdlcore.models.degeneracy``); ``values_x``: as in ``build_problem``."""
    started = time.perf_counter() if started is None else started
    side_x, side_y = (side if isinstance(side, ProblemSide) else problem_side(side, kernel)
                      for side, kernel in ((factor_x, kernel_x), (factor_y, kernel_y)))
    factor_x, factor_y = side_x.factor, side_y.factor
    basis_x, basis_y, A_y = side_x.basis, side_y.basis, side_y.A
    A_x = side_x.A if values_x else None
    extremes_x = side_x.extremes if values_x else unknown_extremes(basis_x.size)
    partials = factor_partials(factor_x.L, factor_y.L, side_x.gram, side_y.gram)
    reductions = reductions_from_partials(partials, basis_x, basis_y, extremes_x, side_y.extremes)
    n = Y.shape[0]
    size = support_size_for(support_size, Y.shape[1], factor_y.rank, Y.shape[0])
    sums, support = side_y.y_marginal(Y, reductions, size, seed, support_resolution(kernel_y))
    sums.update({name: block_sums(f, Y, A_y) for name, f in (test_functions or {}).items()})
    factors = factor_diagnostics(factor_x, factor_y, started, rank_budget)
    return JDLProblem(basis_x, basis_y, A_x, A_y, reductions, factors, sums, support, X[sample_rows(n, seed, grid_points)])


def kernel_problem(estimator: Any, X: Any, Y: Any) -> tuple[JDLProblem, np.ndarray, np.ndarray]:
    """Validate the pairs, then pivoted Cholesky of K_X and K_Y, the bases and the reductions
    (``build_problem``) with the estimator's kernels (Gaussian of lengthscale 1 where None) under its
    scaling (``Estimator._scaled_kernel``) and
    factorisation options (tol, max_rank, pivoting, seed, block_size; support_size and grid_points
    where it has them); the x basis values at the rows only where the estimator ``reads_x_values``;
    returns (problem, X, Y)."""
    estimator._note_inputs(X, Y)
    X, Y = paired_samples(X, Y)
    extra = {name: getattr(estimator, name) for name in ("support_size", "grid_points") if hasattr(estimator, name)}
    check_support_rows(extra.get("support_size"), X.shape[0])
    problem = build_problem(X, Y, estimator._scaled_kernel("kernel_x", X), estimator._scaled_kernel("kernel_y", Y),
                            Factorisation.of(estimator), values_x=estimator.reads_x_values, **extra)
    return problem, X, Y


def marginal_sums(reductions: JDLReductions, sums: dict[str, FunctionSums]) -> MarginalSums:
    """The sums a support reproduces: n, sum_j Psi_Y(y_j) and the standard mean and second moment."""
    return MarginalSums(reductions.n, reductions.sum_y, sums["mean"], sums["second_moment"])


def support_resolution(kernel_y: Kernel | None) -> float | None:
    """The widest support bin that resolves the Y basis: half the Y kernel's (scalar) lengthscale in
    y's units (None for a basis without a kernel, or a per-feature lengthscale)."""
    scale = getattr(kernel_y, "data_lengthscale", None)
    return None if scale is None or np.ndim(scale) else 0.5 * float(scale)


def factor_diagnostics(factor_x: PivotedCholesky, factor_y: PivotedCholesky, started: float,
                       rank_budget: int | None = None) -> dict:
    """Ranks, residual traces and stop reasons of the two factorisations, and the default rank budget
    they ran under (None: the caller's own max_rank)."""
    return {
        "rank_budget": rank_budget,
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
