"""Compiled per-row kernels of ``jdlcore.conditional.laws`` (Numba, no GIL): the projection, the quantile merge
and the CRPS.

Each kernel walks the M support atoms of one row a few times and writes its row of the output, so a
block of rows costs O(rows M) memory traffic and no (rows x M x K) temporaries. ``jdlcore.conditional.laws``
documents the mathematics; ``_law_newton`` holds the passes and the Newton step the two projections
share, ``_law_exact`` the exact path and the certificates. This module is imported on first use
(compiling takes a few seconds once; the machine code is cached next to this file).

The projection solves, per row, the dual of min sum_k (p_k - pi_k u_k)^2 / pi_k subject to p >= 0 and
sum_k p_k c(z_k) = b: minimise phi(theta) = 0.5 sum_k pi_k max(0, t_k)^2 - b . theta with
t_k = u_k + theta . c(z_k); then p_k = pi_k max(0, t_k). Every p of that form is non-negative and
complementary, so the moment residual F = sum_k p_k c(z_k) - b (the dual gradient) is the whole KKT
residual: a row is *converged* when each |F_i| is below ``tol`` or within the rounding floor of the
sums that make it (``_FLOOR`` times their magnitudes). The moment functions c are taken in the row's
own coordinates (centred at its mean, scaled by its spread), where the multipliers stay of the size
of u instead of growing with the inverse width of a narrow law.

Two solvers share that test, a fast semi-smooth Newton path and an exact one for the rows that
stall (``project_scalar`` states both).
"""
from __future__ import annotations

import numba as nb
import numpy as np

from ._law_exact import _exact_newton, _inside_moment_set, _mass_multiplier, _separates
from ._law_newton import (
    CONVERGED, LEVEL_FAILED, LEVEL_MASS, LEVEL_MEAN, LEVEL_SECOND, LEVEL_SIGNED_EMPTY, STALLED, UNBOUNDED,
    _DAMPING, _DIVERGED, _VECTOR_DAMPING, _VECTOR_DIVERGED, _basis_at_floor, _clip_normalise, _emit, _local_powers,
    _monomial_sums, _newton_step, _normalise, _pass, _power_pass, _signed_moments, _spread_inverse, _stalled,
)

__all__ = ["project_scalar", "project_vector", "running_quantiles", "crps_rows"]


@nb.njit(cache=True)
def _newton_scalar(u, scale, pi, z, centre, inv, b, degree, tol, theta, iterations, C, A):
    """The fast path for a scalar y: semi-smooth Newton with Armijo backtracking on the dual of the
    projection with the first ``degree`` + 1 moments of s = (z - centre) inv (targets b); theta (3,)
    in/out, from zero. The Newton system carries a ridge proportional to the gradient (regularised
    semi-smooth Newton), which keeps it solvable when few atoms are active and vanishes at the
    solution. Returns True on convergence (the module docstring's test), False where it stalls or
    reaches ``iterations``, theta then at the lowest dual value it found. C (3, M) receives the moment
    basis in the row's coordinates where the rounding floor is tested (``_basis_at_floor``; A (3,)
    scratch)."""
    n = degree + 1
    S = np.empty(9)
    J = np.zeros((3, 3))
    F = np.zeros(3)
    d = np.zeros(3)
    trial = np.zeros(3)
    before = np.zeros(3)
    L = np.zeros((3, 3))
    y = np.zeros(3)
    for i in range(3):
        theta[i] = 0.0
    _power_pass(u, scale, pi, z, centre, inv, 0.0, 0.0, 0.0, S)
    phi = 0.5 * S[8]
    data = (u, scale, pi, z, centre, inv, S)
    previous = np.inf
    basis = False  # C holds the row's moment basis
    for _ in range(iterations):
        err = 0.0
        for i in range(n):
            F[i] = S[5 + i] - b[i]
            err = max(err, abs(F[i]))
        if err <= tol:
            return True
        if _stalled(err, previous):
            if not basis:
                _local_powers(z, centre, inv, C)
                basis = True
            if _basis_at_floor(u, scale, pi, C, n, theta, F, b, A):
                return True
        previous = err
        for i in range(n):
            for j in range(n):
                J[i, j] = S[i + j]
        before[:] = theta
        phi = _newton_step(J, F, d, n, _DAMPING * err, L, y, theta, b, phi, trial, _DIVERGED, data)
        if np.isnan(phi):
            for i in range(3):
                theta[i] = before[i]
            return False
    return False


