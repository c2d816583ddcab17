"""Degenerate fits: models that look valid but carry little or nothing of x, found and reported.

A fit can end in a model that is a probability law at every x and still useless:

* ``rank_budget_x`` / ``rank_budget_y``: the pivoted Cholesky stopped at the default rank budget
  (``rank_budget``) before reaching ``tol``: the kernel is close to diagonal on the data (a short
  lengthscale for the dimension of x), and the factor would otherwise grow toward n;
* ``rank_near_n_x`` / ``rank_near_n_y``: the rank reached half of n or more, so the basis nearly
  interpolates the training points;
* ``rank_one_x`` / ``rank_one_y``: the kernel matrix is constant to ``tol`` (a lengthscale far longer
  than the data's spread), so that side carries no information: every conditional law is the marginal;
* ``near_marginal``: on a sample of training rows the model scores almost as the marginal law of y
  (``marginal_ratio`` at or above ``NEAR_MARGINAL``);
* ``solver_unconverged``: an iterative solver stopped at its iteration budget;
* ``grid_budget``: grid positivity stopped at its round or time budget, and the fit fell back to the
  normalized one (projected at query time).

Each finding is a ``kind -> message`` entry of the model's ``diagnostics_["degeneracies"]`` (kept in
the model store, printed by ``jdl fit`` and ``jdl inspect``) and a ``DegeneracyWarning`` when the fit
is announced; its message names the likely cause and the setting to change.
"""
from __future__ import annotations

import os
import warnings
from typing import Any

import numpy as np

__all__ = ["DegeneracyWarning", "GridBudgetWarning", "rank_budget", "factor_degeneracies", "solver_degeneracy",
           "marginal_degeneracy", "projection_degeneracy", "announce", "NEAR_MARGINAL", "NEAR_N", "MARGINAL_ROWS"]

RANK_FLOOR = 512  # the budget is never below this (small problems may use their full rank)
RANK_SHARE = 8  # ... nor above n / RANK_SHARE once n exceeds RANK_FLOOR * RANK_SHARE
FACTOR_MEMORY_SHARE = 0.25  # the largest share of physical memory one in-memory factor L (n x m) may take
NEAR_N = 0.5  # a rank at or above this share of n is reported
NEAR_MARGINAL = 0.95  # a model scoring at or above this share of the marginal's loss is reported
MARGINAL_ROWS = 2000  # training rows the marginal comparison is made on


class DegeneracyWarning(UserWarning):
    """A fit ended in a degenerate model (``jdlcore.models.degeneracy``); the message says why and what to change."""


class GridBudgetWarning(DegeneracyWarning):
    """Grid positivity stopped at its budget; the fit fell back to normalization plus projection."""


_CATEGORIES = {"grid_budget": GridBudgetWarning}


