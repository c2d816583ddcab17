"""Greedy JDL for a discrete X (Lahjouji 2022, "A greedy approach to joint distribution learning").

Setting. X takes D classes; with the delta kernel on X every h in H_X (x) H_Y is h(i, y) =
Psi_Y(y) h_i, one coefficient vector h_i (m_Y,) per class, Psi_Y the double-orthogonal Y basis
(values A_Y at the atoms, computed through the kernel as the fitted model's queries recompute them;
Lambda_Y = diag(A_Y^T A_Y)). The class indicators are the delta kernel's double-orthogonal basis,
so the model is a JDL whose X basis is the one-hot map (``ClassBasis``) and whose coefficients are
H = [h_1 ... h_D] (m_Y x D, ascending class order). With class counts n_i, a_i = A_Y^T 1[class i]
and s_Y = A_Y^T 1, JDL's empirical risk (paper (14)/(22), jdlcore's scaling) separates by class:

    R(H) = sum_i r_i(h_i),  r_i(h) = (n_i/n^2) h^T Lambda_Y h - (2/n) a_i^T h + (2 n_i/n^2) s_Y^T h + reg |h|^2,

i.e. (n^2/2) r_i(h) = 1/2 h^T D_i h - g_i^T h with D_i = n_i Lambda_Y + n^2 reg, g_i = n a_i - n_i s_Y.

Greedy steps. The classes are solved one after another (``class_order``). With P_i = n_i/n,
v_i = (1/n_i) sum_{i' before i} n_i' h_i' and c_i = (n - sum_{i' up to i} n_i') / n_i, step i solves

    min r_i(h)  s.t.  s_Y^T h = 0                        (the class conditional has mass 1)
                      1 + Psi_Y(y) h >= 0                (positivity)
                      Psi_Y(y) (v_i + h) <= c_i          (the running sum sum_{i'<=i} P_i'(1 + h_i'(y)) <= 1)

for all y: at every training atom (``positivity="atoms"``) or over the thesis's box (``"cube"``);
``solve_class_step`` states how a step is solved and why it is always feasible. At the last class
the running sum is 1 at every atom, so JDL's Y-marginal constraint holds too.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..kernels import DeltaKernel, Kernel, kernel_from_dict
from ..lowrank.basis import JDLReductions, SpectralBasis, spectral_basis
from ..lowrank.cholesky import DEFAULT_TOL, FACTORISATION_PARAMS, Factorisation, pivoted_cholesky
from ..params import Choice, Number, Param, Rule
from ..scaling import DEFAULT_SCALING
from ..solvers.active_set import ProjectionQP
from ..validation import as_samples, check_choice, check_paired
from .estimator import SCALING_PARAMS
from .jdl import JDL, SUPPORT_PARAMS
from .problem import JDLProblem

__all__ = [
    "ClassBasis", "GreedyJDL", "ClassStep", "build_class_problem", "class_objective", "solve_class_step",
    "class_order_indices", "GREEDY_POSITIVITY", "GREEDY_BOUNDS", "CLASS_ORDERS",
]

GREEDY_POSITIVITY = ("atoms", "cube")
GREEDY_BOUNDS = ("sample", "global")
CLASS_ORDERS = ("sorted", "frequency")


# -- the X basis: class indicators --------------------------------------------------------------------
@dataclass
class ClassBasis:
    """The double-orthogonal basis of the delta kernel on a finite X: the class indicators.

    classes: (D,) float64, sorted distinct training labels; counts: (D,) float64 class counts n_i.
    e_i(x) = 1[x == classes[i]] is orthonormal in the delta kernel's RKHS and has empirical squared
    norm n_i, so ``eigenvalues`` = counts and ``coefficients`` = I (``raw`` is already the basis).
    """

    classes: np.ndarray
    counts: np.ndarray

    def __post_init__(self) -> None:
        self.classes = np.asarray(self.classes, dtype=np.float64).ravel()
        self.counts = np.asarray(self.counts, dtype=np.float64).ravel()
        if self.classes.shape != self.counts.shape:
            raise ValueError(f"state: class basis has {self.classes.size} classes and {self.counts.size} counts")
        if self.classes.size and np.any(np.diff(self.classes) <= 0):
            raise ValueError("state: class basis classes must be strictly increasing")
        self._identity = np.eye(self.classes.size)

    @property
    def size(self) -> int:
        return int(self.classes.size)

    @property
    def width(self) -> int:
        return 1

    @property
    def eigenvalues(self) -> np.ndarray:
        return self.counts

    @property
    def coefficients(self) -> np.ndarray:
        return self._identity

    def spec(self) -> dict[str, Any]:
        """The delta kernel's JSON: the class indicators are its double-orthogonal basis."""
        return DeltaKernel().to_dict()

    def describe(self) -> str:
        return "delta on classes " + ", ".join(f"{c:g}" for c in self.classes)

    def smoothing_scale(self, component: int = 0) -> float:
        """Half the smallest gap between classes (1 for a single class)."""
        return float(np.diff(self.classes).min()) / 2.0 if self.size > 1 else 1.0

    def slice_points(self, n_slices: int) -> np.ndarray:
        """Every class, (D, 1), whatever ``n_slices``."""
        return self.classes[:, None].copy()

    def index(self, Z: np.ndarray) -> np.ndarray:
        """Class index (q,) of labels Z (q, 1); unseen labels raise ``ValueError``."""
        labels = np.asarray(Z, dtype=np.float64).reshape(-1)
        position = np.searchsorted(self.classes, labels)
        clipped = np.minimum(position, self.size - 1)
        unseen = self.classes[clipped] != labels
        if np.any(unseen):
            bad = float(labels[np.flatnonzero(unseen)[0]])
            raise ValueError(f"Xq: class {bad!r} was not seen in training; known classes: "
                             f"{[float(c) for c in self.classes]}")
        return clipped

    def raw(self, Z: np.ndarray) -> np.ndarray:
        """One-hot (q, D) of labels Z (q, 1)."""
        index = self.index(Z)
        out = np.zeros((index.size, self.size))
        out[np.arange(index.size), index] = 1.0
        return out

    def features(self, Z: np.ndarray) -> np.ndarray:
        return self.raw(Z) @ self.coefficients

    def ranges(self) -> tuple[np.ndarray, np.ndarray]:
        return np.zeros(self.size), np.ones(self.size)

    def to_arrays(self, side: str) -> dict[str, np.ndarray]:
        return {f"{side}_classes": self.classes, f"{side}_counts": self.counts}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], side: str) -> "ClassBasis":
        return cls(arrays[f"{side}_classes"], arrays[f"{side}_counts"])


