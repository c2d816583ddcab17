"""Goldfarb–Idnani dual active-set method for a diagonal QP with a growing pool of constraints.

Problem: minimise 1/2 h^T D h - g^T h subject to e^T h = 0 (optional) and c_k^T h >= -beta_k,
with D > 0 diagonal. With y = D^{1/2} h it becomes the Euclidean projection of y0 = D^{-1/2} g
onto a polyhedron, i.e. a QP with identity Hessian, for which the Goldfarb–Idnani method is simple:
the iterate is always the minimiser over the current active set (dual feasible), the most violated
pooled constraint is added, and constraints whose multiplier would turn negative are dropped on the
way (partial steps). It terminates in finitely many steps with the exact solution, copes with more
constraints than variables and with linearly dependent normals, and new constraints can be pooled
at any time without restarting: ideal for cutting planes.

Reference: D. Goldfarb and A. Idnani, "A numerically stable dual method for solving strictly convex
quadratic programs", Math. Programming 27 (1983).
"""
from __future__ import annotations

import numpy as np
from scipy.linalg import solve_triangular

__all__ = ["ProjectionQP"]


class ProjectionQP:
    """Incremental Goldfarb–Idnani solver in the scaled variables y = D^{1/2} h.

    Parameters
    ----------
    D: (M,) positive curvature; g: (M,) linear term; equality: optional (M,) normal e.
    tol: a constraint counts as violated when c^T h + beta < -tol.

    The active normals N (M x q) are kept as an economic QR factorisation N = Q R in preallocated
    buffers (Q Fortran-ordered, so a column is contiguous); adding a constraint appends a column by
    re-orthogonalised Gram–Schmidt, dropping one restores R by Givens rotations: O(M q) each.
    """

    def __init__(self, D: np.ndarray, g: np.ndarray, equality: np.ndarray | None = None, tol: float = 1e-12):
        self.root = np.sqrt(D)
        self.y = g / self.root
        self.tol = tol
        M = D.size
        self._pool = np.zeros((0, M))  # scaled normals a_k = c_k / sqrt(D), one per row
        self._beta = np.zeros(0)
        self._active: list[int] = []  # pool indices; -1 stands for the equality
        self._u = np.zeros(0)  # multipliers of the active constraints
        capacity = min(M, 64)
        self._Q = np.zeros((M, capacity), order="F")
        self._R = np.zeros((capacity, capacity))
        self._equality = None
        self.iterations = 0
        if equality is not None and np.any(equality):
            self._equality = equality / self.root
            normal = self._equality
            step = -float(normal @ self.y) / float(normal @ normal)
            self.y = self.y + step * normal
            self._append_column(normal)
            self._active = [-1]
            self._u = np.array([step])

    @property
    def h(self) -> np.ndarray:
        """Current primal solution h = D^{-1/2} y."""
        return self.y / self.root

    def multipliers(self) -> np.ndarray:
        """Multiplier of every pooled inequality (0 when inactive)."""
        out = np.zeros(self._beta.size)
        for index, value in zip(self._active, self._u):
            if index >= 0:
                out[index] = value
        return out

    def add(self, normals: np.ndarray, beta: np.ndarray) -> None:
        """Pool constraints c_k^T h >= -beta_k; ``normals`` has shape (k, M)."""
        self._pool = np.vstack([self._pool, normals / self.root])
        self._beta = np.concatenate([self._beta, beta])

    def prune(self) -> int:
        """Forget pooled constraints that are not active; returns how many were dropped.

        Safe between solves: the iterate stays the optimum over its active set (dual feasible),
        so the dual objective keeps increasing and a forgotten constraint that is violated later
        is simply pooled again.
        """
        keep = sorted(k for k in self._active if k >= 0)
        dropped = self._beta.size - len(keep)
        remap = {old: new for new, old in enumerate(keep)}
        self._pool = self._pool[keep]
        self._beta = self._beta[keep]
        self._active = [remap[k] if k >= 0 else k for k in self._active]
        return dropped

    def solve(self, max_iter: int = 100_000) -> int:
        """Run until no pooled constraint is violated; returns the number of GI iterations."""
        done = 0
        while done < max_iter and self._beta.size:
            slack = self._pool @ self.y + self._beta
            slack[[k for k in self._active if k >= 0]] = np.inf
            p = int(np.argmin(slack))
            if slack[p] >= -self.tol:
                break
            self._add_constraint(p)
            done += 1
        self.iterations += done
        return done

    # -- Goldfarb–Idnani step ---------------------------------------------------------------------
    def _add_constraint(self, p: int) -> None:
        normal = self._pool[p]
        u_p = 0.0
        for _ in range(10 * (len(self._active) + 2)):
            q = len(self._active)
            Q, R = self._Q[:, :q], self._R[:q, :q]
            projection = Q.T @ normal
            z = normal - Q @ projection
            z -= Q @ (Q.T @ z)  # re-orthogonalise
            r = solve_triangular(R, projection, check_finite=False) if q else projection
            dependent = np.linalg.norm(z) <= 1e-12 * np.linalg.norm(normal)
            # partial step: largest t keeping the active inequality multipliers >= 0
            t1, drop = np.inf, -1
            inequality = np.array([k >= 0 for k in self._active], dtype=bool)
            candidates = np.flatnonzero(inequality & (r > 0))
            if candidates.size:
                ratios = self._u[candidates] / r[candidates]
                best = int(np.argmin(ratios))
                t1, drop = float(ratios[best]), int(candidates[best])
            slack = float(normal @ self.y) + self._beta[p]
            t2 = np.inf if dependent else -slack / float(z @ normal)
            t = min(t1, t2)
            if not np.isfinite(t):
                raise RuntimeError("active-set QP: constraints are infeasible")
            if not dependent:
                self.y = self.y + t * z
            self._u = self._u - t * r
            u_p += t
            if t2 <= t1:
                self._append_column(normal)
                self._active.append(p)
                self._u = np.append(self._u, u_p)
                return
            self._remove_column(drop)
            del self._active[drop]
            self._u = np.delete(self._u, drop)
        raise RuntimeError("active-set QP: cycling while adding a constraint")  # pragma: no cover

    def _append_column(self, normal: np.ndarray) -> None:
        q = len(self._active)
        if q == self._Q.shape[1]:
            capacity = min(self._Q.shape[0], 2 * q)
            Q = np.zeros((self._Q.shape[0], capacity), order="F")
            Q[:, :q] = self._Q[:, :q]
            R = np.zeros((capacity, capacity))
            R[:q, :q] = self._R[:q, :q]
            self._Q, self._R = Q, R
        Q = self._Q[:, :q]
        coefficients = Q.T @ normal
        residual = normal - Q @ coefficients
        correction = Q.T @ residual
        residual -= Q @ correction
        self._R[:q, q] = coefficients + correction
        self._R[q, q] = np.linalg.norm(residual)
        self._Q[:, q] = residual / self._R[q, q]
        self._R[q + 1 :, q] = 0.0

    def _remove_column(self, position: int) -> None:
        """Delete active column ``position`` and restore R to triangular form with Givens rotations."""
        q = len(self._active)
        R, Q = self._R, self._Q
        R[:q, position : q - 1] = R[:q, position + 1 : q].copy()
        R[:q, q - 1] = 0.0
        for k in range(position, q - 1):
            a, b = R[k, k], R[k + 1, k]
            radius = np.hypot(a, b)
            if radius == 0.0:
                continue
            c, s = a / radius, b / radius
            rows = R[k : k + 2, k : q - 1]
            top = c * rows[0] + s * rows[1]
            rows[1] = -s * rows[0] + c * rows[1]
            rows[0] = top
            R[k + 1, k] = 0.0
            left = Q[:, k].copy()
            Q[:, k] = c * left + s * Q[:, k + 1]
            Q[:, k + 1] = -s * left + c * Q[:, k + 1]
        R[q - 1, : q] = 0.0
