"""Global positivity of the polynomial JDL's 1 + h as a sum of squares (the paper's (39)): the SDP and
its certificate, in the bases of ``jdlcore.models.polynomial_basis``.

Sum-of-squares positivity (39)
------------------------------
h(x, y) = psi_Y(y) H psi_X(x)^T = tau_Y(y~) C tau_X(x~)^T with C = W_Y H W_X^T (m_Y x m_X), linear
in H; C[b, a] is the coefficient of x~^a y~^b. The fit imposes 1 + h = tau_g(z~) S tau_g(z~)^T with
S >= sos_margin * I (PSD), matching the coefficient of every monomial x~^a y~^b: an SDP.

Newton polytope (Reznick 1978, "Extremal PSD forms with few terms", Thm 1): if p = sum_i f_i^2 then
the exponents of every f_i lie in (1/2) N(p), N(p) the convex hull of p's exponents. 1 + h has
degree <= q in x and <= q in y, so N(p) lies in {(a, b): |a| <= q, |b| <= q} and every f_i uses only
monomials x^a y^b with |a| <= floor(q/2), |b| <= floor(q/2). The Gram basis tau_g is therefore the
product of the two half-degree monomial sets (g = C(d_X + k, k) C(d_Y + k, k), k = floor(q / 2);
for d_X = d_Y = 3, q = 4: 100 instead of the C(6 + 4, 4) = 210 monomials of total degree <= q), and
this gives exactly the cone (39) intersected with the model's space. The reduced SDP also has
interior points (S = I is one), while the paper's full basis has none: every Gram matrix of it
must vanish on the monomials outside (1/2) N(p) (x^q, then x^(q-1), ...: singularity degree 2 for
q = 4), so solvers reach only a low accuracy on it (``gram="full"``, kept for comparisons,
needs margin 0). For odd q the top-degree monomials (|a| = q or |b| = q) cannot be
formed, so their coefficients vanish; with the triangular W this is H[i, j] = 0 for every basis
function psi_Y,i or psi_X,j of degree q, imposed exactly by fixing those entries to zero.

The certificate that 1 + h > 0 everywhere, not only on the training grid, is ``sos_certificate``.
"""
from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.sparse import csr_matrix

from ..lowrank.basis import JDLReductions
from ..validation import check_choice
from .polynomial_basis import PolynomialBasis, monomial_exponents

__all__ = ["gram_exponents", "sos_certificate", "solve_sos_positivity", "GRAM_BASES"]

GRAM_BASES = ("reduced", "full")
_EPS = np.finfo(np.float64).eps
_CLARABEL_SVEC = 1000  # Clarabel first up to this svec size of S (g <= 44), SCS first above
_SCS_MAX_ITERS = 100_000


def gram_exponents(d_x: int, d_y: int, degree: int, gram: str = "reduced") -> np.ndarray:
    """Exponents (g, d_x + d_y) of the Gram basis tau_g in z = (x, y) (x first).

    "reduced": x^a y^b with |a|, |b| <= floor(q/2) (the Newton polytope of the model's space);
    "full": every monomial of total degree <= q in z (the paper's basis in (39)).
    """
    check_choice(gram, "gram", GRAM_BASES)
    if gram == "full":
        return monomial_exponents(d_x + d_y, degree)
    half = degree // 2
    ex, ey = monomial_exponents(d_x, half), monomial_exponents(d_y, half)
    return np.hstack([np.repeat(ex, ey.shape[0], axis=0), np.tile(ey, (ex.shape[0], 1))])


@dataclass
class _GramMap:
    """Coefficient matching between 1 + h and tau_g S tau_g^T.

    Rows 0 .. m_Y m_X - 1 are the model's monomials x^a y^b (a = exponents_x[j], b = exponents_y[i]) at
    row i + m_Y j (the column-major vec of C); further rows are products of Gram monomials outside
    the model's space (their coefficient must be 0). ``operator`` (rows, g^2) maps the column-major
    vec of S to the coefficients of tau_g S tau_g^T; ``formable`` (rows,) flags the rows reached by
    some product (an unformable row has no Gram pair, so its coefficient must vanish exactly);
    ``constant_row`` is the row of the constant monomial; ``exponents`` (rows, d_X + d_Y) those of each row.
    """

    operator: csr_matrix
    formable: np.ndarray
    model_rows: int
    constant_row: int
    exponents: np.ndarray


