"""PSDJDL: a JDL whose 1 + h is a PSD form in the double-orthogonal feature map.

Model. With the augmented bases a~(x) = [1, Psi_X(x)] (q_X = m_X + 1) and b~(y) = [1, Psi_Y(y)]
(q_Y = m_Y + 1), phi(x, y) = a~(x) (x) b~(y) (p = q_X q_Y, index (j, k) -> j q_Y + k) and

    g(x, y) = 1 + h(x, y) = phi(x, y)^T M phi(x, y),      M PSD (p x p).

M = E0 = e_0 e_0^T is independence (g = 1). M PSD makes g >= 0 at every (x, y), on and off the
data; M is kept as a factor R (M = R R^T) and g evaluated as a sum of squares, exactly >= 0 in floats.

Fit: the empirical JDL risk in g (the paper's (14), constants dropped), n samples,
    R(M) = (1/n^2) sum_{s,t} g(x_s, y_t)^2 - (2/n) sum_i g(x_i, y_i) + reg |M - E0|_F^2
subject to the (linear) normalization sum_{s,t} g(x_s, y_t) = n^2, i.e. <N, M> = 1 with
N = (G~_X / n) (x) (G~_Y / n), G~_X = sum_s a~_s a~_s^T. Closed forms (no p^2 x p^2 object):

* sum_i g(x_i, y_i) = <M, D>, D = sum_i phi_i phi_i^T, phi_i = a~_i (x) b~_i;
* sum_{s,t} g_st^2 = <M, T(M)> with T(M) = F_X Mr F_Y^T re-indexed, where Mr is M as the
  (q_X^2, q_Y^2) matrix Mr[(j j'), (k k')] = M[(j k), (j' k')] and F_X[(j j'), (l l')] =
  sum_s a~_sj a~_sj' a~_sl a~_sl' (q_X^2 x q_X^2, likewise F_Y) are the fourth-moment matrices.

The solver is ADMM with the Hessian inverted through its Kronecker structure, stopped on a certified
duality gap (``jdlcore.models.psd_jdl_admm``). M is p x p, so p is limited (``max_features``, default
400; p = 2,000 costs seconds per iteration). Queries read M per x as a PSD form (``radon_nikodym``).
"""
from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

from ..conditional.atoms import evaluate_function
from .degeneracy import announce, factor_degeneracies, solver_degeneracy
from ..scaling import DEFAULT_SCALING
from .estimator import SCALING_PARAMS, Estimator
from .problem import kernel_problem
from ..kernels import Kernel
from .psd_jdl_admm import apply_T, solve_psd_jdl
from ..conditional.queries import below_thresholds, check_levels, quantiles_from_weights
from ..lowrank.cholesky import DEFAULT_TOL, FACTORISATION_PARAMS
from ..params import Integer, Number, Param

__all__ = ["PSDJDL", "fourth_moments", "diagonal_moments", "apply_T", "psd_jdl_objective"]

_BLOCK_ELEMENTS = 1 << 22  # rows x columns per block when accumulating n-sized sums
_QUERY_ELEMENTS = 1 << 22


def _augment(A: np.ndarray) -> np.ndarray:
    """[1, A] (n, m + 1)."""
    return np.hstack([np.ones((A.shape[0], 1)), A])


