"""Fitting a Gaussian PSD density model to data (Rudi & Ciliberto 2021, estimator (12)).

The model is f_A(x) = sum_ij A_ij k(x, c_i) k(x, c_j), A in S^m_+ (PSD), centres C (m, d), the
Gaussian kernel k = exp(-|x - x'|^2 / (2 l^2)) written with the paper's precision eta = 1 / (2 l^2)
(d,): k_eta(x, x') = exp(-sum_t eta_t (x_t - x'_t)^2), and c_eta = pi^{d/2} prod_t eta_t^{-1/2}.
The estimator minimises over A in S^m_+, K = K_{C,C,eta},

    J(A) = int_{R^d} f_A^2 dx - (2/n) sum_i f_A(x_i) + reg * Tr(A K A K),

an empirical |f_A - p|^2_{L2} (up to the constant int p^2) plus an RKHS regulariser, in closed forms:

* linear term: (2/n) sum_i f_A(x_i) = 2 <A, S>,  S = (1/n) K_{C,X} K_{X,C}            (m, m)
* L2 term: int f_A^2 = vec(A)^T G vec(A) with the (m^2, m^2) Gram matrix of the functions
  phi_ij(x) = k(x, c_i) k(x, c_j) in L2(R^d):
      G_(ij),(kl) = c_{4 eta} K½_ij K½_kl k_eta(m_ij, m_kl),   K½ = K_{C,C,eta/2},  m_ij = (c_i+c_j)/2.
  (``psd_l2_gram``; vec is row-major, vec(A)[i*m + j] = A_ij.)
* normalisation: int f_A = c_{2 eta} Tr(A K½) = <A, N>,  N = c_{2 eta} K½.

G is invariant under (ij) <-> (ji), so the solvers work on the p = m(m+1)/2 upper-triangle entries
(a quarter of G's memory: 204 MB at m = 100); past ``max_centers`` (150, about 1 GB) the O(m^4)
memory is refused with a ValueError.

Both solvers work in whitened coordinates B = K^{1/2} A K^{1/2}, where the Hessian is well
conditioned (``_solve_cvxpy``, ``_solve_pgd`` state how each solves; docs/methods.md, PSD models).
"""
from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from .model import GaussianPSDModel, eta_from_lengthscale, gaussian_block, gaussian_mass
from ..solvers.fista import ConvergenceWarning, affine_psd_gap, fista
from ..validation import as_samples, check_choice, check_nonnegative

__all__ = ["fit_psd_density", "psd_objective_terms", "psd_l2_gram", "held_out_loss", "project_psd_affine"]

_AUTO_CVXPY_MAX_M = 40
_WHITEN_FLOOR = 1e-12  # K eigenvalues below this * max are floored in the whitening R = K^{-1/2}


def _check_centers(centers: Any, d: int | None = None) -> np.ndarray:
    C = as_samples(centers, "centers")
    if d is not None and C.shape[1] != d:
        raise ValueError(f"centers: have {C.shape[1]} features but the data have {d}")
    return C


def _check_A(A: Any, m: int) -> np.ndarray:
    A = np.asarray(A, dtype=np.float64)
    if A.shape != (m, m):
        raise ValueError(f"A: must have shape ({m}, {m}), got {A.shape}")
    if not np.all(np.isfinite(A)):
        raise ValueError("A: contains NaN or inf")
    return A


# ---------------------------------------------------------------------------------------------
# the L2 Gram
# ---------------------------------------------------------------------------------------------
def _check_size(m: int, max_centers: int) -> None:
    if m > max_centers:
        raise ValueError(
            f"centers: m = {m} exceeds max_centers = {max_centers}; the L2 term needs O(m^4) memory "
            f"(m^2(m+1)^2/4 = {m * m * (m + 1) ** 2 // 4:.3g} doubles for the reduced Gram), so m is limited "
            f"to about 100-150. Use fewer centres or raise max_centers deliberately."
        )


