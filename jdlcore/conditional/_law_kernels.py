"""Compiled per-row kernels of ``jdlcore.conditional.laws`` (Numba, no GIL): the projection, the quantile merge
and the CRPS.

Each kernel walks the M support atoms of one row a few times and writes its row of the output, so a
block of rows costs O(rows M) memory traffic and no (rows x M x K) temporaries. ``jdlcore.conditional.laws``
documents the mathematics; this module is imported on first use (compiling takes a few seconds
once, then the machine code is cached next to this file).

The projection solves, per row, the dual of min sum_k (p_k - pi_k u_k)^2 / pi_k subject to p >= 0 and
sum_k p_k c(z_k) = b: minimise phi(theta) = 0.5 sum_k pi_k max(0, t_k)^2 - b . theta with
t_k = u_k + theta . c(z_k); then p_k = pi_k max(0, t_k). Every p of that form is non-negative and
complementary, so the moment residual F = sum_k p_k c(z_k) - b (the dual gradient) is the whole KKT
residual: a row is *converged* when each |F_i| is below ``tol`` or within the rounding floor of the
sums that make it (``_FLOOR`` times their magnitudes). The moment functions c are taken in the row's
own coordinates (centred at its mean, scaled by its spread), where the multipliers stay of the size
of u instead of growing with the inverse width of a narrow law.

Two solvers share that test. The fast path is a regularised semi-smooth Newton method with Armijo
steps on phi (``iterations``); Armijo compares values of phi, whose rounding can exceed the decrease
left near the boundary of the moment set, so a row can stall there. Such rows go on from where the
fast path stopped with the exact path (``_exact_newton``): Newton steps on the current active set with
an exact line search along each step (the root of the piecewise-linear directional derivative, found
by walking its breakpoints), at the precision of the gradient. On a convex piecewise-quadratic dual,
Newton's method with exact line search ends in finitely many steps (Li & Swetits, SIAM J. Optim. 3,
1993); it also proves a row infeasible when the dual falls without bound along a step.
"""
from __future__ import annotations

import numba as nb
import numpy as np
from numba import types
from numba.extending import overload

__all__ = ["project_scalar", "project_vector", "running_quantiles", "crps_rows"]

_HALVINGS = 40
_DIVERGED = 1e12
_DAMPING = 1e-2  # Levenberg-Marquardt ridge in units of the gradient's size: regular at degenerate active sets
_VECTOR_DAMPING = 1e-4  # measured on a 3-D y: fewer stalled rows than 1e-2
_VECTOR_DIVERGED = 1e5
_FLOOR = 64 * 2.220446049250313e-16  # a residual this small relative to the magnitude of its sums is rounding
_NEAR = 1e-8  # residuals below this are compared with the rounding floor
HULL_MARGIN = 1e-10  # relative: moments this close to the boundary of the moment set count as on it
LEVEL_SECOND = 2  # mass, mean and second moment kept
LEVEL_MEAN = 1  # mass and mean kept; the second moment is outside the moment set of the atoms
LEVEL_MASS = 0  # mass kept; the mean is outside the atoms' hull
LEVEL_SIGNED_EMPTY = -1  # the signed law had no positive mass: the closest probability vector to its weights
LEVEL_FAILED = -2  # no solver certified the moments the feasibility test allows; a lower level's vector
CONVERGED = 0
STALLED = 1
UNBOUNDED = 2


@nb.njit(cache=True, fastmath=True)
def _power_pass(u, scale, pi, z, centre, inv, t0, t1, t2, S):
    """One pass over the atoms at theta = (t0, t1, t2) in the row's coordinates s_k = (z_k - centre) inv:
    with t_k = scale u_k + t0 + t1 s_k + t2 s_k^2 and w_k = pi_k [t_k >= 0], S[0:5] = sum w s^p
    (p = 0..4), S[5:8] = sum w t s^p (p = 0..2), S[8] = sum w t^2. (Atoms at exactly t = 0 add nothing
    to the gradient and the value; counting them in the Jacobian picks the element of the generalised
    Jacobian that stays regular at a degenerate start.)"""
    s0 = s1 = s2 = s3 = s4 = f0 = f1 = f2 = ph = 0.0
    for k in range(u.shape[0]):
        s = (z[k] - centre) * inv
        ss = s * s
        t = scale * u[k] + t0 + t1 * s + t2 * ss
        w = pi[k] * (t >= 0.0)
        ws = w * s
        wss = w * ss
        s0 += w
        s1 += ws
        s2 += wss
        s3 += wss * s
        s4 += wss * ss
        wt = w * t
        f0 += wt
        f1 += wt * s
        f2 += wt * ss
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
def _signed_moments(u, pi, z):
    """(mass, sum pi u z, sum pi u z^2, min u) of one row: the signed law's moments, unnormalised."""
    mass = m1 = m2 = 0.0
    low = np.inf
    for k in range(u.shape[0]):
        w = pi[k] * u[k]
        mass += w
        m1 += w * z[k]
        m2 += w * z[k] * z[k]
        low = min(low, u[k])
    return mass, m1, m2, low


