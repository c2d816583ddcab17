"""Sec. 5.1 of the paper: conditional second moments E[Y Y^T | x], one experiment cell at a time.

A cell is (case, d, n, replicate): n samples of a case (``data``: Gaussian with a random
Archakov-Hansen correlation, the later version's uniform small-n case, or Cauchy heavy tails), split
4:1 into training and validation, plus 5,000 fresh test points with their exact conditional second
moments (none exist for Cauchy: its loss is NaN, the structural metrics still apply).

Hyperparameters, per cell: the kernel lengthscales (median heuristic of the training x and y times
``lengthscale_factors``) are chosen by the pooled validation loss (40) of the normalized JDL on at
most ``tune_rows`` rows; then each method picks its own reg from ``regs`` by the same validation loss
(on at most ``validation_rows`` validation points) with the full training set. Low-rank tolerance as
in the paper: 1e-3 for n <= 1e5, 1e-2 up to 1e6, 1e-1 beyond.

Methods: JDL unconstrained (normalization holds by construction of its conditional law), JDL with
the paper's positivity tightening (33) (1 + h >= 0 on the training grid), JDL with Lemma 4.2's
pointwise bounds (29) (1 + h >= 0 at every (x, y): the one variant guaranteed at fresh x), JDL with
exact positivity on the training grid (n^2 pairs, an active-set QP whose cost grows fast with n and
with heavy tails: only up to ``grid_rows`` training rows, NaN beyond, and at the reg validated for
the unconstrained JDL), JPDL (degree 4, or lower where the training rows cannot determine every
monomial: ``jpdl_degree``), CME (45) and CME with the unconditional constraints (53)+(54). Fit time is the factorisations plus the solve (the
factorisations are shared by the kernel methods, as in the paper's timings); query time is the
conditional second moments at the 5,000 test points.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from jdlcore import (
    CME, JDL, Factorisation, GaussianKernel, PolynomialJDL, build_problem, median_heuristic,
)
from jdlcore.tuning import best_row, score_grid
from jdlcore.conditional.losses import SecondMomentLoss, conditional_second_moments, relative_second_moment_loss

from .data import CauchyCase, GaussianCase, UniformCase
from .metrics import TEST_FUNCTIONS, negative_share, normalization_error, psd_failure, timed

__all__ = ["CASES", "MOMENT_METHODS", "METRICS", "GRID_METRICS", "MomentSettings", "tolerance", "make_case", "moments_cell"]

CASES = ("gaussian", "uniform", "cauchy")
MOMENT_METHODS = ("jdl", "jdl_tightening", "jdl_pointwise", "jdl_grid", "jpdl", "cme", "cme_constrained")
METRICS = ("loss", "normalization_error", "psd_failure", "negative_share", "fit_time", "query_time")
GRID_METRICS = ("grid_minimum", "grid_train_psd_failure")  # the positivity variants on their training grid
JDL_VARIANTS = {"jdl": ("none", "grid"), "jdl_tightening": ("positivity", "tightening"),
                "jdl_pointwise": ("positivity", "pointwise"),
                "jdl_grid": ("positivity", "grid")}  # method -> (constraints, positivity)
CME_VARIANTS = {"cme": "none", "cme_constrained": "positivity"}  # method -> constraints
POSITIVE_VARIANTS = ("jdl_tightening", "jdl_pointwise", "jdl_grid")  # 1 + h >= 0 guaranteed at the training pairs


@dataclass(frozen=True)
class MomentSettings:
    """Knobs of a cell; the defaults are the full run's.

    ``max_rank``: a rank budget for each pivoted Cholesky (None: none). Lengthscales whose
    factorisation of the tuning rows needs more pivots than the budget to reach the tolerance are left
    out of the search; should the chosen ones still exceed it on the full training set, the
    factorisation stops at the budget and the cell records the relative trace error it reached
    (``_meta["factor_error"]``) instead of the tolerance.
    """

    lengthscale_factors: tuple[float, ...] = (0.5, 1.0, 2.0)
    regs: tuple[float, ...] = (1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3)
    jpdl_degree: int = 4
    tune_rows: int = 20_000
    validation_rows: int = 20_000
    grid_rows: int = 400
    test_points: int = 5_000
    negative_points: int = 500
    max_rank: int | None = None


def tolerance(n: int) -> float:
    """The paper's relative pivoted-Cholesky tolerance for n samples."""
    return 1e-3 if n <= 100_000 else 1e-2 if n <= 1_000_000 else 1e-1


