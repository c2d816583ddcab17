"""Compiled per-row kernels of ``jdlcore.conditional.laws`` (Numba, no GIL): the projection, the quantile merge
and the CRPS.

Each kernel walks the M support atoms of one row a few times and writes its row of the output, so a
block of rows costs O(rows M) memory traffic and no (rows x M x K) temporaries. ``jdlcore.conditional.laws``
documents the mathematics; this module is imported on first use (compiling takes a few seconds
once, then the machine code is cached next to this file).
"""
from __future__ import annotations

import numba as nb
import numpy as np
from numba import types
from numba.extending import overload

__all__ = ["project_scalar", "project_vector", "running_quantiles", "crps_rows"]

_ITERATIONS = 60
_HALVINGS = 40
_DIVERGED = 1e12
_DAMPING = 1e-2  # Levenberg-Marquardt ridge in units of the gradient's size: regular at degenerate active sets
_VECTOR_DAMPING = 1e-4  # measured on a 3-D y: fewer stalled rows than 1e-2
_VECTOR_DIVERGED = 1e5
_VECTOR_ITERATIONS = 30  # no exact feasibility test for a vector Y: infeasible rows stop here
LEVEL_SECOND = 2  # mass, mean and second moment kept
LEVEL_MEAN = 1  # mass and mean kept
LEVEL_MASS = 0  # mass kept: the closest probability vector
LEVEL_SIGNED_EMPTY = -1  # the signed law had no positive mass: the closest probability vector to its weights


@nb.njit(cache=True, fastmath=True)
def _power_pass(u, scale, pi, z, z2, z3, z4, t0, t1, t2, S):
    """One pass over the atoms at theta = (t0, t1, t2): with t_k = scale u_k + t0 + t1 z_k + t2 z_k^2 and
    w_k = pi_k [t_k >= 0], S[0:5] = sum w z^p (p = 0..4), S[5:8] = sum w t z^p (p = 0..2), S[8] = sum w t^2.
    (Atoms at exactly t = 0 add nothing to the gradient and the value; counting them in the Jacobian
    picks the element of the generalised Jacobian that stays regular at a degenerate start.)"""
    s0 = s1 = s2 = s3 = s4 = f0 = f1 = f2 = ph = 0.0
    for k in range(u.shape[0]):
        t = scale * u[k] + t0 + t1 * z[k] + t2 * z2[k]
        w = pi[k] * (t >= 0.0)
        s0 += w
        s1 += w * z[k]
        s2 += w * z2[k]
        s3 += w * z3[k]
        s4 += w * z4[k]
        wt = w * t
        f0 += wt
        f1 += wt * z[k]
        f2 += wt * z2[k]
        ph += wt * t
    S[0] = s0
    S[1] = s1
    S[2] = s2
    S[3] = s3
    S[4] = s4
    S[5] = f0
    S[6] = f1
    S[7] = f2
    S[8] = ph


@nb.njit(cache=True, fastmath=True)
def _signed_moments(u, pi, z, z2):
    """(mass, sum pi u z, sum pi u z^2, min u) of one row: the signed law's moments, unnormalised."""
    mass = m1 = m2 = 0.0
    low = np.inf
    for k in range(u.shape[0]):
        w = pi[k] * u[k]
        mass += w
        m1 += w * z[k]
        m2 += w * z2[k]
        low = min(low, u[k])
    return mass, m1, m2, low


@nb.njit(cache=True, fastmath=True)
def _emit(u, scale, pi, z, z2, t0, t1, t2, out):
    """out_k = pi_k max(0, scale u_k + t0 + t1 z_k + t2 z_k^2), normalised to sum 1 (pi if nothing is left)."""
    for k in range(u.shape[0]):
        out[k] = scale * u[k] + t0 + t1 * z[k] + t2 * z2[k]
    _clip_normalise(pi, out)


@nb.njit(cache=True, fastmath=True)
def _clip_normalise(pi, out):
    """out_k <- pi_k max(0, out_k), normalised to sum 1 (``_normalise``)."""
    total = 0.0
    for k in range(out.shape[0]):
        value = pi[k] * out[k] if out[k] > 0.0 else 0.0
        out[k] = value
        total += value
    _normalise(pi, out, total)