def _row_blocks(n: int, width: int):
    step = max(1, _BLOCK_ELEMENTS // max(width, 1))
    for start in range(0, n, step):
        yield slice(start, min(start + step, n))


def fourth_moments(At: np.ndarray) -> np.ndarray:
    """F[(j j'), (l l')] = sum_s At_sj At_sj' At_sl At_sl' for At (n, q), shape (q^2, q^2)."""
    n, q = At.shape
    F = np.zeros((q * q, q * q))
    for rows in _row_blocks(n, q * q):
        W = (At[rows, :, None] * At[rows, None, :]).reshape(-1, q * q)
        F += W.T @ W
    return (F + F.T) / 2.0


def diagonal_moments(At: np.ndarray, Bt: np.ndarray) -> np.ndarray:
    """D = sum_i (At_i At_i^T) (x) (Bt_i Bt_i^T), shape (p, p), p = q_X q_Y."""
    n, qx = At.shape
    qy = Bt.shape[1]
    p = qx * qy
    D = np.zeros((p, p))
    for rows in _row_blocks(n, p):
        Phi = (At[rows, :, None] * Bt[rows, None, :]).reshape(-1, p)
        D += Phi.T @ Phi
    return (D + D.T) / 2.0


def psd_jdl_objective(M: np.ndarray, F_x: np.ndarray, F_y: np.ndarray, D: np.ndarray, n: int, reg: float) -> float:
    """R(M) = <M, T(M)> / n^2 - 2 <M, D> / n + reg |M - E0|_F^2."""
    E0 = np.zeros_like(M)
    E0[0, 0] = 1.0
    return float(np.sum(M * apply_T(M, F_x, F_y)) / n**2 - 2.0 * np.sum(M * D) / n + reg * np.sum((M - E0) ** 2))


def _psd_factor(M: np.ndarray) -> np.ndarray:
    """R (p, r) with R R^T = the PSD part of symmetric M (eigenvalues <= 0 dropped)."""
    lam, U = np.linalg.eigh((M + M.T) / 2.0)
    keep = lam > 0
    return U[:, keep] * np.sqrt(lam[keep])


class PSDJDL(Estimator):
    """JDL with 1 + h = phi^T M phi, M PSD: a conditional law that is non-negative everywhere.

    Parameters
    ----------
    kernel_x, kernel_y: kernels on X and Y (default Gaussian with lengthscale 1).
    reg: weight of reg |M - E0|_F^2, >= 0.
    tol, pivoting, max_rank, seed, block_size: the pivoted Cholesky factorisations (as ``JDL``).
    scaling: how the kernels' inputs are standardised, as for ``JDL`` (default "robust").
    solver_tol: the solver stops where its certified relative duality gap is at most this.
    max_iter: ADMM iterations at most (an unconverged fit warns, with its gap).
    max_features: refuse p = (m_X + 1)(m_Y + 1) above this (M is p x p, each iteration O(p^3)).

    Fitted attributes: coef_ (M, p x p), factor_ (R (p, r) with M = R R^T; what the store keeps and
    every query reads), basis_x_, basis_y_, y_atoms_ (the n training atoms the laws weigh), gram_y_,
    n_samples_, diagnostics_ (objective, iterations, converged, min_eigenvalue, normalization_defect,
    solve_seconds, rank_x, rank_y, trace_error_x / _y, ...). Registered as method "psd": positivity
    "psd" (by construction), fitted in memory.
    """

    method = "psd"
    summary = "JDL with 1 + h a PSD form in the feature map: a law non-negative at every (x, y)"
    positivity_rules = ("psd",)  # 1 + h = |R^T phi(x, y)|^2: structural, there is nothing to choose
    state_dims = {"factor": ("psd_feature", "psd_rank"), "y_atoms": ("sample", "y_feature")}
    _FITTED = "factor_"
    parameters = {
        "reg": Param(Number(low=0), "weight of reg |M - E0|_F^2"),
        **FACTORISATION_PARAMS,
        **SCALING_PARAMS,
        "solver_tol": Param(Number(low=0), "the certified relative duality gap at which the solver stops"),
        "max_iter": Param(Integer(), "ADMM iterations at most"),
        "max_features": Param(Integer(), "refuse (m_X + 1)(m_Y + 1) features above this"),
    }

    def __init__(self, kernel_x: Kernel | None = None, kernel_y: Kernel | None = None, *, reg: float = 1e-3,
                 tol: float = DEFAULT_TOL, pivoting: str = "random", max_rank: int | None = None, seed: int | None = 0,
                 block_size: int | None = None, solver_tol: float = 1e-6, max_iter: int = 10_000,
                 max_features: int = 400, scaling: str = DEFAULT_SCALING):
        self._keep_params(locals())

    # -- fitting ----------------------------------------------------------------------------------
    def fit(self, X: Any, Y: Any) -> "PSDJDL":
        """Fit on paired samples X (n, d_X) and Y (n, d_Y); returns self. An unconverged solve or a
        degenerate factorisation warns (``DegeneracyWarning``) and is listed in
        ``diagnostics_["degeneracies"]``."""
        self.check_params()
        problem, X, Y = kernel_problem(self, X, Y)
        n = X.shape[0]
        qx, qy = problem.basis_x.size + 1, problem.basis_y.size + 1
        p = qx * qy
        if p > int(self.max_features):
            raise ValueError(
                f"max_features: p = (m_X + 1)(m_Y + 1) = {qx} x {qy} = {p} exceeds max_features = {self.max_features}; "
                f"M is p x p and every solver iteration costs O(p^3). Raise tol, set max_rank, or raise "
                f"max_features deliberately."
            )
        started = time.perf_counter()
        At, Bt = _augment(problem.A_x), _augment(problem.A_y)
        F_x, F_y = fourth_moments(At), fourth_moments(Bt)
        D = diagonal_moments(At, Bt)
        G_x, G_y = At.T @ At, Bt.T @ Bt
        N = np.kron(G_x / n, G_y / n)
        N = (N + N.T) / 2.0
        M, info = solve_psd_jdl(F_x, F_y, D, N, n, float(self.reg), tol=float(self.solver_tol),
                                max_iter=int(self.max_iter))
        self.basis_x_, self.basis_y_ = problem.basis_x, problem.basis_y
        self.n_samples_ = n
        self.n_iter_ = int(info["iterations"])
        self._set_atoms(Y)
        self._set_coef(M)
        factors = problem.factors
        self.diagnostics_ = {
            "rank_x": factors["rank_x"], "rank_y": factors["rank_y"], "features": p,
            "trace_error_x": factors["trace_error_x"], "trace_error_y": factors["trace_error_y"],
            "factor_seconds": factors["factor_seconds"],
            "objective": psd_jdl_objective(self.coef_, F_x, F_y, D, n, float(self.reg)),
            "min_eigenvalue": float(np.linalg.eigvalsh(self.coef_)[0]),
            "normalization_defect": float(np.sum(N * self.coef_) - 1.0),
            "solve_seconds": time.perf_counter() - started,
            **info,
        }
        self.diagnostics_["degeneracies"] = {
            **factor_degeneracies({**factors, **self.diagnostics_}, n, float(self.tol)),
            **solver_degeneracy(info, "ADMM solver", f"max_iter = {self.max_iter}, solver_tol = {self.solver_tol:g}; "
                                                    f"relative duality gap {info['gap']:.2g}"),
        }
        announce(self.diagnostics_["degeneracies"], stacklevel=2)
        return self

    def _set_atoms(self, Y: np.ndarray) -> None:
        """The training atoms y_t (n, d_Y) and what queries read of them: b~_t = [1, Psi_Y(y_t)] through
        the kernel (as a stored model recomputes them) and G~_Y = sum_t b~_t b~_t^T."""
        self.y_atoms_ = np.ascontiguousarray(Y, dtype=np.float64)
        self._bt = _augment(self.basis_y_.features(self.y_atoms_))
        self.gram_y_ = self._bt.T @ self._bt
        self._registered: dict[str, tuple[np.ndarray, tuple]] = {}

    def _set_coef(self, M: np.ndarray) -> None:
        """Set M (p, p), symmetric PSD, through its factor R (M = R R^T; ``_set_factor``)."""
        qx, qy = self.basis_x_.size + 1, self.basis_y_.size + 1
        M = np.asarray(M, dtype=np.float64)
        if M.shape != (qx * qy, qx * qy):
            raise ValueError(f"M: must have shape ({qx * qy}, {qx * qy}), got {M.shape}")
        self._set_factor(_psd_factor(M))

    def _set_factor(self, R: np.ndarray) -> None:
        """Set the factor R (p, r) used by every query, and M = R R^T."""
        qx, qy = self.basis_x_.size + 1, self.basis_y_.size + 1
        self._factor3 = R.reshape(qx, qy, R.shape[1])  # (j, k, r)
        self.coef_ = R @ R.T
        self.factor_ = R

    # -- state (for stores) -----------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """The factor R, the training atoms and the bases as arrays, the rest JSON-able (no pickles);
        ``from_state(state())`` answers every query bit for bit. Registered functions are not kept
        (``register`` again: one pass over the atoms)."""
        self._fitted()
        return self._two_basis_state({"factor": self.factor_, "y_atoms": self.y_atoms_})

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> "PSDJDL":
        """Rebuild a fitted model from ``state()``; ``ValueError`` on missing or inconsistent parts."""
        model, arrays, bases = cls._spectral_restore(state)
        missing = [name for name in ("factor", "y_atoms") if name not in arrays]
        if missing:
            raise ValueError(f"state: missing part {missing[0]!r}")
        factor, atoms = arrays["factor"], arrays["y_atoms"]
        p = (bases["x"].size + 1) * (bases["y"].size + 1)
        if factor.ndim != 2 or factor.shape[0] != p:
            raise ValueError(f"state: factor has shape {factor.shape}, expected ({p}, r) for the bases")
        if atoms.shape != (model.n_samples_, bases["y"].width):
            raise ValueError(f"state: y_atoms has shape {atoms.shape}, expected ({model.n_samples_}, "
                             f"{bases['y'].width})")
        model.basis_x_, model.basis_y_ = bases["x"], bases["y"]
        model._set_atoms(atoms)
        model._set_factor(factor)
        return model

    # -- queries ----------------------------------------------------------------------------------
    def _x_factors(self, Xq: np.ndarray) -> np.ndarray:
        """C_x (q, q_Y, r) with M_x = C_x C_x^T."""
        at = _augment(self.basis_x_.features(Xq))
        return np.einsum("qj,jkr->qkr", at, self._factor3, optimize=True)

    def _x_forms(self, Xq: np.ndarray) -> np.ndarray:
        """M_x (q, q_Y, q_Y), PSD."""
        C = self._x_factors(Xq)
        return np.einsum("qkr,qlr->qkl", C, C, optimize=True)

    def _form_batches(self, q: int) -> list[slice]:
        """Query slices whose (queries, q_Y, r) temporaries stay near ``_QUERY_ELEMENTS`` entries."""
        step = max(1, _QUERY_ELEMENTS // max(self._factor3.shape[1] * max(self.factor_.shape[1], 1), 1))
        return [slice(a, min(a + step, q)) for a in range(0, q, step)]

    def _batches(self, q: int) -> list[slice]:
        step = max(1, _QUERY_ELEMENTS // max(self.n_samples_ * max(self.factor_.shape[1], 1), 1))
        return [slice(a, min(a + step, q)) for a in range(0, q, step)]

    def radon_nikodym(self, Xq: Any) -> np.ndarray:
        """g(x_q, y_t) = 1 + h for queries x_q and every training atom y_t, shape (q, n); >= 0.

        Queries. For x, M_x = sum_{j j'} a~_j(x) a~_j'(x) M[j, :, j', :] (q_Y x q_Y, PSD) and the weight of the
        training atom y_t is w_t(x) = b~_t^T M_x b~_t / Tr(M_x G~_Y) (non-negative, sums to 1). Expectations
        use R_f = sum_t f(y_t) b~_t b~_t^T: E[f | x] = <M_x, R_f> / <M_x, G~_Y>, O(p q_Y) per query after
        the O(n q_Y^2) sums of f.
        """
        Xq = self._queries(Xq)
        out = np.empty((Xq.shape[0], self.n_samples_))
        for sl in self._batches(Xq.shape[0]):
            C = self._x_factors(Xq[sl])  # (b, q_Y, r)
            V = np.einsum("tk,bkr->btr", self._bt, C, optimize=True)
            out[sl] = np.einsum("btr,btr->bt", V, V)
        return out

    def density_ratio(self, Xq: Any, Yq: Any) -> np.ndarray:
        """g(x_i, y_i) = 1 + h at arbitrary pairs (x_i, y_i), shape (q,); >= 0 everywhere."""
        Xq, Yq = self._query_pairs(Xq, Yq)
        out = np.empty(Xq.shape[0])
        for sl in self._form_batches(Xq.shape[0]):
            C = self._x_factors(Xq[sl])  # (b, q_Y, r)
            V = np.einsum("qk,qkr->qr", _augment(self.basis_y_.features(Yq[sl])), C)
            out[sl] = np.einsum("qr,qr->q", V, V)
        return out

    def conditional_weights(self, Xq: Any) -> np.ndarray:
        """Weights of Q(Y | X = x_q) on the training atoms, shape (q, n): >= 0, rows sum to 1."""
        values = self.radon_nikodym(Xq)
        values /= values.sum(axis=1, keepdims=True)
        return values

    def negative_share(self, Xq: Any, tol: float = 1e-12) -> np.ndarray:
        """Share of the training atoms with g(x_q, y_t) < -tol, shape (q,): 0 up to rounding, measured."""
        return np.mean(self.radon_nikodym(Xq) < -tol, axis=1)

    def _function_moments(self, f: Callable | None) -> tuple[np.ndarray, tuple]:
        """R_f as (q_Y^2, P): sum_t f(y_t) b~_t b~_t^T flattened, and the shape of one value f(y)."""
        values, shape = evaluate_function(f, self.y_atoms_)
        qy = self._bt.shape[1]
        Rf = np.zeros((qy * qy, values.shape[1]))
        for rows in _row_blocks(self.n_samples_, qy * qy + values.shape[1]):
            W = (self._bt[rows, :, None] * self._bt[rows, None, :]).reshape(-1, qy * qy)
            Rf += W.T @ values[rows]
        return Rf, shape

    def _expect(self, Xq: np.ndarray, Rf: np.ndarray, shape: tuple) -> np.ndarray:
        out = np.empty((Xq.shape[0], Rf.shape[1]))
        for sl in self._form_batches(Xq.shape[0]):
            forms = self._x_forms(Xq[sl]).reshape(sl.stop - sl.start, -1)  # (b, q_Y^2)
            out[sl] = forms @ Rf
            out[sl] /= (forms @ self.gram_y_.ravel())[:, None]
        return out.reshape((Xq.shape[0],) + shape)

    def conditional_expectation(self, Xq: Any, f: Callable[[np.ndarray], np.ndarray] | None = None) -> np.ndarray:
        """E_Q[f(Y) | X = x_q], shape (q, ...); f maps atoms (b, d_y) row by row, default the identity."""
        Xq = self._queries(Xq)
        Rf, shape = self._function_moments(f)
        return self._expect(Xq, Rf, shape)

    def register(self, name: str, f: Callable[[np.ndarray], np.ndarray]) -> None:
        """Precompute R_f so ``expectation(name, Xq)`` costs O(p q_Y) per query, independent of n."""
        self._fitted()
        self._registered[name] = self._function_moments(f)

    @property
    def registered_(self) -> dict[str, tuple[np.ndarray, tuple]]:
        """Registered test functions by name: (R_f (q_Y^2, P), shape of one value)."""
        self._fitted()
        return dict(self._registered)

    def expectations(self, names: list[str], Xq: Any) -> dict[str, np.ndarray]:
        """E_Q[f(Y) | X = x_q] for registered test functions, by name."""
        Xq = self._queries(Xq)
        unknown = [name for name in names if name not in self._registered]
        if unknown:
            raise ValueError(f"names: no test function {unknown[0]!r} registered; have {sorted(self._registered)}")
        return {name: self._expect(Xq, *self._registered[name]) for name in names}

    def conditional_cdf(self, Xq: Any, thresholds: Any) -> np.ndarray:
        """Q(Y <= t | X = x_q), shape (q, T); thresholds (T,) for scalar Y or (T, d_y)."""
        self._fitted()
        return self.conditional_expectation(Xq, below_thresholds(thresholds, self.y_atoms_.shape[1]))

    def conditional_quantile(self, Xq: Any, levels: Any, component: int = 0) -> np.ndarray:
        """Quantiles of Q(Y_component | X = x_q) at levels in (0, 1], shape (q, len(levels))."""
        Xq = self._queries(Xq)
        levels = check_levels(levels)
        d_y = self.y_atoms_.shape[1]
        if not 0 <= component < d_y:
            raise ValueError(f"component: must be in [0, {d_y}), got {component}")
        column = self.y_atoms_[:, component]
        order = np.argsort(column, kind="stable")
        out = np.empty((Xq.shape[0], levels.size))
        for sl in self._batches(Xq.shape[0]):
            out[sl] = quantiles_from_weights(self.conditional_weights(Xq[sl])[:, order], column[order], levels)
        return out
