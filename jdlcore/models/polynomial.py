"""The polynomial JDL (JPDL) of Section 4.5, with global positivity of 1 + h as a sum of squares.

Spaces and kernel
-----------------
Each variable z (x or y, d features) is standardised, z~ = (z - center) / scale (column means and
standard deviations of the training samples). tau(z~) (1 x m) holds the monomials z~^alpha with
|alpha| <= q in graded order (constant first, ``monomial_exponents``), m = C(d + q, d). With the
Vandermonde matrix V (n x m) of the samples and the empirical Gram matrix G = V^T V / n (full rank,
else ``ValueError``), the kernel is k(z, z') = tau(z~) G^{-1} tau(z~')^T: the reproducing kernel of
the polynomials of degree <= q under the empirical L2 inner product. It depends only on that
space, so neither the standardisation nor the choice of monomial basis changes it (nor the model).

Basis (paper: L = V G^{-1/2}, L^T L = n I, B = L / n)
------------------------------------------------------
Any W (m x m) with W^T G W = I gives psi(z) = tau(z~) W, orthonormal in the RKHS and orthogonal in
the empirical L2 with squared norms Lambda = n: A = V W satisfies A^T A = n I (double
orthogonality, no rotation needed, eps = 0). Here W = R^{-1} from the QR factorisation
V / sqrt(n) = Q R (positive diagonal, one re-orthogonalisation pass), so W is upper triangular,
psi_0, ..., psi_j span the same polynomials as the first j + 1 monomials, and psi_0 = 1 (to
rounding). In these bases the JDL problem is jdlcore's low-rank problem with
``reductions_from_values(A_X, A_Y)`` (Lambda = n), objective (38) = (22); without positivity the
closed forms of ``jdlcore.solvers`` apply unchanged.

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
q = 4), so solvers reach only about 1e-4 relative accuracy on it (``gram="full"``, kept for
comparisons, needs margin 0). For odd q the top-degree monomials (|a| = q or |b| = q) cannot be
formed, so their coefficients vanish; with the triangular W this is H[i, j] = 0 for every basis
function psi_Y,i or psi_X,j of degree q, imposed exactly by fixing those entries to zero.

Certificate
-----------
With r = coefficients(1 + h(H)) - GramMap(S), the residuals the solver leaves, every monomial in
the model is z^(u + v) for Gram monomials u, v, so |z^(u+v)| <= (z^(2u) + z^(2v)) / 2 <=
||tau_g(z)||^2 and

    1 + h(z) = tau_g S tau_g^T + sum_gamma r_gamma z^gamma >= (lambda_min(S) - ||r||_1) ||tau_g(z)||^2

for every z = (x~, y~), i.e. every (x, y). ``sos_certificate`` checks
lambda_min(S) - ||r||_1 - (a floating-point rounding bound) >= 0; since ||tau_g||^2 >= 1 this
makes 1 + h > 0 everywhere, not only on the training grid.
"""
from __future__ import annotations

import itertools
import time
import warnings
from dataclasses import dataclass
from math import comb
from typing import Any, Callable

import numpy as np
from scipy.linalg import solve_triangular
from scipy.sparse import csr_matrix

from ..conditional.atoms import block_sums
from ..lowrank.basis import JDLReductions, reductions_from_values, slice_points
from .jdl import GRID_POINTS, JDL, SUPPORT_PARAMS, JDLProblem
from ..conditional.support import sample_rows
from ..lowrank.cholesky import FACTORISATION_PARAMS
from ..params import Choice, Integer, Number, Param
from ..validation import as_samples, check_choice, check_paired

__all__ = [
    "PolynomialBasis", "PolynomialJDL", "monomial_exponents", "evaluate_monomials", "fit_polynomial_basis",
    "build_polynomial_problem", "gram_exponents", "solve_sos_positivity", "sos_certificate", "POSITIVITY",
    "GRAM_BASES",
]

POSITIVITY = ("sos", "project", "grid", "tightening", "clip")
GRAM_BASES = ("reduced", "full")
_RANK_RTOL = 1e-9  # singular values below this fraction of the largest count as zero (condition > 1e9)
_EPS = np.finfo(np.float64).eps
_CLARABEL_SVEC = 1000  # Clarabel first up to this svec size of S (g <= 44), SCS first above
_SCS_MAX_ITERS = 100_000