def psd_l2_gram(centers: Any, lengthscale: Any, *, max_centers: int = 150) -> np.ndarray:
    """Gram matrix G, shape (m^2, m^2), with vec(A)^T G vec(A) = int_{R^d} f_A(x)^2 dx.

    vec is row-major (``A.ravel()``); G_(ij),(kl) = c_{4eta} K½_ij K½_kl k_eta(m_ij, m_kl) with
    K½ = K_{C,C,eta/2}, m_ij = (c_i + c_j)/2 and eta = 1/(2 l^2). G is symmetric PSD. (The form with
    the middle two indices swapped, c_{4eta} K½_ik K½_jl k_eta(m_ik, m_jl), gives the same quadratic
    form on every A.) centers: (m, d); lengthscale: positive scalar or (d,). Refuses m > max_centers (O(m^4) memory;
    the full matrix for m = 100 already takes 800 MB).
    """
    C = _check_centers(centers)
    m, d = C.shape
    _check_size(m, max_centers)
    eta = eta_from_lengthscale(lengthscale, d)
    v = gaussian_block(C, C, eta / 2.0).ravel()
    M = ((C[:, None, :] + C[None, :, :]) / 2.0).reshape(m * m, d)
    G = gaussian_block(M, M, eta)
    G *= v[:, None]
    G *= v[None, :]
    G *= gaussian_mass(4.0 * eta)
    return G


def _reduced_gram(C: np.ndarray, eta: np.ndarray) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray], np.ndarray]:
    """H (p, p) = G restricted to upper-triangle pairs (i <= j), the index pair, and weights w.

    For symmetric A with s = A[iu]: vec(A)^T G vec(A) = (w s)^T H (w s), w = 1 on the diagonal,
    2 off it; and (G vec A) at (k, l) with k <= l equals (H (w s))_kl.
    """
    m = C.shape[0]
    iu = np.triu_indices(m)
    v = gaussian_block(C, C, eta / 2.0)[iu]
    M = (C[iu[0]] + C[iu[1]]) / 2.0
    H = gaussian_block(M, M, eta)
    H *= v[:, None]
    H *= v[None, :]
    H *= gaussian_mass(4.0 * eta)
    w = np.where(iu[0] == iu[1], 1.0, 2.0)
    return H, iu, w


# ---------------------------------------------------------------------------------------------
# objective
# ---------------------------------------------------------------------------------------------
def psd_objective_terms(A: Any, centers: Any, lengthscale: Any, X: Any) -> dict[str, float]:
    """Terms of J(A) for A (m, m), centers (m, d), data X (n, d), lengthscale scalar or (d,).

    Returns {"l2_square": int f_A^2, "linear": (2/n) sum_i f_A(x_i), "regulariser": Tr(A K A K)}
    (the regulariser without the factor reg); J = l2_square - linear + reg * regulariser.
    """
    C = _check_centers(centers)
    X = as_samples(X, "X")
    if X.shape[1] != C.shape[1]:
        raise ValueError(f"centers: have {C.shape[1]} features but X has {X.shape[1]}")
    m, d = C.shape
    A = _check_A(A, m)
    A = (A + A.T) / 2.0
    eta = eta_from_lengthscale(lengthscale, d)
    H, iu, w = _reduced_gram(C, eta)
    t = w * A[iu]
    K = gaussian_block(C, C, eta)
    KX = gaussian_block(C, X, eta)
    S = KX @ KX.T / X.shape[0]
    return {
        "l2_square": float(t @ H @ t),
        "linear": 2.0 * float(np.sum(A * S)),
        "regulariser": float(np.sum((A @ K) * (A @ K).T)),
    }


def held_out_loss(model: Any, X_val: Any) -> float:
    """Held-out L2 loss int f^2 - 2 mean_i f(x_i) (= |f - p|^2 - int p^2 in expectation).

    ``model``: a ``GaussianPSDModel`` (uses ``A`` (m, m), ``centers`` (m, d), ``lengthscale``);
    X_val (n_val, d). Smaller is better.
    """
    A, C, l = (getattr(model, name) for name in ("A", "centers", "lengthscale"))
    terms = psd_objective_terms(A, C, l, X_val)
    return terms["l2_square"] - terms["linear"]


# ---------------------------------------------------------------------------------------------
# public fit
# ---------------------------------------------------------------------------------------------
_CENTER_PIVOT_FLOOR = 1e-8


