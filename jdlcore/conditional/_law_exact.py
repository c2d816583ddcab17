"""The exact path of the compiled projection (``_law_kernels``): Newton steps on the active set with
an exact line search (a walk over the breakpoints of the piecewise-linear directional derivative),
the separation certificate of an infeasible row, the exact weighted simplex projection that keeps the
mass alone, and the hull test of a scalar row's moments.
"""
from __future__ import annotations

import numba as nb
import numpy as np

from ._law_newton import CONVERGED, HULL_MARGIN, STALLED, UNBOUNDED, _NEAR, _basis_at_floor, _dot, _solve_spd

@nb.njit(cache=True)
def _exact_line_search(t, g, pi, bd, alphas, atoms):
    """The exact minimiser alpha >= 0 of the dual along -d: the root of its derivative
    phi'(alpha) = b . d - sum_k pi_k max(0, t_k - alpha g_k) g_k (t_k the atoms' values at the start,
    g_k = d . c(z_k)), which is piecewise linear and non-decreasing with a breakpoint wherever an atom
    enters or leaves the active set. Walks the breakpoints in order, carrying the piece's intercept
    and slope (the last piece summed afresh); np.inf where the derivative stays negative with no atom
    left to stop it (the dual falls without bound along -d). alphas (M,), atoms (M,) int64 are scratch."""
    c0 = bd
    c1 = 0.0
    count = 0
    for k in range(t.shape[0]):
        now = t[k] > 0.0 or (t[k] == 0.0 and g[k] < 0.0)
        if now:
            c0 -= pi[k] * t[k] * g[k]
            c1 += pi[k] * g[k] * g[k]
            if g[k] > 0.0:  # leaves at t_k / g_k
                alphas[count] = t[k] / g[k]
                atoms[count] = k
                count += 1
        elif g[k] < 0.0:  # enters at t_k / g_k
            alphas[count] = t[k] / g[k]
            atoms[count] = k
            count += 1
    order = np.argsort(alphas[:count])
    low = 0.0
    for j in range(count):
        a = alphas[order[j]]
        if c0 + a * c1 >= 0.0:
            return max(low, -c0 / c1) if c1 > 0.0 else low
        k = atoms[order[j]]
        if g[k] > 0.0:  # leaves
            c0 += pi[k] * t[k] * g[k]
            c1 -= pi[k] * g[k] * g[k]
        else:  # enters
            c0 -= pi[k] * t[k] * g[k]
            c1 += pi[k] * g[k] * g[k]
        low = a
    # past the last breakpoint the active atoms are those with g < 0 (t - alpha g grows): the running
    # sums can cancel there, so the last piece is summed afresh
    c0 = bd
    c1 = 0.0
    for k in range(t.shape[0]):
        if g[k] < 0.0:
            c0 -= pi[k] * t[k] * g[k]
            c1 += pi[k] * g[k] * g[k]
    if c1 > 0.0:
        return max(low, -c0 / c1)
    return np.inf if bd < 0.0 else low


@nb.njit(cache=True, fastmath=True)
def _separates(C, K, theta, b):
    """True where a = theta[1:K] strictly separates the targets b[1:K] from every atom's moment
    functions C[1:K, k] (row 0 the constant 1): max_k a . C_k < a . b by more than rounding. Then no
    probability vector on the atoms has the moments b (a Farkas certificate), as the dual's divergence
    along theta suggests."""
    target = 0.0
    size = 0.0
    for i in range(1, K):
        target += theta[i] * b[i]
        size += abs(theta[i]) * abs(b[i])
    highest = -np.inf
    for k in range(C.shape[1]):
        value = 0.0
        for i in range(1, K):
            value += theta[i] * C[i, k]
            size = max(size, abs(theta[i] * C[i, k]))
        highest = max(highest, value)
    return K > 1 and highest < target - 1e-12 * K * size