# -- monomials and the basis ----------------------------------------------------------------------
def monomial_exponents(d: int, q: int) -> np.ndarray:
    """Exponents alpha (m, d) of the monomials of degree <= q in d variables, m = C(d + q, d).

    Graded order: by total degree (constant first), and within one degree lexicographically
    descending (x1^2, x1 x2, x2^2, ...). So the first C(d + p, d) rows are the monomials of degree <= p.
    """
    d, q = int(d), int(q)
    if d < 1 or q < 0:
        raise ValueError(f"monomial_exponents: need d >= 1 and q >= 0, got d = {d}, q = {q}")
    rows = []
    for degree in range(q + 1):
        for combo in itertools.combinations_with_replacement(range(d), degree):
            alpha = np.zeros(d, dtype=np.int64)
            for k in combo:
                alpha[k] += 1
            rows.append(alpha)
    exponents = np.array(rows, dtype=np.int64).reshape(-1, d)
    assert exponents.shape[0] == comb(d + q, d)
    return exponents


def evaluate_monomials(Z: np.ndarray, exponents: np.ndarray) -> np.ndarray:
    """Monomials Z^alpha (q, m) of points Z (q, d) for exponents (m, d)."""
    Z = np.asarray(Z, dtype=np.float64)
    top = int(exponents.max()) if exponents.size else 0
    powers = np.empty((Z.shape[1], top + 1, Z.shape[0]))  # powers[k, p] = Z[:, k] ** p by multiplication
    powers[:, 0] = 1.0
    for p in range(1, top + 1):
        powers[:, p] = powers[:, p - 1] * Z.T
    out = np.ones((Z.shape[0], exponents.shape[0]))
    for k in range(Z.shape[1]):
        out *= powers[k, exponents[:, k]].T
    return out


@dataclass
class PolynomialBasis:
    """Double-orthogonal polynomial basis psi(z) = tau((z - center) / scale) @ coefficients of one variable.

    Attributes
    ----------
    center, scale: (d,) the standardisation (training means and standard deviations).
    exponents: (m, d) int, the monomials tau in graded order (``monomial_exponents``).
    coefficients: (m, m) W, upper triangular with W^T G W = I for the empirical Gram matrix G of the
        standardised monomials.
    eigenvalues: (m,) Lambda, all equal to n (the squared empirical norms times n).
    """

    center: np.ndarray
    scale: np.ndarray
    exponents: np.ndarray
    coefficients: np.ndarray
    eigenvalues: np.ndarray

    @property
    def size(self) -> int:
        """m, the number of basis functions."""
        return int(self.eigenvalues.size)

    @property
    def width(self) -> int:
        """d, the number of features of a point."""
        return int(self.center.size)

    @property
    def degree(self) -> int:
        """q, the largest total degree of the monomials."""
        return int(self.exponents.sum(axis=1).max())

    def standardize(self, Z: np.ndarray) -> np.ndarray:
        """(Z - center) / scale, shape (q, d)."""
        return (np.asarray(Z, dtype=np.float64) - self.center) / self.scale

    def raw(self, Z: np.ndarray) -> np.ndarray:
        """tau(Z~), the monomials of the standardised points, shape (q, m): psi(Z) = raw(Z) @ coefficients."""
        return evaluate_monomials(self.standardize(Z), self.exponents)

    def features(self, Z: np.ndarray) -> np.ndarray:
        """psi(Z), shape (q, m), for points Z (q, d)."""
        return self.raw(Z) @ self.coefficients

    def to_arrays(self, side: str) -> dict[str, np.ndarray]:
        """The arrays that rebuild the basis, named ``{side}_*`` (all float64; exponents are integers)."""
        return {
            f"{side}_center": np.asarray(self.center, dtype=np.float64),
            f"{side}_scale": np.asarray(self.scale, dtype=np.float64),
            f"{side}_exponents": np.asarray(self.exponents, dtype=np.float64),
            f"{side}_coefficients": np.asarray(self.coefficients, dtype=np.float64),
            f"{side}_eigenvalues": np.asarray(self.eigenvalues, dtype=np.float64),
        }

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], side: str) -> "PolynomialBasis":
        """Inverse of ``to_arrays``; raises ``ValueError`` on inconsistent shapes or non-integer exponents."""
        center = np.asarray(arrays[f"{side}_center"], dtype=np.float64).ravel()
        scale = np.asarray(arrays[f"{side}_scale"], dtype=np.float64).ravel()
        raw_exponents = np.asarray(arrays[f"{side}_exponents"], dtype=np.float64)
        coefficients = np.asarray(arrays[f"{side}_coefficients"], dtype=np.float64)
        eigenvalues = np.asarray(arrays[f"{side}_eigenvalues"], dtype=np.float64).ravel()
        m, d = eigenvalues.size, center.size
        if scale.shape != (d,) or raw_exponents.shape != (m, d) or coefficients.shape != (m, m):
            raise ValueError(
                f"state: inconsistent polynomial basis {side}: center {center.shape}, scale {scale.shape}, "
                f"exponents {raw_exponents.shape}, coefficients {coefficients.shape}, eigenvalues {eigenvalues.shape}"
            )
        if np.any(raw_exponents < 0) or np.any(raw_exponents != np.round(raw_exponents)):
            raise ValueError(f"state: {side}_exponents must be non-negative integers")
        if not np.all(scale > 0):
            raise ValueError(f"state: {side}_scale must be > 0")
        return cls(center, scale, raw_exponents.astype(np.int64), coefficients, eigenvalues)

    def spec(self) -> dict[str, Any]:
        """JSON description (stored as ``kernel_{side}``)."""
        return {"name": "polynomial", "degree": self.degree, "width": self.width, "size": self.size,
                "standardized": True}

    def describe(self) -> str:
        return f"polynomial, degree {self.degree}"

    def smoothing_scale(self, component: int = 0) -> float:
        """A fifth of the feature's training standard deviation."""
        return float(self.scale[component]) / 5.0

    def slice_points(self, n_slices: int) -> np.ndarray:
        """``jdlcore.lowrank.basis.slice_points`` of the mean +- 1.28 standard deviations."""
        return slice_points(self.center + np.outer(np.linspace(-1.28, 1.28, 9), self.scale), n_slices)


