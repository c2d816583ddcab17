"""The shared pieces of the compiled projection kernels (``_law_kernels``): the passes over a row's
atoms (scalar and vector y), the dual's value, the regularised Newton step with Armijo backtracking,
the small linear solves and the convergence tests. ``_law_kernels`` documents the method.
"""
from __future__ import annotations

import numba as nb
import numpy as np
from numba import types
from numba.extending import overload

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


@nb.njit(cache=True)
def _local_powers(z, centre, inv, C):
    """C (3, M) = [1, s, s^2] at s = (z - centre) inv: the scalar moment basis in a row's coordinates."""
    for k in range(z.shape[0]):
        s = (z[k] - centre) * inv
        C[0, k] = 1.0
        C[1, k] = s
        C[2, k] = s * s


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


@nb.njit(cache=True)
def _pass(u, scale, pi, C, theta, K, F, w, wt):
    """``_vector_pass4`` where C has four rows, else ``_vector_pass``."""
    if C.shape[0] == 4:
        return _vector_pass4(u, scale, pi, C, theta, F, w, wt)
    return _vector_pass(u, scale, pi, C, theta, K, F, w, wt)
