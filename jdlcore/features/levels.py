"""Category levels: the name of a categorical cell's level, and a table's columns read as a model's codes.

A categorical x column is stored as codes 0, 1, ... that index its levels (text, in order of first
appearance in the training rows). ``XColumns`` keeps a model's x column names and levels, so that a
table with those columns (a pandas DataFrame, or any object with ``columns`` and ``table[name]``) is
read as the rows the model was fitted on: the codes of its categorical cells looked up by level name,
its other columns as numbers, NaN where a value is missing.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

__all__ = ["XColumns", "level_name", "is_categorical", "is_number", "MISSING_LEVEL", "OTHER_CODE", "MIXED_LEVELS",
           "DETECT_ROWS"]

MISSING_LEVEL = "<missing>"  # the level of a categorical x cell that holds no value (NaN, None, empty text)
OTHER_CODE = -1.0  # the code of a level a model was not fitted on: it matches no level
# most distinct values of a column of numbers and text for it to be read as categories
MIXED_LEVELS = 50
DETECT_ROWS = 1000  # first rows of a column that decide whether it is text (categorical)


def level_name(value: Any) -> str | None:
    """The level a categorical cell holds, as text (None: missing). Strings are stripped; numbers are
    written canonically, so 3, 3.0 and "3" are one level (3)."""
    if value is None:
        return None
    if isinstance(value, (bytes, np.bytes_)):
        value = value.decode()
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return None
        try:
            value = float(text)
        except ValueError:
            return text
        if not np.isfinite(value):
            return text
    try:
        number = float(value)
    except TypeError:  # pandas' NA and NaT are missing; another object is named by its text
        return None if type(value).__name__ in ("NAType", "NaTType") else str(value)
    if np.isnan(number):
        return None
    return str(int(number)) if number.is_integer() else repr(number)


def is_categorical(values: Any) -> bool:
    """Whether a column looks categorical: it holds text, and either no number or at most
    ``MIXED_LEVELS`` distinct values (codes such as "K", 1, 2, 3). A column of many distinct numbers
    with a stray text cell is not: it is refused where that cell is read, naming the ways out."""
    present = [v for v in np.asarray(values, dtype=object) if level_name(v) is not None]
    numbers = sum(is_number(v) for v in present)
    if numbers == len(present):
        return False
    return numbers == 0 or len({level_name(v) for v in present}) <= MIXED_LEVELS


def is_number(value: Any) -> bool:
    """Whether ``float(value)`` reads the cell as a number."""
    try:
        float(value)
        return True
    except (TypeError, ValueError):
        return False


@dataclass(frozen=True)
class XColumns:
    """A model's x columns by name, in order, and the levels of its categorical ones ({name: levels})."""

    names: tuple[str, ...]
    levels: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def of(cls, names: Sequence[str], levels: dict[str, Sequence[str]] | None = None) -> "XColumns":
        return cls(tuple(map(str, names)), {str(k): tuple(map(str, v)) for k, v in (levels or {}).items()})

    @classmethod
    def learn(cls, table: Any) -> "XColumns":
        """The columns of a training ``table`` (a pandas DataFrame, say) as ``jdl stage`` reads them: a
        column of a categorical dtype, or one ``is_categorical`` finds on its first ``DETECT_ROWS`` cells
        (text, or text mixed with a few numbers), holds categories, whose levels are the cells' names
        (``level_name``; ``MISSING_LEVEL`` for a missing cell) in order of first appearance. Columns of
        numbers stay numbers (category codes among them are the caller's to declare, read as they are)."""
        names = [str(label) for label in table.columns]
        levels = {}
        for name, label in zip(names, table.columns):
            column = table[label]
            values = np.asarray(column, dtype=object).reshape(-1)
            dtype = getattr(column, "dtype", None)
            text = getattr(dtype, "kind", "O") == "O" and is_categorical(values[:DETECT_ROWS])
            if text or getattr(dtype, "name", "") == "category":
                named = (level_name(value) for value in dict.fromkeys(values))  # each distinct cell named once
                levels[name] = tuple(dict.fromkeys(MISSING_LEVEL if level is None else level for level in named))
        return cls(tuple(names), levels)

    @property
    def categorical(self) -> list[int]:
        """The positions of the categorical columns."""
        return [j for j, name in enumerate(self.names) if name in self.levels]

    def codes(self, table: Any, unseen: str = "refuse") -> np.ndarray:
        """The rows of ``table`` (n rows; the model's columns by name, others ignored) as float64 (n, d):
        categorical cells as their level's code (``unseen`` "other": a level the model lacks reads as
        ``OTHER_CODE``; "refuse": ``ValueError`` naming the column and the level), other cells as numbers,
        NaN where missing. ``ValueError`` naming a column the table lacks or a cell that is not a number."""
        have = {str(label): label for label in table.columns}  # labels as the model names them
        absent = [name for name in self.names if name not in have]
        if absent:
            raise ValueError(f"X: has no column {absent[0]!r}; the model reads {', '.join(self.names)}")
        columns = []
        for name in self.names:
            column = table[have[name]]
            columns.append(self._codes(name, np.asarray(column, dtype=object).reshape(-1), unseen)
                           if name in self.levels else _numbers(name, column))
        return np.column_stack(columns) if columns else np.empty((len(table), 0))

    def _codes(self, name: str, values: np.ndarray, unseen: str) -> np.ndarray:
        code = {level: float(k) for k, level in enumerate(self.levels[name])}
        read: dict[Any, float] = {}  # each distinct cell named once
        out = np.empty(values.size)
        for i, value in enumerate(values):
            if value not in read:
                level = level_name(value)
                level = MISSING_LEVEL if level is None else level
                if level not in code and unseen != "other":
                    known = ", ".join(self.levels[name])
                    raise ValueError(f"X column {name!r}: level {level!r} (row {i}) is not one the model was fitted "
                                     f"on ({known}); query with model.columns_.codes(X, unseen='other') to let it "
                                     "match no level")
                read[value] = code.get(level, OTHER_CODE)
            out[i] = read[value]
        return out


def _numbers(name: str, column: Any) -> np.ndarray:
    """A continuous column's cells as float64, NaN for a missing one (None, NaN, empty text)."""
    try:
        return np.asarray(column, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):  # None, text: read cell by cell
        pass
    values = np.asarray(column, dtype=object).reshape(-1)
    out = np.empty(values.size)
    for i, value in enumerate(values):
        if value is None or (isinstance(value, str) and not value.strip()):
            out[i] = np.nan
            continue
        try:
            out[i] = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"X column {name!r}: non-numeric value {value!r} at row {i}") from None
    return out