@nb.njit(cache=True)
def _solve_scalar(u, scale, pi, z, centre, inv, b, degree, tol, iterations, exact_steps, theta, C, scratch):
    """The projection of one row keeping the first ``degree`` + 1 moments: the fast path, then the
    exact path from where it stopped. Returns (converged, the exact path's passes); theta (3,) holds the
    multipliers in the coordinates (z - centre) inv."""
    t, g, F, J, d, L, y, A, alphas, atoms = scratch
    if _newton_scalar(u, scale, pi, z, centre, inv, b, degree, tol, theta, iterations, C, A):
        return True, 0
    for i in range(3):
        if not np.isfinite(theta[i]):
            theta[:] = 0.0
    _local_powers(z, centre, inv, C)
    status, steps = _exact_newton(u, scale, pi, C, degree + 1, b, tol, theta, exact_steps,
                                  t, g, F, J, d, L, y, A, alphas, atoms)
    return status == CONVERGED, steps


@nb.njit(cache=True)
def _scratch(M, K):
    """The exact path's scratch for M atoms and up to K moment functions (``_exact_newton``)."""
    return (np.empty(M), np.empty(M), np.zeros(K), np.zeros((K, K)), np.zeros(K), np.zeros((K, K)),
            np.zeros(K), np.zeros(K), np.empty(M), np.empty(M, dtype=np.int64))


@nb.njit(cache=True, nogil=True)
def project_scalar(R, pi, z, tol, iterations, exact_steps, P, level, exact):
    """Projected laws of rows of R (q, M) = 1 + h(x, z_k) on scalar support atoms z (standardised, strictly
    ascending) with probabilities pi > 0.

    P (q, M) receives pi_k max(0, u_k + theta . (1, s_k, s_k^2)) normalised to sum 1, u = R / sum(pi R),
    s_k the atoms in the row's coordinates; level (q,) the moments kept (LEVEL_*); exact (q,) the exact
    path's passes over the atoms (0 where the fast path sufficed). ``iterations`` and ``exact_steps``
    bound the fast and the exact path per row and level. Which moments can be kept is decided first, exactly
    (``_inside_moment_set``); the solvers then keep them, and a row where they fail to is
    LEVEL_FAILED, with the vector of the highest lower level that converged (the mass alone is
    always kept exactly: ``_mass_multiplier``).

    Two solvers share that test. The fast path is a regularised semi-smooth Newton method with Armijo
    steps on phi (``iterations``); Armijo compares values of phi, whose rounding can exceed the decrease
    left near the boundary of the moment set, so a row can stall there. Such rows go on from where the
    fast path stopped with the exact path (``_exact_newton``): Newton steps on the current active set with
    an exact line search along each step (the root of the piecewise-linear directional derivative, found
    by walking its breakpoints), at the precision of the gradient. On a convex piecewise-quadratic dual,
    Newton's method with exact line search ends in finitely many steps (Li & Swetits, SIAM J. Optim. 3,
    1993); it also proves a row infeasible when the dual falls without bound along a step.
    """
    q, M = R.shape
    b = np.zeros(3)
    theta = np.zeros(3)
    C = np.empty((3, M))
    scratch = _scratch(M, 3)
    span = max(z[M - 1] - z[0], 1e-300)
    for r in range(q):
        u = R[r]
        mass, m1, m2, low = _signed_moments(u, pi, z)
        negative = low < 0.0
        exact[r] = 0
        for i in range(3):
            theta[i] = 0.0
        centre, inv, scale = 0.0, 1.0, 1.0
        if mass > 0.0 and not negative:
            level[r] = LEVEL_SECOND
            scale = 1.0 / mass
        elif mass > 0.0:
            scale = 1.0 / mass
            m1 *= scale
            m2 *= scale
            inside_mean, inside_second = _inside_moment_set(z, m1, m2, span)
            failed = False
            done = False
            if inside_second:
                centre, inv = m1, 1.0 / np.sqrt(m2 - m1 * m1)
                b[0], b[1], b[2] = 1.0, 0.0, 1.0
                done, steps = _solve_scalar(u, scale, pi, z, centre, inv, b, 2, tol, iterations, exact_steps,
                                            theta, C, scratch)
                exact[r] += steps
                level[r] = LEVEL_SECOND
                failed = not done
            if not done and inside_mean:
                centre, inv = m1, _spread_inverse(u, pi, z, m1, span)
                b[0], b[1], b[2] = 1.0, 0.0, 0.0
                done, steps = _solve_scalar(u, scale, pi, z, centre, inv, b, 1, tol, iterations, exact_steps,
                                            theta, C, scratch)
                exact[r] += steps
                level[r] = LEVEL_FAILED if failed else LEVEL_MEAN
                failed = failed or not done
            if not done:
                centre, inv = 0.0, 1.0
                theta[0], theta[1], theta[2] = _mass_multiplier(u, scale, pi, scratch[9]), 0.0, 0.0
                level[r] = LEVEL_FAILED if failed else LEVEL_MASS
        else:
            theta[0] = _mass_multiplier(u, scale, pi, scratch[9])
            level[r] = LEVEL_SIGNED_EMPTY
        _emit(u, scale, pi, z, centre, inv, theta[0], theta[1], theta[2], P[r])