def fit_polynomial_basis(Z: Any, degree: int, name: str = "Z") -> tuple[PolynomialBasis, np.ndarray]:
    """The double-orthogonal polynomial basis of degree <= ``degree`` of samples Z (n, d), and A = psi(Z) (n, m).

    Raises ``ValueError`` (naming ``name``) for a constant column or a Vandermonde matrix of
    deficient numerical rank (fewer distinct points than monomials, points on an algebraic set of
    degree <= q, or a condition number above 1e9).
    """
    Z = as_samples(Z, name, min_rows=2)
    n, d = Z.shape
    degree = _check_degree(degree)
    for k in range(d):
        if np.all(Z[:, k] == Z[0, k]):
            raise ValueError(f"{name}: column {k} is constant ({Z[0, k]!r}); a polynomial basis needs varying features")
    center = Z.mean(axis=0)
    scale = Z.std(axis=0)
    if not np.all(scale > 0):  # pragma: no cover - a non-constant column has a positive std
        raise ValueError(f"{name}: a column has zero standard deviation after rounding")
    exponents = monomial_exponents(d, degree)
    m = exponents.shape[0]
    basis = PolynomialBasis(center, scale, exponents, np.eye(m), np.full(m, float(n)))
    V = basis.raw(Z) / np.sqrt(n)
    singular = np.linalg.svd(V, compute_uv=False)
    rank = int(np.sum(singular > _RANK_RTOL * singular[0]))
    if n < m or rank < m:
        distinct = np.unique(Z, axis=0).shape[0]
        raise ValueError(
            f"{name}: the {m} monomials of degree <= {degree} in {d} variable(s) have numerical rank {rank} at the "
            f"{n} samples ({distinct} distinct points); need rank {m}: lower the degree or give more varied data"
        )
    W = np.eye(m)
    for _ in range(2):  # QR, then one re-orthogonalisation pass ("twice is enough")
        R = np.linalg.qr(V @ W, mode="r")
        R *= np.where(np.diag(R) < 0, -1.0, 1.0)[:, None]
        W = solve_triangular(R, W.T, trans="T", lower=False).T  # W <- W R^{-1}, stays upper triangular
    W = np.triu(W)
    basis.coefficients = W
    return basis, basis.features(Z)


DEGREE = Param(Integer(1, 8), "degree of the monomials of each variable (binomial(d + degree, d) of them)",
               option=True)


def _check_degree(degree: Any) -> int:
    DEGREE.check("degree", degree)
    return int(degree)