def _gram_map(exponents_x: np.ndarray, exponents_y: np.ndarray, gram_exps: np.ndarray) -> _GramMap:
    m_x, m_y, g = exponents_x.shape[0], exponents_y.shape[0], gram_exps.shape[0]
    index: dict[tuple, int] = {}
    for j in range(m_x):
        for i in range(m_y):
            index[tuple(exponents_x[j]) + tuple(exponents_y[i])] = i + m_y * j
    rows = m_x * m_y
    product_rows = np.empty((g, g), dtype=np.int64)
    for i in range(g):
        for j in range(g):
            key = tuple(gram_exps[i] + gram_exps[j])
            if key not in index:
                index[key] = rows
                rows += 1
            product_rows[i, j] = index[key]
    flat = product_rows.ravel(order="F")  # entry S[i, j] sits at i + g j of the column-major vec
    operator = csr_matrix((np.ones(g * g), (flat, np.arange(g * g))), shape=(rows, g * g))
    formable = np.bincount(flat, minlength=rows) > 0
    exps = np.zeros((rows, gram_exps.shape[1]), dtype=np.int64)
    for key, row in index.items():
        exps[row] = key
    constant = (0,) * gram_exps.shape[1]
    if constant not in index or index[constant] >= m_x * m_y:
        raise ValueError("positivity: 'sos' needs the constant monomial in both polynomial bases")
    return _GramMap(operator, formable, m_x * m_y, index[constant], exps)


def _active(basis: PolynomialBasis, half: int) -> np.ndarray:
    """Basis functions that may appear in an SOS 1 + h: degree <= 2 floor(q/2) (all of them for even q).

    The coefficient of the monomials of degree > 2 floor(q/2) depends only on the inactive basis
    functions when W is upper triangular in graded order (W[inactive, active] = 0); refused otherwise.
    """
    active = basis.exponents.sum(axis=1) <= 2 * half
    if not np.all(basis.coefficients[np.ix_(~active, active)] == 0):
        raise ValueError("positivity: 'sos' with an odd degree needs a triangular polynomial basis "
                         "(from fit_polynomial_basis)")
    return active


def sos_certificate(
    H: np.ndarray, S: np.ndarray, basis_x: PolynomialBasis, basis_y: PolynomialBasis, gram_exps: np.ndarray,
) -> dict[str, Any]:
    """Check that 1 + h(H) >= 0 everywhere from the Gram matrix S (g x g) of the Gram basis ``gram_exps``.

    With r = coefficients(1 + h(H)) - GramMap(S), the residuals the solver leaves, every monomial in
    the model is z^(u + v) for Gram monomials u, v, so |z^(u+v)| <= (z^(2u) + z^(2v)) / 2 <=
    ||tau_g(z)||^2 and

        1 + h(z) = tau_g S tau_g^T + sum_gamma r_gamma z^gamma >= (lambda_min(S) - ||r||_1) ||tau_g(z)||^2

    for every z = (x~, y~), i.e. every (x, y). ``sos_certificate`` checks
    lambda_min(S) - ||r||_1 - (a floating-point rounding bound) >= 0; since ||tau_g||^2 >= 1 this
    makes 1 + h > 0 everywhere, not only on the training grid.

    Returns sos_certified (bool), sos_min_eigenvalue (lambda_min(S)), sos_residual_l1 (||r||_1 over the
    formable monomials, r = coefficients(1 + h) - GramMap(S)), sos_unformable_residual (max |r| over
    monomials no Gram pair forms: must be exactly 0), sos_rounding_bound (floating-point allowance)
    and sos_certificate_margin = lambda_min - ||r||_1 - rounding: 1 + h(z) >= margin ||tau_g(z~)||^2.
    """
    S = 0.5 * (S + S.T)
    g = S.shape[0]
    gmap = _gram_map(basis_x.exponents, basis_y.exponents, gram_exps)
    Wx, Wy = basis_x.coefficients, basis_y.coefficients
    C = Wy @ H @ Wx.T
    coefficients = np.zeros(gmap.operator.shape[0])
    coefficients[:gmap.model_rows] = C.ravel(order="F")
    coefficients[gmap.constant_row] += 1.0
    residual = coefficients - gmap.operator @ S.ravel(order="F")
    formable = gmap.formable
    residual_l1 = float(np.sum(np.abs(residual[formable])))
    unformable = float(np.max(np.abs(residual[~formable]), initial=0.0))
    min_eigenvalue = float(np.linalg.eigvalsh(S)[0])
    k = Wx.shape[0] + Wy.shape[0] + 2
    gamma = k * _EPS / (1 - k * _EPS)
    rounding = float(gamma * float(np.sum(np.abs(Wy) @ np.abs(H) @ np.abs(Wx).T))
                + (g + 2) * _EPS * float(np.sum(np.abs(S)))
                + 4 * g * _EPS * float(np.linalg.norm(S)))
    margin = min_eigenvalue - residual_l1 - rounding
    return {
        "sos_certified": bool(margin >= 0 and unformable == 0.0),
        "sos_min_eigenvalue": min_eigenvalue,
        "sos_residual_l1": residual_l1,
        "sos_unformable_residual": unformable,
        "sos_rounding_bound": rounding,
        "sos_certificate_margin": margin,
    }


