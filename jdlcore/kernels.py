"""Stationary kernels evaluated block by block, never as an n x n matrix.

Every kernel maps two sample arrays A (p, d) and B (q, d) to the block k(A, B) of shape (p, q) and
gives the diagonal k(a_i, a_i) of shape (p,). A kernel may carry a scaling (``location`` and
``scale``, one entry per feature, from ``jdlcore.scaling.robust_scaling``): distances are then taken
on (z - location) / scale, and the lengthscale is in those standard units; without one, in the units
of the features. A per-feature lengthscale (shape (d,)) rescales each column before the distance is
taken. Columns named ``categorical`` hold category codes (exact integers, -1 for a level matching
none): a pair of rows that differ in such a column j is at squared distance 1 / l_j^2 along it, equal
codes at 0. That is the distance of the codes' one-hot vectors scaled by 1 / (sqrt(2) l_j), so every
kernel stays positive definite; a short l_j makes the column a delta kernel in the product, a long
one leaves it out.
Large blocks are evaluated in row slabs on jdl's thread pool (``jdlcore.pool``; NumPy releases the
GIL in BLAS and in ufuncs), which is where kernel-heavy work spends its time.
"""
from __future__ import annotations

from typing import Any, ClassVar, Sequence

import numpy as np

from .pool import pool_map
from .scaling import check_scaling, check_scaling_choice, robust_scaling
from .validation import as_samples, check_positive

FAR = 1e100  # kernel coordinates are capped here (in lengthscales): every kernel value is 0 this far out

__all__ = [
    "Kernel",
    "GaussianKernel",
    "LaplaceKernel",
    "Matern32Kernel",
    "Matern52Kernel",
    "DeltaKernel",
    "kernel_from_dict",
    "median_heuristic",
    "LENGTHSCALE_KERNELS",
    "DEFAULT_KERNEL",
    "kernel_family",
]