def build_polynomial_problem(
    X: Any, Y: Any, degree: int, test_functions: dict[str, Callable] | None = None, seed: int | None = 0,
    grid_points: int = GRID_POINTS,
) -> JDLProblem:
    """The JDL problem in the polynomial bases of X (n, d_X) and Y (n, d_Y): exact, no pivoted Cholesky.

    ``test_functions`` (name -> f, row-wise on the atoms) are summed and registered with models fitted
    on the problem. The support of Y is built by the fit; ``grid_x`` is a seeded sample of
    ``grid_points`` training x rows (grid positivity).
    """
    started = time.perf_counter()
    X = as_samples(X, "X", min_rows=2)
    Y = as_samples(Y, "Y", min_rows=2)
    check_paired(X, Y)
    basis_x, A_x = fit_polynomial_basis(X, degree, "X")
    basis_y, A_y = fit_polynomial_basis(Y, degree, "Y")
    reductions = reductions_from_values(A_x, A_y)
    factors = {
        "rank_x": basis_x.size, "rank_y": basis_y.size,
        "trace_error_x": np.zeros(1), "trace_error_y": np.zeros(1),
        "relative_error_x": 0.0, "relative_error_y": 0.0,
        "stop_reason_x": "exact", "stop_reason_y": "exact",
        "pivots_x": np.arange(0), "pivots_y": np.arange(0),
        "factor_seconds": time.perf_counter() - started,
    }
    sums = {name: block_sums(f, Y, A_y) for name, f in (test_functions or {}).items()}
    return JDLProblem(basis_x, basis_y, A_x, A_y, reductions, factors, sums,
                      grid_x=X[sample_rows(X.shape[0], seed, grid_points)])