def _default_centers(X: np.ndarray, m: int, lengthscale: Any, seed: int) -> tuple[np.ndarray, str]:
    """Greedy pivoted Cholesky pivots of k(X, X): at most m, and fewer once the largest residual
    kernel variance drops below 1e-8 (``pivot_floor``), i.e. when a further centre's feature is
    numerically in the span of the chosen ones. That keeps K = K_{C,C} reasonably conditioned,
    which both solvers need (they work in whitened coordinates K^{1/2} A K^{1/2}).
    Fallback, if pivoted Cholesky raises: m distinct data points drawn at random."""
    try:
        from ..lowrank.cholesky import pivoted_cholesky
        from ..kernels import GaussianKernel

        scale = np.asarray(lengthscale, dtype=np.float64)
        kernel = GaussianKernel(float(scale) if scale.ndim == 0 else scale)
        pc = pivoted_cholesky(
            kernel, X, max_rank=min(m, X.shape[0]), tol=0.0, pivoting="greedy", seed=seed,
            pivot_floor=_CENTER_PIVOT_FLOOR,
        )
        return np.asarray(pc.pivot_points, dtype=np.float64).copy(), "pivoted_cholesky"
    except Exception:  # pragma: no cover - fallback path
        rng = np.random.default_rng(seed)
        uniq = np.unique(X, axis=0)
        idx = rng.choice(uniq.shape[0], size=min(m, uniq.shape[0]), replace=False)
        return uniq[idx].copy(), "random_subset"


def fit_psd_density(
    X: Any,
    *,
    centers: Any = None,
    m: int = 50,
    lengthscale: float | np.ndarray,
    reg: float = 1e-6,
    normalize: bool = True,
    solver: str = "auto",
    max_iter: int = 10_000,
    tol: float = 1e-9,
    gap_tol: float = 1e-6,
    seed: int = 0,
    max_centers: int = 150,
) -> GaussianPSDModel:
    """Fit a Gaussian PSD density f(x) = k_C(x)^T A k_C(x) to samples (Rudi & Ciliberto 2021, (12)).

    Parameters
    ----------
    X: (n, d) samples (1-D input is one feature); NaN/inf rejected.
    centers: (m, d) centres; default: the greedy pivoted-Cholesky pivots of k(X, X) (at most m of
        them; fewer if the kernel matrix is numerically of lower rank).
    m: number of centres when ``centers`` is None.
    lengthscale: positive scalar or (d,) array, jdlcore convention k = exp(-|x-x'|^2 / (2 l^2)).
    reg: >= 0, weight of Tr(A K A K).
    normalize: impose int f = 1 as a linear equality (default); else solve without it and divide
        the result by its integral.
    solver: "auto" (cvxpy for m <= 40, else pgd), "cvxpy" (Clarabel, SCS fallback) or "pgd"
        (FISTA with exact projection): ``_solve_cvxpy``, ``_solve_pgd``. Without ``normalize`` the
        returned A is the minimiser divided by its integral (fit_info_["objective"] is J there;
        "objective_unnormalized" and "integral_before_normalization" describe the raw minimiser).
    max_iter: pgd's iteration cap; a run that stops there unconverged warns (``ConvergenceWarning``).
    gap_tol: with ``normalize``, pgd stops where its certified relative duality gap is <= gap_tol
        (``jdlcore.solvers.fista.affine_psd_gap``: an upper bound on J(A) - J*, over max(1, |J(A)|));
        fit_info_ reports "gap" and "converged".
    tol: without ``normalize``, pgd stops where |A_k+1 - A_k|_F <= tol * max(1, |A_k+1|_F) (a small step,
        not a certificate).
    seed: for the power iteration start and the fallback centre choice.
    max_centers: refuse more centres than this (the L2 term costs O(m^4) memory).

    Returns
    -------
    ``jdlcore.psd.model.GaussianPSDModel(A, centers, lengthscale)`` with attribute ``fit_info_``: dict with
    objective (J at the returned A), iterations, solver, seconds, min_eigenvalue, integral, m, ...
    """
    X = as_samples(X, "X")
    d = X.shape[1]
    eta = eta_from_lengthscale(lengthscale, d)
    reg = check_nonnegative(reg, "reg")
    check_choice(solver, "solver", ("auto", "cvxpy", "pgd"))
    if int(max_iter) < 1:
        raise ValueError(f"max_iter: must be >= 1, got {max_iter!r}")
    for name, value in (("tol", tol), ("gap_tol", gap_tol)):
        if not (np.isfinite(value) and value >= 0):
            raise ValueError(f"{name}: must be finite and >= 0, got {value!r}")
    C, center_source = _fit_centers(X, centers, m, lengthscale, seed, max_centers)
    mC = C.shape[0]
    if solver == "auto":
        solver = "cvxpy" if mC <= _AUTO_CVXPY_MAX_M else "pgd"

    t0 = time.perf_counter()
    problem = _density_problem(C, X, eta, reg)
    if solver == "cvxpy":
        A, info = _solve_cvxpy(problem, normalize)
    else:
        A, info = _solve_pgd(problem, normalize, int(max_iter), float(gap_tol if normalize else tol), seed)
    if solver == "pgd" and not info["converged"]:
        measure = (f"a certified relative duality gap of {info['gap']:.3g} above gap_tol = {gap_tol:g}" if normalize
                   else f"a relative step above tol = {tol:g}")
        warnings.warn(f"fit_psd_density: pgd stopped at max_iter = {max_iter} with {measure}; raise max_iter, or "
                      "reg (a larger reg converges faster)", ConvergenceWarning, stacklevel=2)
    A, objective, info_extra = _unit_integral(problem, A, normalize)
    seconds = time.perf_counter() - t0
    eig_A = np.linalg.eigvalsh(A)
    info.update(
        objective=objective,
        solver=solver if "solver" not in info else info["solver"],
        seconds=seconds,
        min_eigenvalue=float(eig_A[0]),
        min_eigenvalue_relative=float(eig_A[0] / eig_A[-1]) if eig_A[-1] > 0 else 0.0,
        integral=float(np.sum(problem.N * A)),
        m=mC,
        cond_K=float(np.linalg.cond(problem.K)),
        center_source=center_source,
        normalize=bool(normalize),
        **info_extra,
    )
    model = GaussianPSDModel.from_eta(A, C, eta)
    model.fit_info_ = info
    return model


