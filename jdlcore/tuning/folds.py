"""The train/validation splits of a tuning (folds): disjoint validation blocks of a seeded permutation
of the rows, each a ``validation_fraction`` of them, the other rows training. By default
(``folds="auto"``) one split validates ``MIN_VALIDATED_ROWS`` rows or more, and below that every row
is validated (5-fold cross-validation at a fraction of 0.2)."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .constants import MIN_VALIDATED_ROWS

__all__ = ["Fold", "subsample_rows", "split_rows", "resolve_folds", "fold_rows", "splits_for", "make_folds"]


# one train/validation split of a tuning: (X_train, Y_train, X_val, Y_val), rows by features
Fold = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def subsample_rows(n: int, max_rows: int, seed: int) -> np.ndarray:
    """Sorted indices of a seeded random subset of min(n, max_rows) of n rows."""
    if max_rows < 10:
        raise ValueError(f"max_rows: must be at least 10, got {max_rows}")
    if n <= max_rows:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, max_rows, replace=False))


def split_rows(n: int, validation_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, validation) row indices of a seeded random split; the validation part has
    round(validation_fraction * n) >= 1 rows. The first of ``fold_rows``'s folds."""
    return fold_rows(n, validation_fraction, 1, seed)[0]


def _blocks(n: int, validation_fraction: float) -> tuple[float, int]:
    """(s, K): the disjoint validation blocks of n rows (positions in a permutation) are
    [round(k s), round((k + 1) s)) for k < K, with s = validation_fraction * n rows (at least 1) and K
    as many as fit in n rows. The first has round(validation_fraction * n) >= 1 rows; at a fraction
    1 / K the K blocks cover every row."""
    if not 0 < validation_fraction < 1:
        raise ValueError(f"validation_fraction: must be in (0, 1), got {validation_fraction}")
    share = max(validation_fraction * n, 1.0)
    count = int(n // share)  # count * share <= n; one more block fits where rounding takes its end down to n
    return share, count + (round((count + 1) * share) <= n)


def resolve_folds(folds: int | str, n: int, validation_fraction: float, held_out: bool = False) -> int:
    """The number of folds of n rows: ``folds`` itself (an int from 1 to the number of disjoint
    validation blocks of ``validation_fraction`` that n rows hold, 5 at 0.2), or for "auto" one where a
    block has ``MIN_VALIDATED_ROWS`` rows or more, else every block (cross-validation: 5 folds at 0.2).
    ``held_out``: the candidates are scored on a validation set given, one fold ("auto" or 1).
    ``ValueError`` naming folds."""
    if held_out:
        if not (folds == "auto" or (folds == 1 and not isinstance(folds, bool))):
            raise ValueError(f"folds: the candidates are scored on the validation set given (one fold), got {folds!r}")
        return 1
    share, most = _blocks(n, validation_fraction)
    if isinstance(folds, str) and folds == "auto":
        return 1 if round(share) >= MIN_VALIDATED_ROWS else most
    if isinstance(folds, (bool, np.bool_)) or not isinstance(folds, (int, np.integer)) or not 1 <= folds <= most:
        raise ValueError(f"folds: must be 'auto' or an integer from 1 to {most} (the disjoint validation blocks of "
                         f"validation_fraction {validation_fraction:g} in {n:,} rows), got {folds!r}")
    return int(folds)


def fold_rows(n: int, validation_fraction: float, folds: int | str, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """(train, validation) row indices of seeded splits of n rows, as many as ``folds`` (``resolve_folds``:
    a number, or "auto"): the validation blocks are consecutive blocks of about validation_fraction * n
    rows of one seeded permutation (so disjoint; ``_blocks``), and each fold trains on the other
    rows; the first fold is ``split_rows``'s split. With validation_fraction 0.2 and 5 folds, 5-fold
    cross-validation: every row is validated once."""
    folds = resolve_folds(folds, n, validation_fraction)
    share, _ = _blocks(n, validation_fraction)
    bounds = [round(k * share) for k in range(folds + 1)]
    order = np.random.default_rng(seed).permutation(n)
    return [(np.concatenate([order[:start], order[stop:]]), order[start:stop])
            for start, stop in zip(bounds[:folds], bounds[1:folds + 1])]


def splits_for(n: int, validation_fraction: float, folds: int | str, seed: int, held_out: bool = False
               ) -> list[tuple[np.ndarray, np.ndarray]] | None:
    """``fold_rows`` of n rows, or None where the candidates are scored on a validation set given
    (``held_out``), ``folds`` then checked to be one fold (``resolve_folds``). Called before any work,
    so a bad ``folds`` fails first."""
    if held_out:
        resolve_folds(folds, n, validation_fraction, held_out=True)
        return None
    return fold_rows(n, validation_fraction, folds, seed)


def make_folds(X: np.ndarray, Y: np.ndarray, splits: Sequence[tuple[np.ndarray, np.ndarray]]) -> list[Fold]:
    """The ``Fold`` of each (train, validation) split of the rows of X and Y (``fold_rows``)."""
    return [(X[train], Y[train], X[val], Y[val]) for train, val in splits]