def build_class_problem(
    labels: np.ndarray,
    Y: np.ndarray,
    kernel_y: Kernel,
    factorisation: Factorisation = Factorisation(),
) -> JDLProblem:
    """The JDL problem with the class basis on X: pivoted Cholesky of K_Y only, and the reductions.

    labels (n, 1), Y (n, d_y), validated. A_x is not materialised (None); cross = [a_1 ... a_D]; the
    reductions are sums over A_y = Psi_Y(Y) (Lambda_Y = diag(A_y^T A_y)).
    """
    started = time.perf_counter()
    classes, inverse, counts = np.unique(labels[:, 0], return_inverse=True, return_counts=True)
    inverse = inverse.reshape(-1)
    n, D = labels.shape[0], classes.size
    factor = pivoted_cholesky(kernel_y, Y, **factorisation.cholesky_arguments())
    basis_y = spectral_basis(factor, kernel_y)
    # The basis values through the kernel, Psi_Y(y_j) = k(y_j, pivots) @ coefficients, exactly what the
    # fitted model's queries recompute (``Atoms``), rather than the factor's L V (equal up to rounding,
    # which grows with the conditioning of the pivot block): the constraints then hold for the weights
    # the model answers with.
    A_y = basis_y.features(Y)
    basis_x = ClassBasis(classes, counts.astype(np.float64))
    cross = np.stack([np.bincount(inverse, weights=A_y[:, j], minlength=D) for j in range(A_y.shape[1])])
    reductions = JDLReductions(
        n=n, lam_x=basis_x.counts.copy(), lam_y=np.einsum("ij,ij->j", A_y, A_y), cross=cross,
        sum_x=basis_x.counts.copy(), sum_y=A_y.sum(axis=0),
        min_x=np.zeros(D), max_x=np.ones(D), min_y=A_y.min(axis=0), max_y=A_y.max(axis=0),
    )
    first = np.array([int(np.argmax(inverse == k)) for k in range(D)], dtype=np.int64)
    trace_x = np.concatenate([[float(n)], float(n) - np.cumsum(counts).astype(np.float64)])
    factors = {
        "rank_x": D, "rank_y": factor.rank, "trace_error_x": trace_x, "trace_error_y": factor.trace_error,
        "relative_error_x": 0.0, "relative_error_y": factor.relative_error,
        "stop_reason_x": "classes", "stop_reason_y": factor.stop_reason,
        "pivots_x": first, "pivots_y": factor.pivots, "factor_seconds": time.perf_counter() - started,
    }
    return JDLProblem(basis_x, basis_y, None, A_y, reductions, factors)