def _fit_centers(X: np.ndarray, centers: Any, m: int, lengthscale: Any, seed: int,
                 max_centers: int) -> tuple[np.ndarray, str]:
    """The centres C (m', d) of ``fit_psd_density`` and where they came from: the given ones, else
    ``_default_centers`` (at most m); ``ValueError`` past ``max_centers``."""
    if centers is None:
        if int(m) < 1:
            raise ValueError(f"m: must be >= 1, got {m!r}")
        _check_size(int(m), max_centers)
        C, center_source = _default_centers(X, int(m), lengthscale, seed)
    else:
        C = _check_centers(centers, X.shape[1])
        center_source = "given"
    _check_size(C.shape[0], max_centers)
    return C, center_source


def _density_problem(C: np.ndarray, X: np.ndarray, eta: np.ndarray, reg: float) -> _Problem:
    """The terms of J for centres C (m, d), samples X (n, d) and precision eta (d,): the factor of the
    reduced L2 Gram, K = K_{C,C}, S = K_{C,X} K_{X,C} / n and N = c_{2 eta} K_{C,C,eta/2}."""
    H, iu, w = _reduced_gram(C, eta)
    K = gaussian_block(C, C, eta)
    KX = gaussian_block(C, X, eta)
    S = KX @ KX.T / X.shape[0]
    N = gaussian_mass(2.0 * eta) * gaussian_block(C, C, eta / 2.0)
    return _Problem(F=_gram_factor(H), iu=iu, w=w, K=K, S=S, N=N, reg=reg, m=C.shape[0])


