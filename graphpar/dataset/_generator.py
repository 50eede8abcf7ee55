"""``GeneratorDataset``: rows from user Python code.

Three kinds of ``source``, told apart as MindSpore does:

- random-accessible (``__getitem__`` and ``__len__``): read by index like the file readers, so it shuffles
  (by default), shards, samples and runs on worker processes;
- iterable (``iter(source)`` works): read front to back, ``iter`` called anew each epoch;
- a callable returning a generator (``def generate(): yield ...``): called anew each epoch.

The last two cannot be shuffled by index, sampled or sharded: asking for that is an error here (MindSpore silently
ignores ``shuffle`` for them). Chain ``.shuffle(buffer_size)`` instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from graphpar.dataset._pipeline import Dataset
from graphpar.dataset._rows import Row, names, to_row
from graphpar.dataset._source import SourceDataset
from graphpar.dataset._stream import Build
from graphpar.errors import DatasetError


class _Checked:
    """User rows converted to tuples of arrays, with ``column_types`` checked."""

    def __init__(self, columns: Sequence[str], column_types: Sequence[Any] | None):
        self.columns = list(columns)
        self.types = [np.dtype(t) for t in column_types] if column_types else None
        if self.types is not None and len(self.types) != len(self.columns):
            raise DatasetError(f"GeneratorDataset: column_types has {len(self.types)} entries for "
                               f"{len(self.columns)} columns {self.columns}")

    def __call__(self, value: Any, where: str) -> Row:
        row = to_row(value, self.columns, where)
        if self.types is not None:
            for name, v, t in zip(self.columns, row, self.types):
                if v.dtype != t:
                    raise DatasetError(f"{where}: column {name!r} has dtype {v.dtype} but column_types says {t}; "
                                       "cast it in the source or fix column_types")
        return row


class _IndexedReader:
    """A random-accessible user source as a reader."""

    def __init__(self, source: Any, check: _Checked):
        self.source, self.check = source, check

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, i: int) -> Row:
        return self.check(self.source[i], f"GeneratorDataset source[{i}]")


def _is_random_access(source: Any) -> bool:
    return hasattr(source, "__getitem__") and hasattr(source, "__len__")


def _iterable(source: Any) -> bool:
    try:
        iter(source)
    except TypeError:
        return False
    return True


class GeneratorDataset(SourceDataset):
    """A dataset whose rows come from ``source`` (see the module docstring for the kinds of source).

    Each row is a tuple with one value per name in ``column_names``; values become numpy arrays (scalars 0-d).
    ``num_parallel_workers`` None (MindSpore's default is 1) starts at 1 and lets ``Model.train`` raise it; a number
    is kept (docs/datasets.md, 'Parallel workers').
    """

    def __init__(self, source: Callable[[], Any] | Any, column_names: str | Sequence[str] | None = None,
                 column_types: Sequence[Any] | None = None, schema: Any = None, num_samples: int | None = None,
                 num_parallel_workers: int | None = None, shuffle: bool | None = None, sampler: Any = None,
                 num_shards: int | None = None, shard_id: int | None = None, python_multiprocessing: bool = True):
        if schema is not None:
            raise DatasetError("GeneratorDataset: schema is not supported by graphpar; pass column_names (and "
                               "column_types to check dtypes)")
        columns = names(column_names, "GeneratorDataset: column_names")
        if columns is None:
            raise DatasetError("GeneratorDataset: column_names is required, e.g. ['data', 'label']")
        if isinstance(source, zip):
            source = list(source)  # a zip is exhausted after one pass; MindSpore materializes it too
        if not callable(source) and not _iterable(source):
            raise DatasetError(f"GeneratorDataset: source must be callable, iterable or random accessible "
                               f"(__getitem__ and __len__), got {type(source).__name__}")
        self._check = _Checked(columns, column_types)
        self.python_multiprocessing = bool(python_multiprocessing)
        self._user_source = source
        if _is_random_access(source):
            super().__init__(_IndexedReader(source, self._check), columns, num_samples=num_samples,
                             num_parallel_workers=num_parallel_workers, shuffle=shuffle, sampler=sampler,
                             num_shards=num_shards, shard_id=shard_id)
            self._indexed = True
            return
        for name, value in (("shuffle", shuffle if shuffle else None), ("sampler", sampler),
                            ("num_shards", num_shards), ("shard_id", shard_id)):
            if value is not None:
                raise DatasetError(f"GeneratorDataset: {name} needs a random-accessible source (one with "
                                   f"__getitem__ and __len__), but {type(source).__name__} is only "
                                   f"{'iterable' if _iterable(source) else 'callable'}; chain .shuffle(buffer_size) "
                                   "to shuffle it, or make the source indexable to sample or shard it")
        Dataset.__init__(self, None, num_parallel_workers)
        self._indexed = False
        self._column_names = list(columns)
        self._num_samples = num_samples
        self._num_classes = None
        if num_samples is not None and (not isinstance(num_samples, int) or num_samples < 0):
            raise DatasetError(f"GeneratorDataset: num_samples must be an int >= 0, got {num_samples!r}")

    def _random_access(self) -> bool:
        return self._indexed

    def _length(self) -> int | None:
        if self._indexed:
            return super()._length()
        if hasattr(self._user_source, "__len__"):
            n = len(self._user_source)
            return min(n, self._num_samples) if self._num_samples else n
        return None

    def _rows(self, build: Build) -> Iterator[Row]:
        if self._indexed:
            yield from super()._rows(build)
            return
        source = self._user_source
        it = iter(source) if _iterable(source) else iter(source())
        limit = self._num_samples or None
        for i, value in enumerate(it):
            if limit is not None and i >= limit:
                return
            yield self._check(value, f"GeneratorDataset row {i}")

    def _shard_info(self) -> tuple[int | None, int | None]:
        return super()._shard_info() if self._indexed else (None, None)

    def _resharded(self, num_shards: int, shard_id: int) -> Dataset:
        if not self._indexed:
            raise DatasetError("GeneratorDataset: an iterable or generator source cannot be sharded; give it "
                               "__getitem__ and __len__")
        return super()._resharded(num_shards, shard_id)
