"""A conditional Gaussian PSD density tau(x' | x) fitted from pairs: the filter's transition and
observation models.

With centres (X'_i, X_i) and precisions (eta', eta), a Gaussian PSD model over (x', x),

    tau(x', x) = sum_ij A_ij k'(x', X'_i) k'(x', X'_j) k(x, X_i) k(x, X_j),    A PSD,

is fitted by least squares on the conditional density (as least-squares conditional density estimation
does for linear models):

    J(A) = (1/n) sum_s int tau(x', x_s)^2 dx' - (2/n) sum_s tau(x'_s, x_s) + reg Tr(A K A K),

which in expectation is E_x int (tau(x' | x) - p(x' | x))^2 dx' less a constant. The first term is a
quadratic form in A whose Gram over the pairs (i <= j), (k <= l) is the x' part's L2 Gram (the density
fit's, ``jdlcore.psd.fit``) times the empirical fourth moments (1/n) sum_s k_i k_j k_k k_l (x_s) of the x
kernels: both PSD, so their entrywise product is. K is the joint kernel matrix of the centres. The same
FISTA solves it on the PSD cone. No normalisation is imposed (int tau(x' | x) dx' = 1 for every x is not
one linear constraint): the least-squares fit estimates the normalised conditional, and
``fit_info_["integral_mean"]``, ``["integral_min"]``, ``["integral_max"]`` report int tau(x' | x_s) dx'
over the training x. A joint density fitted by (12) instead would be tau(x' | x) pi(x), which the
filter's recursion would read as one more factor pi per step.

``conditional_loss`` (J without the regulariser, on held-out pairs) compares fits;
``tune_psd_conditional`` chooses the lengthscales and reg by it.
"""
from __future__ import annotations

import itertools
import time
import warnings
from typing import Any, Sequence

import numpy as np

from .fit import _Problem, _check_size, _default_centers, _gram_factor, _reduced_gram, _solve_pgd
from .model import GaussianPSDModel, eta_from_lengthscale, gaussian_block
from ..solvers.fista import ConvergenceWarning
from ..validation import as_samples, check_nonnegative

__all__ = ["fit_psd_conditional", "conditional_loss", "tune_psd_conditional"]


def fit_psd_conditional(X_next: Any, X: Any, *, m: int = 50, lengthscale_next: float | np.ndarray,
                        lengthscale: float | np.ndarray, reg: float = 1e-6, max_iter: int = 10_000,
                        tol: float = 1e-9, seed: int = 0, max_centers: int = 150) -> GaussianPSDModel:
    """Fit tau(x' | x) from n pairs: ``X_next`` (n, d') the x' of each pair, ``X`` (n, d) its x.

    m: centres at most (greedy pivoted-Cholesky pivots of the joint kernel on the pairs);
    lengthscale_next, lengthscale: the Gaussian kernels' lengthscales on x' and on x (scalars or one per
    coordinate); reg: >= 0, the weight of Tr(A K A K); max_iter, tol: FISTA's cap and its stopping
    step (|A_k+1 - A_k|_F <= tol max(1, |A_k+1|_F); the PSD cone is unbounded, so there is no duality-gap
    certificate here); a fit that stops at max_iter warns (``ConvergenceWarning``).

    Returns a ``GaussianPSDModel`` over (x', x), x' first (the filter's convention), with ``fit_info_``:
    objective, iterations, converged, seconds, m, integral_mean / _min / _max (see the module).
    """
    Xn, Xc = as_samples(X_next, "X_next"), as_samples(X, "X")
    if Xn.shape[0] != Xc.shape[0]:
        raise ValueError(f"X_next: has {Xn.shape[0]} rows but X has {Xc.shape[0]}")
    reg = check_nonnegative(reg, "reg")
    d_next, d = Xn.shape[1], Xc.shape[1]
    eta_next, eta = eta_from_lengthscale(lengthscale_next, d_next), eta_from_lengthscale(lengthscale, d)
    if int(m) < 1:
        raise ValueError(f"m: must be >= 1, got {m!r}")
    _check_size(int(m), max_centers)
    started = time.perf_counter()
    joint = np.hstack([Xn, Xc])
    scales = np.concatenate([np.broadcast_to(np.asarray(lengthscale_next, dtype=float), (d_next,)),
                             np.broadcast_to(np.asarray(lengthscale, dtype=float), (d,))])
    C, _ = _default_centers(joint, int(m), scales, seed)
    problem = _conditional_problem(C[:, :d_next], C[:, d_next:], Xn, Xc, eta_next, eta, reg)
    A, info = _solve_pgd(problem, False, int(max_iter), float(tol), seed)
    if not info["converged"]:
        warnings.warn(f"fit_psd_conditional: FISTA stopped at max_iter = {max_iter} with a relative step above "
                      f"tol = {tol:g}; raise max_iter, or reg (a larger reg converges faster)", ConvergenceWarning,
                      stacklevel=2)
    A = 0.5 * (A + A.T)
    model = GaussianPSDModel.from_eta(A, C, np.concatenate([eta_next, eta]))
    integrals = model.marginalize(list(range(d_next, d_next + d)))(Xc)
    model.fit_info_ = {**info, "objective": problem.objective(A), "seconds": time.perf_counter() - started,
                       "m": C.shape[0], "integral_mean": float(integrals.mean()),
                       "integral_min": float(integrals.min()), "integral_max": float(integrals.max())}
    return model