@nb.njit(cache=True)
def _exact_newton(u, scale, pi, C, K, b, tol, theta, steps, t, g, F, J, d, L, y, A, alphas, atoms):
    """The exact path: from theta (first K entries, in/out), Newton steps on the dual for the first K
    rows of the moment basis C (K_max, M) with targets b, each direction from the Jacobian of the
    current active set (a ridge only where it is singular), each step the exact minimiser along it
    (``_exact_line_search``). Returns (CONVERGED; UNBOUNDED where the moments are proved infeasible,
    the dual falling without bound along a step or theta separating them from the atoms
    (``_separates``); or STALLED) and the number of passes over the atoms taken. The other
    arguments are scratch: t, g, alphas (M,), atoms (M,) int64, F, d, y, A (K_max,), J, L (K_max, K_max)."""
    M = u.shape[0]
    for step in range(steps + 1):
        for k in range(M):
            value = scale * u[k]
            for i in range(K):
                value += theta[i] * C[i, k]
            t[k] = value
        for i in range(K):
            F[i] = -b[i]
            for j in range(K):
                J[i, j] = 0.0
        for k in range(M):
            if t[k] >= 0.0:
                for i in range(K):
                    wc = pi[k] * C[i, k]
                    F[i] += wc * t[k]
                    for j in range(i + 1):
                        J[i, j] += wc * C[j, k]
        err = 0.0
        for i in range(K):
            err = max(err, abs(F[i]))
            for j in range(i):
                J[j, i] = J[i, j]
        if err <= tol or (err <= _NEAR and _basis_at_floor(u, scale, pi, C, K, theta, F, b, A)):
            return CONVERGED, step + 1
        if _separates(C, K, theta, b):
            return UNBOUNDED, step + 1
        if step == steps or not _solve_spd(J, F, d, K, 0.0, L, y):
            return STALLED, step + 1
        for k in range(M):
            value = 0.0
            for i in range(K):
                value += d[i] * C[i, k]
            g[k] = value
        alpha = _exact_line_search(t, g, pi, _dot(b, d, K), alphas, atoms)
        if alpha == np.inf:  # a proof only where -d separates the targets by more than rounding
            for i in range(K):
                d[i] = -d[i]
            return (UNBOUNDED if _separates(C, K, d, b) else STALLED), step + 1
        if not alpha > 0.0:
            return STALLED, step + 1
        for i in range(K):
            theta[i] -= alpha * d[i]
    return STALLED, steps + 1


@nb.njit(cache=True)
def _mass_multiplier(u, scale, pi, order):
    """The exact theta_0 of the projection keeping the mass alone: sum_k pi_k max(0, v_k + theta_0) = 1
    for v = scale u, found by walking the atoms in descending v (the weighted projection onto the
    simplex: no iterations, no budget). order (M,) int64 is scratch."""
    M = u.shape[0]
    values = np.empty(M)
    for k in range(M):
        values[k] = -scale * u[k]
    order[:] = np.argsort(values)  # ascending -v: descending v
    weight = total = 0.0
    theta = 0.0
    for j in range(M):
        k = order[j]
        weight += pi[k]
        total += pi[k] * scale * u[k]
        theta = (1.0 - total) / weight
        if j + 1 == M or scale * u[order[j + 1]] + theta <= 0.0:
            break
    return theta


@nb.njit(cache=True)
def _inside_moment_set(z, m1, m2, span):
    """(mean inside, mean and second moment inside) for the scalar atoms z (ascending): m1 strictly
    within (z_0, z_{M-1}) and (m1, m2) strictly inside the convex hull of the points (z_k, z_k^2):
    above the chord of the two atoms around m1, below the chord of the outermost atoms, each by more
    than ``HULL_MARGIN`` of the span (of the atoms; of the hull at m1)."""
    M = z.shape[0]
    inside_mean = z[0] + HULL_MARGIN * span < m1 < z[M - 1] - HULL_MARGIN * span
    if not inside_mean:
        return False, False
    i1 = np.searchsorted(z, m1, side="right")
    i0 = i1 - 1
    lower = z[i0] * z[i0] + (z[i1] * z[i1] - z[i0] * z[i0]) * (m1 - z[i0]) / (z[i1] - z[i0])
    upper = z[0] * z[0] + (z[M - 1] * z[M - 1] - z[0] * z[0]) * (m1 - z[0]) / span
    gap = HULL_MARGIN * (upper - lower)
    return True, lower + gap < m2 < upper - gap
