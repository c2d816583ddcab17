"""Compress n labelled samples to m points whose conditional mean embedding matches the data's
(Broadbent, Whiteley, Allison & Lovett): ACKIP, ACKH, JKIP, JKH and a random-subsample baseline.

- KIP methods (``ackip``, ``jkip``) move all m points at once (Algs. 3, 4): the start is the best of
  ``n_init`` random subsets of the data, then ``steps`` Adam steps (or L-BFGS iterations) on the
  analytic gradient of the whole-set objective.
- Herding methods (``ackh``, ``jkh``) add one point at a time (Algs. 1, 2): the best of ``n_init``
  random data pairs as seed, then ``steps`` Adam steps (or L-BFGS iterations) on that point only.
  They minimise the same set objective over the newest point, which is the paper's eq. 9 (ACKH)
  exactly and eq. 12 (JKH) up to a positive affine map. The cost per step is O(m^2 n) for both,
  the paper's order for ACKH and a factor m above its O(m n) for JKH.
- A discrete y (``kernel_y`` a ``DeltaKernel``) keeps its labels among the data's classes: after
  each pass the labels move to their exact best class one at a time (App. B.11), and only x moves
  by gradient.

Every evaluation is one chunked pass over the data (``SampleSource.reduce``), so the work is
O(m^3 + m^2 n) per step and linear in n. The returned set is the best one seen (Adam is not
monotone); ``CompressionResult.trace`` holds the objective at every evaluation of the descent
(KIP) or after each herded point.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..kernels import DeltaKernel, GaussianKernel, Kernel, median_heuristic
from ..validation import check_choice, check_positive
from .objectives import SetObjective, label_objective, make_objective, search_labels
from .optimizers import Adam, minimise_lbfgs
from .regularisation import select_reg
from .sources import ArraySource, SampleSource

__all__ = ["METHODS", "OPTIMIZERS", "LEARNING_RATE", "N_INIT", "CompressionResult", "compress", "run_compression", "default_kernel",
           "check_settings"]

LEARNING_RATE = 0.01  # Adam's step, in standard deviations of each column of the data
N_INIT = 10  # random starts compared

METHODS = ("ackip", "ackh", "jkip", "jkh", "random")
OPTIMIZERS = ("adam", "lbfgs")
DEFAULT_STEPS = {"ackip": 500, "jkip": 500, "ackh": 50, "jkh": 50, "random": 0}
_LABEL_ROUND = 20  # L-BFGS iterations between label searches for a discrete y


@dataclass
class CompressionResult:
    """A compressed set and how it was made.

    X (m, d_x), Y (m, d_y): the compressed points. objective: "ackip" or "jkip", the objective the
    method minimises ("ackip" is also reported for "random"). value: that objective at (X, Y);
    initial_value: at the starting subset (KIP) or the first herded point. trace (steps + 1,) or (m,).
    seconds: wall time. settings: method, m, n, reg, seed, steps, optimizer, learning_rate, n_init,
    kernel_x and kernel_y (as ``Kernel.to_dict``).
    """

    X: np.ndarray
    Y: np.ndarray
    objective: str
    value: float
    initial_value: float
    trace: np.ndarray
    seconds: float
    settings: dict[str, Any] = field(default_factory=dict)


def default_kernel(Z: np.ndarray) -> GaussianKernel:
    """The paper's median heuristic (App. C): k(z, z') = exp(-|z - z'|^2 / H) with H the median squared
    pairwise distance, i.e. a Gaussian kernel of lengthscale median distance / sqrt(2)."""
    return GaussianKernel(float(median_heuristic(Z)) / math.sqrt(2.0))


class _Best:
    """The lowest objective seen and the set that had it."""

    def __init__(self) -> None:
        self.value, self.X, self.Y = np.inf, None, None

    def offer(self, value: float, X: np.ndarray, Y: np.ndarray) -> None:
        if value < self.value:
            self.value, self.X, self.Y = float(value), X.copy(), Y.copy()


class _Problem:
    """One compression run's fixed parts: the source, the objective, the parameter layout."""

    def __init__(self, source: SampleSource, objective: SetObjective, learning_rate: float):
        self.source, self.objective, self.learning_rate = source, objective, learning_rate
        self.classes = objective.classes
        self.discrete = self.classes is not None
        self.scale_x, self.scale_y = (np.maximum(s, 1e-12) for s in source.column_scale())
        self.trace: list[float] = []
        self.best = _Best()

    def labels_of(self, Y: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.classes, Y[:, 0])

    def value(self, X: np.ndarray, Y: np.ndarray) -> float:
        return self.objective.evaluate(X, Y, self.source, gradient=False).value

    def flat(self, X: np.ndarray, Y: np.ndarray) -> np.ndarray:
        return X.ravel().copy() if self.discrete else np.concatenate([X.ravel(), Y.ravel()])

    def unflat(self, params: np.ndarray, rows: int, Y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        d_x = self.scale_x.size
        X = params[: rows * d_x].reshape(rows, d_x)
        return (X, Y) if self.discrete else (X, params[rows * d_x:].reshape(rows, self.scale_y.size))

    def scale(self, rows: int) -> np.ndarray:
        parts = [np.tile(self.scale_x, rows)] + ([] if self.discrete else [np.tile(self.scale_y, rows)])
        return np.concatenate(parts)

    def descend(self, X: np.ndarray, Y: np.ndarray, moving: slice, steps: int, optimizer: str) -> tuple:
        """Minimise over the rows ``moving`` of (X, Y), the others held; labels of a discrete y are
        searched (only among ``moving``) after every pass. Returns the best (X, Y) seen."""
        X, Y = X.copy(), Y.copy()
        rows = moving.stop - moving.start
        local = _Best()
        order = np.arange(moving.start, moving.stop)

        def evaluate(params: np.ndarray, Y_now: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
            X[moving], Y[moving] = self.unflat(params, rows, Y_now[moving])
            evaluation = self.objective.evaluate(X, Y, self.source, gradient=True)
            self.trace.append(evaluation.value)
            local.offer(evaluation.value, X, Y)
            gradient = self.flat(evaluation.grad_x[moving], None if self.discrete else evaluation.grad_y[moving])
            if self.discrete:  # exact best labels at these points; record the improved set
                labels = search_labels(self.labels_of(Y), evaluation.labels, order)
                Y[:, 0] = self.classes[labels]
                local.offer(label_objective(labels, evaluation.labels), X, Y)
            return evaluation.value, gradient, Y

        params = self.flat(X[moving], Y[moving])
        scale = self.scale(rows)
        if optimizer == "adam":
            adam = Adam(params.size, self.learning_rate, scale)
            for _ in range(steps):
                _, gradient, Y = evaluate(params, Y)
                params = adam.step(params, gradient)
        elif not self.discrete:
            params = minimise_lbfgs(lambda p: evaluate(p, Y)[:2], params, scale, steps)
        else:  # rounds of L-BFGS on x with the labels held, then a label search
            for _ in range(max(1, math.ceil(steps / _LABEL_ROUND))):
                held = Y.copy()
                params = minimise_lbfgs(lambda p: evaluate(p, held)[:2], params, scale, _LABEL_ROUND)
                _, _, Y = evaluate(params, Y)
        X[moving], Y[moving] = self.unflat(params, rows, Y[moving])
        final = self.value(X, Y)
        self.trace.append(final)
        local.offer(final, X, Y)
        return local.X, local.Y, local.value


def check_settings(m: Any, method: str, optimizer: str, reg: float | None, steps: int | None, learning_rate: float,
                   n_init: int, n: int) -> tuple[int, int]:
    """One ``ValueError`` per broken rule of a compression's settings; returns (m, steps) with the
    method's default steps filled in."""
    check_choice(method, "method", METHODS)
    check_choice(optimizer, "optimizer", OPTIMIZERS)
    if reg is not None:
        check_positive(reg, "reg")
    check_positive(learning_rate, "learning_rate")
    if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or not 1 <= m <= n:
        raise ValueError(f"m: must be an integer in [1, n = {n}], got {m!r}")
    if isinstance(n_init, bool) or not isinstance(n_init, (int, np.integer)) or n_init < 1:
        raise ValueError(f"n_init: must be an integer >= 1, got {n_init!r}")
    steps = DEFAULT_STEPS[method] if steps is None else steps
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 0:
        raise ValueError(f"steps: must be an integer >= 0, got {steps!r}")
    return int(m), int(steps)


def _kernels(source: SampleSource, kernel_x: Kernel | None, kernel_y: Kernel | None,
             rng: np.random.Generator) -> tuple[Kernel, Kernel]:
    if kernel_x is None or kernel_y is None:
        sample = np.sort(rng.choice(source.n, min(source.n, 2000), replace=False))
        X, Y = source.rows(sample)
        kernel_x = kernel_x or default_kernel(X)
        kernel_y = kernel_y or default_kernel(Y)
    for name, kernel in (("kernel_x", kernel_x), ("kernel_y", kernel_y)):
        if not isinstance(kernel, Kernel):
            raise ValueError(f"{name}: must be a jdlcore Kernel, got {type(kernel).__name__}")
    for name, kernel, width in (("kernel_x", kernel_x, source.x_width), ("kernel_y", kernel_y, source.y_width)):
        if np.ndim(kernel.lengthscale) == 1 and len(kernel.lengthscale) != width:
            raise ValueError(f"{name}: has {len(kernel.lengthscale)} lengthscales for {width} feature(s)")
    if not kernel_x.differentiable:
        raise ValueError(f"kernel_x: the {kernel_x.name} kernel has no gradient; use gaussian, matern32 or matern52")
    if not (kernel_y.differentiable or isinstance(kernel_y, DeltaKernel)):
        raise ValueError(f"kernel_y: the {kernel_y.name} kernel has no gradient; use gaussian, matern32, "
                         "matern52, or delta for a discrete y")
    return kernel_x, kernel_y


REG_SAMPLE_ROWS = 5000  # rows drawn to choose reg by validation


def _validated_reg(source: SampleSource, m: int, kernel_x: Kernel, kernel_y: Kernel,
                   rng: np.random.Generator) -> float:
    """``select_reg`` for KCMEs of m points, on a random sample of the data (10 % of it held out)."""
    sample = np.sort(rng.choice(source.n, min(source.n, REG_SAMPLE_ROWS + 10 * m), replace=False))
    X, Y = source.rows(sample)
    subset = max(1, min(m, int(0.9 * X.shape[0]) - 1))
    return select_reg(X, Y, kernel_x=kernel_x, kernel_y=kernel_y, subset_size=subset,
                      seed=int(rng.integers(2**31)))[0]


def run_compression(source: SampleSource, *, m: int, method: str = "ackip", kernel_x: Kernel | None = None,
                    kernel_y: Kernel | None = None, reg: float | None = None, seed: int | None = None,
                    steps: int | None = None, optimizer: str = "adam", learning_rate: float = LEARNING_RATE,
                    n_init: int = N_INIT) -> CompressionResult:
    """Compress the samples of ``source`` to m points; see the module docstring and ``compress``."""
    started = time.perf_counter()
    m, steps = check_settings(m, method, optimizer, reg, steps, learning_rate, n_init, source.n)
    rng = np.random.default_rng(seed)
    kernel_x, kernel_y = _kernels(source, kernel_x, kernel_y, rng)
    reg_given = reg is not None
    reg = float(reg) if reg_given else _validated_reg(source, m, kernel_x, kernel_y, rng)
    classes = source.classes() if isinstance(kernel_y, DeltaKernel) else None
    objective = make_objective("ackip" if method == "random" else method, kernel_x, kernel_y, reg, classes)
    problem = _Problem(source, objective, learning_rate)

    if method == "random":
        X, Y = source.rows(np.sort(rng.choice(source.n, m, replace=False)))
        value = initial = problem.value(X, Y)
        problem.trace.append(value)
    elif method in ("ackip", "jkip"):
        starts = [source.rows(np.sort(rng.choice(source.n, m, replace=False))) for _ in range(n_init)]
        values = [problem.value(X, Y) for X, Y in starts]
        X, Y = starts[int(np.argmin(values))]
        initial = float(np.min(values))
        X, Y, value = problem.descend(X, Y, slice(0, m), steps, optimizer)
    else:
        X, Y = np.empty((0, source.x_width)), np.empty((0, source.y_width))
        initial = np.nan
        for t in range(m):
            cx, cy = source.rows(rng.choice(source.n, n_init, replace=False))
            candidates = [(np.vstack([X, cx[k:k + 1]]), np.vstack([Y, cy[k:k + 1]])) for k in range(n_init)]
            values = [problem.value(Xk, Yk) for Xk, Yk in candidates]
            X, Y = candidates[int(np.argmin(values))]
            trace_before = len(problem.trace)
            X, Y, value = problem.descend(X, Y, slice(t, t + 1), steps, optimizer)
            del problem.trace[trace_before:]  # herding reports one value per point
            problem.trace.append(value)
            initial = value if t == 0 else initial
    settings = {"method": method, "m": m, "n": int(source.n), "reg": reg,
                "reg_from": "given" if reg_given else "validation", "seed": seed, "steps": steps,
                "optimizer": optimizer, "learning_rate": float(learning_rate), "n_init": n_init,
                "kernel_x": kernel_x.to_dict(), "kernel_y": kernel_y.to_dict()}
    return CompressionResult(X, Y, objective.name, float(value), float(initial), np.asarray(problem.trace),
                             time.perf_counter() - started, settings)


def compress(X: Any, Y: Any, *, m: int, method: str = "ackip", kernel_x: Kernel | None = None,
             kernel_y: Kernel | None = None, reg: float | None = None, seed: int | None = None, steps: int | None = None,
             optimizer: str = "adam", learning_rate: float = LEARNING_RATE, n_init: int = N_INIT,
             chunk_rows: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Compress paired samples X (n, d_x), Y (n, d_y) to m points (Xc (m, d_x), Yc (m, d_y)).

    method: "ackip" (recommended), "ackh", "jkip", "jkh" or "random" (a uniform subsample).
    kernel_x, kernel_y: default Gaussian kernels by the paper's median heuristic; a ``DeltaKernel``
    kernel_y treats y as a class label (one column). reg: the compressed KCME's lambda in
    W = (K + reg I)^{-1} (no factor m); None chooses it by validation (``select_reg`` for KCMEs of m
    points, on up to 5,000 + 10 m sampled rows, 10 % held out). seed: for the random starts. steps: Adam steps or L-BFGS
    iterations, for the whole set (KIP, default 500) or per point (herding, default 50).
    learning_rate: Adam's, in units of each column's standard deviation (the paper: 0.01).
    n_init: random starts compared (the paper: 10). chunk_rows: rows per reduction chunk.
    ``run_compression`` returns the objective trace and timings too.
    """
    result = run_compression(ArraySource(X, Y, chunk_rows), m=m, method=method, kernel_x=kernel_x,
                             kernel_y=kernel_y, reg=reg, seed=seed, steps=steps, optimizer=optimizer,
                             learning_rate=learning_rate, n_init=n_init)
    return result.X, result.Y