def _unit_integral(problem: _Problem, A: np.ndarray, normalize: bool) -> tuple[np.ndarray, float, dict[str, Any]]:
    """A solver's A (m, m) symmetrised and divided by its integral <N, A> (with ``normalize``, this only
    removes the solver's residual equality violation), J there, and (without ``normalize``) J and the
    integral of the raw minimiser; ``RuntimeError`` for an integral <= 0."""
    A = (A + A.T) / 2.0
    objective = problem.objective(A)
    integral = float(np.sum(problem.N * A))
    info_extra: dict[str, Any] = {}
    if normalize:
        if integral <= 0:
            raise RuntimeError("fit_psd_density: solver returned a model with non-positive integral")
        A = A / integral  # removes the solver's residual equality violation
        objective = problem.objective(A)
    else:
        info_extra["objective_unnormalized"] = objective
        info_extra["integral_before_normalization"] = integral
        if integral <= 0:
            raise RuntimeError("fit_psd_density: the unnormalised fit is identically zero; cannot renormalise")
        A = A / integral
        objective = problem.objective(A)
    return A, objective, info_extra


# ---------------------------------------------------------------------------------------------
# solvers
# ---------------------------------------------------------------------------------------------
def _gram_factor(H: np.ndarray) -> np.ndarray:
    """F (r, p) with F^T F = the PSD part of H: eigenvalues <= p * eps * max are dropped. The
    computed H is PSD only up to rounding; its slightly negative eigenvalues would make the
    objective unbounded below along near-null directions (docs/methods.md, PSD models)."""
    lam, U = np.linalg.eigh(H)
    keep = lam > H.shape[0] * np.finfo(float).eps * max(lam[-1], 0.0)
    return np.ascontiguousarray((U[:, keep] * np.sqrt(lam[keep])).T)


@dataclass
class _Problem:
    F: np.ndarray
    iu: tuple[np.ndarray, np.ndarray]
    w: np.ndarray
    K: np.ndarray
    S: np.ndarray
    N: np.ndarray
    reg: float
    m: int

    def gram_op(self, A: np.ndarray) -> np.ndarray:
        """mat(G vec A) for symmetric A, shape (m, m)."""
        g = self.F.T @ (self.F @ (self.w * A[self.iu]))
        out = np.zeros((self.m, self.m))
        out[self.iu] = g
        out.T[self.iu] = g
        return out

    def hess_op(self, A: np.ndarray) -> np.ndarray:
        """Half the Hessian: mat(G vec A) + reg K A K."""
        out = self.gram_op(A)
        if self.reg:
            out += self.reg * (self.K @ A @ self.K)
        return out

    def objective(self, A: np.ndarray) -> float:
        return float(np.sum(A * self.hess_op(A)) - 2.0 * np.sum(A * self.S))


