"""Choosing the KCME's reg for compression as the paper does (App. C): validation of the KCME
fitted on random training subsets of 1,000 pairs (the paper's recipe avoids O(n^3) solves).

The validation loss of a KCME fitted on a subset S is its mean squared RKHS error on held-out
pairs, (1/n_v) sum_v ||l(y_v, .) - mu_S(x_v)||^2 - (1/n_v) sum_v l(y_v, y_v): exactly the ACKIP
objective of S evaluated on the validation pairs, so it costs one chunked pass per (subset, reg).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..kernels import Kernel
from ..validation import as_samples, check_paired, check_positive
from .objectives import ACKIPObjective
from .sources import ArraySource

__all__ = ["DEFAULT_REGS", "select_reg"]

DEFAULT_REGS = tuple(10.0 ** np.arange(-6, 2))


def select_reg(X: Any, Y: Any, *, kernel_x: Kernel, kernel_y: Kernel, regs: Any = DEFAULT_REGS,
               subset_size: int = 1000, n_subsets: int = 10, validation_fraction: float = 0.1,
               seed: int | None = 0) -> tuple[float, dict[str, Any]]:
    """The reg of the KCME W = (K + reg I)^{-1} chosen by validation, and the losses.

    A ``validation_fraction`` of the pairs is held out; on each of ``n_subsets`` random training
    subsets of ``subset_size`` pairs, every reg in ``regs`` is scored by the validation loss (module
    docstring); the result minimises the loss averaged over the subsets. (The paper averages the
    subsets' own minimisers instead; with ill-conditioned small-reg solves an outlying subset can
    then pull the average by orders of magnitude, which the averaged loss does not allow.)
    Returns (reg, {"regs", "losses" (n_subsets, len(regs)), "mean_loss" (len(regs),)}).
    """
    X, Y = as_samples(X, "X", min_rows=4), as_samples(Y, "Y", min_rows=4)
    check_paired(X, Y)
    regs = np.sort(np.atleast_1d(check_positive(regs, "regs")).astype(np.float64))
    if not 0 < validation_fraction < 1:
        raise ValueError(f"validation_fraction: must be in (0, 1), got {validation_fraction!r}")
    rng = np.random.default_rng(seed)
    order = rng.permutation(X.shape[0])
    held = max(1, int(round(validation_fraction * X.shape[0])))
    validation, training = order[:held], order[held:]
    size = min(int(subset_size), training.size)
    source = ArraySource(X[validation], Y[validation])
    losses = np.empty((int(n_subsets), regs.size))
    for s in range(int(n_subsets)):
        subset = rng.choice(training, size, replace=False)
        for r, reg in enumerate(regs):
            objective = ACKIPObjective(kernel_x, kernel_y, reg)
            losses[s, r] = objective.evaluate(X[subset], Y[subset], source, gradient=False).value
    mean_loss = losses.mean(axis=0)
    return float(regs[np.argmin(mean_loss)]), {"regs": regs, "losses": losses, "mean_loss": mean_loss}