def make_case(case: str, d: int, rng: np.random.Generator):
    if case == "gaussian":
        return GaussianCase.random(d, rng)
    if case == "uniform":
        return UniformCase(d)
    if case == "cauchy":
        return CauchyCase.random(d, rng)
    raise ValueError(f"case: unknown {case!r}; choose one of {', '.join(CASES)}")


def _choose_lengthscales(train: tuple, validation: tuple, settings: MomentSettings, tol: float,
                         rows: tuple[int, int]) -> tuple[GaussianKernel, GaussianKernel]:
    """The (k_x, k_y) whose best normalized JDL has the smallest pooled validation loss (40), by jdl's
    grid search (``jdlcore.tuning.score_grid``: each side factorised once per lengthscale factor of
    the median heuristic, the pairs' problems shared by the regs). A factorisation that needs more
    pivots than ``settings.max_rank`` (none: unlimited) leaves its candidates out; should every one
    exceed it, the widest kernels, the fewest pivots, are taken."""
    (X, Y), (Xv, Yv) = (train[0][:rows[0]], train[1][:rows[0]]), (validation[0][:rows[1]], validation[1][:rows[1]])
    factors = settings.lengthscale_factors
    kernels = [[GaussianKernel(factor * median_heuristic(Z)) for factor in factors] for Z in (X, Y)]
    base = JDL(tol=tol, constraints="normalization", max_rank=settings.max_rank or X.shape[0])
    table = score_grid([(X, Y, Xv, Yv)], base, *kernels, settings.regs, SecondMomentLoss(),
                       usable=lambda factor: factor.stop_reason != "max_rank")
    if not any(np.isfinite(row["score"]) for row in table):
        widest = int(np.argmax(factors))
        return kernels[0][widest], kernels[1][widest]
    best = best_row(table)
    by_scale = [{kernel.lengthscale: kernel for kernel in side} for side in kernels]
    return by_scale[0][best["lengthscale_x"]], by_scale[1][best["lengthscale_y"]]


def jpdl_degree(d: int, rows: int, largest: int) -> int:
    """The largest polynomial degree <= ``largest`` whose comb(d + q, q) monomials per side do not
    exceed the training rows (the monomial matrix needs full column rank), at least 1."""
    from math import comb

    return max([1] + [q for q in range(1, largest + 1) if comb(d + q, q) <= rows])


def _fitters(kernels: tuple, problem, train: tuple, tol: float, degree: int) -> dict[str, Callable[[float], Any]]:
    """method -> reg -> fitted model (the kernel methods on the shared factorisations)."""
    X, Y = train
    fitters: dict[str, Callable[[float], Any]] = {}
    for name, (constraints, positivity) in JDL_VARIANTS.items():
        fitters[name] = (lambda c, p: lambda reg: JDL(*kernels, reg=reg, tol=tol, constraints=c, positivity=p)
                         .fit_problem(problem, Y))(constraints, positivity)
    for name, constraints in CME_VARIANTS.items():
        fitters[name] = (lambda c: lambda reg: CME(*kernels, reg=reg, tol=tol, constraints=c)
                         .fit_problem(problem))(constraints)
    fitters["jpdl"] = lambda reg: _fit_jpdl(X, Y, degree, reg)
    return fitters