def _solve_cvxpy(p: _Problem, normalize: bool) -> tuple[np.ndarray, dict[str, Any]]:
    """B = K^{1/2} A K^{1/2} a PSD cvxpy variable (A = R B R, R = K^{-1/2}); the L2 term is
    sum_squares(F t) with t the weighted upper-triangle entries of A and F^T F the eigen-factorisation
    of the reduced Gram (eigenvalues below p * eps * max dropped; pgd uses the same factor); the
    regulariser is sum_squares(K^{1/2} A K^{1/2}). Clarabel (tolerances 1e-11) first, SCS as a
    fallback; the status is in the info's "status", and tiny negative eigenvalues of the answer are
    clipped. In the raw A-coordinates neither solver reached the optimum; centres that make K
    numerically singular (cond(K) beyond ~1e10) still defeat both, so ``_default_centers`` stops
    adding centres before that, and fit_info_["cond_K"] reports it."""
    import cvxpy as cp
    import scipy.sparse as sp

    m = p.m
    F = p.F  # (r, p): H ~ F^T F
    rows = np.arange(p.iu[0].size)
    # cp.vec is column-major: A[i, j] sits at j*m + i.
    P = sp.csr_matrix((p.w, (rows, p.iu[1] * m + p.iu[0])), shape=(rows.size, m * m))
    # whitened variable B = K^{1/2} A K^{1/2} (PSD iff A is), A = R B R with R = K^{-1/2}:
    # keeps the variable O(1) where A itself has entries in the thousands.
    lk, Uk = np.linalg.eigh(p.K)
    lk = np.clip(lk, _WHITEN_FLOOR * lk[-1], None)
    R = (Uk * lk**-0.5) @ Uk.T
    Kh = (Uk * lk**0.5) @ Uk.T
    B = cp.Variable((m, m), PSD=True)
    A = R @ B @ R
    t = P @ cp.vec(A, order="F")
    obj = cp.sum_squares(F @ t) - 2.0 * cp.sum(cp.multiply(R @ p.S @ R, B))
    if p.reg:
        obj = obj + p.reg * cp.sum_squares(Kh @ A @ Kh)
    cons = [cp.sum(cp.multiply(R @ p.N @ R, B)) == 1.0] if normalize else []
    prob = cp.Problem(cp.Minimize(obj), cons)
    errors = []
    for name in ("CLARABEL", "SCS"):
        try:
            kwargs = (
                {"eps": 1e-9, "max_iters": 100000} if name == "SCS"
                else {"tol_gap_abs": 1e-11, "tol_gap_rel": 1e-11, "tol_feas": 1e-11, "max_iter": 500}
            )
            with warnings.catch_warnings():  # "may be inaccurate": recorded in fit_info_["status"]
                warnings.simplefilter("ignore", UserWarning)
                prob.solve(solver=name, **kwargs)
        except Exception as error:  # solver failure: try the next one
            errors.append(f"{name}: {error}")
            continue
        if prob.status in ("optimal", "optimal_inaccurate") and B.value is not None:
            Av = R @ np.asarray(B.value, dtype=np.float64) @ R
            Av = (Av + Av.T) / 2.0
            lam_a, U_a = np.linalg.eigh(Av)  # remove the solver's tiny negative eigenvalues
            Av = (U_a * np.clip(lam_a, 0.0, None)) @ U_a.T
            stats = prob.solver_stats
            return Av, {
                "solver": f"cvxpy/{name.lower()}",
                "iterations": int(getattr(stats, "num_iters", 0) or 0),
                "status": prob.status,
            }
        errors.append(f"{name}: status {prob.status}")
    raise RuntimeError("fit_psd_density: cvxpy failed (" + "; ".join(errors) + ")")


def _project_psd(B: np.ndarray) -> np.ndarray:
    lam, U = np.linalg.eigh((B + B.T) / 2.0)
    return (U * np.clip(lam, 0.0, None)) @ U.T


def project_psd_affine(B: np.ndarray, N: np.ndarray, mu0: float, scale: float) -> tuple[np.ndarray, float, int]:
    """Euclidean projection of symmetric B onto {A PSD, <N, A> = 1} (N positive definite).

    Returns (A, mu, eigen-decompositions used). A = Pi_+(B + mu N) with phi(mu) = <N, A> = 1.
    """
    B = (B + B.T) / 2.0
    evals = 0

    def phi(mu: float) -> tuple[float, float, np.ndarray]:
        nonlocal evals
        evals += 1
        lam, U = np.linalg.eigh(B + mu * N)
        pos = np.clip(lam, 0.0, None)
        A = (U * pos) @ U.T
        Nt = U.T @ N @ U
        # derivative of Pi_+ at B + mu N in direction N: U (Gamma o Nt) U^T
        dl = lam[:, None] - lam[None, :]
        dp = pos[:, None] - pos[None, :]
        with np.errstate(divide="ignore", invalid="ignore"):
            gam = np.where(np.abs(dl) > 1e-300, dp / dl, (lam[:, None] > 0).astype(float))
        return float(np.sum(N * A)), float(np.sum(gam * Nt * Nt)), A

    lo, hi = -np.inf, np.inf
    mu = mu0
    step = max(abs(mu0), scale, 1e-12)
    best = None
    for _ in range(200):
        val, der, A = phi(mu)
        r = val - 1.0
        best = (A, mu)
        if abs(r) <= 1e-13:
            break
        if r < 0:
            lo = mu
        else:
            hi = mu
        cand = mu - r / der if der > 0 else np.nan
        if np.isfinite(lo) and np.isfinite(hi):
            if not (np.isfinite(cand) and lo < cand < hi):
                cand = 0.5 * (lo + hi)
            if hi - lo <= 1e-15 * max(1.0, abs(mu)):
                break
        elif not np.isfinite(cand) or (r < 0 and cand <= mu) or (r > 0 and cand >= mu):
            cand = mu + step if r < 0 else mu - step
            step *= 4.0
        mu = cand
    A, mu = best
    return A, mu, evals