@dataclass
class _SOSProgram:
    """The SDP of ``solve_sos_positivity`` as a cvxpy ``problem`` in H (the block of the coefficients on
    the active basis functions) and T (g x g, PSD; S = T + margin I), with the Gram basis exponents
    ``gram_exps`` (g, d_X + d_Y) and the active basis functions of each side (boolean, ``_active``)."""

    problem: Any
    H: Any
    T: Any
    gram_exps: np.ndarray
    active_x: np.ndarray
    active_y: np.ndarray

    @property
    def size(self) -> int:
        """g, the side of the Gram matrix S."""
        return int(self.gram_exps.shape[0])


def _sos_program(basis_x: PolynomialBasis, basis_y: PolynomialBasis, red: JDLReductions, reg: float,
                 normalize: bool, margin: float, gram: str) -> _SOSProgram:
    """Build the SDP: (22) = (38) divided by max(D) (D = n^2 (1 + reg), so the objective is O(1)), the
    coefficient matching of 1 + h with tau_g S tau_g^T (``_gram_map``) and, if ``normalize``, (23)."""
    import cvxpy as cp

    q = basis_x.degree
    if basis_y.degree != q:
        raise ValueError(f"positivity: 'sos' needs one degree for X and Y, got {q} and {basis_y.degree}")
    half = q // 2
    active_x, active_y = _active(basis_x, half), _active(basis_y, half)
    gram_exps = gram_exponents(basis_x.width, basis_y.width, q, gram)
    ex, ey = basis_x.exponents[active_x], basis_y.exponents[active_y]
    gmap = _gram_map(ex, ey, gram_exps)
    Wx = basis_x.coefficients[np.ix_(active_x, active_x)]
    Wy = basis_y.coefficients[np.ix_(active_y, active_y)]
    g = gram_exps.shape[0]

    D = red.curvature(reg)[np.ix_(active_y, active_x)]
    linear = red.linear_term()[np.ix_(active_y, active_x)]
    scale = float(np.max(D))  # D = n^2 (1 + reg): the scaled objective is O(1)
    H = cp.Variable(D.shape)
    T = cp.Variable((g, g), PSD=True)
    S = T + margin * np.eye(g)
    vec_S = cp.vec(S, order="F")
    constant = np.zeros(gmap.model_rows)
    constant[gmap.constant_row] = 1.0
    constraints = [gmap.operator[:gmap.model_rows] @ vec_S == cp.vec(Wy @ H @ Wx.T, order="F") + constant]
    if gmap.operator.shape[0] > gmap.model_rows:
        constraints.append(gmap.operator[gmap.model_rows:] @ vec_S == 0)
    if normalize:
        outer = np.outer(red.sum_y[active_y], red.sum_x[active_x])
        constraints.append(cp.sum(cp.multiply(outer / max(np.max(np.abs(outer)), 1e-300), H)) == 0)
    objective = cp.Minimize(0.5 * cp.sum(cp.multiply(D / scale, cp.square(H))) - cp.sum(cp.multiply(linear / scale, H)))
    return _SOSProgram(cp.Problem(objective, constraints), H, T, gram_exps, active_x, active_y)


def _solver_order(solver: str | None, g: int, installed: list[str]) -> list[str]:
    """The solvers to try, in order, among the ``installed`` ones (``solve_sos_positivity``'s ``solver``)."""
    if solver not in (None, "auto"):
        order = [str(solver).upper()]
    else:  # Clarabel (interior point) for small Gram blocks; its KKT has a dense svec(g) block, so SCS above
        order = ["CLARABEL", "SCS"] if g * (g + 1) // 2 <= _CLARABEL_SVEC else ["SCS", "CLARABEL"]
    order = [name for name in order if name in installed]
    if not order:
        raise RuntimeError(f"positivity: 'sos' needs cvxpy with the Clarabel or SCS solver installed "
                           f"(have {installed})")
    return order


def _solver_options(name: str, tol: float) -> dict[str, Any]:
    """The gap and feasibility tolerances ``tol`` (and iteration caps) in the solver's own option names."""
    return ({"tol_gap_abs": tol, "tol_gap_rel": tol, "tol_feas": tol, "max_iter": 500} if name == "CLARABEL"
            else {"eps_abs": tol, "eps_rel": tol, "max_iters": _SCS_MAX_ITERS})