def _fit_jpdl(X: np.ndarray, Y: np.ndarray, degree: int, reg: float) -> PolynomialJDL:
    """JPDL of the highest degree <= ``degree`` whose monomials have full numerical rank on the data
    (heavy tails make the degree-4 monomials of Cauchy samples rank-deficient)."""
    for q in range(degree, 0, -1):
        try:
            return PolynomialJDL(degree=q, reg=reg, constraints="normalization").fit(X, Y)
        except ValueError as error:
            if "numerical rank" not in str(error) or q == 1:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def _test_metrics(fitted: Any, X_test: np.ndarray, truth: np.ndarray | None, settings: MomentSettings,
                  fit_time: float) -> dict[str, float]:
    """``METRICS`` of a fitted model at the test x (truth: the exact moments, None for Cauchy)."""
    moments, query_time = timed(lambda: conditional_second_moments(fitted, X_test))
    return {
        "loss": np.nan if truth is None else relative_second_moment_loss(moments, truth),
        "normalization_error": normalization_error(fitted, X_test),
        "psd_failure": psd_failure(moments),
        "negative_share": negative_share(fitted, X_test[:settings.negative_points]),
        "fit_time": fit_time,
        "query_time": query_time,
    }


def _training_grid_metrics(fitted: JDL, X_train: np.ndarray) -> dict[str, float]:
    """``GRID_METRICS`` of a positivity-constrained JDL at training inputs X_train (t, d) against every
    training atom: min 1 + h(x_t, y_s), and the share of non-PSD second-moment matrices at the x_t."""
    return {"grid_minimum": fitted.grid_minimum(X_train),
            "grid_train_psd_failure": psd_failure(conditional_second_moments(fitted, X_train))}