@nb.njit(cache=True, fastmath=True)
def _jacobian4(C, w, J):
    """J = C diag(w) C^T (4, 4) for C = [1, z_1, z_2, z_3], one loop over the atoms."""
    z1 = C[1]
    z2 = C[2]
    z3 = C[3]
    s0 = s1 = s2 = s3 = s11 = s12 = s13 = s22 = s23 = s33 = 0.0
    for k in range(w.shape[0]):
        weight = w[k]
        a = weight * z1[k]
        b = weight * z2[k]
        c = weight * z3[k]
        s0 += weight
        s1 += a
        s2 += b
        s3 += c
        s11 += a * z1[k]
        s12 += a * z2[k]
        s13 += a * z3[k]
        s22 += b * z2[k]
        s23 += b * z3[k]
        s33 += c * z3[k]
    J[0, 0] = s0
    J[0, 1] = J[1, 0] = s1
    J[0, 2] = J[2, 0] = s2
    J[0, 3] = J[3, 0] = s3
    J[1, 1] = s11
    J[1, 2] = J[2, 1] = s12
    J[1, 3] = J[3, 1] = s13
    J[2, 2] = s22
    J[2, 3] = J[3, 2] = s23
    J[3, 3] = s33


@nb.njit(cache=True)
def _jacobian(C, monomials, products, w, K, S, J):
    """The leading K x K block of C diag(w) C^T: ``_jacobian4`` where C has four rows, else from the
    monomial sums (``products[i, j]`` the row of C_i C_j in ``monomials``)."""
    if C.shape[0] == 4:
        _jacobian4(C, w, J)
        return
    _monomial_sums(monomials, w, S)
    for i in range(K):
        for j in range(K):
            J[i, j] = S[products[i, j]]


@nb.njit(cache=True)
def _newton_vector(u, scale, pi, C, monomials, products, b, K, tol, iterations, theta, S, F, J, d, trial, w, wt,
                   L, y, A):
    """The fast path for the first K columns of a general moment basis C (K_max, M), as
    ``_newton_scalar``; the Jacobian entry (i, j) is the monomial sum ``products[i, j]``, computed only
    where a Newton step is taken (not at the converged point, not at rejected trial points). Gives up
    after ``iterations`` or once |theta| passes ``_VECTOR_DIVERGED`` (measured on a 3-D y:
    feasible rows converge in 4-20 iterations with |theta| below 2e4, infeasible ones diverge); the
    exact path decides those rows. On True, wt holds pi_k max(0, t_k) at the returned theta; S to A
    (sized for K_max; w, wt (M,)) are scratch."""
    for i in range(C.shape[0]):
        theta[i] = 0.0
        trial[i] = 0.0
    phi = 0.5 * _pass(u, scale, pi, C, theta, K, F, w, wt)
    previous = np.inf
    for _ in range(iterations):
        err = 0.0
        for i in range(K):
            F[i] -= b[i]
            err = max(err, abs(F[i]))
        if err <= tol or (_stalled(err, previous) and _basis_at_floor(u, scale, pi, C, K, theta, F, b, A)):
            return True
        previous = err
        _jacobian(C, monomials, products, w, K, S, J)
        phi = _newton_step(J, F, d, K, _VECTOR_DAMPING * err, L, y, theta, b, phi, trial, _VECTOR_DIVERGED,
                           (u, scale, pi, C, K, F, w, wt))
        if np.isnan(phi):
            return False
    return False