@nb.njit(cache=True, fastmath=True)
def _normalise(pi, out, total):
    """out <- out / total for non-negative out with sum ``total``; the support weights pi where nothing
    is left (which a converged projection never leaves)."""
    if total > 0.0:
        for k in range(out.shape[0]):
            out[k] /= total
    else:
        for k in range(out.shape[0]):
            out[k] = pi[k]


@nb.njit(cache=True)
def _solve_spd(J, F, d, n, ridge, L, y):
    """d = (J + ridge I)^{-1} F for the leading n x n block of a symmetric positive semi-definite J, by
    Cholesky; retried with 1e-8 of the largest diagonal entry added; False if both fail. L (n_max,
    n_max) and y (n_max,) are scratch."""
    if _cholesky_solve(J, F, d, n, ridge + 1e-13, L, y):
        return True
    largest = 0.0
    for i in range(n):
        largest = max(largest, J[i, i])
    return largest > 0.0 and _cholesky_solve(J, F, d, n, 1e-8 * largest, L, y)


@nb.njit(cache=True)
def _cholesky_solve(J, F, d, n, ridge, L, y):
    for i in range(n):
        for j in range(i + 1):
            s = J[i, j]
            if i == j:
                s += ridge
            for k in range(j):
                s -= L[i, k] * L[j, k]
            if i == j:
                if s <= 0.0:
                    return False
                L[i, i] = np.sqrt(s)
            else:
                L[i, j] = s / L[j, j]
    for i in range(n):
        s = F[i]
        for k in range(i):
            s -= L[i, k] * y[k]
        y[i] = s / L[i, i]
    for i in range(n - 1, -1, -1):
        s = y[i]
        for k in range(i + 1, n):
            s -= L[k, i] * d[k]
        d[i] = s / L[i, i]
    return True


@nb.njit(cache=True)
def _dot(a, b, n):
    """sum_i a_i b_i over the first n entries."""
    total = 0.0
    for i in range(n):
        total += a[i] * b[i]
    return total


def _dual_value(trial, data):
    """The dual's first term 0.5 sum_k pi_k max(0, t_k)^2 at ``trial``, with the pass's sums left in
    the scratch of ``data``: (u, scale, pi, z, z2, z3, z4, S) for a scalar y (``_power_pass``), or
    (u, scale, pi, C, K, F, w, wt) for a moment basis C (``_pass``). Compiled per kind by the overload
    below."""
    raise NotImplementedError  # only called from compiled code


@overload(_dual_value)
def _dual_value_of(trial, data):
    if isinstance(data[3], types.Array) and data[3].ndim == 2:
        def moment_basis(trial, data):
            u, scale, pi, C, K, F, w, wt = data
            return 0.5 * _pass(u, scale, pi, C, trial, K, F, w, wt)
        return moment_basis

    def scalar(trial, data):
        u, scale, pi, z, z2, z3, z4, S = data
        _power_pass(u, scale, pi, z, z2, z3, z4, trial[0], trial[1], trial[2], S)
        return 0.5 * S[8]
    return scalar


@nb.njit(cache=True)
def _backtrack(theta, d, F, b, n, phi, trial, limit, data):
    """Armijo backtracking along the Newton direction -d from theta (first n entries) on the dual
    phi(t) = ``_dual_value``(t) - b . t, whose gradient at theta is F: halves the step until phi falls
    by at least 1e-4 of the predicted decrease (with a rounding allowance relative to |phi|), then
    moves theta there. Returns the new phi, or NaN when no step of ``_HALVINGS`` halvings decreases
    it or theta passes ``limit`` (divergence). The scratch in ``data`` holds the pass at the new theta."""
    slope = _dot(d, F, n)
    step = 1.0
    for _h in range(_HALVINGS):
        for i in range(n):
            trial[i] = theta[i] - step * d[i]
        value = _dual_value(trial, data) - _dot(trial, b, n)
        if value <= phi - 1e-4 * step * slope + 1e-15 * abs(phi):
            for i in range(n):
                theta[i] = trial[i]
                if abs(theta[i]) > limit:
                    return np.nan
            return value
        step *= 0.5
    return np.nan