# -- one greedy step -----------------------------------------------------------------------------------
def class_objective(h: np.ndarray, lam_y: np.ndarray, a_i: np.ndarray, s_y: np.ndarray, n: int, n_i: float,
                    reg: float) -> float:
    """r_i(h) = (n_i/n^2) h^T Lambda_Y h - (2/n) a_i^T h + (2 n_i/n^2) s_Y^T h + reg |h|^2."""
    return float(n_i / n**2 * np.sum(lam_y * h * h) - 2.0 / n * (a_i @ h) + 2.0 * n_i / n**2 * (s_y @ h)
                 + reg * (h @ h))


@dataclass
class ClassStep:
    """Result of one greedy step: h (m_Y,), cutting-plane rounds, pooled cuts, active cuts at the
    end, Goldfarb-Idnani iterations, seconds, and the largest remaining violation (<= feasibility_tol)
    of positivity and of the running bound (in the units of 1 + h and of c)."""

    h: np.ndarray
    rounds: int
    cuts: int
    active: int
    iterations: int
    seconds: float
    positivity_violation: float
    running_violation: float


def solve_class_step(
    lam_y: np.ndarray,
    a_i: np.ndarray,
    s_y: np.ndarray,
    n: int,
    n_i: float,
    reg: float,
    v: np.ndarray,
    c: float,
    *,
    positivity: str = "atoms",
    A_y: np.ndarray | None = None,
    bounds: tuple[np.ndarray, np.ndarray] | None = None,
    feasibility_tol: float = 1e-11,
    max_new: int = 128,
    max_rounds: int = 2000,
    label: Any = None,
) -> ClassStep:
    """Minimise r_i(h) s.t. s_Y^T h = 0, 1 + psi h >= 0 and psi (v + h) <= c for all psi in the
    family: the rows of ``A_y`` (``positivity="atoms"``) or the box ``bounds`` = (a, b) ("cube").

    "For all psi" reads "for all y": at every training atom y_j (``positivity="atoms"``: exact where the model's
    weights live) or over the thesis's box a <= Psi_Y(y) <= b (``positivity="cube"``: min over the box
    vertices for positivity, max for the running bound; ``bounds="sample"`` takes the column extremes
    of A_Y, ``bounds="global"`` the whole-domain bounds of a bounded kernel, ``SpectralBasis.ranges``).
    The box form is the LP over h = w+ - w-, written as its vertex cuts.

    Each step is a diagonal QP with one equality and linear cuts, solved by cutting planes on the
    Goldfarb-Idnani ``ProjectionQP``: atoms add the most violated atoms of each family per round, the
    box adds its most violated vertex (a_j or b_j per coordinate by the sign), until no cut is violated
    beyond ``feasibility_tol``. h_i = -v_i / (c_i + 1) is always feasible (by induction from the
    previous step's running bound), so a solver failure is a bug and raises ``RuntimeError``.
    At the last class c_D = 0: the running sum is then 1 at every atom, for both variants (both boxes
    contain every atom's Psi_Y, and its mean over the atoms is 1), so JDL's Y-marginal constraint holds
    too. Tolerances: the cuts close at ``feasibility_tol`` (1e-11, in the units of 1 + h and of c_i);
    no margin is used, since the last step's feasible set can be a single point (h_D = -v_D).

    Raises ``RuntimeError`` (naming ``label`` and the round) when the QP fails or does not close
    within ``max_rounds``: with a feasible v, c (see the module docstring) that is a bug.
    """
    started = time.perf_counter()
    if positivity == "atoms":
        if A_y is None:
            raise ValueError("positivity: 'atoms' needs the basis values A_y at the atoms")
        Av = A_y @ v
    elif positivity == "cube":
        if bounds is None:
            raise ValueError("positivity: 'cube' needs the box bounds (a, b) of the basis")
        low, high = (np.asarray(b, dtype=np.float64) for b in bounds)
    else:
        raise ValueError(f"positivity: unknown value {positivity!r}; choose one of 'atoms', 'cube'")
    D = n_i * lam_y + float(n) ** 2 * reg
    g = n * a_i - n_i * s_y
    qp = ProjectionQP(D, g, equality=s_y, tol=feasibility_tol * 1e-2)
    cuts = 0
    rounds = 0
    while True:
        h = qp.h
        if positivity == "atoms":
            normals, beta, pos_worst, run_worst = _atom_cuts(A_y, Av, h, c, feasibility_tol, max_new)
        else:
            normals, beta, pos_worst, run_worst = _box_cuts(low, high, v, h, c, feasibility_tol)
        if normals is None:
            break
        rounds += 1
        if rounds > max_rounds:
            raise RuntimeError(
                f"greedy JDL: the QP of class {label} did not close within max_rounds={max_rounds} cutting-plane "
                f"rounds (violations: positivity {pos_worst:.3e}, running bound {run_worst:.3e}); this is a bug"
            )
        try:
            qp.prune()
            qp.add(normals, beta)
            qp.solve()
        except RuntimeError as error:
            raise RuntimeError(
                f"greedy JDL: the QP of class {label} failed in cutting-plane round {rounds} ({error}); "
                f"h = -v/(c + 1) is feasible, so this is a bug"
            ) from error
        cuts += normals.shape[0]
    active = int(np.sum(qp.multipliers() > 0))
    return ClassStep(h.copy(), rounds, cuts, active, qp.iterations, time.perf_counter() - started,
                     max(pos_worst, 0.0), max(run_worst, 0.0))


