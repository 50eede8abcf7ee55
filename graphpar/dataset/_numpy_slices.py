"""``NumpySlicesDataset``: rows sliced from in-memory arrays along their first dimension (MindSpore's).

``data`` is a numpy array or a list (one column), a tuple of them (one column each), or a dict (one column per key,
named by the keys). Row ``i`` holds element ``i`` of every column, so every column must have the same length. It is
a random-accessible :class:`GeneratorDataset` source: it shuffles (by default), samples and shards like one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from graphpar.dataset._generator import GeneratorDataset
from graphpar.errors import DatasetError


class _Slices:
    """Columns of equal length; item ``i`` is the tuple of their ``i``-th elements."""

    def __init__(self, columns: list[np.ndarray]):
        self.columns = columns

    def __len__(self) -> int:
        return len(self.columns[0])

    def __getitem__(self, i: int) -> tuple:
        return tuple(c[i] for c in self.columns)


def _column(value: Any, where: str) -> np.ndarray:
    try:
        array = np.asarray(value)
    except ValueError as exc:  # ragged lists
        raise DatasetError(f"NumpySlicesDataset: {where} cannot become one array ({exc}); give equal-shaped "
                           "elements") from None
    if array.ndim == 0:
        raise DatasetError(f"NumpySlicesDataset: {where} is a scalar ({array!r}); each column needs a first "
                           "dimension to slice rows from")
    return array


def _columns(data: Any, column_names: Sequence[str] | None) -> tuple[list[np.ndarray], list[str]]:
    if isinstance(data, dict):
        if not data:
            raise DatasetError("NumpySlicesDataset: data is an empty dict; give {'column': array, ...}")
        names = [str(k) for k in data]
        if column_names is not None and list(column_names) != names:
            raise DatasetError(f"NumpySlicesDataset: column_names {list(column_names)} differ from the dict's keys "
                               f"{names}; with a dict the keys name the columns")
        return [_column(v, f"data[{k!r}]") for k, v in data.items()], names
    if isinstance(data, tuple):
        columns = [_column(v, f"data[{i}]") for i, v in enumerate(data)]
    elif isinstance(data, (list, np.ndarray)):
        columns = [_column(data, "data")]
    else:
        raise DatasetError(f"NumpySlicesDataset: data must be a list, tuple, dict or numpy array, got "
                           f"{type(data).__name__}")
    if column_names is None:
        names = [f"column_{i}" for i in range(len(columns))]
    else:
        names = [column_names] if isinstance(column_names, str) else list(column_names)
        if len(names) != len(columns):
            raise DatasetError(f"NumpySlicesDataset: {len(names)} column_names {names} for {len(columns)} column(s) "
                               "of data")
    return columns, names


class NumpySlicesDataset(GeneratorDataset):
    """``NumpySlicesDataset(data, column_names=None, num_samples=None, num_parallel_workers=None, shuffle=None,
    sampler=None, num_shards=None, shard_id=None)``. MindSpore's default is 1 worker; graphpar's None starts at 1
    and lets ``Model.train`` raise it (docs/datasets.md, 'Parallel workers')."""

    def __init__(self, data: Any, column_names: Sequence[str] | str | None = None, num_samples: int | None = None,
                 num_parallel_workers: int | None = None, shuffle: bool | None = None, sampler: Any = None,
                 num_shards: int | None = None, shard_id: int | None = None):
        columns, names = _columns(data, column_names)
        lengths = {name: len(c) for name, c in zip(names, columns)}
        if len(set(lengths.values())) > 1:
            raise DatasetError(f"NumpySlicesDataset: the columns have different lengths {lengths}; every column "
                               "needs one element per row")
        super().__init__(_Slices(columns), names, num_samples=num_samples, num_parallel_workers=num_parallel_workers,
                         shuffle=shuffle, sampler=sampler, num_shards=num_shards, shard_id=shard_id,
                         python_multiprocessing=False)
