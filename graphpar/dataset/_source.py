"""``SourceDataset``: a random-access reader plus the sampler that picks each epoch's indices.

A reader is any picklable object with ``__len__`` and ``__getitem__(i) -> row`` (a tuple of numpy arrays). The
source turns (reader, sampler, seed, epoch) into a ``grain.MapDataset`` over the sampled indices. The sampler's seed
depends on the pipeline seed and the pass but not on the shard, so all shards cut the same permutation and stay
disjoint.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from typing import Any

import grain
import numpy as np

from graphpar.dataset._pipeline import Dataset
from graphpar.dataset._rows import Row
from graphpar.dataset._stream import Build
from graphpar.dataset.samplers import DistributedSampler, RandomSampler, Sampler, SequentialSampler, select_sampler
from graphpar.errors import DatasetError


class Lookup(grain.MapDataset):
    """The rows of ``reader`` at ``indices``, as a grain dataset. A direct subclass rather than
    ``grain.MapDataset.source``: that wrapper records metrics and estimates every row's byte size per read, which
    costs more than reading a small image."""

    def __init__(self, reader: Any, indices: np.ndarray):
        super().__init__()
        self.reader, self.indices = reader, indices

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return self.slice(i)
        return self.reader[int(self.indices[i])]

    def __str__(self) -> str:
        return f"Lookup({type(self.reader).__name__}, {len(self.indices)} rows)"


class SourceDataset(Dataset):
    """A dataset read from a random-access ``reader`` (base of the readers and of mappable GeneratorDatasets)."""

    def __init__(self, reader: Any, columns: Sequence[str], *, num_samples: int | None = None,
                 num_parallel_workers: int | None = None, shuffle: bool | None = None, sampler: Any = None,
                 num_shards: int | None = None, shard_id: int | None = None, num_classes: int | None = None):
        super().__init__(None, num_parallel_workers)
        self._reader = reader
        self._column_names = list(columns)
        self._sampler: Sampler = select_sampler(type(self).__name__, sampler, shuffle, num_samples, num_shards,
                                                shard_id)
        self._num_classes = num_classes

    def _columns(self) -> list[str]:
        return list(self._column_names)

    def _length(self) -> int | None:
        return self._sampler.count(len(self._reader))

    def _random_access(self) -> bool:
        return True

    def _indices(self, build: Build) -> np.ndarray:
        return self._sampler.indices(len(self._reader), build.op_seed(0))

    def _grain(self, build: Build) -> Any:
        return Lookup(self._reader, self._indices(build))

    def _rows(self, build: Build) -> Iterator[Row]:
        for i in self._indices(build):
            yield self._reader[int(i)]

    def _shard_info(self) -> tuple[int | None, int | None]:
        if isinstance(self._sampler, DistributedSampler):
            return self._sampler.num_shards, self._sampler.shard_id
        return None, None

    def _resharded(self, num_shards: int, shard_id: int) -> Dataset:
        old = self._sampler
        if isinstance(old, DistributedSampler):
            per_shard = old.num_samples
        elif (isinstance(old, RandomSampler) and not old.replacement) or \
                (isinstance(old, SequentialSampler) and old.start_index == 0):
            per_shard = -(-old.num_samples // num_shards) if old.num_samples else None
        else:
            raise DatasetError(f"{type(self).__name__}: cannot shard a source read through {old!r}; use "
                               "num_shards/shard_id, a DistributedSampler, or no sampler")
        node = copy.copy(self)
        node._sampler = DistributedSampler(num_shards, shard_id, shuffle=old.is_shuffled(), num_samples=per_shard)
        node._reset_caches()
        return node