_SLAB_ELEMENTS = 1 << 19  # entries per slab: about 4 MB of float64, cache-friendly
class Kernel:
    """Base class: subclasses implement ``_from_sqdist`` (a function of squared scaled distance)
    or override ``_block`` entirely.

    Parameters
    ----------
    lengthscale:
        Positive scalar, or one positive value per feature (shape (d,)), in the standard units of
        the scaling where there is one.
    location, scale:
        The scaling (both or neither): per-feature location (finite) and scale (> 0), shape (d,) or
        scalars; the kernel sees (z - location) / scale. ``standardised`` estimates them from data.
        A categorical column's location and scale are 0 and 1 (its codes are compared as they are).
    categorical:
        Indices of the columns that hold category codes (see the module's docstring); default none.
    """

    name: ClassVar[str] = "kernel"
    scalable: ClassVar[bool] = True  # whether a scaling of the inputs means anything to the kernel

    def __init__(self, lengthscale: float | np.ndarray = 1.0, *, location: Any = None, scale: Any = None,
                 categorical: Sequence[int] | None = None):
        # the arguments as given: what get_params returns (scikit-learn's clone checks their identity)
        self._given = {"lengthscale": lengthscale, "location": location, "scale": scale, "categorical": categorical}
        value = check_positive(lengthscale, "lengthscale")
        if value.ndim > 1:
            raise ValueError(f"lengthscale: must be a scalar or a 1-D array, got shape {value.shape}")
        self.lengthscale = float(value) if value.ndim == 0 else value.copy()
        if (location is None) != (scale is None):
            raise ValueError("scale: a scaling needs both location and scale")
        self.location, self.scale = (None, None) if location is None else check_scaling(location, scale)
        if self.scale is not None and np.ndim(self.lengthscale) == 1 and len(self.lengthscale) != len(self.scale):
            raise ValueError(f"lengthscale: has {len(self.lengthscale)} entries but the scaling has {len(self.scale)}")
        self.categorical = check_categorical(categorical, self.lengthscale, self.location, self.scale)

    # -- parameters (scikit-learn's protocol: a kernel is a nested parameter of an estimator) ------
    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor's arguments as they were given, by name (a kernel has no nested parameters,
        so ``deep`` changes nothing)."""
        return dict(self._given)

    def set_params(self, **params: Any) -> "Kernel":
        """This kernel with the named constructor arguments replaced (validated as the constructor does;
        ``ValueError`` for a name it does not take); returns self. A grid over ``kernel_x__lengthscale``
        reaches it through the estimator's ``set_params``."""
        unknown = sorted(set(params) - set(self._given))
        if unknown:
            raise ValueError(f"{unknown[0]}: not a parameter of {type(self).__name__}; it takes "
                             f"{', '.join(self._given)}")
        self.__init__(**{**self._given, **params})
        return self

    # -- public API -----------------------------------------------------------------------------
    def __call__(self, A: Any, B: Any | None = None) -> np.ndarray:
        """Kernel block k(A, B), shape (p, q); B defaults to A."""
        A = self._check(A, "A")
        B = A if B is None else self._check(B, "B")
        if A.shape[1] != B.shape[1]:
            raise ValueError(f"B: has {B.shape[1]} features, A has {A.shape[1]}")
        return self.block(A, B)

    def block(self, A: np.ndarray, B: np.ndarray) -> np.ndarray:
        """Unchecked k(A, B) for float64 arrays of matching width, threaded over row slabs."""
        Bs = self._scale(B)
        if A.shape[0] * B.shape[0] <= _SLAB_ELEMENTS:
            return self._block(self._scale(A), Bs)
        out = np.empty((A.shape[0], B.shape[0]))

        def work(rows: slice) -> None:
            out[rows] = self._block(self._scale(A[rows]), Bs)

        _over_slabs(A.shape[0], B.shape[0], work)
        return out

    def value_and_slope(self, A: np.ndarray, B: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Unchecked k(A, B) and its slope dk/ds in the squared scaled distance s = |(a - b) / l|^2,
        both (p, q), threaded over row slabs. The slope feeds ``distance_gradient``: by the chain
        rule the gradient of sum_ij S_ij k(a_i, b_j) with respect to A is
        ``distance_gradient(A, B, S * slope)``. ``ValueError`` for kernels without a gradient.
        """
        if not self.differentiable:
            raise ValueError(f"kernel: {self.name} is not differentiable; use gaussian, matern32 or matern52")
        Bs = self._scale(B)
        values, slopes = np.empty((A.shape[0], B.shape[0])), np.empty((A.shape[0], B.shape[0]))

        def work(rows: slice) -> None:
            values[rows], slopes[rows] = self._value_and_slope(self._sqdist(self._scale(A[rows]), Bs))

        _over_slabs(A.shape[0], B.shape[0], work)
        return values, slopes

    def distance_gradient(self, A: np.ndarray, B: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """Gradient with respect to A (p, d) of sum_ij weights_ij |(a_i - b_j) / l|^2, B held fixed, l the
        lengthscale in the features' units (``data_lengthscale``): row i is
        2 (a_i sum_j weights_ij - sum_j weights_ij b_j) / l^2, shape (p, d). ``ValueError`` for a kernel
        with categorical columns (codes do not move continuously)."""
        if self.categorical:
            raise ValueError(f"kernel: has categorical columns {list(self.categorical)}; there is no gradient along "
                             "category codes")
        return 2.0 * (weights.sum(axis=1)[:, None] * A - weights @ B) / np.square(self.data_lengthscale)

    differentiable: ClassVar[bool] = False

    def _slope_from_sqdist(self, sq: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def _value_and_slope(self, sq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        slope = self._slope_from_sqdist(sq)
        return self._from_sqdist(sq), slope  # _from_sqdist may overwrite sq

    def diag(self, A: Any) -> np.ndarray:
        """Diagonal k(a_i, a_i), shape (p,). Stationary kernels: all ones."""
        A = self._check(A, "A")
        return np.ones(A.shape[0])

    @property
    def bounds(self) -> tuple[float, float]:
        """Lower and upper bound of k over all pairs of points."""
        return 0.0, 1.0

    @property
    def data_lengthscale(self) -> float | np.ndarray:
        """The lengthscale in the features' own units: lengthscale x scale (the lengthscale itself
        without a scaling); a scalar, or shape (d,)."""
        if self.scale is None:
            return self.lengthscale
        value = self.lengthscale * self.scale
        return float(value[0]) if value.shape == (1,) and np.ndim(self.lengthscale) == 0 else value

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable description (floats kept exactly); ``kernel_from_dict`` inverts it."""
        spec = {"name": self.name, "lengthscale": _json_floats(self.lengthscale)}
        if self.scale is not None:
            spec.update(location=_json_floats(self.location), scale=_json_floats(self.scale))
        if self.categorical:
            spec["categorical"] = list(self.categorical)
        return spec

    def with_lengthscale(self, lengthscale: float | np.ndarray) -> "Kernel":
        """Same kernel family, scaling and categorical columns with another lengthscale."""
        return type(self)(lengthscale, location=self.location, scale=self.scale, categorical=self.categorical)

    def with_scaling(self, location: Any, scale: Any) -> "Kernel":
        """Same kernel family, lengthscale and categorical columns with another scaling (None, None: none)."""
        return type(self)(self.lengthscale, location=location, scale=scale, categorical=self.categorical)

    def standardised(self, Z: Any, names: list[str] | None = None, role: str = "x",
                     constant: str = "refuse") -> "Kernel":
        """This kernel with the robust scaling of the columns of ``Z`` (n, d) (``robust_scaling``:
        median and interquartile range; 0 and 1 for its categorical columns); a constant column is
        refused (``ValueError`` naming it) or, with ``constant="unit"``, given scale 1."""
        return self.with_scaling(*robust_scaling(Z, names, role, categorical=self.categorical, constant=constant))

    def scaled(self, Z: Any, scaling: str, names: list[str] | None = None, role: str = "x",
               constant: str = "refuse") -> "Kernel":
        """The kernel a fit or a tuning uses on the columns of ``Z`` (n, d) under ``scaling``: for "robust",
        this kernel ``standardised`` to them, unless it carries a scaling of its own (kept) or a scaling
        means nothing to it (a delta kernel); for "none", this kernel as it is. ``constant``: see
        ``standardised``."""
        if check_scaling_choice(scaling) == "none" or self.scale is not None or not self.scalable:
            return self
        return self.standardised(Z, names, role, constant)

    def squared_distances(self, A: Any, B: Any | None = None) -> np.ndarray:
        """The squared distances the kernel is a function of, shape (p, q): |(a - b) / l|^2 on the
        standardised continuous columns plus 1 / l_j^2 for each categorical column j where the codes
        differ. B defaults to A."""
        A = self._check(A, "A")
        B = A if B is None else self._check(B, "B")
        return self._sqdist(self._scale(A), self._scale(B))

    def __repr__(self) -> str:
        scaling = "" if self.scale is None else f", location={self.location!r}, scale={self.scale!r}"
        categorical = f", categorical={list(self.categorical)!r}" if self.categorical else ""
        return f"{type(self).__name__}(lengthscale={self.lengthscale!r}{scaling}{categorical})"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self.categorical == other.categorical and all(
            _same(getattr(self, name), getattr(other, name)) for name in ("lengthscale", "location", "scale"))

    __hash__ = None  # type: ignore[assignment]

    # -- internals ------------------------------------------------------------------------------
    def _check(self, A: Any, name: str) -> np.ndarray:
        A = as_samples(A, name)
        for part in ("lengthscale", "scale"):
            value = getattr(self, part)
            broadcast = part == "scale" and np.size(value) == 1  # a scalar scaling serves every feature
            if np.ndim(value) == 1 and len(value) != A.shape[1] and not broadcast:
                raise ValueError(f"{part}: has {len(value)} entries but {name} has {A.shape[1]} features")
        if self.categorical and self.categorical[-1] >= A.shape[1]:
            raise ValueError(f"categorical: column {self.categorical[-1]} is out of range for {name} with "
                             f"{A.shape[1]} features")
        return A

    def standard(self, A: np.ndarray) -> np.ndarray:
        """A (p, d) in the kernel's standard units: (A - location) / scale, or A itself without a scaling."""
        return A if self.scale is None else (A - self.location) / self.scale

    def _scale(self, A: np.ndarray) -> np.ndarray:
        """The kernel's view of A: standardised where there is a scaling, then over the lengthscale;
        categorical columns keep their codes (``_sqdist`` weighs their mismatches). Coordinates are
        capped at +-``FAR`` lengthscales: every kernel is exactly 0 at that distance from anything
        nearer, and the squared distances of points beyond it would overflow to inf and NaN."""
        divisor: Any = self.lengthscale
        if self.categorical:
            divisor = np.broadcast_to(np.asarray(self.lengthscale, dtype=np.float64), (A.shape[1],)).copy()
            divisor[list(self.categorical)] = 1.0
        with np.errstate(over="ignore"):  # an overflow to inf is capped like any other far value
            view = self.standard(A) / divisor
            return np.clip(view, -FAR, FAR, out=view)

    def _sqdist(self, As: np.ndarray, Bs: np.ndarray) -> np.ndarray:
        """Squared distances of rows in the kernel's view (``_scale``), shape (p, q)."""
        if not self.categorical:
            return _squared_distances(As, Bs)
        codes = list(self.categorical)
        continuous = np.setdiff1d(np.arange(As.shape[1]), codes)
        sq = (_squared_distances(As[:, continuous], Bs[:, continuous]) if continuous.size
              else np.zeros((As.shape[0], Bs.shape[0])))
        weights = 1.0 / np.square(np.broadcast_to(np.asarray(self.lengthscale, dtype=np.float64), (As.shape[1],))[codes])
        _add_mismatches(sq, [As[:, column] for column in codes], [Bs[:, column] for column in codes], weights)
        return sq

    def _block(self, As: np.ndarray, Bs: np.ndarray) -> np.ndarray:
        sq = self._sqdist(As, Bs)
        return self._from_sqdist(sq)

    def _from_sqdist(self, sq: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError


def check_categorical(categorical: Sequence[int] | None, lengthscale: float | np.ndarray,
                      location: np.ndarray | None, scale: np.ndarray | None) -> tuple[int, ...]:
    """The categorical column indices as a sorted tuple of distinct ints >= 0 (empty for None), within
    the per-feature lengthscale and scaling where those are vectors, each with location 0 and scale 1
    where there is a scaling. ``ValueError`` naming the rule."""
    if categorical is None:
        return ()
    try:
        columns = [int(c) for c in categorical]
    except (TypeError, ValueError):
        raise ValueError(f"categorical: must be column indices, got {categorical!r}") from None
    if any(c < 0 for c in columns) or len(set(columns)) != len(columns) or any(
            float(c) != float(v) for c, v in zip(columns, categorical)):
        raise ValueError(f"categorical: must be distinct column indices >= 0, got {list(categorical)!r}")
    columns.sort()
    for part, value in (("lengthscale", lengthscale), ("scale", scale)):
        if columns and np.ndim(value) == 1 and np.size(value) > 1 and columns[-1] >= len(value):
            raise ValueError(f"categorical: column {columns[-1]} is out of range for a {part} of {len(value)} entries")
    if scale is not None and columns:
        at = [part[columns] if part.size > 1 else part for part in (location, scale)]
        if np.any(at[0] != 0.0) or np.any(at[1] != 1.0):
            raise ValueError("scale: a categorical column's location and scale must be 0 and 1 (its codes are compared "
                             "as they are)")
    return tuple(columns)


def _json_floats(value: float | np.ndarray) -> float | list[float]:
    """A float or a list of floats (JSON writes each exactly: Python's repr round-trips)."""
    return float(value) if np.ndim(value) == 0 else [float(v) for v in value]


def _same(a: Any, b: Any) -> bool:
    return (a is None) == (b is None) and (a is None or np.array_equal(np.asarray(a), np.asarray(b)))


def _over_slabs(p: int, q: int, work) -> None:
    """Call ``work(rows)`` for slices of range(p) of about _SLAB_ELEMENTS / q rows, on the pool."""
    rows = max(1, _SLAB_ELEMENTS // max(q, 1))
    pool_map(work, [slice(start, min(start + rows, p)) for start in range(0, p, rows)])


def _add_mismatches(sq: np.ndarray, mine: list[np.ndarray], theirs: list[np.ndarray], weights: np.ndarray) -> None:
    """sq (p, q) += weights[c] where mine[c] (p,) and theirs[c] (q,) differ, column c after column c - 1, in
    place: each sum exactly as a masked add gives it (weight * 1 is the weight, and adding weight * 0 leaves
    sq as it is), about twice as fast. The codes are made contiguous first (a strided column broadcast
    against another compared ten times slower), and the mismatches are weighed in slabs of rows of at
    most ``_SLAB_ELEMENTS`` entries, so the buffers stay small beside sq. A weight that is not finite (a
    lengthscale so short that its square's inverse overflows) takes the masked add (inf * 0 is NaN)."""
    p, q = sq.shape
    step = max(1, min(p, _SLAB_ELEMENTS // max(q, 1)))
    mismatch, weighed = np.empty((step, q), dtype=bool), np.empty((step, q))
    for a, b, weight in zip(mine, theirs, weights):
        a, b = np.ascontiguousarray(a)[:, None], np.ascontiguousarray(b)[None, :]
        for start in range(0, p, step):
            rows = slice(start, min(start + step, p))
            unequal = mismatch[: rows.stop - start]
            np.not_equal(a[rows], b, out=unequal)
            if np.isfinite(weight):
                sq[rows] += np.multiply(unequal, weight, out=weighed[: rows.stop - start])
            else:
                np.add(sq[rows], weight, out=sq[rows], where=unequal)


def _squared_distances(As: np.ndarray, Bs: np.ndarray) -> np.ndarray:
    """|a - b|^2 for all pairs, shape (p, q), clipped at 0 against rounding."""
    out = As @ (-2.0 * Bs.T)
    out += np.einsum("ij,ij->i", As, As)[:, None]
    out += np.einsum("ij,ij->i", Bs, Bs)[None, :]
    np.maximum(out, 0.0, out=out)
    return out


class GaussianKernel(Kernel):
    """k(x, x') = exp(-|x - x'|^2 / (2 lengthscale^2))."""

    name = "gaussian"
    differentiable = True

    def _from_sqdist(self, sq: np.ndarray) -> np.ndarray:
        sq *= -0.5
        return np.exp(sq, out=sq)

    def _slope_from_sqdist(self, sq: np.ndarray) -> np.ndarray:
        return -0.5 * np.exp(-0.5 * sq)

    def _value_and_slope(self, sq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        values = self._from_sqdist(sq)
        return values, -0.5 * values


class LaplaceKernel(Kernel):
    """k(x, x') = exp(-|x - x'| / lengthscale)."""

    name = "laplace"

    def _from_sqdist(self, sq: np.ndarray) -> np.ndarray:
        np.sqrt(sq, out=sq)
        sq *= -1.0
        return np.exp(sq, out=sq)


class Matern32Kernel(Kernel):
    """k(x, x') = (1 + sqrt(3) r) exp(-sqrt(3) r), r = |x - x'| / lengthscale."""

    name = "matern32"
    differentiable = True

    def _from_sqdist(self, sq: np.ndarray) -> np.ndarray:
        r = np.sqrt(sq, out=sq)
        r *= np.sqrt(3.0)
        return (1.0 + r) * np.exp(-r)

    def _slope_from_sqdist(self, sq: np.ndarray) -> np.ndarray:
        # dk/dr = -3 r exp(-sqrt(3) r) and ds/dr = 2 r: finite at r = 0
        return -1.5 * np.exp(-np.sqrt(3.0 * sq))


class Matern52Kernel(Kernel):
    """k(x, x') = (1 + sqrt(5) r + 5 r^2 / 3) exp(-sqrt(5) r), r = |x - x'| / lengthscale."""

    name = "matern52"
    differentiable = True

    def _from_sqdist(self, sq: np.ndarray) -> np.ndarray:
        r = np.sqrt(sq)
        r *= np.sqrt(5.0)
        sq *= 5.0 / 3.0
        sq += 1.0
        sq += r
        np.negative(r, out=r)
        np.exp(r, out=r)
        sq *= r
        return sq

    def _slope_from_sqdist(self, sq: np.ndarray) -> np.ndarray:
        # dk/dr = -(5/3) r (1 + sqrt(5) r) exp(-sqrt(5) r) and ds/dr = 2 r
        r5 = np.sqrt(5.0 * sq)
        return -(5.0 / 6.0) * (1.0 + r5) * np.exp(-r5)


class DeltaKernel(Kernel):
    """k(x, x') = 1 if x == x' (every feature equal) else 0: the kernel of a discrete variable.

    The lengthscale is irrelevant and fixed at 1.
    """

    name = "delta"
    scalable = False

    def __init__(self, lengthscale: float | np.ndarray = 1.0, *, location: Any = None, scale: Any = None,
                 categorical: Sequence[int] | None = None):
        super().__init__(1.0)  # levels are compared as they are: no lengthscale, no scaling, every column a level
        self._given = {}  # no parameters

    def with_lengthscale(self, lengthscale: float | np.ndarray) -> "Kernel":
        return DeltaKernel()

    def with_scaling(self, location: Any, scale: Any) -> "Kernel":
        return DeltaKernel()

    def _scale(self, A: np.ndarray) -> np.ndarray:
        return A

    def _block(self, As: np.ndarray, Bs: np.ndarray) -> np.ndarray:
        equal = np.ones((As.shape[0], Bs.shape[0]), dtype=bool)
        for column in range(As.shape[1]):
            equal &= As[:, column, None] == Bs[None, :, column]
        return equal.astype(np.float64)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name}

    def __repr__(self) -> str:
        return "DeltaKernel()"


_KERNELS: dict[str, type[Kernel]] = {
    cls.name: cls for cls in (GaussianKernel, LaplaceKernel, Matern32Kernel, Matern52Kernel, DeltaKernel)
}


# the kernel families of a lengthscale (those a tuning searches; the delta kernel has none)
LENGTHSCALE_KERNELS = tuple(name for name in _KERNELS if name != "delta")
DEFAULT_KERNEL = GaussianKernel.name  # of an estimator given no kernel, and of a fit given no family


def kernel_family(name: str) -> type[Kernel]:
    """The kernel class of a family of ``LENGTHSCALE_KERNELS`` by name; ``ValueError`` naming the choices."""
    if name not in LENGTHSCALE_KERNELS:
        raise ValueError(f"kernel: unknown family {name!r}; choose one of {', '.join(LENGTHSCALE_KERNELS)}")
    return _KERNELS[name]


def kernel_from_dict(spec: dict[str, Any]) -> Kernel:
    """Rebuild a kernel from ``Kernel.to_dict()``; unknown names raise ``ValueError``."""
    name = spec.get("name") if isinstance(spec, dict) else None
    if name not in _KERNELS:
        raise ValueError(f"kernel: unknown name {name!r}; choose one of {', '.join(sorted(_KERNELS))}")
    if name == "delta":
        return DeltaKernel()
    lengthscale = spec.get("lengthscale", 1.0)
    return _KERNELS[name](np.asarray(lengthscale, dtype=np.float64) if isinstance(lengthscale, list) else lengthscale,
                          location=spec.get("location"), scale=spec.get("scale"), categorical=spec.get("categorical"))


def median_heuristic(X: Any, *, per_feature: bool = False, max_points: int = 2000, seed: int = 0,
                     kernel: Kernel | None = None, ties: str = "raise") -> float | np.ndarray:
    """Median pairwise Euclidean distance of (a seeded subsample of) X, a common lengthscale choice;
    with ``kernel``, the distance as that kernel sees it at lengthscale 1 (its scaling applied, a
    categorical mismatch counting 1: ``Kernel.squared_distances``).

    With ``per_feature=True`` returns one median absolute difference per column (shape (d,)).
    Where the median is 0 (half the pairs or more tied: constant or mostly duplicated data, such as one
    binary column, or a y that is 0 on three rows in four), ``ties`` "raise" (the default) raises
    ``ValueError``, and "distinct" returns the median over the pairs of distinct rows instead (raising
    only where there are none).
    """
    X = as_samples(X, "X", min_rows=2)
    rng = np.random.default_rng(seed)
    if X.shape[0] > max_points:
        X = X[rng.choice(X.shape[0], max_points, replace=False)]
    upper = np.triu_indices(X.shape[0], k=1)
    if per_feature:
        medians = np.array([np.median(np.abs(col[:, None] - col[None, :])[upper]) for col in X.T])
        if np.any(medians <= 0):
            raise ValueError(f"X: median pairwise difference is 0 in column(s) {np.flatnonzero(medians <= 0).tolist()}")
        return medians
    if ties not in ("raise", "distinct"):
        raise ValueError(f"ties: must be 'raise' or 'distinct', got {ties!r}")
    squared = _squared_distances(X, X) if kernel is None else kernel.with_lengthscale(1.0).squared_distances(X)
    distances = np.sqrt(squared[upper])
    median = float(np.median(distances))
    if median <= 0 and ties == "distinct" and np.any(distances > 0):
        median = float(np.median(distances[distances > 0]))
    if median <= 0:
        raise ValueError("X: median pairwise distance is 0 (constant or mostly duplicated rows)")
    return median
