"""The polynomial JDL (JPDL) of Section 4.5, with global positivity of 1 + h as a sum of squares.

The bases (``jdlcore.models.polynomial_basis``): the monomials of degree <= q of each standardised
variable, made double-orthogonal with Lambda = n (psi_0 = 1). In these bases the JDL problem is
jdlcore's low-rank problem with ``reductions_from_values(A_X, A_Y)`` (Lambda = n), objective (38) = (22);
without positivity the closed forms of ``jdlcore.solvers`` apply unchanged. Positivity "sos" puts
1 + h in the sum-of-squares cone (39), an SDP whose solution is certified to give 1 + h >= 0 at every
(x, y) (``jdlcore.models.sos``).
"""
from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

from ..conditional.atoms import block_sums
from ..conditional.support import sample_rows
from ..lowrank.basis import reductions_from_values
from ..lowrank.cholesky import FACTORISATION_PARAMS
from ..params import Choice, Number, Param
from ..validation import as_samples, check_paired
from .jdl import JDL, SUPPORT_PARAMS
from .polynomial_basis import DEGREE, PolynomialBasis, fit_polynomial_basis
from .problem import GRID_POINTS, JDLProblem
from .sos import solve_sos_positivity

__all__ = ["PolynomialJDL", "build_polynomial_problem", "POSITIVITY"]

POSITIVITY = ("sos", "project", "grid", "tightening", "clip")


def build_polynomial_problem(
    X: Any, Y: Any, degree: int, test_functions: dict[str, Callable] | None = None, seed: int | None = 0,
    grid_points: int = GRID_POINTS,
) -> JDLProblem:
    """The JDL problem in the polynomial bases of X (n, d_X) and Y (n, d_Y): exact, no pivoted Cholesky.

    ``test_functions`` (name -> f, row-wise on the atoms) are summed and registered with models fitted
    on the problem. The support of Y is built by the fit; ``grid_x`` is a seeded sample of
    ``grid_points`` training x rows (grid positivity).
    """
    started = time.perf_counter()
    X = as_samples(X, "X", min_rows=2)
    Y = as_samples(Y, "Y", min_rows=2)
    check_paired(X, Y)
    basis_x, A_x = fit_polynomial_basis(X, degree, "X")
    basis_y, A_y = fit_polynomial_basis(Y, degree, "Y")
    reductions = reductions_from_values(A_x, A_y)
    factors = {
        "rank_x": basis_x.size, "rank_y": basis_y.size,
        "trace_error_x": np.zeros(1), "trace_error_y": np.zeros(1),
        "relative_error_x": 0.0, "relative_error_y": 0.0,
        "stop_reason_x": "exact", "stop_reason_y": "exact",
        "pivots_x": np.arange(0), "pivots_y": np.arange(0),
        "factor_seconds": time.perf_counter() - started,
    }
    sums = {name: block_sums(f, Y, A_y) for name, f in (test_functions or {}).items()}
    return JDLProblem(basis_x, basis_y, A_x, A_y, reductions, factors, sums,
                      grid_x=X[sample_rows(X.shape[0], seed, grid_points)])


