"""Double-orthogonal polynomial bases of one variable: the bases of the polynomial JDL (JPDL, Section 4.5).

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
rounding).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from math import comb
from typing import Any

import numpy as np
from scipy.linalg import solve_triangular

from ..lowrank.basis import slice_points
from ..params import Integer, Param
from ..validation import as_samples

__all__ = ["PolynomialBasis", "monomial_exponents", "evaluate_monomials", "fit_polynomial_basis", "DEGREE"]

_RANK_RTOL = 1e-9  # singular values below this fraction of the largest count as zero (condition > 1e9)


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