def _conditional_problem(C_next: np.ndarray, C: np.ndarray, X_next: np.ndarray, X: np.ndarray, eta_next: np.ndarray,
                         eta: np.ndarray, reg: float) -> _Problem:
    """The terms of J (see the module) for centres (C_next, C) (m, d' + d) and pairs (X_next, X) (n rows)."""
    H, iu, w = _reduced_gram(C_next, eta_next)  # int of products of four x' kernels, over pairs (i <= j)
    KX = gaussian_block(C, X, eta)  # (m, n)
    products = KX[iu[0]] * KX[iu[1]]  # (pairs, n): k_i k_j at each x_s
    H *= products @ products.T / X.shape[0]
    joint = gaussian_block(C_next, X_next, eta_next) * KX  # the features phi_s of each pair, (m, n)
    K = gaussian_block(C_next, C_next, eta_next) * gaussian_block(C, C, eta)
    S = joint @ joint.T / X.shape[0]
    return _Problem(F=_gram_factor(H), iu=iu, w=w, K=K, S=S, N=np.zeros_like(K), reg=reg, m=C.shape[0])


def conditional_loss(model: GaussianPSDModel, X_next: Any, X: Any) -> float:
    """The least-squares conditional loss of a fitted tau (a ``GaussianPSDModel`` over (x', x), x' first)
    on n pairs ``X_next`` (n, d'), ``X`` (n, d):

        (1/n) sum_s int tau(x', x_s)^2 dx' - (2/n) sum_s tau(x'_s, x_s),

    in closed form (the fit's J without its regulariser). On pairs the fit did not see it estimates
    E_x int (tau(x' | x) - p(x' | x))^2 dx' less a constant: lower is better, and it may be negative.
    Costs O(m^4 n) for m centres (the pairs of centres against the pairs of centres at each x_s)."""
    Xn, Xc = as_samples(X_next, "X_next"), as_samples(X, "X")
    d_next = Xn.shape[1]
    if Xc.shape[0] != Xn.shape[0]:
        raise ValueError(f"X_next: has {Xn.shape[0]} rows but X has {Xc.shape[0]}")
    if d_next + Xc.shape[1] != model.d:
        raise ValueError(f"X_next, X: {d_next} + {Xc.shape[1]} columns, but the model is over {model.d} coordinates")
    C, eta = model.centers, model.eta
    H, iu, w = _reduced_gram(C[:, :d_next], eta[:d_next])
    KX = gaussian_block(C[:, d_next:], Xc, eta[d_next:])  # (m, n)
    V = (w * model.A[iu])[:, None] * (KX[iu[0]] * KX[iu[1]])  # column s: w * (A o k(x_s) k(x_s)^T) on i <= j
    squares = float(np.sum(V * (H @ V))) / Xc.shape[0]
    return squares - 2.0 * float(np.mean(model(np.hstack([Xn, Xc]))))


