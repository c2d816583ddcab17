"""Validation criteria of the paper's experiments.

* ``SecondMomentLoss``: the relative second-moment loss (40) with T(y) = y y^T. On test data with
  known conditional moments pass them as ``target``; on validation data the realised y_v y_v^T is
  the (unbiased) target and the loss is the pooled ratio sum ||T_v - E_hat||_F^2 / sum ||T_v||_F^2,
  which stays finite when some |y_v| is near 0.
* ``ClippedLogisticLoss``: the clipped binary cross-entropy (41) of the event Y <= threshold,
  probabilities clipped to [eta, 1].
* ``CRPSLoss``: the mean continuous ranked probability score of the conditional laws (scalar Y),
  exact for weighted atoms; a proper score of the whole law, in the units of Y.
* ``PinballLoss``: the mean pinball (quantile) loss of the conditional quantiles at given levels
  (scalar Y). Twice its mean over levels spread evenly on (0, 1) tends to the CRPS.
* ``LogLoss``: the mean negative log density of the observed y under the conditional law smoothed by
  the y kernel (``smoothed_log_density``): the weighted atoms are a law without a density, and the
  model's own y kernel, normalised, is the smoothing it already works at. For a delta y kernel (a
  discrete y) the law is a probability mass function and the loss is -log Q(Y = y | x).
Every criterion is a callable (model, X_val, Y_val) -> float, lower is better; ``scalar_y`` says
whether it needs a scalar Y.
"""
from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["SecondMomentLoss", "ClippedLogisticLoss", "CRPSLoss", "PinballLoss", "LogLoss", "smoothed_log_density",
           "pinball_loss", "pinball_losses", "second_moment", "conditional_second_moments",
           "relative_second_moment_loss", "clipped_logistic_loss"]


def second_moment(y: np.ndarray) -> np.ndarray:
    """T(y) = y y^T for atoms y (n, d) -> (n, d, d)."""
    return y[:, :, None] * y[:, None, :]


def conditional_second_moments(model: Any, X: np.ndarray) -> np.ndarray:
    """E[Y Y^T | x_q] for queries X (q, d_x), shape (q, d_y, d_y). A model fitted on a problem built
    with ``test_functions={"second_moment": second_moment}`` (or one that registered it) answers from
    those m-sized sums; otherwise the expectation runs over every atom."""
    registered = getattr(model, "registered_", {})
    if "second_moment" in registered and not getattr(model, "clips", False):
        return model.expectation("second_moment", X)
    return model.conditional_expectation(X, second_moment)


def relative_second_moment_loss(predicted: np.ndarray, target: np.ndarray, pooled: bool = False) -> float:
    """(40): mean over queries of ||target - predicted||_F^2 / ||target||_F^2 (or the pooled ratio)."""
    error = np.sum((target - predicted) ** 2, axis=(1, 2))
    norm = np.sum(target**2, axis=(1, 2))
    if pooled:
        return float(error.sum() / norm.sum())
    return float(np.mean(error / norm))


def clipped_logistic_loss(probability: np.ndarray, event: np.ndarray, eta: float = 1e-12) -> float:
    """(41): -mean(I log min(1, max(p, eta)) + (1 - I) log max(eta, min(1 - p, 1)))."""
    p = np.asarray(probability, dtype=np.float64)
    event = np.asarray(event, dtype=bool)
    positive = np.log(np.minimum(1.0, np.maximum(p, eta)))
    negative = np.log(np.maximum(eta, np.minimum(1.0 - p, 1.0)))
    return float(-np.mean(np.where(event, positive, negative)))


