"""The double-orthogonal basis of Section 4.2 and the m x m reductions of the JDL problem.

From a pivoted Cholesky factor L (n x m) of K with bi-orthogonal B: L^T L = V Lambda V^T and
Psi(.) = Phi(.) B V. The functions Psi_i are orthonormal in the RKHS and orthogonal in L2 of the
empirical measure with squared norms Lambda_i / n. Their values at the training points are
A = L V (n x m), with A^T A = Lambda.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from .cholesky import PivotedCholesky
from ..kernels import Kernel

__all__ = [
    "Basis", "slice_points", "SpectralBasis", "JDLReductions", "FactorPartials", "spectral_basis", "factor_partials",
    "column_extremes", "unknown_extremes", "reductions_from_partials", "reductions_from_values",
]


class Basis(Protocol):
    """What every basis of one variable provides (``SpectralBasis``, ``jdlcore.models.polynomial_basis.PolynomialBasis``,
    ``jdlcore.models.greedy.ClassBasis``): the estimators, the model store and the model card read only this.

    size (m) and width (d); raw(Z) (q, r) and coefficients (r, m) with features(Z) = raw(Z) @
    coefficients = Psi(Z) (q, m); eigenvalues (m,), the squared empirical norms times n;
    to_arrays(side), the arrays that rebuild it; spec(), the JSON of what generates it (stored as
    ``kernel_{side}``); describe(), one line for people; smoothing_scale(component), a bandwidth in
    units of that feature at which the basis resolves the variable (for smoothed densities); and
    slice_points(n_slices), points (k, d) that span the training data, for plots.
    """

    coefficients: np.ndarray
    eigenvalues: np.ndarray

    @property
    def size(self) -> int: ...

    @property
    def width(self) -> int: ...

    def raw(self, Z: np.ndarray) -> np.ndarray: ...

    def features(self, Z: np.ndarray) -> np.ndarray: ...

    def to_arrays(self, side: str) -> dict[str, np.ndarray]: ...

    def spec(self) -> dict[str, Any]: ...

    def describe(self) -> str: ...

    def smoothing_scale(self, component: int = 0) -> float: ...

    def slice_points(self, n_slices: int) -> np.ndarray: ...


def slice_points(points: np.ndarray, n_slices: int) -> np.ndarray:
    """(n_slices, d) points spanning ``points`` (k, d): the first feature at its quantiles 0.1..0.9 (0.5
    for one slice), the others at their medians."""
    if n_slices < 1:
        raise ValueError(f"n_slices: must be >= 1, got {n_slices}")
    points = np.asarray(points, dtype=np.float64)
    levels = np.linspace(0.1, 0.9, n_slices) if n_slices > 1 else np.array([0.5])
    out = np.tile(np.median(points, axis=0), (levels.size, 1))
    out[:, 0] = np.quantile(points[:, 0], levels)
    return out


@dataclass
class SpectralBasis:
    """Double-orthogonal basis of one variable.

    Attributes
    ----------
    kernel: the kernel k.
    pivot_points: (m, d) the pivot samples.
    coefficients: (m, m) B[pivots, :] V, so Psi(z) = k(z, pivot_points) @ coefficients.
    eigenvalues: (m,) Lambda, descending (the squared empirical L2 norms times n).
    rotation: (m, m) V, eigenvectors of L^T L.
    """

    kernel: Kernel
    pivot_points: np.ndarray
    coefficients: np.ndarray
    eigenvalues: np.ndarray
    rotation: np.ndarray

    @property
    def size(self) -> int:
        return int(self.eigenvalues.size)

    @property
    def width(self) -> int:
        """d, the number of features of a point."""
        return int(self.pivot_points.shape[1])

    def raw(self, Z: np.ndarray) -> np.ndarray:
        """k(Z, pivot_points), shape (q, m): Psi(Z) = raw(Z) @ coefficients."""
        return self.kernel.block(Z, self.pivot_points)

    def features(self, Z: np.ndarray) -> np.ndarray:
        """Psi(Z), shape (q, m), for points Z (q, d)."""
        return self.raw(Z) @ self.coefficients

    def ranges(self) -> tuple[np.ndarray, np.ndarray]:
        """Lower and upper bounds (m,) of each Psi_j over the whole domain, from the kernel's bounds.

        Psi_j(z) = sum_k k(z, p_k) C_kj with k(z, p_k) in [k_lo, k_hi] independently for each k, so
        Psi_j lies in [sum_k min(k_lo C_kj, k_hi C_kj), sum_k max(k_lo C_kj, k_hi C_kj)].
        """
        k_lo, k_hi = self.kernel.bounds
        ends = np.stack([k_lo * self.coefficients, k_hi * self.coefficients])
        return ends.min(axis=0).sum(axis=0), ends.max(axis=0).sum(axis=0)

    def spec(self) -> dict[str, Any]:
        """The kernel's JSON (``Kernel.to_dict``)."""
        return self.kernel.to_dict()

    def describe(self) -> str:
        text = _floats(self.kernel.lengthscale, repr)
        if getattr(self.kernel, "scale", None) is not None:
            text += f" in standard units ({_floats(self.kernel.data_lengthscale, '{:.4g}'.format)} in the data's units)"
        return f"{self.kernel.name}, lengthscale {text}"

    def smoothing_scale(self, component: int = 0) -> float:
        """Half the kernel's lengthscale of feature ``component``, in the feature's units."""
        scale = np.asarray(self.kernel.data_lengthscale, dtype=np.float64)
        return float(scale if scale.ndim == 0 else scale[component]) / 2.0

    def slice_points(self, n_slices: int) -> np.ndarray:
        """``slice_points`` of the pivot points."""
        return slice_points(self.pivot_points, n_slices)

    def to_arrays(self, side: str) -> dict[str, np.ndarray]:
        """The arrays that rebuild the basis (with its kernel), named ``{side}_*``."""
        return {f"{side}_pivot_points": self.pivot_points, f"{side}_coefficients": self.coefficients,
                f"{side}_eigenvalues": self.eigenvalues, f"{side}_rotation": self.rotation}

    @classmethod
    def from_arrays(cls, kernel: Kernel, arrays: dict[str, np.ndarray], side: str) -> "SpectralBasis":
        """Inverse of ``to_arrays``; raises ``ValueError`` on inconsistent shapes."""
        basis = cls(kernel, arrays[f"{side}_pivot_points"], arrays[f"{side}_coefficients"],
                    arrays[f"{side}_eigenvalues"], arrays[f"{side}_rotation"])
        m = basis.size
        for name in ("coefficients", "rotation"):
            if getattr(basis, name).shape != (m, m) or basis.pivot_points.shape[0] != m:
                raise ValueError(f"state: {side}_{name} has shape {getattr(basis, name).shape}, expected {(m, m)}")
        return basis