def _atom_cuts(A_y: np.ndarray, Av: np.ndarray, h: np.ndarray, c: float, feasibility_tol: float,
               max_new: int) -> tuple[np.ndarray | None, np.ndarray | None, float, float]:
    """The cuts of one round at the atoms: (normals (k, m_Y), beta (k,)) for the ``max_new`` most violated
    atoms of positivity (1 + A_y h >= 0) and of the running bound (A_y (v + h) <= c, Av = A_y v), or
    (None, None) when none is violated beyond ``feasibility_tol``; then the largest violations of each."""
    values = A_y @ h
    pos_slack = 1.0 + values  # >= 0 wanted
    run_slack = c - (Av + values)  # >= 0 wanted
    pos_bad = np.flatnonzero(pos_slack < -feasibility_tol)
    run_bad = np.flatnonzero(run_slack < -feasibility_tol)
    pos_worst = -float(pos_slack.min())
    run_worst = -float(run_slack.min())
    if pos_bad.size == 0 and run_bad.size == 0:
        return None, None, pos_worst, run_worst
    pos_bad = _most_violated(pos_bad, pos_slack, max_new)
    run_bad = _most_violated(run_bad, run_slack, max_new)
    normals = np.vstack([A_y[pos_bad], -A_y[run_bad]])
    beta = np.concatenate([np.ones(pos_bad.size), c - Av[run_bad]])
    return normals, beta, pos_worst, run_worst