def moments_cell(case: str, d: int, n: int, replicate: int, settings: MomentSettings = MomentSettings(),
                 methods: tuple[str, ...] = MOMENT_METHODS, seed: int = 0) -> dict[str, Any]:
    """Run one cell; returns {method: {metric: value}} for ``METRICS`` (NaN where a method or metric
    does not apply) and "_meta" (tolerance, ranks, lengthscales, chosen regs). Deterministic in
    (seed, case, d, n, replicate)."""
    rng = np.random.default_rng([seed, CASES.index(case), d, n, replicate])
    model = make_case(case, d, rng)
    X, Y = model.sample(n, rng)
    split = max(2, (4 * n) // 5)
    train, validation = (X[:split], Y[:split]), (X[split:], Y[split:])
    X_test, _ = model.sample(settings.test_points, rng)
    truth = None if case == "cauchy" else model.conditional_second_moment(X_test)
    tol = tolerance(n)
    tune = (min(split, (4 * settings.tune_rows) // 5), min(n - split, settings.tune_rows // 5))
    kernels = _choose_lengthscales(train, validation, settings, tol, tune)
    problem, factor_time = timed(lambda: build_problem(*train, *kernels, Factorisation(tol=tol, max_rank=settings.max_rank),
                                                       test_functions=TEST_FUNCTIONS))
    degree = jpdl_degree(d, split, settings.jpdl_degree)
    fitters = _fitters(kernels, problem, train, tol, degree)
    Xv, Yv = validation[0][:settings.validation_rows], validation[1][:settings.validation_rows]
    loss = SecondMomentLoss()
    results: dict[str, Any] = {}
    chosen: dict[str, float] = {}
    for method in methods:
        if method == "jdl_grid" and split > settings.grid_rows:
            results[method] = {metric: np.nan for metric in METRICS}
            continue
        fits = {}
        candidates = (chosen["jdl"],) if method == "jdl_grid" and "jdl" in chosen else settings.regs
        for reg in candidates:
            fitted, seconds = timed(lambda: fitters[method](reg))
            fits[reg] = (loss(fitted, Xv, Yv), seconds, fitted)
        reg = min(fits, key=lambda r: (not np.isfinite(fits[r][0]), fits[r][0]))
        _, seconds, fitted = fits[reg]
        chosen[method] = reg
        results[method] = _test_metrics(fitted, X_test, truth, settings,
                                        seconds + (0.0 if method == "jpdl" else factor_time))
        if method == "jpdl":
            degree = int(fitted.degree)
        if method in POSITIVE_VARIANTS:  # the guarantee itself: 1 + h >= 0 at the training pairs, so PSD there
            results[method].update(_training_grid_metrics(fitted, train[0][:settings.negative_points]))
    results["_meta"] = {"tolerance": tol, "rank_x": problem.basis_x.size, "rank_y": problem.basis_y.size,
                        "factor_error": max(problem.factors["relative_error_x"], problem.factors["relative_error_y"]),
                        "lengthscale_x": float(kernels[0].lengthscale), "lengthscale_y": float(kernels[1].lengthscale),
                        "regs": chosen, "factor_time": factor_time, "jpdl_degree": degree}
    return results


CHUNKED_METHODS = {**{m: JDL_VARIANTS[m] for m in ("jdl", "jdl_tightening", "jdl_pointwise")},
                   **{m: (c, "auto") for m, c in CME_VARIANTS.items()}}  # no n^2 grid at this size


def moments_cell_chunked(case: str, d: int, n: int, replicate: int, settings: MomentSettings = MomentSettings(),
                         scheduler: str = "local", seed: int = 0) -> dict[str, Any]:
    """A cell through the chunked pipeline, for n beyond memory-friendly sizes (the paper's 1e7 point):
    the samples are written to an .npy file, staged to zarr, and each of JDL, JDL (33), CME and
    CME (53)+(54) is fitted by ``pipeline.fitting.fit_store`` on the embedded Dask cluster (or
    ``scheduler``). Hyperparameters come from the in-memory selection on ``tune_rows`` rows (reg
    included, there being no n-sized validation here). JPDL and grid positivity are NaN."""
    import tempfile
    from pathlib import Path

    from pipeline.fitting import fit_store
    from pipeline.staging import stage

    rng = np.random.default_rng([seed, CASES.index(case), d, n, replicate])
    model = make_case(case, d, rng)
    X, Y = model.sample(n, rng)
    split = (4 * n) // 5
    X_test, _ = model.sample(settings.test_points, rng)
    truth = None if case == "cauchy" else model.conditional_second_moment(X_test)
    tol = tolerance(n)
    rows = (4 * settings.tune_rows) // 5
    small = (X[:rows], Y[:rows]), (X[split:split + settings.tune_rows // 5], Y[split:split + settings.tune_rows // 5])
    kernels = _choose_lengthscales(*small, settings, tol, (rows, settings.tune_rows // 5))
    problem = build_problem(*small[0], *kernels, Factorisation(tol=tol, max_rank=settings.max_rank),
                            test_functions=TEST_FUNCTIONS)
    fitters = _fitters(kernels, problem, small[0], tol, settings.jpdl_degree)
    loss = SecondMomentLoss()
    results: dict[str, Any] = {}
    regs: dict[str, float] = {}
    seconds: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "samples.npy"
        np.save(source, np.hstack([X[:split], Y[:split]]))
        del X, Y
        data, seconds["stage"] = timed(lambda: stage(source, Path(tmp) / "data.zarr", x=[str(i) for i in range(d)],
                                                     y=[str(d + i) for i in range(d)], chunk_size=1_250_000))
        source.unlink()
        for method in MOMENT_METHODS:
            if method not in CHUNKED_METHODS:
                results[method] = {metric: np.nan for metric in METRICS}
                continue
            regs[method] = min(settings.regs, key=lambda reg: loss(fitters[method](reg), *small[1]))
            constraints, positivity = CHUNKED_METHODS[method]
            (_, fitted), fit_time = timed(lambda: fit_store(
                data, Path(tmp) / f"{method}.zarr", lengthscale_x=float(kernels[0].lengthscale),
                lengthscale_y=float(kernels[1].lengthscale), reg=regs[method], tol=tol, constraints=constraints,
                positivity=positivity, method=method.split("_")[0], scheduler=scheduler))
            results[method] = _test_metrics(fitted, X_test, truth, settings, fit_time)
            seconds[f"{method}_rank"] = float(fitted.basis_x_.size)
    results["_meta"] = {"tolerance": tol, "lengthscale_x": float(kernels[0].lengthscale),
                        "lengthscale_y": float(kernels[1].lengthscale), "regs": regs, "chunked": seconds}
    return results
