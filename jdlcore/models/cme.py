"""Low-rank conditional mean embedding (CME), the paper's baseline (Appendix A, (43)-(54)).

The CME of Song et al. (2009) / Grünewälder et al. (2012) estimates E[f(Y) | x] for f in H_Y by
minimising (43), (1/n) sum_i ||k_Y(y_i, .) - F(x_i)||^2 + reg ||F||^2, whose solution is
F = (K_X + n reg I)^{-1} (44) and E[f(Y) | x] = [f(y_1) .. f(y_n)] F k_X(X, x) (45).

Low rank (47): F = B_Y V_Y Ftil V_X^T B_X^T with the double-orthogonal bases of both pivoted
Cholesky factorisations. Objective (48) is misprinted in the paper; the correct one (derived by
substituting (47) into the regularised least-squares risk, and checked against the dense (44) at full
rank by the tests) is

    R(Ftil) = -2 <A_Y^T A_X, Ftil> + sum_ij Ftil_ij^2 (Lambda_X,j + n reg),

so Ftil_ij = G_ij / (Lambda_X,j + n reg) with G = A_Y^T A_X: the same m x m reductions as JDL.
Since B_Y is zero outside the Y pivots, the estimator puts weights only on the m_Y pivot atoms:

    w(x) = C_Y Ftil Psi_X(x)^T  (m_Y,),   C_Y = B_Y[pivots_Y, :] V_Y,
    E[f(Y) | x] = sum_k w_k(x) f(y_{p_k}).

These weights are signed and not normalized: that is the point of the comparison, so every query
reports them as they are (``total_mass`` gives E[1 | x], the paper's normalization check).

Constraints (``constraints``: "none", "normalization", "positivity") concern the average over the
training x only (``solve_cme``).
"""
from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

from ..conditional.atoms import Atoms, evaluate_function
from ..lowrank.basis import JDLReductions
from ..scaling import DEFAULT_SCALING
from .estimator import SCALING_PARAMS, Estimator
from .problem import kernel_problem
from ..kernels import Kernel
from ..conditional.queries import below_thresholds, check_levels, quantiles_from_weights
from ..solvers.active_set import ProjectionQP
from ..lowrank.cholesky import DEFAULT_TOL, FACTORISATION_PARAMS
from ..params import Choice, Number, Param

__all__ = ["CME", "solve_cme"]

CME_CONSTRAINTS = ("none", "normalization", "positivity")


def solve_cme(red: JDLReductions, reg: float, coefficients_y: np.ndarray, constraints: str = "none",
              tol: float = 1e-12) -> tuple[np.ndarray, dict[str, Any]]:
    """Ftil (m_Y, m_X) minimising the low-rank CME objective under ``constraints``, and diagnostics.

    red: the JDL reductions (uses n, lam_x, cross = A_Y^T A_X, sum_x); coefficients_y: C_Y (m_Y, m_Y).

    Constraints (``constraints``): "none"; "normalization", the unconditional normalization (53)
    1^T B_Y V_Y Ftil V_X^T L_X^T 1 / n = 1, i.e. u^T Ftil s_X = n with u = C_Y^T 1; "positivity", (53) and
    the unconditional positivity (54) C_Y Ftil s_X >= 0 (m_Y inequalities), solved exactly by the
    Goldfarb–Idnani active-set method. Both constraints concern the average over the training x only.
    """
    D = np.broadcast_to(red.lam_x[None, :] + red.n * reg, red.cross.shape)
    if constraints == "none":
        return red.cross / D, {}
    # Both constraints see Ftil only through v = Ftil s_X (m_Y,): (53) is u^T v = n with u = C_Y^T 1,
    # (54) is C_Y v >= 0. Row k of the objective sum D F^2 - 2 G F (G = cross), minimised with
    # F[k] s_X = v_k held fixed, is F[k, j] = (G[k, j] + t_k s_j) / D[k, j] with t_k = (v_k - a_k) / b_k,
    # a = (G / D) s_X, b = (1 / D) s_X^2, and costs (v_k - a_k)^2 / b_k up to a constant. So the
    # m_Y x m_X QP is exactly the m_Y-dimensional one: min sum_k (v_k - a_k)^2 / b_k under (53), (54).
    s = red.sum_x
    a = (red.cross / D) @ s
    b = (1.0 / D) @ (s * s)
    u = coefficients_y.sum(axis=0)
    weight = float(np.sum(b * u * u))
    if weight <= 0:
        raise ValueError("constraints: the unconditional normalization (53) cannot be met (u s_X^T = 0)")
    v0 = red.n * b * u / weight  # meets (53); v = v0 + w with u^T w = 0
    qp = ProjectionQP(2.0 / b, 2.0 * (a - v0) / b, equality=u, tol=tol)
    if constraints == "positivity":
        qp.add(coefficients_y, coefficients_y @ v0)  # C_Y v >= 0, row by row
        qp.solve()
    v = v0 + qp.h
    F = (red.cross + np.outer((v - a) / b, s)) / D
    mean_weights = coefficients_y @ F @ red.sum_x / red.n  # average over the training x of w(x)
    info = {"unconditional_mass": float(mean_weights.sum()), "unconditional_min_weight": float(mean_weights.min())}
    if constraints == "positivity":
        info["active"] = int(np.sum(qp.multipliers() > 0))
    return F, info