def _box_cuts(low: np.ndarray, high: np.ndarray, v: np.ndarray, h: np.ndarray, c: float,
              feasibility_tol: float) -> tuple[np.ndarray | None, np.ndarray | None, float, float]:
    """The cuts of one round on the box low <= psi <= high: the vertex minimising 1 + psi h (positivity)
    and the one maximising psi (v + h) (the running bound), each where violated beyond
    ``feasibility_tol``, as (normals (k, m_Y), beta (k,)), or (None, None); then the two violations."""
    low_vertex = np.where(h > 0, low, high)  # argmin over the box of x^T h
    w = v + h
    high_vertex = np.where(w > 0, high, low)  # argmax over the box of x^T (v + h)
    pos_worst = -(1.0 + float(low_vertex @ h))
    run_worst = float(high_vertex @ w) - c
    new_normals, new_beta = [], []
    if pos_worst > feasibility_tol:
        new_normals.append(low_vertex)
        new_beta.append(1.0)
    if run_worst > feasibility_tol:
        new_normals.append(-high_vertex)
        new_beta.append(c - float(high_vertex @ v))
    if not new_normals:
        return None, None, pos_worst, run_worst
    return np.vstack(new_normals), np.asarray(new_beta), pos_worst, run_worst


def _most_violated(bad: np.ndarray, slack: np.ndarray, count: int) -> np.ndarray:
    """The ``count`` entries of ``bad`` with the smallest slack, most violated first."""
    if bad.size > count:
        bad = bad[np.argpartition(slack[bad], count - 1)[:count]]
    return bad[np.argsort(slack[bad], kind="stable")]


