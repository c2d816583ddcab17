"""Weighted support atoms: the training marginal of Y on M atoms, with its sums kept exactly.

A JDL model sees Y only through the basis Psi_Y and the sums of registered test functions. Its
conditional law at x puts weight pi_k (1 + Psi_Y(z_k) . g(x)) / Z(x) on support atoms z_k with
probabilities pi_k. The n training atoms (pi_k = 1/n) are one choice. This module builds another
with M << n atoms whose weights reproduce, to rounding, the sums that matter:

    sum_k w_k Psi_Y(z_k) = sum_j Psi_Y(y_j),   sum_k w_k z_k = sum_j y_j,
    sum_k w_k z_k z_k^T = sum_j y_j y_j^T,      sum_k w_k = n,

so the normalisation Z(x), the conditional mean and the conditional second moment of the signed
law are the same on the support as on all n atoms, at every x. Every query then costs O(M m_Y)
per row, whatever n is.

The atoms are built in one pass over the rows, in blocks (``plan_support``, ``support_partial``,
``reweight``), so chunked and lazily read data work too.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np

from .atoms import FunctionSums

__all__ = [
    "Support", "SupportPlan", "SupportPartial", "MarginalSums", "SUM_GROUPS", "ATOMS_PER_SUM", "MIN_DEFAULT_SIZE",
    "default_support_size", "support_size_for", "plan_support",
    "support_partial", "sum_groups", "finish_support", "build_support", "reweight", "sample_rows",
    "check_support_rows", "value_range", "two_point_rule", "SAMPLE_ROWS",
]

SAMPLE_ROWS = 1 << 17  # rows that place the bin edges or cell centres
_ASSIGN_ELEMENTS = 1 << 22  # (rows x centres) distances per slab
MIN_DEFAULT_SIZE = 512  # the fewest support atoms by default
# default atoms per sum the weights are to reproduce: diamonds at 40,000 rows (m_Y = 340, 1,023 sums in
# the three groups) kept none of them on 512 atoms, the normalisation on 2,048 and all three on 4,096
ATOMS_PER_SUM = 4


def default_support_size(d_y: int, m_y: int) -> int:
    """The default number of support atoms M for a Y of d_y components and a Y basis of m_y functions:
    ``ATOMS_PER_SUM`` atoms per sum of ``SUM_GROUPS`` ((1 + m_y) each for the normalisation, d_y times
    that for the mean, d_y (d_y + 1) / 2 times for the second moment), so the non-negative reweighting
    (``reweight``) has room to carry them all; at least ``MIN_DEFAULT_SIZE``."""
    sums = (1 + d_y + d_y * (d_y + 1) // 2) * (1 + m_y)
    return max(MIN_DEFAULT_SIZE, ATOMS_PER_SUM * sums)


def support_size_for(requested: int | None, d_y: int, m_y: int, rows: int) -> int:
    """The support atoms M a fit on ``rows`` training rows builds: the ``requested`` support_size, else
    ``default_support_size(d_y, m_y)``; at most the rows."""
    return min(requested or default_support_size(d_y, m_y), rows)


def check_support_rows(size: int | None, rows: int, what: str = "training rows") -> None:
    """``ValueError`` when a requested ``support_size`` exceeds the ``rows`` it would be built from."""
    if size is not None and size > rows:
        raise ValueError(f"support_size: {size} is more than the {rows:,} {what}")


@dataclass
class Support:
    """M weighted support atoms of the training marginal of Y.

    atoms: (M, d_y) support points (scalar Y: ascending); weights: (M,) probabilities (>= 0, sum 1);
    construction: "distinct", "bins" or "cells"; exact: the last of ``SUM_GROUPS`` whose sums the
    weights reproduce ("none" if not even the normalisation); defect: the largest relative error of
    those sums (0 for "distinct"; see ``reweight``); requested: the M asked for (empty and merged
    cells make ``size`` smaller).
    """

    atoms: np.ndarray
    weights: np.ndarray
    construction: str
    defect: float = 0.0
    exact: str = "none"
    requested: int = 0

    @property
    def size(self) -> int:
        return int(self.weights.size)

    @property
    def d(self) -> int:
        return int(self.atoms.shape[1])

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {"support_atoms": self.atoms, "support_weights": self.weights}


@dataclass
class SupportPlan:
    """Where each atom goes: bin edges (scalar Y), cell centres and scales (vector Y). ``size`` is M."""

    size: int
    edges: np.ndarray | None = None  # (M' - 1,) ascending
    centres: np.ndarray | None = None  # (M', d) in scaled units
    scale: np.ndarray | None = None  # (d,)

    @property
    def cells(self) -> int:
        return self.edges.size + 1 if self.edges is not None else int(self.centres.shape[0])

    def assign(self, y: np.ndarray) -> np.ndarray:
        """The cell of every row of y (b, d), shape (b,)."""
        if self.edges is not None:
            return np.searchsorted(self.edges, y[:, 0], side="right")
        scaled = y / self.scale
        norms = np.sum(self.centres**2, axis=1)
        out = np.empty(y.shape[0], dtype=np.int64)
        step = max(1, _ASSIGN_ELEMENTS // self.cells)
        for start in range(0, y.shape[0], step):  # argmin_k |y - c_k|^2 = argmin_k (|c_k|^2 - 2 y . c_k)
            stop = min(start + step, y.shape[0])
            out[start:stop] = np.argmin(norms - 2.0 * scaled[start:stop] @ self.centres.T, axis=1)
        return out


@dataclass
class SupportPartial:
    """What one block of atoms contributes; additive over disjoint blocks.

    distinct: (values (u, d), counts (u,)) while the blocks have at most ``size`` distinct rows, else
    None; counts (cells,), sums (cells, d), squares (cells, d): members, their sum and sum of squares
    per cell; n; total (d,), outer (d, d): sum y and sum y y^T; lows, highs (cells, d): the members'
    least and greatest values per cell (+inf and -inf in an empty cell).
    """

    distinct: tuple[np.ndarray, np.ndarray] | None
    counts: np.ndarray
    sums: np.ndarray
    squares: np.ndarray
    n: int
    total: np.ndarray
    outer: np.ndarray
    size: int
    lows: np.ndarray
    highs: np.ndarray

    def __add__(self, other: "SupportPartial") -> "SupportPartial":
        distinct = None
        if self.distinct is not None and other.distinct is not None:
            distinct = _merge_distinct(self.distinct, other.distinct, self.size)
        return SupportPartial(distinct, self.counts + other.counts, self.sums + other.sums,
                              self.squares + other.squares, self.n + other.n, self.total + other.total,
                              self.outer + other.outer, self.size, np.minimum(self.lows, other.lows),
                              np.maximum(self.highs, other.highs))


def _merge_distinct(a: tuple, b: tuple, size: int) -> tuple | None:
    values, inverse = np.unique(np.vstack([a[0], b[0]]), axis=0, return_inverse=True)
    if values.shape[0] > size:
        return None
    return values, np.bincount(inverse.ravel(), weights=np.concatenate([a[1], b[1]]), minlength=values.shape[0])


def sample_rows(n: int, seed: int | None, rows: int = SAMPLE_ROWS) -> np.ndarray:
    """Sorted indices of the seeded sample of min(n, rows) rows that places edges or centres."""
    if n <= rows:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, rows, replace=False))


def plan_support(sample: np.ndarray, size: int, seed: int | None = 0, resolution: float | None = None,
                 span: np.ndarray | None = None) -> SupportPlan:
    """Bin edges (scalar Y) or cell centres (vector Y) for ``size`` cells from a sample (s, d) of the atoms.

    Construction, in one pass over the atoms (blocks, so chunked and lazily read data work too):
    * "distinct": a Y with at most M distinct values (class labels, counts) keeps them all, weighted by
      their counts: the empirical marginal itself, no approximation.
    * "bins" (scalar Y): M / 2 bins, half with edges at equal-count quantiles of a seeded sample, half on
      an even grid fine enough for the Y kernel; each bin holds two atoms between its least and greatest
      member that keep the bin's count, sum and sum of squares (``two_point_rule``: its members' mean
      plus and minus their standard deviation, with half their count each, where those lie in that range).
    * "cells" (vector Y): M centres drawn from a seeded sample (distances in units of the sample's
      standard deviations); each atom is the mean of the members of its nearest-centre cell.
    The bins keep sum y and sum y^2 exactly, the cells sum y; the counts are then moved, as little as
    possible in the chi-square sense and never below zero, so the weights reproduce the other sums
    (``reweight``): as many groups as the atoms can carry, reported as ``Support.exact``.

    Scalar Y: half the edges at equal-count quantiles of the sample, half on an even grid over the
    atoms' range (``span``: their least and greatest values (2, d), ``value_range``; default: the
    sample's) with spacing at least ``resolution`` (half the Y kernel's lengthscale): the quantile edges
    resolve the conditional laws where the data are dense, the grid resolves the kernel's basis
    functions in the tails, where equal-count bins are wide. A sample can miss the extremes, and the Y
    basis has functions there (a pivoted Cholesky takes the extremes first): at 1,000,000 rows a sample
    of 131,072 stopped at -0.74 where the rows went to -1.59, the rows below fell in one cell five
    times the kernel's lengthscale wide, and no reweighting kept even the normalisation (relative
    defect 1.5%).
    """
    sample = np.asarray(sample, dtype=np.float64)
    if sample.shape[1] == 1:
        column = sample[:, 0]
        bins = max(1, size // 2)  # two atoms per bin
        quantile_edges = np.quantile(column, np.arange(1, bins // 2) / (bins // 2), method="inverted_cdf")
        covered = column if span is None else np.concatenate([column, np.asarray(span, dtype=np.float64)[:, 0]])
        low, high = float(covered.min()), float(covered.max())
        cells = max(1, bins - quantile_edges.size - 1)
        spacing = max((high - low) / cells, float(resolution or 0.0))
        grid = low + spacing * np.arange(1, int(np.ceil((high - low) / spacing))) if high > low else np.empty(0)
        return SupportPlan(size=size, edges=np.unique(np.concatenate([quantile_edges, grid])))
    scale = sample.std(axis=0)
    scale = np.where(scale > 0, scale, 1.0)
    distinct = np.unique(sample / scale, axis=0)
    rng = np.random.default_rng(seed)
    take = distinct if distinct.shape[0] <= size else distinct[np.sort(rng.choice(distinct.shape[0], size, replace=False))]
    return SupportPlan(size=size, centres=take, scale=scale)


def support_partial(y: np.ndarray, plan: SupportPlan) -> SupportPartial:
    """The contribution of one block of atoms y (b, d) under ``plan``."""
    y = np.asarray(y, dtype=np.float64)
    cells = plan.assign(y)
    counts = np.bincount(cells, minlength=plan.cells).astype(np.float64)
    sums = np.stack([np.bincount(cells, weights=y[:, j], minlength=plan.cells) for j in range(y.shape[1])], axis=1)
    squares = np.stack([np.bincount(cells, weights=y[:, j] ** 2, minlength=plan.cells) for j in range(y.shape[1])],
                       axis=1)
    lows = np.full((plan.cells, y.shape[1]), np.inf)
    highs = np.full((plan.cells, y.shape[1]), -np.inf)
    np.minimum.at(lows, cells, y)
    np.maximum.at(highs, cells, y)
    distinct = None
    values, inverse = np.unique(y, axis=0, return_inverse=True)
    if values.shape[0] <= plan.size:
        distinct = values, np.bincount(inverse.ravel(), minlength=values.shape[0]).astype(np.float64)
    return SupportPartial(distinct, counts, sums, squares, y.shape[0], y.sum(axis=0), y.T @ y, plan.size, lows,
                          highs)


@dataclass
class MarginalSums:
    """Sums over the n training atoms that a support keeps, by group (in basis coordinates).

    n; sum_psi: sum_j Psi_Y(y_j) (m_Y,); mean, second_moment: the ``FunctionSums`` of f(y) = y and
    f(y) = y y^T (moments A_Y^T F (m_Y, p), totals F^T 1 (p,)).
    """

    n: int
    sum_psi: np.ndarray
    mean: FunctionSums
    second_moment: FunctionSums


SUM_GROUPS = ("normalization", "mean", "second moment")


def sum_groups(atoms: np.ndarray, psi: np.ndarray, sums: MarginalSums) -> list[tuple[np.ndarray, np.ndarray]]:
    """(columns at the atoms (M, K_g), targets (K_g,)) of each group of ``SUM_GROUPS``.

    With P = [1, Psi_Y] the groups are P (the normalisation Z(x)), y_i P (the conditional mean) and
    y_i y_j P for i <= j (the conditional second moment): reproducing a group's sums makes that
    conditional quantity of the signed law identical on the support and on all n atoms, at every x.
    psi: Psi_Y at the atoms (M, m_Y).
    """
    d = atoms.shape[1]
    P = np.column_stack([np.ones(atoms.shape[0]), psi])
    upper = [(i, j) for i in range(d) for j in range(i, d)]
    mean = [(atoms[:, i:i + 1] * P, np.concatenate([[sums.mean.totals[i]], sums.mean.moments[:, i]]))
            for i in range(d)]
    second = [(atoms[:, i:i + 1] * atoms[:, j:j + 1] * P,
               np.concatenate([[sums.second_moment.totals[i * d + j]], sums.second_moment.moments[:, i * d + j]]))
              for i, j in upper]
    joined = [(np.column_stack([c for c, _ in group]), np.concatenate([t for _, t in group])) for group in (mean, second)]
    return [(P, np.concatenate([[float(sums.n)], sums.sum_psi]))] + joined


def finish_support(partial: SupportPartial, features: Callable[[np.ndarray], np.ndarray], sums: MarginalSums,
                   tolerance: float = 1e-9) -> Support:
    """The support from the summed partials.

    At most M distinct values: those values with their counts (the empirical marginal, exact). Else
    the non-empty cells' means with weights moved from the counts (``reweight``) to reproduce the
    sums of as many of ``SUM_GROUPS`` as the atoms can carry, in that order, each to ``tolerance``;
    ``exact`` names the last group kept, "none" when even the normalisation cannot be (the counts).
    features: Psi_Y as a function of points (q, d) -> (q, m_Y).
    """
    if partial.distinct is not None:
        atoms, counts = partial.distinct
        return Support(np.ascontiguousarray(atoms), counts / counts.sum(), "distinct", 0.0, SUM_GROUPS[-1], partial.size)
    atoms, counts = _cell_atoms(partial)
    groups = sum_groups(atoms, features(atoms), sums)
    construction = "bins" if atoms.shape[1] == 1 else "cells"
    for kept in range(len(groups), 0, -1):
        columns = np.column_stack([c for c, _ in groups[:kept]])
        if columns.shape[1] >= atoms.shape[0] // 2:  # too many sums for the atoms (measured: they fail)
            continue
        weights, defect = reweight(columns, counts, np.concatenate([t for _, t in groups[:kept]]))
        if defect <= tolerance:
            keep = weights > 0  # an atom without weight carries nothing; the laws assume pi > 0
            return Support(np.ascontiguousarray(atoms[keep]), weights[keep] / weights.sum(), construction, defect,
                           SUM_GROUPS[kept - 1], partial.size)
    _, defect = _defect(groups[0][0], counts, groups[0][1])
    return Support(np.ascontiguousarray(atoms), counts / counts.sum(), construction, defect, "none", partial.size)


def _cell_atoms(partial: SupportPartial) -> tuple[np.ndarray, np.ndarray]:
    """Atoms (M, d) and counts (M,) of the non-empty cells: for a scalar Y two per bin between its least
    and greatest member (``two_point_rule``; one where the bin's members are all equal), ascending; for
    a vector Y each cell's mean."""
    filled = partial.counts > 0
    counts = partial.counts[filled]
    means = partial.sums[filled] / counts[:, None]
    if means.shape[1] > 1:
        return means, counts
    variance = np.maximum(partial.squares[filled, 0] / counts - means[:, 0] ** 2, 0.0)
    atoms, shares = two_point_rule(means[:, 0], variance, partial.lows[filled, 0], partial.highs[filled, 0])
    split = shares[:, 1] > 0
    atoms = np.concatenate([atoms[~split, 0], atoms[split, 0], atoms[split, 1]])
    weights = np.concatenate([counts[~split], counts[split] * shares[split, 0], counts[split] * shares[split, 1]])
    order = np.argsort(atoms, kind="stable")
    return atoms[order, None], weights[order]


def two_point_rule(mean: np.ndarray, variance: np.ndarray, low: np.ndarray,
                   high: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two atoms u <= v and their shares p, q (p + q = 1) with the mean and variance of each group of
    values whose least and greatest are ``low`` and ``high`` (all (b,)), both atoms in [low, high].

    The two-point laws with that mean mu and variance s^2 are u = mu - s t, v = mu + s / t with shares
    p = 1 / (1 + t^2), q = t^2 / (1 + t^2), for t > 0. Both atoms lie in [low, high] where
    s / (high - mu) <= t <= (mu - low) / s, an interval that is not empty because any values in
    [low, high] have s^2 <= (mu - low) (high - mu) (the Bhatia-Davis inequality). The rule takes the t
    of that interval nearest 1: mu -+ s with equal shares where those lie in the range (a bin well
    inside the data), else an atom on the range's end (the zeros of a y that is often 0 stay at 0).
    A group of equal values gets one atom, its mean, with share 1 (q = 0): where s is at most 1e-12 of
    its scale, or the mean is not strictly inside the range (the rounding of sums of equal values
    leaves a variance of about 1e-18 and a mean an ulp off them). Returns atoms (b, 2) and shares (b, 2)."""
    mean, low, high = (np.asarray(a, dtype=np.float64) for a in (mean, low, high))
    spread = np.sqrt(np.maximum(np.asarray(variance, dtype=np.float64), 0.0))
    split = (spread > 1e-12 * np.maximum(np.abs(mean), 1.0)) & (low < mean) & (mean < high)
    s = np.where(split, spread, 1.0)
    below = (mean - low) / s  # the largest t keeping u >= low (t is 1 where not split)
    above = s / np.maximum(high - mean, np.finfo(float).tiny)  # the least t keeping v <= high
    t = np.where(split, np.clip(1.0, above, np.maximum(below, above)), 1.0)
    u, v = mean - spread * t, mean + spread / t
    # rounding can leave an atom a few ulps outside the range the t was chosen for
    u, v = np.where(split, np.clip(u, low, high), mean), np.where(split, np.clip(v, low, high), mean)
    p = np.where(split, 1.0 / (1.0 + t**2), 1.0)
    return np.column_stack([u, v]), np.column_stack([p, 1.0 - p])


def _defect(columns: np.ndarray, weights: np.ndarray, targets: np.ndarray) -> tuple[np.ndarray, float]:
    """(columns^T w - targets, its largest entry relative to sum_k w_k |columns_ki|)."""
    error = columns.T @ weights - targets
    magnitude = np.abs(columns).T @ weights
    return error, float(np.max(np.abs(error) / np.where(magnitude > 0, magnitude, 1.0)))


def reweight(columns: np.ndarray, counts: np.ndarray, targets: np.ndarray, rounds: int = 20,
             rcond: float = 1e-8) -> tuple[np.ndarray, float]:
    """Weights w >= 0 near ``counts`` in the chi-square sense with columns^T w = targets.

    Minimises sum_k (w_k - c_k)^2 / c_k subject to the equalities, with an active set on the atoms
    whose weight would turn negative (fixed at 0, the rest re-solved). Each equality solve is the
    minimum-norm solution of the column-scaled system (singular values below ``rcond`` times the
    largest dropped), refined once. Returns (w, defect) with defect the largest entry of
    |columns^T w - targets| relative to sum_k w_k |columns_ki|.
    """
    scale = np.sqrt((counts[:, None] * columns**2).sum(axis=0))
    scale = np.where(scale > 0, scale, 1.0)
    A = columns / scale
    b = targets / scale
    free = counts > 0
    weights = counts.copy()
    for _ in range(rounds):
        weights = np.where(free, counts, 0.0)
        root = np.sqrt(weights)
        for _refine in range(2):  # the second pass removes the first one's rounding
            step = np.linalg.lstsq(A.T * root, b - A.T @ weights, rcond=rcond)[0]
            weights = weights + root * step
        negative = free & (weights < 0)
        if not negative.any():
            break
        free &= ~negative
        if free.sum() < 0.75 * counts.size:  # a quarter of the atoms gone: these sums cannot be carried
            break
    weights = np.maximum(weights, 0.0)
    return weights, _defect(A, weights, b)[1]


def value_range(blocks: Iterable[np.ndarray]) -> np.ndarray:
    """The least and greatest value of each column over blocks of atoms (b, d): shape (2, d)."""
    low = high = None
    for y in blocks:
        y = np.asarray(y, dtype=np.float64)
        if y.shape[0]:
            low = y.min(axis=0) if low is None else np.minimum(low, y.min(axis=0))
            high = y.max(axis=0) if high is None else np.maximum(high, y.max(axis=0))
    if low is None:
        raise ValueError("value_range: no atoms")
    return np.vstack([low, high])


def build_support(blocks: Iterable[np.ndarray], sample: np.ndarray, size: int, features: Callable,
                  sums: MarginalSums, seed: int | None = 0, resolution: float | None = None,
                  span: np.ndarray | None = None) -> Support:
    """``finish_support`` over blocks of atoms in memory: plan from ``sample`` and the atoms' ``span``
    (``plan_support``), one pass over ``blocks``."""
    plan = plan_support(sample, size, seed, resolution, span)
    total: SupportPartial | None = None
    for y in blocks:
        part = support_partial(y, plan)
        total = part if total is None else total + part
    assert total is not None
    return finish_support(total, features, sums)