def physical_memory() -> int:
    """Bytes of physical memory of this machine (8 GiB where the system does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 8 << 30


def rank_budget(n: int, holds_factor: bool = True, memory_bytes: int | None = None) -> int:
    """The default cap on each pivoted-Cholesky rank for n samples.

    max(RANK_FLOOR, n / RANK_SHARE), and, where the factor L (n x m, float64) is held in memory
    (``holds_factor``), no more than fits in ``FACTOR_MEMORY_SHARE`` of ``memory_bytes`` (default: the
    machine's physical memory); never more than n. A fit that needs more than n / 8 basis functions
    per side is close to interpolating its data, whatever its tolerance says.
    """
    n = int(n)
    budget = max(RANK_FLOOR, n // RANK_SHARE)
    if holds_factor:
        memory = physical_memory() if memory_bytes is None else int(memory_bytes)
        budget = min(budget, max(1, int(FACTOR_MEMORY_SHARE * memory) // (8 * max(n, 1))))
    return max(1, min(n, budget))


_SIDES = ("x", "y")


def factor_degeneracies(diagnostics: dict[str, Any], n: int, tol: float, tuned: bool = False) -> dict[str, str]:
    """Rank findings of one fit from its factor diagnostics (``rank_*``, ``stop_reason_*``,
    ``relative_error_*`` and ``rank_budget``, the default cap when it applied). ``tuned``: the
    lengthscales were chosen by a tuning, whose candidates were fitted under such a budget too and
    where longer ones scored worse, so a rank-budget finding does not advise a longer lengthscale."""
    found: dict[str, str] = {}
    budget = diagnostics.get("rank_budget")
    for side in _SIDES:
        matrix, lengthscale, name = f"K_{side.upper()}", f"lengthscale_{side}", side
        rank, stop = diagnostics.get(f"rank_{side}"), diagnostics.get(f"stop_reason_{side}")
        if rank is None or stop in ("classes", "exact"):
            continue
        left = float(diagnostics.get(f"relative_error_{side}", np.nan))
        if stop == "max_rank" and budget is not None and rank >= budget:
            facts = (f"the pivoted Cholesky of {matrix} stopped at the rank budget m_{side.upper()} = {rank} "
                     f"(n = {n:,}) with {left:.2g} of its trace left, above tol = {tol:g}")
            found[f"rank_budget_{side}"] = facts + (
                f". The tuning chose {lengthscale} on candidates fitted under such a budget, and longer ones scored "
                f"worse there: the cut is part of the model it judged. Change, to take more of the trace: max_rank= "
                f"above {rank} (more time and memory), or a higher tol to accept the cut" if tuned else
                f": the kernel is close to diagonal on these data, so the model would need about one basis function "
                f"per sample. Likely cause: {lengthscale} short for the spread and dimension of {name} (distances "
                f"grow like sqrt(d)). Change: a longer {lengthscale} (or one lengthscale per feature), a higher "
                f"tol, or max_rank= to accept the cut")
        elif rank >= NEAR_N * n and n >= 20:
            found[f"rank_near_n_{side}"] = (
                f"m_{side.upper()} = {rank} is {rank / n:.0%} of n = {n:,}: the basis nearly interpolates the training "
                f"{name}, and the model tends to the marginal away from them. Likely cause: {lengthscale} short "
                f"for these data. Change: a longer {lengthscale} or a higher tol")
        if rank == 1 and n > 1 and stop != "max_rank":
            found[f"rank_one_{side}"] = (
                f"{matrix} is constant on these data to tol = {tol:g} (m_{side.upper()} = 1): {name} carries nothing "
                f"into the model and every conditional law is the marginal of y. Likely cause: {lengthscale} far "
                f"longer than the spread of {name}. Change: standardise {name} or shorten {lengthscale}")
    return found


def solver_degeneracy(diagnostics: dict[str, Any], solver: str, budget: str) -> dict[str, str]:
    """The ``solver_unconverged`` finding when ``diagnostics["converged"]`` is False."""
    if diagnostics.get("converged", True):
        return {}
    return {"solver_unconverged": f"the {solver} stopped at its budget ({budget}) before converging; the "
                                  f"coefficients are its last iterate. Change: raise the budget, or a higher tol "
                                  f"(fewer basis functions) or a larger reg (a better-conditioned problem)"}


def marginal_degeneracy(ratio: float, rows: int, score: str) -> dict[str, str]:
    """The ``near_marginal`` finding when the model's loss is at least NEAR_MARGINAL of the marginal's."""
    if not np.isfinite(ratio) or ratio < NEAR_MARGINAL:
        return {}
    return {"near_marginal": (
        f"the conditional laws are close to the marginal law of y: on {rows:,} training rows the model's "
        f"{score} is {ratio:.3f} of the marginal's (1: x adds nothing). Likely causes: lengthscale_x far from "
        f"the scale of x (see the ranks), reg too large, a positivity rule that shrinks toward independence "
        f"(tightening, pointwise), or y independent of x. Change: tune lengthscales and reg (jdl tune), "
        f"standardise x, or use positivity='project'")}


def projection_degeneracy(record: dict) -> dict[str, str]:
    """The ``projection_failed`` finding where a ``JDL.projection_record`` has failed rows."""
    if not record.get("failed"):
        return {}
    return {"projection_failed": (
        f"at {100 * record['failed']:.2g}% of {record['rows']:,} training x rows no solver certified the moments "
        f"the projection can keep (level -2); those rows get the nearest probability vector at a lower level. "
        f"JDL.law_levels(X) finds them; docs/positivity.md says what each level means")}


def announce(degeneracies: dict[str, str], stacklevel: int = 3) -> None:
    """One ``DegeneracyWarning`` per finding (``GridBudgetWarning`` for a grid budget hit), kind first."""
    for kind, message in degeneracies.items():
        warnings.warn(_CATEGORIES.get(kind, DegeneracyWarning)(f"{kind}: {message}"), stacklevel=stacklevel)