def class_order_indices(order: Any, classes: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Indices into ``classes`` (sorted) in solving order: "sorted", "frequency" (descending counts,
    ties by ascending value) or an explicit sequence of class values (a permutation of the classes)."""
    if isinstance(order, str):
        check_choice(order, "class_order", CLASS_ORDERS)
        if order == "sorted":
            return np.arange(classes.size)
        return np.lexsort((classes, -np.asarray(counts, dtype=np.float64)))
    values = _order_values(order)
    position = np.searchsorted(classes, values)
    clipped = np.minimum(position, classes.size - 1)
    unknown = values[classes[clipped] != values]
    if unknown.size:
        raise ValueError(f"class_order: class {float(unknown[0])!r} was not seen in training; "
                         f"known classes: {[float(c) for c in classes]}")
    if np.unique(values).size != values.size:
        duplicated = values[np.flatnonzero(np.bincount(clipped, minlength=classes.size)[clipped] > 1)[0]]
        raise ValueError(f"class_order: class {float(duplicated)!r} appears more than once")
    missing = np.setdiff1d(classes, values)
    if missing.size:
        raise ValueError(f"class_order: misses class(es) {[float(c) for c in missing]}; "
                         f"give every training class once ({[float(c) for c in classes]})")
    return clipped


class ClassOrder(Rule):
    """The rule of ``class_order``: one of ``CLASS_ORDERS`` or a 1-D sequence of finite class values."""

    text = "must be 'sorted', 'frequency' or a 1-D sequence of finite class values"

    def _meets(self, order: Any) -> bool:
        if isinstance(order, str):
            return order in CLASS_ORDERS
        try:
            _order_values(order)
        except ValueError:
            return False
        return True

    def message(self, value: Any) -> str:
        return Choice(CLASS_ORDERS).message(value) if isinstance(value, str) else super().message(value)


def _order_values(order: Any) -> np.ndarray:
    try:
        values = np.asarray(order, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"class_order: must be 'sorted', 'frequency' or a sequence of class values, "
                         f"got {order!r}") from None
    if values.ndim != 1 or values.size == 0 or not np.all(np.isfinite(values)):
        raise ValueError(f"class_order: must be 'sorted', 'frequency' or a 1-D sequence of finite class values, "
                         f"got {order!r}")
    return values


# -- the estimator -------------------------------------------------------------------------------------
class GreedyJDL(JDL):
    """Greedy JDL for a discrete X (delta kernel on X), a JDL whose X basis is the class one-hot map.

    Parameters
    ----------
    kernel_y: kernel on Y (default Gaussian with lengthscale 1).
    reg: lambda of the regularised loss (8), > 0.
    tol: relative tolerance of the pivoted Cholesky decomposition of K_Y.
    positivity: "atoms" (default; positivity and the running bound at every training atom) or
        "cube" (the thesis's box relaxation with ``bounds``).
    bounds: box of the "cube" variant: "sample" (column extremes of A_Y, the thesis's choice) or
        "global" (whole-domain bounds of a bounded kernel: the guarantees hold at every y).
    class_order: "sorted" (ascending class value), "frequency" (descending counts, ties by value) or
        an explicit sequence of every training class value.
    pivoting, max_rank, seed, block_size: of the pivoted Cholesky decomposition of K_Y.
    scaling: how the y kernel's inputs are standardised, as for ``JDL`` (default "robust").
    support_size: M, the support atoms of the Y marginal the conditional laws live on (``JDL``).

    ``fit(labels, Y)``; queries take class labels Xq (q,) or (q, 1); unseen classes raise
    ``ValueError``. ``diagnostics_`` adds, in solving order: ``class_order`` (values),
    ``qp_rounds``, ``qp_cuts``, ``qp_active``, ``running_max`` (max over atoms of
    sum_{i'<=i} P_i'(1 + h_i'(y_j)) after each step), ``running_violation`` (max(0, running_max - 1)),
    ``step_seconds``, and ``greedy_seconds``, ``min_density`` (min over classes and atoms of 1 + h).
    """

    method = "greedy"
    summary = "greedy JDL for a discrete x (x holds class labels)"
    positivity_rules = GREEDY_POSITIVITY
    fits_from_reductions = False
    bases = ("classes", "spectral")
    KERNELS = ("kernel_y",)
    parameters = {
        "reg": Param(Number(low=0, low_open=True), "regularisation lambda of the loss"),
        **FACTORISATION_PARAMS,
        "positivity": Param(Choice(GREEDY_POSITIVITY), "atoms: positive at every training atom; cube: a box "
                            "relaxation", option=True),
        "bounds": Param(Choice(GREEDY_BOUNDS), "the box of the cube variant: sample | global"),
        "class_order": Param(ClassOrder(), "the order in which the classes are solved"),
        "support_size": SUPPORT_PARAMS["support_size"],
        **SCALING_PARAMS,
    }

    def __init__(
        self,
        kernel_y: Kernel | None = None,
        *,
        reg: float = 1e-3,
        tol: float = DEFAULT_TOL,
        positivity: str = "atoms",
        bounds: str = "sample",
        class_order: str | Sequence[float] = "sorted",
        pivoting: str = "random",
        max_rank: int | None = None,
        seed: int | None = 0,
        block_size: int | None = None,
        support_size: int | None = None,
        scaling: str = DEFAULT_SCALING,
    ):
        self._keep_params(locals())

    # The X side is the delta kernel's class basis. JDL's switches (clips, uses_grid, uses_tightening)
    # are False for the greedy positivity rules "atoms" and "cube".
    kernel_x = None
    constraints = "positivity"

    def fit(self, labels: Any, Y: Any) -> "GreedyJDL":
        """Fit on class labels (n,) or (n, 1) (numeric, at least 2 classes) and paired Y (n, d_y)."""
        self.check_params()
        self._note_inputs(labels, Y)
        labels = as_samples(labels, "labels", min_rows=2)
        if labels.shape[1] != 1:
            raise ValueError(f"labels: must be one column of class labels, shape (n,) or (n, 1), got {labels.shape}")
        Y = as_samples(Y, "Y", min_rows=2)
        check_paired(labels, Y, "labels", "Y")
        classes, counts = np.unique(labels[:, 0], return_counts=True)
        if classes.size < 2:
            raise ValueError(f"labels: need at least 2 classes, got 1 (every label is {float(classes[0])!r})")
        class_order_indices(self.class_order, classes, counts)  # fail before the factorisation
        problem = build_class_problem(labels, Y, self._scaled_kernel("kernel_y", Y), Factorisation.of(self))
        return self.fit_problem(problem, Y)

    def _solve(self, problem: JDLProblem, reg: float) -> tuple[np.ndarray, dict[str, Any]]:
        """The greedy steps; H (m_Y, D) in ascending class order and the diagnostics."""
        basis = problem.basis_x
        if not isinstance(basis, ClassBasis):
            raise ValueError("problem: GreedyJDL needs a problem with the class basis on X (build_class_problem)")
        red = problem.reductions
        A_y = problem.A_y
        if self.positivity == "atoms" and A_y is None:
            raise ValueError("positivity: 'atoms' needs the basis values A_y of the problem, which were not kept")
        bounds = None
        if self.positivity == "cube":
            bounds = (red.min_y, red.max_y) if self.bounds == "sample" else problem.basis_y.ranges()
            if not all(np.all(np.isfinite(b)) for b in bounds):
                raise ValueError(f"bounds: {self.bounds!r} bounds of the Y basis are not finite")
        started = time.perf_counter()
        order = class_order_indices(self.class_order, basis.classes, basis.counts)
        n = int(red.n)
        counts = np.rint(basis.counts).astype(np.int64)
        m_y = red.lam_y.size
        H = np.zeros((m_y, basis.size))
        S = np.zeros(m_y)  # sum_{i' solved} n_i' h_i'
        cumulative = 0
        info: dict[str, list] = {"qp_rounds": [], "qp_cuts": [], "qp_active": [], "running_max": [],
                                 "running_violation": [], "step_seconds": []}
        min_density = np.inf
        for step, k in enumerate(order):
            n_i = int(counts[k])
            cumulative += n_i
            v = S / n_i
            c = (n - cumulative) / n_i
            label = f"{float(basis.classes[k])!r} (step {step + 1} of {basis.size})"
            result = solve_class_step(
                red.lam_y, red.cross[:, k], red.sum_y, n, n_i, reg, v, c, positivity=self.positivity,
                A_y=A_y, bounds=bounds, label=label,
            )
            H[:, k] = result.h
            S = S + n_i * result.h
            info["qp_rounds"].append(result.rounds)
            info["qp_cuts"].append(result.cuts)
            info["qp_active"].append(result.active)
            info["step_seconds"].append(result.seconds)
            if A_y is not None:
                running = float((cumulative + np.max(A_y @ S)) / n)
                min_density = min(min_density, float(1.0 + np.min(A_y @ result.h)))
            else:
                running = float("nan")
            info["running_max"].append(running)
            info["running_violation"].append(max(0.0, running - 1.0) if np.isfinite(running) else running)
        return H, {
            **info,
            "class_order": [float(basis.classes[k]) for k in order],
            "greedy_seconds": time.perf_counter() - started,
            "min_density": min_density if np.isfinite(min_density) else float("nan"),
        }

    # -- fitted views ------------------------------------------------------------------------------
    @property
    def x_classes_(self) -> np.ndarray:
        """The training classes of X, ascending (the columns of ``coef_``)."""
        self._fitted()
        return self.basis_x_.classes

    @property
    def x_counts_(self) -> np.ndarray:
        self._fitted()
        return self.basis_x_.counts

    # -- state -------------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        state = super().state()
        order = state["params"]["class_order"]
        if not isinstance(order, str):
            state["params"]["class_order"] = [float(c) for c in np.asarray(order, dtype=np.float64).ravel()]
        return state

    @classmethod
    def _from_params(cls, state: dict[str, Any]) -> "GreedyJDL":
        if kernel_from_dict(state["kernel_x"]).name != "delta":
            raise ValueError(f"state: GreedyJDL needs the delta kernel on X, got {state['kernel_x']!r}")
        return cls(kernel_y=kernel_from_dict(state["kernel_y"]), **state["params"])

    @classmethod
    def _basis_from_state(cls, side: str, arrays: dict[str, np.ndarray], state: dict[str, Any]) -> Any:
        if side == "x":
            return ClassBasis.from_arrays(arrays, side)
        return SpectralBasis.from_arrays(kernel_from_dict(state[f"kernel_{side}"]), arrays, side)