@nb.njit(cache=True, fastmath=True)
def _vector_emit(u, scale, pi, C, K, theta, out):
    """out_k = pi_k max(0, scale u_k + theta . C_k) over the first K rows of C, normalised to sum 1 (pi
    if nothing is left)."""
    for k in range(u.shape[0]):
        out[k] = scale * u[k]
    for i in range(K):
        for k in range(u.shape[0]):
            out[k] += theta[i] * C[i, k]
    _clip_normalise(pi, out)


@nb.njit(cache=True)
def _emit_last_pass(pi, wt, out):
    """out = wt normalised to sum 1: the last pass's pi_k max(0, t_k) at a converged theta (the pass
    leaves w_k t_k = -0.0 where t_k < 0; written here as 0.0)."""
    total = 0.0
    for k in range(wt.shape[0]):
        value = wt[k] if wt[k] > 0.0 else 0.0
        out[k] = value
        total += value
    _normalise(pi, out, total)


@nb.njit(cache=True, fastmath=True)
def _signed_sums(u, pi, C, signed, b):
    """b = C @ (pi u) (K,), one loop over the atoms per moment function so that each vectorises;
    signed (M,) is scratch."""
    for k in range(u.shape[0]):
        signed[k] = pi[k] * u[k]
    for i in range(C.shape[0]):
        total = 0.0
        for k in range(u.shape[0]):
            total += signed[k] * C[i, k]
        b[i] = total


@nb.njit(cache=True)
def _local_basis(u, pi, C, K, centre, local):
    """local (K, M): row 0 ones, row i (C_i - centre_i) / spread_i for i >= 1, spread_i that of the
    positive part of the row's signed law around centre_i (1 where it has none): the moment basis in
    the row's coordinates."""
    M = u.shape[0]
    for k in range(M):
        local[0, k] = 1.0
    for i in range(1, K):
        inv = _spread_inverse(u, pi, C[i], centre[i], 1.0)
        for k in range(M):
            local[i, k] = (C[i, k] - centre[i]) * inv


@nb.njit(cache=True)
def _padded(C, rows):
    """C (K, M) with zero rows appended up to ``rows``, as a new C-contiguous array."""
    out = np.zeros((rows, C.shape[1]))
    out[:C.shape[0]] = C
    return out


