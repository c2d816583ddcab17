"""The paper's diagnostics of a fitted JDL on its n training atoms (not on the support atoms).

``TrainingAtomDiagnostics`` is a mixin of ``jdlcore.models.jdl.JDL``: 1 + h(x, y) = 1 + Psi_Y(y) . g(x)
with the host's directions g(x_q) (q, m_Y) (``_directions``), read against the n training atoms block
by block (``Atoms.blocks``: rows, atoms (b, d_Y), Psi_Y at them (b, m_Y)), so nothing (q, n) is held
in memory but the answer of ``radon_nikodym``, which is (q, n) itself.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..solvers import grid_minimum

__all__ = ["TrainingAtomDiagnostics"]

_QUERY_ELEMENTS = 1 << 22  # (queries x training atoms) entries per batch of the n-atom diagnostics


class TrainingAtomDiagnostics:
    """Radon-Nikodym values, negative mass and share, and the grid minimum on the training atoms (a mixin:
    the host is a fitted ``JDL``)."""

    def density_ratio(self, Xq: Any, Yq: Any) -> np.ndarray:
        """The fitted Radon-Nikodym derivative 1 + h(x_i, y_i) = 1 + Psi_Y(y_i) H Psi_X(x_i)^T at pairs
        (x_i, y_i) anywhere, shape (q,): signed, before any projection of the laws."""
        Xq, Yq = self._query_pairs(Xq, Yq)
        return 1.0 + np.einsum("qm,qm->q", self.basis_y_.features(Yq), self._directions(Xq))

    def radon_nikodym(self, Xq: Any) -> np.ndarray:
        """1 + h(x_q, y_j) for queries x_q and every training atom y_j, shape (q, n)."""
        Xq = self._queries(Xq)
        g = self._directions(Xq)
        values = np.empty((Xq.shape[0], self.n_samples_))
        for rows, _, A in self.atoms_.blocks():
            np.matmul(g, A.T, out=values[:, rows])
        values += 1.0
        return values

    def negative_mass(self, Xq: Any) -> np.ndarray:
        """Negative weight of the signed law on the n training atoms, relative to its total, shape (q,)."""
        Xq = self._queries(Xq)
        negative, totals = np.zeros(Xq.shape[0]), np.zeros(Xq.shape[0])
        g = self._directions(Xq)
        for _, _, A in self.atoms_.blocks():  # atoms outside: one pass over them for all queries
            for sl in _batches(Xq.shape[0], A.shape[0]):
                values = g[sl] @ A.T
                values += 1.0
                negative[sl] += np.minimum(values, 0.0).sum(axis=1)
                totals[sl] += values.sum(axis=1)
        return negative / -totals

    def negative_share(self, Xq: Any, tol: float = 1e-12) -> np.ndarray:
        """Share of training atoms y_j with 1 + h(x_q, y_j) < -tol (a negative Radon-Nikodym value of the
        signed law), shape (q,); computed block by block, so never (q, n) in memory."""
        Xq = self._queries(Xq)
        counts = np.zeros(Xq.shape[0])
        g = self._directions(Xq)
        for _, _, A in self.atoms_.blocks():
            for sl in _batches(Xq.shape[0], A.shape[0]):
                counts[sl] += np.count_nonzero(g[sl] @ A.T < -1.0 - tol, axis=1)
        return counts / self.n_samples_

    def grid_minimum(self, X: Any) -> float:
        """min over training samples x_t and atoms y_s of 1 + h(x_t, y_s) (X: the training inputs)."""
        X = self._queries(X)
        psi = self.basis_x_.features(X)
        return min(grid_minimum(self.coef_, psi, A) for _, _, A in self.atoms_.blocks())


def _batches(q: int, atoms: int) -> list[slice]:
    """Query slices whose (queries x atoms) temporaries stay near ``_QUERY_ELEMENTS`` entries."""
    step = max(1, _QUERY_ELEMENTS // max(atoms, 1))
    return [slice(start, min(start + step, q)) for start in range(0, q, step)]