@nb.njit(cache=True)
def _newton_step(J, F, d, n, ridge, L, y, theta, b, phi, trial, limit, data):
    """One damped Newton step on the dual: d solves (J + ridge I) d = F (first n entries; L, y
    scratch), then ``_backtrack`` along -d. Returns the new phi, or NaN where the system is singular or
    the search fails."""
    if not _solve_spd(J, F, d, n, ridge, L, y):
        return np.nan
    return _backtrack(theta, d, F, b, n, phi, trial, limit, data)


@nb.njit(cache=True)
def _newton_scalar(u, scale, pi, z, z2, z3, z4, b, degree, tol, theta):
    """Semi-smooth Newton with Armijo backtracking on the dual of the projection with the first
    ``degree`` + 1 moments of z (targets b); theta (3,) in/out. The Newton system carries a ridge
    proportional to the gradient (regularised semi-smooth Newton), which keeps it solvable when few
    atoms are active and vanishes at the solution. Returns True on convergence."""
    n = degree + 1
    S = np.empty(9)
    J = np.zeros((3, 3))
    F = np.zeros(3)
    d = np.zeros(3)
    trial = np.zeros(3)
    L = np.zeros((3, 3))
    y = np.zeros(3)
    for i in range(3):
        theta[i] = 0.0
    _power_pass(u, scale, pi, z, z2, z3, z4, 0.0, 0.0, 0.0, S)
    phi = 0.5 * S[8]
    for _ in range(_ITERATIONS):
        err = 0.0
        for i in range(n):
            F[i] = S[5 + i] - b[i]
            err = max(err, abs(F[i]))
        if err <= tol:
            return True
        for i in range(n):
            for j in range(n):
                J[i, j] = S[i + j]
        phi = _newton_step(J, F, d, n, _DAMPING * err, L, y, theta, b, phi, trial, _DIVERGED,
                           (u, scale, pi, z, z2, z3, z4, S))
        if np.isnan(phi):
            break
    return False


@nb.njit(cache=True, nogil=True)
def project_scalar(R, pi, z, tol, P, level):
    """Projected laws of rows of R (q, M) = 1 + h(x, z_k) on scalar support atoms z (standardised, strictly
    ascending) with probabilities pi > 0.

    P (q, M) receives pi_k max(0, u_k + theta . (1, z_k, z_k^2)) normalised to sum 1, u = R / sum(pi R);
    level (q,) the moments kept (LEVEL_*). Feasibility of keeping the mean and the second moment is
    checked first (they must lie strictly inside the convex hull of the atoms (z_k, z_k^2)), then Newton
    decides; each failure drops the highest moment.
    """
    q, M = R.shape
    z2 = z * z
    z3 = z2 * z
    z4 = z2 * z2
    b = np.zeros(3)
    theta = np.zeros(3)
    span = max(z[M - 1] - z[0], 1e-300)
    for r in range(q):
        u = R[r]
        mass, m1, m2, low = _signed_moments(u, pi, z, z2)
        negative = low < 0.0
        for i in range(3):
            theta[i] = 0.0
        if mass > 0.0 and not negative:
            level[r] = LEVEL_SECOND
            scale = 1.0 / mass
        elif mass > 0.0:
            scale = 1.0 / mass
            m1 *= scale
            m2 *= scale
            b[0] = 1.0
            b[1] = m1
            b[2] = m2
            inside_mean = z[0] + 1e-9 * span < m1 < z[M - 1] - 1e-9 * span
            inside_second = False
            if inside_mean:
                # (m1, m2) strictly inside the hull of the points (z_k, z_k^2): above the chord of the two
                # atoms around m1, below the chord of the outermost atoms
                i1 = np.searchsorted(z, m1, side="right")
                i0 = i1 - 1
                lower = z2[i0] + (z2[i1] - z2[i0]) * (m1 - z[i0]) / (z[i1] - z[i0])
                upper = z2[0] + (z2[M - 1] - z2[0]) * (m1 - z[0]) / span
                gap = 1e-9 * (upper - lower)
                inside_second = lower + gap < m2 < upper - gap
            done = False
            if inside_second:
                done = _newton_scalar(u, scale, pi, z, z2, z3, z4, b, 2, tol, theta)
                level[r] = LEVEL_SECOND
            if not done and inside_mean:
                done = _newton_scalar(u, scale, pi, z, z2, z3, z4, b, 1, tol, theta)
                level[r] = LEVEL_MEAN
            if not done:
                _newton_scalar(u, scale, pi, z, z2, z3, z4, b, 0, tol, theta)
                level[r] = LEVEL_MASS
        else:
            scale = 1.0
            b[0] = 1.0
            _newton_scalar(u, scale, pi, z, z2, z3, z4, b, 0, tol, theta)
            level[r] = LEVEL_SIGNED_EMPTY
        _emit(u, scale, pi, z, z2, theta[0], theta[1], theta[2], P[r])