def spectral_basis(factor: PivotedCholesky, kernel: Kernel, gram: np.ndarray | None = None) -> SpectralBasis:
    """Rotate a pivoted Cholesky factor into the double-orthogonal basis.

    ``gram`` = L^T L (m x m) may be given when L itself is not in memory (chunked path).
    """
    if gram is None:
        gram = factor.L.T @ factor.L
    eigenvalues, rotation = np.linalg.eigh(gram)
    order = np.argsort(eigenvalues)[::-1]
    eigenvalues = np.maximum(eigenvalues[order], 0.0)
    rotation = rotation[:, order]
    # Fix the sign of each eigenvector (largest entry positive) so fits are reproducible.
    signs = np.sign(rotation[np.argmax(np.abs(rotation), axis=0), np.arange(rotation.shape[1])])
    rotation = rotation * np.where(signs == 0, 1.0, signs)
    return SpectralBasis(
        kernel=kernel,
        pivot_points=factor.pivot_points,
        coefficients=factor.B_pivots @ rotation,
        eigenvalues=eigenvalues,
        rotation=rotation,
    )


@dataclass
class JDLReductions:
    """Every data-dependent quantity of the low-rank JDL problem (22)-(25): sums over the n samples.

    n: number of samples; lam_x (m_X,), lam_y (m_Y,): Lambda_X, Lambda_Y;
    cross: (m_Y, m_X) G = A_Y^T A_X (pairs (x_i, y_i) matched); sum_x (m_X,) = A_X^T 1,
    sum_y (m_Y,) = A_Y^T 1; min_x, max_x (m_X,), min_y, max_y (m_Y,): column extremes of A_X, A_Y.
    """

    n: int
    lam_x: np.ndarray
    lam_y: np.ndarray
    cross: np.ndarray
    sum_x: np.ndarray
    sum_y: np.ndarray
    min_x: np.ndarray
    max_x: np.ndarray
    min_y: np.ndarray
    max_y: np.ndarray

    def curvature(self, reg: float) -> np.ndarray:
        """D_ij = Lambda_Y,i Lambda_X,j + n^2 reg, the diagonal Hessian of (n^2/2) * (22)."""
        return np.outer(self.lam_y, self.lam_x) + self.n**2 * reg

    def linear_term(self) -> np.ndarray:
        """g = n G - s_Y s_X^T: (n^2/2) * (22) = 1/2 sum D H^2 - <g, H>."""
        return self.n * self.cross - np.outer(self.sum_y, self.sum_x)

    def objective(self, H: np.ndarray, reg: float) -> float:
        """The low-rank objective (22) at H (m_Y x m_X), in the paper's scaling."""
        quadratic = 0.5 * np.sum(self.curvature(reg) * H * H) - np.sum(self.linear_term() * H)
        return float(2.0 / self.n**2 * quadratic)

    def total_mass_defect(self, H: np.ndarray) -> float:
        """s_Y^T H s_X: the normalization (23) holds when this is 0."""
        return float(self.sum_y @ H @ self.sum_x)

    def to_arrays(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


def reductions_from_values(A_x: np.ndarray, A_y: np.ndarray) -> JDLReductions:
    """Reductions from the basis values at the training points (in memory)."""
    return JDLReductions(
        n=A_x.shape[0],
        lam_x=np.einsum("ij,ij->j", A_x, A_x),
        lam_y=np.einsum("ij,ij->j", A_y, A_y),
        cross=A_y.T @ A_x,
        sum_x=A_x.sum(axis=0),
        sum_y=A_y.sum(axis=0),
        min_x=A_x.min(axis=0),
        max_x=A_x.max(axis=0),
        min_y=A_y.min(axis=0),
        max_y=A_y.max(axis=0),
    )


@dataclass
class FactorPartials:
    """Sums over samples of products of the Cholesky factors; additive over disjoint sample chunks.

    n; gram_x = L_X^T L_X (m_X, m_X); gram_y = L_Y^T L_Y (m_Y, m_Y); cross = L_Y^T L_X (m_Y, m_X);
    sum_x = L_X^T 1 (m_X,); sum_y = L_Y^T 1 (m_Y,).
    """

    n: int
    gram_x: np.ndarray
    gram_y: np.ndarray
    cross: np.ndarray
    sum_x: np.ndarray
    sum_y: np.ndarray

    def __add__(self, other: "FactorPartials") -> "FactorPartials":
        return FactorPartials(
            self.n + other.n, self.gram_x + other.gram_x, self.gram_y + other.gram_y,
            self.cross + other.cross, self.sum_x + other.sum_x, self.sum_y + other.sum_y,
        )


def factor_partials(L_x: np.ndarray, L_y: np.ndarray, gram_x: np.ndarray | None = None,
                    gram_y: np.ndarray | None = None) -> FactorPartials:
    """Partial sums of one chunk of paired rows of L_X (n_c, m_X) and L_Y (n_c, m_Y); ``gram_x``,
    ``gram_y``: L_X^T L_X and L_Y^T L_Y where already computed."""
    return FactorPartials(L_x.shape[0], L_x.T @ L_x if gram_x is None else gram_x,
                          L_y.T @ L_y if gram_y is None else gram_y, L_y.T @ L_x, L_x.sum(axis=0), L_y.sum(axis=0))


def column_extremes(A: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Column minima and maxima of basis values A (n_c, m) of one chunk (combine chunks with min / max)."""
    return A.min(axis=0), A.max(axis=0)


def unknown_extremes(m: int) -> tuple[np.ndarray, np.ndarray]:
    """The column extremes of a problem that did not compute them: NaN, shape (m,) each (only the
    tightening reads them, and it refuses NaN)."""
    return np.full(m, np.nan), np.full(m, np.nan)


def reductions_from_partials(
    partials: FactorPartials,
    basis_x: SpectralBasis,
    basis_y: SpectralBasis,
    extremes_x: tuple[np.ndarray, np.ndarray],
    extremes_y: tuple[np.ndarray, np.ndarray],
) -> JDLReductions:
    """The reductions of the JDL problem from factor partial sums: A = L V, so A_Y^T A_X = V_Y^T (L_Y^T L_X) V_X."""
    Vx, Vy = basis_x.rotation, basis_y.rotation
    return JDLReductions(
        n=partials.n,
        lam_x=_rotated_diagonal(partials.gram_x, Vx),
        lam_y=_rotated_diagonal(partials.gram_y, Vy),
        cross=Vy.T @ partials.cross @ Vx,
        sum_x=Vx.T @ partials.sum_x,
        sum_y=Vy.T @ partials.sum_y,
        min_x=extremes_x[0], max_x=extremes_x[1], min_y=extremes_y[0], max_y=extremes_y[1],
    )


def _rotated_diagonal(gram: np.ndarray, rotation: np.ndarray) -> np.ndarray:
    """diag(V^T G V) (m,) of G (m, m) and V (m, m), through one matrix product (O(m^3) in BLAS; the
    three-operand einsum it replaces ran as a plain loop, 11 s at m = 2,000)."""
    return np.sum(rotation * (gram @ rotation), axis=0)


def _floats(value: float | np.ndarray, form) -> str:
    """A lengthscale as text, each number written by ``form``: one number, or a bracketed list."""
    array = np.asarray(value, dtype=np.float64)
    return form(float(array)) if array.ndim == 0 else "[" + ", ".join(form(float(v)) for v in array) + "]"