def pinball_losses(quantiles: np.ndarray, observed: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """The pinball loss rho_tau(y - q) = max(tau (y - q), (tau - 1)(y - q)) of each row and level, (q, L),
    for quantiles (q, L) at ``levels`` (L,) and observations (q,)."""
    residual = np.asarray(observed, dtype=np.float64)[:, None] - quantiles
    return np.maximum(levels * residual, (levels - 1.0) * residual)


def pinball_loss(quantiles: np.ndarray, observed: np.ndarray, levels: np.ndarray) -> float:
    """Mean over rows and levels of the pinball loss (``pinball_losses``)."""
    return float(np.mean(pinball_losses(quantiles, observed, levels)))


class SecondMomentLoss:
    """Relative second-moment loss (40); ``target`` (q, d, d) overrides the realised y y^T."""

    name = "second_moment"
    scalar_y = False

    def __init__(self, target: np.ndarray | None = None):
        self.target = target

    def __call__(self, model: Any, X: np.ndarray, Y: np.ndarray) -> float:
        predicted = conditional_second_moments(model, X)
        if self.target is not None:
            return relative_second_moment_loss(predicted, self.target)
        return relative_second_moment_loss(predicted, second_moment(np.atleast_2d(Y.T).T), pooled=True)


class ClippedLogisticLoss:
    """Clipped logistic loss (41) of the event Y <= threshold (scalar Y)."""

    name = "logistic"
    scalar_y = True

    def __init__(self, threshold: float, eta: float = 1e-12):
        self.threshold = float(threshold)
        self.eta = float(eta)

    def __call__(self, model: Any, X: np.ndarray, Y: np.ndarray) -> float:
        probability = model.conditional_cdf(X, [self.threshold])[:, 0]
        event = np.asarray(Y).reshape(len(probability), -1)[:, 0] <= self.threshold
        return clipped_logistic_loss(probability, event, self.eta)


class CRPSLoss:
    """Mean CRPS of the conditional laws at the validation rows (``model.crps``: exact for the weighted
    support atoms; scalar Y)."""

    name = "crps"
    scalar_y = True

    def __call__(self, model: Any, X: np.ndarray, Y: np.ndarray) -> float:
        return float(np.mean(model.crps(X, np.asarray(Y).reshape(len(X), -1)[:, :1])))


class PinballLoss:
    """Mean pinball loss of the conditional quantiles at ``levels`` in (0, 1) (scalar Y)."""

    scalar_y = True

    def __init__(self, levels: Any):
        levels = np.atleast_1d(np.asarray(levels, dtype=np.float64))
        if levels.ndim != 1 or levels.size == 0 or not np.all((levels > 0) & (levels < 1)):
            raise ValueError(f"levels: the pinball criterion needs levels in (0, 1), got {levels.tolist()}")
        self.levels = levels
        self.name = "pinball:" + ",".join(f"{level:g}" for level in levels)

    def __call__(self, model: Any, X: np.ndarray, Y: np.ndarray) -> float:
        observed = np.asarray(Y).reshape(len(X), -1)[:, 0]
        return pinball_loss(model.conditional_quantile(X, self.levels), observed, self.levels)


def smoothed_log_density(model: Any, X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """log p(y_i | x_i), shape (n,), of the conditional law on the support atoms a_j (weights w_ij)
    smoothed by the model's y kernel: for a Gaussian y kernel of lengthscale h (per y feature, in y's
    units) p(y | x) = sum_j w_j prod_k N(y_k; a_jk, h_k^2), a true density (the weights are >= 0 and sum
    to 1); for a delta y kernel, log Q(Y = y | x) (-inf for a y on no atom). ``ValueError`` for another y
    kernel."""
    kernel = model.basis_y_.kernel  # the fitted y kernel, its scaling included
    weights = np.asarray(model.conditional_weights(X), dtype=np.float64)
    atoms = np.asarray(model.law_atoms_, dtype=np.float64)
    Y = np.asarray(Y, dtype=np.float64).reshape(len(X), -1)
    with np.errstate(divide="ignore"):
        log_weights = np.log(weights)
    if kernel.name == "delta":
        on_atom = np.all(Y[:, None, :] == atoms[None, :, :], axis=2)  # (n, M)
        return np.log(np.where(on_atom, weights, 0.0).sum(axis=1))
    if kernel.name != "gaussian":
        raise ValueError(f"criterion: log needs a Gaussian (or delta) y kernel for its smoothed density, the model's "
                         f"is {kernel.name}")
    h = np.broadcast_to(np.asarray(kernel.data_lengthscale, dtype=np.float64), (Y.shape[1],))
    squared = np.zeros(weights.shape)
    for k in range(Y.shape[1]):
        squared += np.square((Y[:, k, None] - atoms[None, :, k]) / h[k])
    terms = log_weights - 0.5 * squared
    top = terms.max(axis=1)
    finite = np.isfinite(top)
    total = np.full(len(X), -np.inf)
    total[finite] = top[finite] + np.log(np.exp(terms[finite] - top[finite, None]).sum(axis=1))
    return total - float(np.sum(np.log(h))) - 0.5 * Y.shape[1] * np.log(2.0 * np.pi)


class LogLoss:
    """Mean negative log density of the validation y under the smoothed conditional laws
    (``smoothed_log_density``; nats, in y's units)."""

    name = "log"
    scalar_y = False

    def __call__(self, model: Any, X: np.ndarray, Y: np.ndarray) -> float:
        return float(-np.mean(smoothed_log_density(model, X, Y)))