@nb.njit(cache=True, fastmath=True)
def _vector_pass(u, scale, pi, C, theta, K, F, w, wt):
    """One pass over the atoms at theta (first K rows of C, (K_max, M)): with t_k = scale u_k + theta . C_k,
    w_k = pi_k [t_k >= 0] and wt_k = w_k t_k are written to w, wt (M,), F[:K] = C[:K] @ wt; returns
    sum w t^2. Each sum runs along the atoms in one loop, so it vectorises."""
    M = u.shape[0]
    for k in range(M):
        wt[k] = scale * u[k]
    for i in range(K):  # t = scale u + C[:K]^T theta, one axpy per moment function
        for k in range(M):
            wt[k] += theta[i] * C[i, k]
    value = 0.0
    for k in range(M):
        t = wt[k]
        weight = pi[k] if t >= 0.0 else 0.0
        w[k] = weight
        wt[k] = weight * t
        value += weight * t * t
    for i in range(K):
        total = 0.0
        for k in range(M):
            total += wt[k] * C[i, k]
        F[i] = total
    return value


@nb.njit(cache=True, fastmath=True)
def _monomial_sums(monomials, w, S):
    """S = monomials @ w (every product of two moment functions is a monomial of degree <= 4;
    monomials (D, M)): the Jacobian's distinct entries at the active set w of the last pass."""
    for m in range(monomials.shape[0]):
        total = 0.0
        for k in range(w.shape[0]):
            total += w[k] * monomials[m, k]
        S[m] = total


@nb.njit(cache=True, fastmath=True)
def _vector_pass4(u, scale, pi, C, theta, F, w, wt):
    """``_vector_pass`` for exactly four moment rows C = [1, z_1, z_2, z_3] (a 2-D y padded with a zero
    row): one loop over the atoms with every sum in a register, 2.7x the separate loops' speed
    together with ``_jacobian4`` (measured on a 3-D y, M = 497)."""
    t0 = theta[0]
    t1 = theta[1]
    t2 = theta[2]
    t3 = theta[3]
    z1 = C[1]
    z2 = C[2]
    z3 = C[3]
    value = f0 = f1 = f2 = f3 = 0.0
    for k in range(u.shape[0]):
        t = scale * u[k] + t0 + t1 * z1[k] + t2 * z2[k] + t3 * z3[k]
        weight = pi[k] if t >= 0.0 else 0.0
        w[k] = weight
        v = weight * t
        wt[k] = v
        value += v * t
        f0 += v
        f1 += v * z1[k]
        f2 += v * z2[k]
        f3 += v * z3[k]
    F[0] = f0
    F[1] = f1
    F[2] = f2
    F[3] = f3
    return value


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
def _pass(u, scale, pi, C, theta, K, F, w, wt):
    """``_vector_pass4`` where C has four rows, else ``_vector_pass``."""
    if C.shape[0] == 4:
        return _vector_pass4(u, scale, pi, C, theta, F, w, wt)
    return _vector_pass(u, scale, pi, C, theta, K, F, w, wt)


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
def _newton_vector(u, scale, pi, C, monomials, products, b, K, tol, theta, S, F, J, d, trial, w, wt, L, y):
    """As ``_newton_scalar`` for the first K columns of a general moment basis C (M, K_max); the
    Jacobian entry (i, j) is the monomial sum ``products[i, j]``, computed only where a Newton step
    is taken (not at the converged point, not at rejected trial points). No cheap exact feasibility
    test exists here, so it gives up after 30 iterations or once |theta| passes 1e5 (measured on a
    3-D y: feasible rows converge in 4-20 iterations with |theta| below 2e4, infeasible ones
    diverge). On True, wt holds pi_k max(0, t_k) at the returned theta; S to y (sized for K_max;
    w, wt (M,)) are scratch."""
    for i in range(C.shape[0]):
        theta[i] = 0.0
        trial[i] = 0.0
    phi = 0.5 * _pass(u, scale, pi, C, theta, K, F, w, wt)
    for _ in range(_VECTOR_ITERATIONS):
        err = 0.0
        for i in range(K):
            F[i] -= b[i]
            err = max(err, abs(F[i]))
        if err <= tol:
            return True
        _jacobian(C, monomials, products, w, K, S, J)
        phi = _newton_step(J, F, d, K, _VECTOR_DAMPING * err, L, y, theta, b, phi, trial, _VECTOR_DIVERGED,
                           (u, scale, pi, C, K, F, w, wt))
        if np.isnan(phi):
            return False
    return False