class CME(Estimator):
    """Low-rank conditional mean embedding (Appendix A of the paper), with JDL's query API.

    Parameters
    ----------
    kernel_x, kernel_y: kernels (default Gaussian, lengthscale 1).
    reg: lambda of (43), > 0 for a rank-deficient K_X; at full rank F = (K_X + n reg I)^{-1}.
    tol: relative tolerance of both pivoted Cholesky factorisations.
    constraints: "none", "normalization" (53) or "positivity" ((53) and (54)).
    pivoting, seed, max_rank, block_size, scaling: as for ``JDL``.

    Fitted attributes: basis_x_, basis_y_ (SpectralBasis), coef_ (Ftil, m_Y x m_X), atoms_ (the Y
    pivots, the only atoms carrying weight), n_samples_, diagnostics_.
    """

    method = "cme"
    summary = "low-rank conditional mean embedding (signed weights on the y pivots)"
    fits_from_reductions = True
    reads_x_values = False  # the solve reads only the m x m reductions
    state_dims = {"coef": ("basis_y", "basis_x")}
    parameters = {
        "reg": Param(Number(low=0), "regularisation lambda of the embedding (> 0 for a rank-deficient K_X)"),
        **FACTORISATION_PARAMS,
        **SCALING_PARAMS,
        "constraints": Param(Choice(CME_CONSTRAINTS), "normalization: laws of mass 1 on average over x; "
                             "positivity: also positive on average", option=True),
    }

    def __init__(self, kernel_x: Kernel | None = None, kernel_y: Kernel | None = None, *, reg: float = 1e-3,
                 tol: float = DEFAULT_TOL, constraints: str = "none", pivoting: str = "random",
                 max_rank: int | None = None, seed: int | None = 0, block_size: int | None = None,
                 scaling: str = DEFAULT_SCALING):
        self._keep_params(locals())

    # -- fitting ----------------------------------------------------------------------------------
    def fit(self, X: Any, Y: Any) -> "CME":
        """Fit on paired samples X (n, d_X) and Y (n, d_Y); returns self."""
        self.check_params()
        problem, X, Y = kernel_problem(self, X, Y)
        return self.fit_problem(problem, Y)

    def fit_problem(self, problem: Any, Y: Any = None) -> "CME":
        """Solve on a prepared ``JDLProblem`` (in memory or chunked: only its m x m reductions are used;
        the atoms are the Y pivots the problem carries, so ``Y`` is not read: the signature is
        ``JDL.fit_problem``'s)."""
        self.check_params()
        reg = float(self.reg)
        red = problem.reductions
        if reg == 0 and np.min(red.lam_x) <= 0:
            raise ValueError("reg: must be > 0 when a basis function has zero empirical norm")
        started = time.perf_counter()
        F, info = solve_cme(red, reg, problem.basis_y.coefficients, self.constraints)
        self.basis_x_, self.basis_y_ = problem.basis_x, problem.basis_y
        self.coef_ = F
        self.n_samples_ = red.n
        self._set_atoms()
        factors = problem.factors
        self.diagnostics_ = {
            **{k: v for k, v in factors.items() if not k.startswith("pivots")},
            "solve_seconds": time.perf_counter() - started, **info,
        }
        return self

    def _set_atoms(self) -> None:
        self.atoms_ = Atoms(self.basis_y_.pivot_points, self.basis_y_)
        # w(x) = raw_X(x) @ query_map_: the kernel row against the X pivots, then one (m_X, m_Y) product.
        self.query_map_ = self.basis_x_.coefficients @ (self.basis_y_.coefficients @ self.coef_).T
        self._registered: dict[str, tuple[np.ndarray, tuple]] = {}

    # -- state ------------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """Arrays and JSON-able values that rebuild the model (``from_state``); no pickles."""
        self._fitted()
        return self._two_basis_state({"coef": self.coef_})

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> "CME":
        """Rebuild a fitted model from ``state()``; ``ValueError`` on missing or inconsistent parts."""
        model, arrays, bases = cls._spectral_restore(state)
        if "coef" not in arrays:
            raise ValueError("state: missing part 'coef'")
        coef = arrays["coef"]
        if coef.shape != (bases["y"].size, bases["x"].size):
            raise ValueError(f"state: coef has shape {coef.shape}, expected {(bases['y'].size, bases['x'].size)}")
        model.basis_x_, model.basis_y_, model.coef_ = bases["x"], bases["y"], coef
        model._set_atoms()
        return model

    # -- queries ----------------------------------------------------------------------------------
    @property
    def y_atoms_(self) -> np.ndarray:
        """The atoms carrying weight: the Y pivots (m_Y, d_y)."""
        self._fitted()
        return self.atoms_.values

    @property
    def registered_(self) -> dict[str, tuple[np.ndarray, tuple]]:
        self._fitted()
        return dict(self._registered)

    def conditional_weights(self, Xq: Any) -> np.ndarray:
        """Signed, unnormalized weights w(x_q) on the Y pivot atoms, shape (q, m_Y)."""
        Xq = self._queries(Xq)
        return self.basis_x_.raw(Xq) @ self.query_map_

    def total_mass(self, Xq: Any) -> np.ndarray:
        """E[1 | X = x_q] = sum_k w_k(x_q), shape (q,); 1 for a normalized law (the paper's Fig. 3 check)."""
        return self.conditional_weights(Xq).sum(axis=1)

    def negative_share(self, Xq: Any, tol: float = 1e-12) -> np.ndarray:
        """Share of the y pivots whose weight at x_q is below -tol, shape (q,)."""
        return np.mean(self.conditional_weights(Xq) < -tol, axis=1)

    def conditional_expectation(self, Xq: Any, f: Callable[[np.ndarray], np.ndarray] | None = None) -> np.ndarray:
        """sum_k w_k(x_q) f(y_{p_k}) for each query, shape (q, ...); f defaults to the identity."""
        W = self.conditional_weights(Xq)
        values, shape = evaluate_function(f, self.atoms_.values)
        return (W @ values).reshape((W.shape[0],) + shape)

    def register(self, name: str, f: Callable[[np.ndarray], np.ndarray]) -> None:
        """Keep f at the atoms so ``expectation(name, Xq)`` costs one (m_X, p) product per query."""
        self._fitted()
        values, shape = evaluate_function(f, self.atoms_.values)
        self._registered[name] = (self.query_map_ @ values, shape)

    def expectations(self, names: list[str], Xq: Any) -> dict[str, np.ndarray]:
        """``expectation(name, Xq)`` for several registered functions (one kernel block)."""
        Xq = self._queries(Xq)
        missing = [name for name in names if name not in self._registered]
        if missing:
            raise ValueError(f"names: no test function {missing[0]!r} registered; have {sorted(self._registered)}")
        raw = self.basis_x_.raw(Xq)
        return {name: (raw @ self._registered[name][0]).reshape((Xq.shape[0],) + self._registered[name][1])
                for name in names}

    def conditional_cdf(self, Xq: Any, thresholds: Any) -> np.ndarray:
        """sum of the weights of atoms below each threshold, shape (q, T) (not normalized)."""
        self._fitted()
        return self.conditional_expectation(Xq, below_thresholds(thresholds, self.atoms_.d))

    def conditional_quantile(self, Xq: Any, levels: Any, component: int = 0) -> np.ndarray:
        """Smallest pivot atom whose running (signed) CDF reaches each level, shape (q, L); NaN if never."""
        Xq = self._queries(Xq)
        levels = check_levels(levels)
        if not 0 <= component < self.atoms_.d:
            raise ValueError(f"component: must be in [0, {self.atoms_.d}), got {component}")
        column = self.atoms_.column(component)
        order = np.argsort(column, kind="stable")
        return quantiles_from_weights(self.conditional_weights(Xq)[:, order], column[order], levels)