def _solve_pgd(p: _Problem, normalize: bool, max_iter: int, tol: float, seed: int) -> tuple[np.ndarray, dict[str, Any]]:
    """FISTA in whitened coordinates B = K^{1/2} A K^{1/2} (A = R B R, R = K^{-1/2}; K's eigenvalues
    floored at 1e-12 * max). The PSD cone is invariant under this congruence, the regulariser
    becomes reg |B|_F^2 and the model is f = psi^T B psi with psi = K^{-1/2} k_C(x) (|psi|^2 <= 1),
    which removes most of the ill-conditioning of the A-parametrisation.

    Step 1/L, L = 2 * the largest eigenvalue of the whitened operator B -> R (mat(G vec A) + reg K A K) R
    on symmetric matrices (power iteration, +2% margin), with adaptive (gradient-scheme) restart. The
    projection is exact: without ``normalize`` onto S^m_+ (negative eigenvalues clipped); with it onto
    {B PSD, <N, B> = 1} (N whitened), which is Pi_+(B + mu N) where the scalar mu solves
    phi(mu) = <N, Pi_+(B + mu N)> = 1 (phi is continuous and nondecreasing, phi(-inf) = 0 as N is
    positive definite): a safeguarded Newton iteration warm-started from the last step's mu
    (``project_psd_affine``), the result rescaled by 1/<N, A> so the equality holds to rounding. With
    ``normalize`` it stops on a certificate, the Frank-Wolfe duality gap over that bounded set
    (``affine_psd_gap``, an upper bound on J - J*); without, on a small step."""
    m = p.m
    lk, Uk = np.linalg.eigh(p.K)
    lk = np.clip(lk, _WHITEN_FLOOR * lk[-1], None)
    R = (Uk * lk**-0.5) @ Uk.T
    S = R @ p.S @ R
    N = R @ p.N @ R
    N = (N + N.T) / 2.0

    def hess(B: np.ndarray) -> np.ndarray:
        out = R @ p.hess_op(R @ B @ R) @ R
        return (out + out.T) / 2.0

    rng = np.random.default_rng(seed)
    # Lipschitz constant: 2 * lambda_max(hess) on symmetric matrices (power iteration).
    V = rng.standard_normal((m, m))
    V = (V + V.T) / 2.0
    V /= np.linalg.norm(V)
    lam = 0.0
    nrm = 0.0
    for _ in range(500):
        W = hess(V)
        lam_new = float(np.sum(V * W))
        nrm = float(np.linalg.norm(W))
        if nrm == 0:
            break
        V = W / nrm
        if abs(lam_new - lam) <= 1e-9 * abs(lam_new):
            lam = lam_new
            break
        lam = lam_new
    L = 2.0 * max(lam, nrm) * 1.02
    if not L > 0:
        raise RuntimeError("fit_psd_density: zero curvature, cannot choose a step size")
    eig_count = 0
    mu = 0.0
    scale_mu = 1.0 / max(float(np.linalg.norm(N)), 1e-300)

    def project(B: np.ndarray) -> np.ndarray:
        nonlocal mu, eig_count
        if normalize:
            A, mu, e = project_psd_affine(B, N, mu, scale_mu * max(1.0, float(np.linalg.norm(B))))
            eig_count += e
            return A
        eig_count += 1
        return _project_psd(B)

    def gap(B: np.ndarray, gradient: np.ndarray) -> float:  # J(B) = <B, H B> - 2 <S, B> = <B, g> / 2 - <S, B>
        return affine_psd_gap(B, gradient, N, 0.5 * float(np.sum(B * gradient)) - float(np.sum(S * B)))

    start = np.eye(m) / np.trace(N) if normalize else np.zeros((m, m))
    B, info = fista(lambda Y: 2.0 * (hess(Y) - S), project, start, L, tol=tol, max_iter=max_iter,
                    certificate=gap if normalize else None)
    return R @ B @ R, {"solver": "pgd", **info, "lipschitz": L, "eigendecompositions": eig_count}

