"""Rows as the pipeline carries them: a tuple of numpy arrays, one per column.

User sources may yield scalars, lists, bytes, numpy arrays or Tensors (``jax.Array``); they are converted here once,
with MindSpore's rules (bytes become uint8 arrays, a lone value is a one-column row, dicts and object arrays are
refused), so every later stage can rely on the tuple-of-arrays shape.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from graphpar.errors import DatasetError

Row = tuple[np.ndarray, ...]


def to_array(value: Any, where: str) -> np.ndarray:
    """One column value as a numpy array (scalars become 0-d arrays)."""
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, np.generic):  # a numpy scalar (a label read from an array)
        return np.asarray(value)
    if isinstance(value, (bytes, bytearray)):
        return np.frombuffer(bytes(value), dtype=np.uint8)
    if isinstance(value, dict):
        raise DatasetError(f"{where}: a column value is a dict; yield a tuple of numpy arrays, one per column")
    array = np.asarray(value)
    if array.dtype == object:
        raise DatasetError(f"{where}: a column value of type {type(value).__name__} does not convert to a numeric or "
                           "string numpy array; yield int, float, str, bytes, numpy arrays or Tensors")
    return array


def to_row(value: Any, columns: Sequence[str], where: str) -> Row:
    """A source's item as a row of ``len(columns)`` arrays, with an error naming the mismatch."""
    if isinstance(value, dict):
        raise DatasetError(f"{where}: got a dict; yield a tuple of numpy arrays in the order of column_names "
                           f"{list(columns)}")
    if type(value) is tuple and len(value) == len(columns):
        if all(type(v) is np.ndarray for v in value):
            return value  # the common case, already a row
        if all(isinstance(v, (np.ndarray, np.generic)) for v in value):  # arrays and numpy scalars (labels)
            return tuple(v if type(v) is np.ndarray else np.asarray(v) for v in value)
    if isinstance(value, (tuple, list)):
        items = tuple(value)
    else:
        items = (value,)
    if len(items) != len(columns):
        raise DatasetError(f"{where}: a row has {len(items)} value(s) but column_names has {len(columns)} "
                           f"({list(columns)}); make them match")
    return tuple(to_array(v, where) for v in items)


def stack_rows(rows: Sequence[Row], columns: Sequence[str]) -> Row:
    """Rows stacked column by column along a new first axis (what ``.batch`` returns)."""
    return tuple(stack_column([r[c] for r in rows], name) for c, name in enumerate(columns))


def stack_column(values: Sequence[np.ndarray], name: str) -> np.ndarray:
    """One column's values stacked, or an error naming the column when their shapes differ."""
    shapes = {v.shape for v in values}
    if len(shapes) > 1:
        raise DatasetError(f"batch: column {name!r} has rows of different shapes {sorted(shapes)}; "
                           "resize or pad them to one shape before .batch (or batch_size=1)")
    return np.stack(values)


def names(value: str | Sequence[str] | None, what: str) -> list[str] | None:
    """A column-name argument (a str or a list of str) as a list, with an error naming ``what`` was wrong."""
    if value is None:
        return None
    items = [value] if isinstance(value, str) else list(value)
    if not items or not all(isinstance(n, str) and n for n in items):
        raise DatasetError(f"{what} must be a non-empty str or list of non-empty str, got {value!r}")
    if len(set(items)) != len(items):
        raise DatasetError(f"{what} has duplicate names: {items}")
    return items


def positions(wanted: Sequence[str], columns: Sequence[str], what: str) -> tuple[int, ...]:
    missing = [n for n in wanted if n not in columns]
    if missing:
        raise DatasetError(f"{what}: column(s) {missing} do not exist; the columns here are {list(columns)}")
    return tuple(columns.index(n) for n in wanted)
