"""Missing values in x, read by a kernel as a state of their own.

A continuous column j that misses values in the training rows is read as two columns: its values with
each missing one replaced by a fill value f_j (the median of the column's present training values),
and a 0/1 indicator of "missing", a categorical column of its own. An x kernel is a radial profile phi
of a sum of per-column squared distances (``jdlcore.kernels``); along column j two rows a, b then add

    s_j(a, b) = ((a~_j - b~_j) / l_j)^2 + [m_a != m_b] / l_miss_j^2

where a~ is the filled value and m the indicator: as before between two present values, 0 between two
missing ones, and between a present and a missing value the distance to the fill value plus a mismatch
1 / l_miss_j^2 (for the Gaussian kernel, phi(s) = exp(-s / 2), a factor exp(-1 / (2 l_miss_j^2))). For 0/1
indicators [m_a != m_b] = (m_a - m_b)^2, so the kernel is its own profile of the Euclidean distance
between the rows' embeddings (..., a~_j / l_j, m_a / l_miss_j, ...): positive definite wherever the
kernel is. The indicator's lengthscale is chosen like any column's: a short one keeps missing rows apart
from present ones, a long one reads a missing value as the median.

A column with no missing value in the training rows (or in the sample of them the rule is learned from)
gets no indicator; a value missing there at a query is read as its fill value (the median), the only
reading those rows support. Categorical columns
carry their missing values as a level of their own upstream (codes), and are filled here, where a NaN
code still reaches them, with a code no training level has (``UNSEEN_CODE``: it matches no level).

``MissingValues.learn`` takes the rule's numbers from training rows; ``augment`` applies it to any rows.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

__all__ = ["MissingValues", "INDICATOR_SUFFIX", "UNSEEN_CODE"]

INDICATOR_SUFFIX = " missing"  # the indicator of column "age" is named "age missing"
UNSEEN_CODE = -1.0  # the code a missing categorical value takes: it matches no training level


@dataclass(frozen=True)
class MissingValues:
    """How rows of x (n, width) with missing values (NaN) are read by a kernel.

    Attributes
    ----------
    width:
        The number of x columns the rows have.
    fill:
        Shape (width,): the value each column takes where it is missing (the median of its present
        training values; ``UNSEEN_CODE`` for a categorical column).
    flagged:
        The columns, ascending, that missed values in the training rows and so get an indicator column,
        appended after the ``width`` columns in this order.
    """

    width: int
    fill: tuple[float, ...]
    flagged: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.fill) != self.width or not all(np.isfinite(self.fill)):
            raise ValueError(f"missing values: needs {self.width} finite fill values, got {list(self.fill)!r}")
        if list(self.flagged) != sorted(set(self.flagged)) or any(not 0 <= j < self.width for j in self.flagged):
            raise ValueError(f"missing values: flagged columns must be distinct, ascending and below {self.width}, "
                             f"got {list(self.flagged)!r}")

    @classmethod
    def learn(cls, X: Any, categorical: Sequence[int] = ()) -> "MissingValues":
        """The rule for rows like the training rows X (n, width), NaN where a value is missing: each
        continuous column that misses a value in X is flagged. ``categorical``: the columns of category
        codes (filled with ``UNSEEN_CODE``, never flagged). A column with no present value in X is a
        ``ValueError`` naming it.
        """
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[0] == 0:
            raise ValueError(f"missing values: X must be a non-empty 2-D array, got shape {X.shape}")
        codes = set(int(c) for c in categorical)
        absent = np.isnan(X)
        empty = [j for j in range(X.shape[1]) if j not in codes and absent[:, j].all()]
        if empty:
            raise ValueError(f"x column {empty[0]}: every value is missing; a column needs present values")
        fill = [UNSEEN_CODE if j in codes else float(np.median(X[~absent[:, j], j])) for j in range(X.shape[1])]
        flagged = tuple(j for j in range(X.shape[1]) if j not in codes and absent[:, j].any())
        return cls(X.shape[1], tuple(fill), flagged)

    def augment(self, X: Any) -> np.ndarray:
        """The rows X (n, width) as the kernel reads them, float64 (n, width + len(flagged)): NaNs
        replaced by the fill values, then one indicator column per flagged column (1.0: missing)."""
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != self.width:
            raise ValueError(f"x: the missing-value rule was learned on {self.width} columns, got shape {X.shape}")
        absent = np.isnan(X)
        filled = np.where(absent, np.asarray(self.fill), X)
        return np.hstack([filled, absent[:, list(self.flagged)].astype(np.float64)])

    def features(self, names: Sequence[str]) -> list[str]:
        """The names of the columns ``augment`` returns: ``names`` (width of them), then each flagged
        column's name followed by ``INDICATOR_SUFFIX``."""
        if len(names) != self.width:
            raise ValueError(f"x: {len(names)} names for a rule on {self.width} columns")
        return list(names) + [names[j] + INDICATOR_SUFFIX for j in self.flagged]

    def categorical(self, categorical: Sequence[int]) -> list[int]:
        """The categorical columns among those ``augment`` returns: ``categorical`` and the indicators."""
        return sorted(int(c) for c in categorical) + list(range(self.width, self.width + len(self.flagged)))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: floats written by repr round-trip exactly."""
        return {"width": self.width, "fill": [float(v) for v in self.fill], "flagged": list(self.flagged)}

    @classmethod
    def from_dict(cls, spec: Any, where: str = "missing values") -> "MissingValues":
        """The rule from ``to_dict``'s record; ``ValueError`` naming ``where`` for any other record."""
        try:
            fill, flagged = tuple(float(v) for v in spec["fill"]), tuple(int(j) for j in spec["flagged"])
            return cls(int(spec["width"]), fill, flagged)
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"{where}: not a missing-value rule ({error})") from None