def tune_psd_conditional(X_next: Any, X: Any, *, lengthscales_next: Sequence[float], lengthscales: Sequence[float],
                         regs: Sequence[float] = (1e-7,), validation: float = 0.25, seed: int = 0,
                         **fit_options: Any) -> tuple[GaussianPSDModel, list[dict[str, float]]]:
    """``fit_psd_conditional`` at every (lengthscale_next, lengthscale, reg) of the grid on a seeded
    share ``1 - validation`` of the pairs, scored by ``conditional_loss`` on the rest; the best refitted
    on all pairs. ``fit_options``: ``fit_psd_conditional``'s others (m, max_iter, tol, max_centers).

    Returns (the refitted model, the grid: one dict per point with lengthscale_next, lengthscale, reg and
    loss, in grid order). Scalar lengthscales (one per side); the model's ``fit_info_`` gains the
    chosen point, its validation loss and ``on_grid_edge``: the parameters whose chosen value is the
    smallest or largest of a grid of several (the best may lie beyond it: widen that grid)."""
    Xn, Xc = as_samples(X_next, "X_next"), as_samples(X, "X")
    if Xn.shape[0] != Xc.shape[0]:
        raise ValueError(f"X_next: has {Xn.shape[0]} rows but X has {Xc.shape[0]}")
    if not 0.0 < float(validation) < 1.0:
        raise ValueError(f"validation: the held-out share must lie in (0, 1), got {validation!r}")
    for name, values in (("lengthscales_next", lengthscales_next), ("lengthscales", lengthscales), ("regs", regs)):
        if len(values) == 0:
            raise ValueError(f"{name}: the grid needs at least one value")
    held = np.random.default_rng(seed).permutation(Xn.shape[0])
    cut = int(round(float(validation) * Xn.shape[0]))
    if cut < 1 or cut >= Xn.shape[0]:
        raise ValueError(f"validation: {validation!r} of {Xn.shape[0]} pairs leaves no pair on one side")
    test, train = held[:cut], held[cut:]
    table = []
    with warnings.catch_warnings():  # a candidate stopped at max_iter is still scored; the refit warns
        warnings.simplefilter("ignore", ConvergenceWarning)
        for length_next, length, reg in itertools.product(lengthscales_next, lengthscales, regs):
            model = fit_psd_conditional(Xn[train], Xc[train], lengthscale_next=length_next, lengthscale=length,
                                        reg=reg, seed=seed, **fit_options)
            table.append({"lengthscale_next": float(length_next), "lengthscale": float(length), "reg": float(reg),
                          "loss": conditional_loss(model, Xn[test], Xc[test])})
    finite = [row for row in table if np.isfinite(row["loss"])]
    if not finite:
        raise ValueError("lengthscales_next, lengthscales, regs: no point of the grid gave a finite validation loss")
    best = min(finite, key=lambda row: row["loss"])
    edges = [name for name, values in (("lengthscale_next", lengthscales_next), ("lengthscale", lengthscales),
                                       ("reg", regs))
             if len(values) > 1 and best[name] in (float(min(values)), float(max(values)))]
    model = fit_psd_conditional(Xn, Xc, lengthscale_next=best["lengthscale_next"], lengthscale=best["lengthscale"],
                                reg=best["reg"], seed=seed, **fit_options)
    model.fit_info_ = {**model.fit_info_, "chosen": {k: best[k] for k in ("lengthscale_next", "lengthscale", "reg")},
                       "validation_loss": best["loss"], "on_grid_edge": edges}
    return model, table