@nb.njit(cache=True, nogil=True)
def project_vector(R, pi, C, monomials, products, tol, iterations, exact_steps, P, level, exact):
    """The projection for a vector Y, keeping mass and mean: C (K, M) = [1, z_1, ..., z_d] in
    standardised units, ``monomials`` (D, M) every product C_i C_j (degree <= 2) with
    ``products[i, j]`` its row; level and exact as in ``project_scalar``. The fast path runs in these
    units (most rows converge there at the cost of one Newton run); a row it leaves runs again in the
    row's own coordinates (``_local_basis``; the fast path where C has at most four rows, then the
    exact path), which converge or prove the mean outside the atoms' hull (LEVEL_MASS: then the mass
    is kept).
    (The second moment is not kept for a vector Y: the signed law's is often not a covariance at
    all, and with no cheap test of which rows can keep it, each row that cannot costs a failing
    Newton run: measured 370 us against 70 us per row on a 3-D y.)"""
    q, M = R.shape
    K = C.shape[0]
    rows = 4 if K == 3 else K  # a 2-D y gets a zero fourth row: the fused four-row loops serve it too
    padded = _padded(C, rows)
    b = np.zeros(rows)
    centre = np.zeros(rows)
    theta = np.zeros(rows)
    signed = np.empty(M)
    S = np.zeros(monomials.shape[0])  # the Newton runs' scratch, allocated once per block
    F = np.zeros(rows)
    J = np.zeros((rows, rows))
    d = np.zeros(rows)
    trial = np.zeros(rows)
    L = np.zeros((rows, rows))
    y = np.zeros(rows)
    A = np.zeros(rows)
    w = np.empty(M)
    wt = np.empty(M)
    local = np.zeros((rows, M))  # a 2-D y's fourth row stays zero, as in padded
    scratch = _scratch(M, K)
    for r in range(q):
        u = R[r]
        _signed_sums(u, pi, padded, signed, b)
        mass = b[0]  # row 0 is the constant 1
        negative = False
        for k in range(M):
            negative |= u[k] < 0.0
        for i in range(rows):
            theta[i] = 0.0
        exact[r] = 0
        out = P[r]
        scale = 1.0 / mass if mass > 0.0 else 1.0
        if mass > 0.0 and not negative:
            level[r] = LEVEL_MEAN
            _vector_emit(u, scale, pi, padded, 1, theta, out)
            continue
        if mass > 0.0:
            for i in range(K):
                b[i] *= scale
            if _newton_vector(u, scale, pi, padded, monomials, products, b, K, tol, iterations, theta,
                              S, F, J, d, trial, w, wt, L, y, A):
                level[r] = LEVEL_MEAN
                _emit_last_pass(pi, wt, out)
                continue
            if _separates(padded, K, theta, b):  # the fast path diverged along a certificate
                level[r] = LEVEL_MASS
            else:  # again in the row's own coordinates: targets mass 1, mean 0
                for i in range(K):
                    centre[i] = b[i]
                _local_basis(u, pi, padded, K, centre, local)
                for i in range(1, K):
                    centre[i] = 0.0
                if rows == 4:  # the fused loops need no monomials: a second fast run, in these coordinates
                    if _newton_vector(u, scale, pi, local, monomials, products, centre, K, tol, iterations, theta,
                                      S, F, J, d, trial, w, wt, L, y, A):
                        level[r] = LEVEL_MEAN
                        _emit_last_pass(pi, wt, out)
                        continue
                status = UNBOUNDED if rows == 4 and _separates(local, K, theta, centre) else STALLED
                if status == STALLED:
                    # from the second fast run's theta where it stalled short of divergence; else from 0
                    # (where rows != 4, theta is still the first run's, in the support's units)
                    if rows != 4 or not np.all(np.abs(theta) < _VECTOR_DIVERGED):
                        theta[:] = 0.0
                    t, g, F2, J2, d2, L2, y2, A2, alphas, atoms = scratch
                    status, exact[r] = _exact_newton(u, scale, pi, local, K, centre, tol, theta, exact_steps,
                                                     t, g, F2, J2, d2, L2, y2, A2, alphas, atoms)
                    if status == CONVERGED:
                        level[r] = LEVEL_MEAN
                        _vector_emit(u, scale, pi, local, K, theta, out)
                        continue
                level[r] = LEVEL_MASS if status == UNBOUNDED else LEVEL_FAILED
        else:
            level[r] = LEVEL_SIGNED_EMPTY
        for i in range(rows):  # the mass alone
            theta[i] = 0.0
        theta[0] = _mass_multiplier(u, scale, pi, scratch[9])
        _vector_emit(u, scale, pi, padded, 1, theta, out)


@nb.njit(cache=True, nogil=True)
def running_quantiles(P, order, values, levels, out):
    """Generalised inverse of each row's running CDF over the atoms in ``order`` (their values ascending
    in ``values``): out[r, l] is the first value whose running maximum CDF reaches levels[l] (ascending),
    within a relative 1e-12; NaN where the CDF never reaches it. Per row one pass writes the running
    maximum CDF and one walk merges it with the levels: O(M + L)."""
    q = P.shape[0]
    M = order.shape[0]
    L = levels.shape[0]
    reach = np.empty(L)
    for l in range(L):
        reach[l] = levels[l] * (1.0 - 1e-12)
    peak = np.empty(M)
    for r in range(q):
        running = 0.0
        highest = -np.inf
        for k in range(M):
            running += P[r, order[k]]
            highest = max(highest, running)
            peak[k] = highest
        k = 0
        for l in range(L):
            while k < M and peak[k] < reach[l]:
                k += 1
            out[r, l] = values[k] if k < M else np.nan


@nb.njit(cache=True, nogil=True)
def crps_rows(P, order, values, observed, out):
    """CRPS of each row of P (q, M) at observed[r], its atoms visited in ``order`` (their values ascending
    in ``values``): out[r] = sum_k p_k (|z_k - y| - z_k (2 F_{k-1} + p_k - 1)), one pass per row, F the
    running sum of the row's weights."""
    q = P.shape[0]
    M = order.shape[0]
    for r in range(q):
        y = observed[r]
        before = 0.0
        total = 0.0
        for k in range(M):
            p = P[r, order[k]]
            z = values[k]
            total += p * (abs(z - y) - z * (2.0 * before + p - 1.0))
            before += p
        out[r] = total
