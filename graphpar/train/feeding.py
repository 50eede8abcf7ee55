"""From a dataset to the global batches a compiled step takes.

MindSpore runs one process per device, and a dataset's batch is that device's batch. graphpar drives several
devices from one process, so with ``dataset_strategy="data_parallel"`` it draws one batch per local device and
concatenates them into the global batch (the quickstart's 2-row batches on 8 devices make a 16-row global batch).
If the dataset is sharded over every rank of the job (``num_shards == get_group_size()``, as the seeds'
``create_dataset`` does), each local device reads its own shard. Otherwise every local device reads the dataset as
given, exactly as every MindSpore process reads an unsharded dataset in full: the same batch goes to each device
(the pipeline is deterministic for a seed, so one iterator serves them all). With ``full_batch`` the dataset's
batch is the global batch.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np


def _epoch_iter(dataset: Any, epoch: int, start: int = 0) -> Iterator[tuple]:
    """Batches of ``epoch`` from batch ``start`` on: graphpar datasets seek (``iter_epoch(epoch, start_batch)``),
    other iterables are read from the beginning and the first ``start`` batches dropped."""
    if hasattr(dataset, "iter_epoch"):
        if start and "start_batch" in inspect.signature(dataset.iter_epoch).parameters:
            return iter(dataset.iter_epoch(epoch, start_batch=start))
        it = iter(dataset.iter_epoch(epoch))
    else:
        it = iter(dataset.create_tuple_iterator(num_epochs=1, output_numpy=True))
    return itertools.islice(it, start, None) if start else it


class BatchFeeder:
    """Global batches for ``draws`` local devices whose first rank is ``first_rank`` in a job of ``world`` ranks."""

    def __init__(self, dataset: Any, draws: int, first_rank: int = 0, world: int = 1):
        self.dataset = dataset
        self.draws = max(int(draws), 1)
        num_shards, shard_id = (dataset.shard_info() if hasattr(dataset, "shard_info") else (None, None))
        self.per_device_shards = (self.draws > 1 and num_shards is not None and num_shards == world
                                  and hasattr(dataset, "with_shard"))
        if self.per_device_shards:
            start = shard_id if shard_id is not None else first_rank
            self.views = [dataset.with_shard(num_shards, start + i) for i in range(self.draws)]
        else:
            self.views = [dataset]

    def steps_per_epoch(self) -> int:
        return min(int(v.get_dataset_size()) for v in self.views)

    def epoch(self, epoch: int, start: int = 0) -> Iterator[tuple[np.ndarray, ...]]:
        """The global batches of one epoch, in order, from global batch ``start`` on (a resumed run)."""
        steps = self.steps_per_epoch()
        iters = [_epoch_iter(v, epoch, start) for v in self.views]
        for _ in range(start, steps):
            if self.per_device_shards:
                parts = [next(it) for it in iters]
            else:
                parts = [next(iters[0])] * self.draws
            yield concat_batches(parts)

    def forever(self, first_epoch: int = 0, start: int = 0) -> Iterator[tuple[np.ndarray, ...]]:
        """Global batches across epochs without end (sink mode with a ``sink_size``), from batch ``start`` of
        ``first_epoch`` on."""
        epoch = first_epoch
        while True:
            yield from self.epoch(epoch, start)
            epoch, start = epoch + 1, 0


def concat_batches(parts: list) -> tuple[np.ndarray, ...]:
    if len(parts) == 1:
        return tuple(np.asarray(c) for c in parts[0])
    return tuple(np.concatenate([np.asarray(p[c]) for p in parts], axis=0) for c in range(len(parts[0])))


def stack_steps(batches: list[tuple[np.ndarray, ...]]) -> tuple[np.ndarray, ...]:
    return tuple(np.stack([b[c] for b in batches]) for c in range(len(batches[0])))