@nb.njit(cache=True, fastmath=True)
def _vector_emit(u, scale, pi, C, theta, out):
    """out_k = pi_k max(0, scale u_k + theta . C_k), normalised to sum 1 (pi if nothing is left)."""
    for k in range(u.shape[0]):
        out[k] = scale * u[k]
    for i in range(C.shape[0]):
        for k in range(u.shape[0]):
            out[k] += theta[i] * C[i, k]
    _clip_normalise(pi, out)


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
def _padded(C, rows):
    """C (K, M) with zero rows appended up to ``rows``, as a new C-contiguous array."""
    out = np.zeros((rows, C.shape[1]))
    out[:C.shape[0]] = C
    return out


@nb.njit(cache=True, nogil=True)
def project_vector(R, pi, C, monomials, products, tol, P, level):
    """The projection for a vector Y, keeping mass and mean: C (K, M) = [1, z_1, ..., z_d] in
    standardised units, ``monomials`` (D, M) every product C_i C_j (degree <= 2) with
    ``products[i, j]`` its row. Where the mean cannot be kept (outside the atoms' hull) the mass is.
    (The second moment is not kept for a vector Y: the signed law's is often not a covariance at
    all, and with no cheap test of which rows can keep it, each row that cannot costs a failing
    Newton run: measured 370 us against 70 us per row on a 3-D y.)"""
    q, M = R.shape
    K = C.shape[0]
    rows = 4 if K == 3 else K  # a 2-D y gets a zero fourth row: the fused four-row loops serve it too
    padded = _padded(C, rows)
    b = np.zeros(rows)
    theta = np.zeros(rows)
    signed = np.empty(M)
    S = np.zeros(monomials.shape[0])  # the Newton runs' scratch, allocated once per block
    F = np.zeros(rows)
    J = np.zeros((rows, rows))
    d = np.zeros(rows)
    trial = np.zeros(rows)
    L = np.zeros((rows, rows))
    y = np.zeros(rows)
    w = np.empty(M)
    wt = np.empty(M)
    for r in range(q):
        u = R[r]
        _signed_sums(u, pi, padded, signed, b)
        mass = b[0]  # row 0 is the constant 1
        negative = False
        for k in range(M):
            negative |= u[k] < 0.0
        for i in range(K):
            theta[i] = 0.0
        converged = False
        if mass > 0.0 and not negative:
            level[r] = LEVEL_MEAN
            scale = 1.0 / mass
        elif mass > 0.0:
            scale = 1.0 / mass
            for i in range(K):
                b[i] *= scale
            level[r] = LEVEL_MEAN
            converged = _newton_vector(u, scale, pi, padded, monomials, products, b, K, tol, theta,
                                       S, F, J, d, trial, w, wt, L, y)
            if not converged:
                converged = _newton_vector(u, scale, pi, padded, monomials, products, b, 1, tol, theta,
                                           S, F, J, d, trial, w, wt, L, y)
                level[r] = LEVEL_MASS
        else:
            scale = 1.0
            b[0] = 1.0
            converged = _newton_vector(u, scale, pi, padded, monomials, products, b, 1, tol, theta,
                                       S, F, J, d, trial, w, wt, L, y)
            level[r] = LEVEL_SIGNED_EMPTY
        out = P[r]
        if converged:  # the last pass's pi max(0, t) at theta, normalised
            total = 0.0
            for k in range(M):
                out[k] = wt[k]
                total += wt[k]
            _normalise(pi, out, total)
        else:
            _vector_emit(u, scale, pi, padded, theta, out)


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