# -- the estimator --------------------------------------------------------------------------------
class PolynomialJDL(JDL):
    """JDL with polynomial kernels of degree <= ``degree`` in X and in Y (JPDL, Section 4.5).

    Parameters
    ----------
    degree: q >= 1, the degree of the monomials of each variable (the paper uses 4).
    reg: lambda of the regularised loss (8), >= 0.
    constraints: "none", "normalization" or "positivity" (normalization and positivity).
    positivity (constraints="positivity"):
        "sos" (default): 1 + h in the sum-of-squares cone (39), an SDP: 1 + h >= 0 at every (x, y),
            certified (``diagnostics_['sos_certified']``, ``sos_min_eigenvalue``, ``sos_residual_l1``);
        "project": normalization in the fit; the laws projected at query time (``JDL``);
        "grid": 1 + h >= 0 on the support atoms x a sample of the training x (``JDL``);
        "tightening": the paper's single inequality (33);
        "clip": normalization only; negative conditional weights clipped at query time.
    sos_margin: S >= sos_margin * I, keeping the solution strictly inside the cone (>= 0).
    solver_tol: the SDP solver's gap and feasibility tolerances (> 0).
    seed, support_size, grid_points, grid_rounds, grid_seconds: as for ``JDL``.

    Fitted attributes as for ``JDL`` (basis_x_, basis_y_ are ``PolynomialBasis``); with "sos" the
    Gram matrix S (g x g) is kept as ``sos_gram_`` (not part of ``state()``).
    """

    method = "jpdl"
    summary = "polynomial JDL (monomial bases, --degree; sum-of-squares positivity)"
    positivity_rules = POSITIVITY
    fits_from_reductions = False
    bases = ("polynomial", "polynomial")
    KERNELS = ()  # the monomial bases have no kernel parameters
    parameters = {
        "degree": DEGREE,
        "reg": JDL.parameters["reg"],
        "constraints": JDL.parameters["constraints"],
        "positivity": Param(Choice(POSITIVITY), "sos: a certified sum of squares; or a rule of jdl", option=True),
        "sos_margin": Param(Number(low=0), "S >= sos_margin x I: the solution strictly inside the cone"),
        "solver_tol": Param(Number(low=0, low_open=True), "the SDP solver's gap and feasibility tolerances"),
        "seed": FACTORISATION_PARAMS["seed"],
        **SUPPORT_PARAMS,
    }

    def __init__(
        self,
        *,
        degree: int = 4,
        reg: float = 1e-3,
        constraints: str = "positivity",
        positivity: str = "sos",
        sos_margin: float = 1e-8,
        solver_tol: float = 1e-10,
        support_size: int | None = None,
        grid_points: int = GRID_POINTS,
        grid_rounds: int = 200,
        grid_seconds: float = 120.0,
        seed: int | None = 0,
    ):
        self._keep_params(locals())

    def _check_together(self) -> None:
        """None: exact polynomial bases stay bounded at reg = 0 (``JDL``'s rule is for kernel bases)."""

    @property
    def uses_sos(self) -> bool:
        """True when fitting solves the sum-of-squares SDP."""
        return self.constraints == "positivity" and self.positivity == "sos"

    def fit(self, X: Any, Y: Any) -> "PolynomialJDL":
        """Fit on paired samples X (n, d_X) and Y (n, d_Y); returns self."""
        self.check_params()
        self._note_inputs(X, Y)
        X = as_samples(X, "X", min_rows=2)
        Y = as_samples(Y, "Y", min_rows=2)
        check_paired(X, Y)
        return self.fit_problem(build_polynomial_problem(X, Y, int(self.degree), seed=self.seed,
                                                         grid_points=int(self.grid_points)), Y)

    def _solve(self, problem: JDLProblem, reg: float) -> tuple[np.ndarray, dict[str, Any]]:
        self.__dict__.pop("sos_gram_", None)
        if not self.uses_sos:
            return super()._solve(problem, reg)
        if not isinstance(problem.basis_x, PolynomialBasis) or not isinstance(problem.basis_y, PolynomialBasis):
            raise ValueError("positivity: 'sos' needs polynomial bases (build_polynomial_problem)")
        H, info = solve_sos_positivity(problem.basis_x, problem.basis_y, problem.reductions, reg,
                                       margin=float(self.sos_margin), tol=float(self.solver_tol))
        self.sos_gram_ = info.pop("sos_gram_matrix")
        return H, info

    @classmethod
    def _from_params(cls, state: dict[str, Any]) -> "PolynomialJDL":
        return cls(**state["params"])

    @classmethod
    def _basis_from_state(cls, side: str, arrays: dict[str, np.ndarray], state: dict[str, Any]) -> PolynomialBasis:
        spec = state[f"kernel_{side}"]
        if spec.get("name") != "polynomial":
            raise ValueError(f"state: kernel_{side} is {spec.get('name')!r}, not a polynomial basis")
        basis = PolynomialBasis.from_arrays(arrays, side)
        if basis.degree != int(spec["degree"]) or basis.width != int(spec["width"]):
            raise ValueError(f"state: kernel_{side} says degree {spec['degree']} and width {spec['width']}, "
                             f"the arrays have {basis.degree} and {basis.width}")
        return basis