@nb.njit(cache=True, fastmath=True)
def _spread_inverse(u, pi, z, centre, fallback):
    """1 / the spread around ``centre`` of the positive part of the signed law pi u on the atoms z
    (M,); 1 / ``fallback`` where that spread is not positive (a single atom)."""
    plus = spread = 0.0
    for k in range(u.shape[0]):
        w = pi[k] * u[k]
        if w > 0.0:
            plus += w
            spread += w * (z[k] - centre) * (z[k] - centre)
    if plus > 0.0 and spread > 0.0:
        return np.sqrt(plus / spread)
    return 1.0 / fallback


@nb.njit(cache=True, fastmath=True)
def _emit(u, scale, pi, z, centre, inv, t0, t1, t2, out):
    """out_k = pi_k max(0, scale u_k + t0 + t1 s_k + t2 s_k^2), s_k = (z_k - centre) inv, normalised to
    sum 1 (pi if nothing is left)."""
    total = 0.0
    for k in range(u.shape[0]):
        s = (z[k] - centre) * inv
        t = scale * u[k] + t0 + t1 * s + t2 * s * s
        value = pi[k] * t if t > 0.0 else 0.0
        out[k] = value
        total += value
    _normalise(pi, out, total)


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
    """out <- out / total for non-negative out with sum ``total`` (1 up to the solver's tolerance at a
    converged row); the support weights pi where nothing is left (which a converged projection never
    leaves)."""
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
    the scratch of ``data``: (u, scale, pi, z, centre, inv, S) for a scalar y (``_power_pass``), or
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
        u, scale, pi, z, centre, inv, S = data
        _power_pass(u, scale, pi, z, centre, inv, trial[0], trial[1], trial[2], S)
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
def _stalled(err, previous):
    """Whether a fast-path residual ``err`` is worth comparing with the rounding floor: small
    (``_NEAR``) and no longer falling fast after the last step (where Newton converges quadratically,
    the next step is cheaper than the floor's pass)."""
    return err <= _NEAR and err > 1e-3 * previous


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
def _basis_at_floor(u, scale, pi, C, K, theta, F, b, A):
    """True where each residual |F_i| (i < K) is within ``_FLOOR`` of the magnitude of the sums that
    make it, |b_i| + sum_k pi_k [t_k >= 0] |C_ik| (|scale u_k| + sum_j |theta_j C_jk|), over the first K
    rows of a moment basis C (K_max, M): all that rounding leaves of a converged row. A (K_max,) is
    scratch."""
    for i in range(K):
        A[i] = abs(b[i])
    for k in range(u.shape[0]):
        t = scale * u[k]
        m = abs(t)
        for i in range(K):
            v = theta[i] * C[i, k]
            t += v
            m += abs(v)
        if t >= 0.0:
            m *= pi[k]
            for i in range(K):
                A[i] += m * abs(C[i, k])
    for i in range(K):
        if abs(F[i]) > _FLOOR * A[i]:
            return False
    return True


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
def _local_powers(z, centre, inv, C):
    """C (3, M) = [1, s, s^2] at s = (z - centre) inv: the scalar moment basis in a row's coordinates."""
    for k in range(z.shape[0]):
        s = (z[k] - centre) * inv
        C[0, k] = 1.0
        C[1, k] = s
        C[2, k] = s * s


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
def _vector_pass(u, scale, pi, C, theta, K, F, w, wt):
    """One pass over the atoms at theta (first K rows of C, (K_max, M)): with t_k = scale u_k + theta . C_k,
    w_k = pi_k [t_k >= 0] and wt_k = w_k t_k are written to w, wt (M,), F[:K] = C[:K] @ wt;
    returns sum w t^2. Each sum runs along the atoms in one loop, so it vectorises."""
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