def _read_solution(sdp: _SOSProgram, red: JDLReductions, margin: float, basis_x: PolynomialBasis,
                   basis_y: PolynomialBasis) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """A solved SDP's H (m_Y, m_X) (zero off the active block), S = T + margin I (g x g, symmetrised)
    and its ``sos_certificate``."""
    g = sdp.size
    H_full = np.zeros(red.cross.shape)
    H_full[np.ix_(sdp.active_y, sdp.active_x)] = sdp.H.value
    S_value = np.asarray(sdp.T.value) + margin * np.eye(g)
    S_value = 0.5 * (S_value + S_value.T)
    return H_full, S_value, sos_certificate(H_full, S_value, basis_x, basis_y, sdp.gram_exps)


def solve_sos_positivity(
    basis_x: PolynomialBasis,
    basis_y: PolynomialBasis,
    red: JDLReductions,
    reg: float,
    *,
    normalize: bool = True,
    margin: float = 1e-8,
    tol: float = 1e-10,
    gram: str = "reduced",
    solver: str | None = None,
    certify: bool = True,
) -> tuple[np.ndarray, dict[str, Any]]:
    """Minimiser of (22) = (38) subject to (23) (if ``normalize``) and 1 + h = tau_g S tau_g^T, S >= margin I.

    basis_x, basis_y: polynomial bases of one degree q; red: the reductions of the problem.
    gram: "reduced" (Newton polytope, default) or "full" (all monomials of degree <= q in (x, y), the
        paper's basis; for comparisons only: it has no interior point, so it needs margin=0 and
        certify=False, and for q >= 4 solvers reach only a low accuracy on it).
    solver: None / "auto": Clarabel first when svec(S) has at most 1000 entries (g <= 44), else SCS
        first (Clarabel's KKT system carries a dense svec(g) x svec(g) block: for g = 100, 5050^2);
        the other one is tried when the first fails or its solution is not certified (SCS: at most
        100,000 iterations). "CLARABEL" or "SCS": that solver only. Their times: docs/methods.md
        (``PolynomialJDL``).
    Returns H (m_Y, m_X) and a dict: sos_certified, sos_min_eigenvalue, sos_residual_l1, ... (see
    ``sos_certificate``), sos_gram_size, sos_solver, sos_status, sos_seconds, sos_solver_objective.
    Raises ``RuntimeError`` if no solver succeeds or (``certify``) the certificate does not hold.
    """
    import cvxpy as cp

    started = time.perf_counter()
    if gram == "full" and (margin > 0 or certify):
        raise ValueError(
            "gram: the full Gram basis has no interior point (the monomials outside half the Newton polytope "
            "must have zero rows in S), so it needs margin=0 and certify=False; it is for comparisons only"
        )
    sdp = _sos_program(basis_x, basis_y, red, reg, normalize, margin, gram)
    problem, H, T = sdp.problem, sdp.H, sdp.T
    order = _solver_order(solver, sdp.size, cp.installed_solvers())
    failures = []
    for name in order:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # "Solution may be inaccurate": the certificate decides
                problem.solve(solver=name, **_solver_options(name, tol))
        except (cp.error.SolverError, ValueError, ArithmeticError) as error:
            failures.append(f"{name}: {error}")
            continue
        if problem.status not in ("optimal", "optimal_inaccurate") or H.value is None or T.value is None:
            failures.append(f"{name}: status {problem.status}")
            continue
        H_full, S_value, info = _read_solution(sdp, red, margin, basis_x, basis_y)
        info.update({
            "sos_gram_size": sdp.size, "sos_gram": gram, "sos_solver": name, "sos_status": problem.status,
            "sos_solver_objective": float(problem.value), "sos_seconds": time.perf_counter() - started,
        })
        if info["sos_certified"] or not certify:
            break
        failures.append(
            f"{name} (status {problem.status}): certificate fails, lambda_min(S) = {info['sos_min_eigenvalue']:.3e} "
            f"< residual {info['sos_residual_l1']:.3e} + rounding {info['sos_rounding_bound']:.3e} "
            f"(unformable residual {info['sos_unformable_residual']:.1e})"
        )
    else:
        raise RuntimeError(
            f"positivity: the sum-of-squares SDP gave no certified solution ({'; '.join(failures)}); "
            f"raise sos_margin or tighten solver_tol"
        )
    info["sos_gram_matrix"] = S_value
    return H_full, info