# -- sum-of-squares positivity --------------------------------------------------------------------
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
        certify=False, and for q >= 4 solvers reach only about 1e-4 relative accuracy on it).
    solver: None / "auto": Clarabel first when svec(S) has at most 1000 entries (g <= 44), else SCS
        first (Clarabel's KKT system carries a dense svec(g) x svec(g) block: for g = 100, 5050^2);
        the other one is tried when the first fails or its solution is not certified (SCS: at most
        100,000 iterations). "CLARABEL" or "SCS": that solver only. Measured at d = 3, q = 4,
        n = 2000 on 2 cores: SCS 3-6 s on Gaussian or uniform data, about 160 s on heavy-tailed
        heteroscedastic data (Student t5); Clarabel 75 s (Gaussian), over 200 s and inaccurate (t5).
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
    problem = cp.Problem(objective, constraints)

    installed = cp.installed_solvers()
    if solver not in (None, "auto"):
        order = [str(solver).upper()]
    else:  # Clarabel (interior point) for small Gram blocks; its KKT has a dense svec(g) block, so SCS above
        order = ["CLARABEL", "SCS"] if g * (g + 1) // 2 <= _CLARABEL_SVEC else ["SCS", "CLARABEL"]
    order = [name for name in order if name in installed]
    if not order:
        raise RuntimeError(f"positivity: 'sos' needs cvxpy with the Clarabel or SCS solver installed "
                           f"(have {installed})")
    failures = []
    for name in order:
        options = ({"tol_gap_abs": tol, "tol_gap_rel": tol, "tol_feas": tol, "max_iter": 500} if name == "CLARABEL"
                   else {"eps_abs": tol, "eps_rel": tol, "max_iters": _SCS_MAX_ITERS})
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # "Solution may be inaccurate": the certificate decides
                problem.solve(solver=name, **options)
        except (cp.error.SolverError, ValueError, ArithmeticError) as error:
            failures.append(f"{name}: {error}")
            continue
        if problem.status not in ("optimal", "optimal_inaccurate") or H.value is None or T.value is None:
            failures.append(f"{name}: status {problem.status}")
            continue
        H_full = np.zeros(red.cross.shape)
        H_full[np.ix_(active_y, active_x)] = H.value
        S_value = np.asarray(T.value) + margin * np.eye(g)
        S_value = 0.5 * (S_value + S_value.T)
        info: dict[str, Any] = sos_certificate(H_full, S_value, basis_x, basis_y, gram_exps)
        info.update({
            "sos_gram_size": int(g), "sos_gram": gram, "sos_solver": name, "sos_status": problem.status,
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


# -- the estimator --------------------------------------------------------------------------------
class PolynomialJDL(JDL):
    """JDL with polynomial kernels of degree <= ``degree`` in X and in Y (JPDL, Section 4.5).

    Parameters
    ----------
    degree: q >= 1, the degree of the monomials of each variable (the paper uses 4).
    reg: lambda of the regularised loss (8), >= 0.
    constraints: "none", "normalization" or "positivity" (normalization and positivity).
    positivity (constraints="positivity"):
        "sos" (default): 1 + h in the sum-of-squares cone (39), an SDP: 1 + h >= 0 at every (x, y),
            certified (``diagnostics_['sos_certified']``, ``sos_min_eigenvalue``, ``sos_residual_l1``);
        "project": normalization in the fit; the laws projected at query time (``JDL``);
        "grid": 1 + h >= 0 on the support atoms x a sample of the training x (``JDL``);
        "tightening": the paper's single inequality (33);
        "clip": normalization only; negative conditional weights clipped at query time.
    sos_margin: S >= sos_margin * I, keeping the solution strictly inside the cone (>= 0).
    solver_tol: the SDP solver's gap and feasibility tolerances (> 0).
    seed, support_size, grid_points, grid_rounds, grid_seconds: as for ``JDL``.

    Fitted attributes as for ``JDL`` (basis_x_, basis_y_ are ``PolynomialBasis``); with "sos" the
    Gram matrix S (g x g) is kept as ``sos_gram_`` (not part of ``state()``).
    """

    method = "jpdl"
    summary = "polynomial JDL (monomial bases, --degree; sum-of-squares positivity)"
    positivity_rules = POSITIVITY
    fits_from_reductions = False
    bases = ("polynomial", "polynomial")
    KERNELS = ()  # the monomial bases have no kernel parameters
    parameters = {
        "degree": DEGREE,
        "reg": JDL.parameters["reg"],
        "constraints": JDL.parameters["constraints"],
        "positivity": Param(Choice(POSITIVITY), "sos: a certified sum of squares; or a rule of jdl", option=True),
        "sos_margin": Param(Number(low=0), "S >= sos_margin x I: the solution strictly inside the cone"),
        "solver_tol": Param(Number(low=0, low_open=True), "the SDP solver's gap and feasibility tolerances"),
        "seed": FACTORISATION_PARAMS["seed"],
        **SUPPORT_PARAMS,
    }

    def __init__(
        self,
        *,
        degree: int = 4,
        reg: float = 1e-3,
        constraints: str = "positivity",
        positivity: str = "sos",
        sos_margin: float = 1e-8,
        solver_tol: float = 1e-10,
        support_size: int | None = None,
        grid_points: int = GRID_POINTS,
        grid_rounds: int = 200,
        grid_seconds: float = 120.0,
        seed: int | None = 0,
    ):
        self._keep_params(locals())

    def _check_together(self) -> None:
        """None: exact polynomial bases stay bounded at reg = 0 (``JDL``'s rule is for kernel bases)."""

    @property
    def uses_sos(self) -> bool:
        """True when fitting solves the sum-of-squares SDP."""
        return self.constraints == "positivity" and self.positivity == "sos"

    def fit(self, X: Any, Y: Any) -> "PolynomialJDL":
        """Fit on paired samples X (n, d_X) and Y (n, d_Y); returns self."""
        self.check_params()
        X = as_samples(X, "X", min_rows=2)
        Y = as_samples(Y, "Y", min_rows=2)
        check_paired(X, Y)
        return self.fit_problem(build_polynomial_problem(X, Y, int(self.degree), seed=self.seed,
                                                         grid_points=int(self.grid_points)), Y)

    def _solve(self, problem: JDLProblem, reg: float) -> tuple[np.ndarray, dict[str, Any]]:
        self.__dict__.pop("sos_gram_", None)
        if not self.uses_sos:
            return super()._solve(problem, reg)
        if not isinstance(problem.basis_x, PolynomialBasis) or not isinstance(problem.basis_y, PolynomialBasis):
            raise ValueError("positivity: 'sos' needs polynomial bases (build_polynomial_problem)")
        H, info = solve_sos_positivity(problem.basis_x, problem.basis_y, problem.reductions, reg,
                                       margin=float(self.sos_margin), tol=float(self.solver_tol))
        self.sos_gram_ = info.pop("sos_gram_matrix")
        return H, info

    @classmethod
    def _from_params(cls, state: dict[str, Any]) -> "PolynomialJDL":
        return cls(**state["params"])

    @classmethod
    def _basis_from_state(cls, side: str, arrays: dict[str, np.ndarray], state: dict[str, Any]) -> PolynomialBasis:
        spec = state[f"kernel_{side}"]
        if spec.get("name") != "polynomial":
            raise ValueError(f"state: kernel_{side} is {spec.get('name')!r}, not a polynomial basis")
        basis = PolynomialBasis.from_arrays(arrays, side)
        if basis.degree != int(spec["degree"]) or basis.width != int(spec["width"]):
            raise ValueError(f"state: kernel_{side} says degree {spec['degree']} and width {spec['width']}, "
                             f"the arrays have {basis.degree} and {basis.width}")
        return basis
