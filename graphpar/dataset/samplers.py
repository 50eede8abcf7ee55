"""Samplers (``mindspore.dataset.*Sampler``): which source indices an epoch reads, in which order.

A sampler turns (source length, epoch seed) into an index array; it holds no iteration state, so an epoch can be
rebuilt anywhere (a worker process, a resumed job) from the seed alone.

Sharding (:class:`DistributedSampler`, which ``num_shards``/``shard_id`` build) follows MindSpore: every shard
shuffles the whole dataset with the same seed, then shard ``k`` takes positions ``k, k + S, k + 2S, ...`` of that
order. When ``S`` does not divide ``N`` the order is extended by wrapping around to its start, so every shard has
``ceil(N / S)`` samples: shards stay the same size (devices consume them in lockstep) and together cover every
sample at least once per epoch; the ``ceil(N / S) * S - N`` samples at the start of the order appear twice.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from graphpar.errors import DatasetError


def _count(value: Any, name: str, who: str, allow_none: bool = True) -> int | None:
    if value is None and allow_none:
        return None
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 0:
        raise DatasetError(f"{who}: {name} must be an int >= 0, got {value!r}")
    return int(value)


class Sampler:
    """Base class: :meth:`indices` for one epoch and :meth:`count` without computing them."""

    num_samples: int | None = None

    def indices(self, n: int, seed: int) -> np.ndarray:
        raise NotImplementedError

    def count(self, n: int) -> int:
        return len(self.indices(n, 0))

    def is_shuffled(self) -> bool:
        return False

    def is_sharded(self) -> bool:
        return False

    def _limit(self, idx: np.ndarray) -> np.ndarray:
        return idx if not self.num_samples else idx[:self.num_samples]

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({fields})"


class SequentialSampler(Sampler):
    """Indices ``start_index, start_index + 1, ...`` (at most ``num_samples``)."""

    def __init__(self, start_index: int | None = None, num_samples: int | None = None):
        self.start_index = _count(start_index, "start_index", "SequentialSampler") or 0
        self.num_samples = _count(num_samples, "num_samples", "SequentialSampler")

    def indices(self, n: int, seed: int) -> np.ndarray:
        if n and self.start_index >= n:
            raise DatasetError(f"SequentialSampler: start_index {self.start_index} is past the dataset's {n} rows")
        return self._limit(np.arange(self.start_index, n, dtype=np.int64))

    def count(self, n: int) -> int:
        rest = max(n - self.start_index, 0)
        return min(rest, self.num_samples) if self.num_samples else rest


class RandomSampler(Sampler):
    """A fresh permutation every epoch (or draws with replacement), at most ``num_samples`` of it."""

    def __init__(self, replacement: bool = False, num_samples: int | None = None):
        self.replacement = bool(replacement)
        self.num_samples = _count(num_samples, "num_samples", "RandomSampler")

    def indices(self, n: int, seed: int) -> np.ndarray:
        rng = np.random.default_rng(seed)
        if self.replacement:
            return rng.integers(0, n, size=self.num_samples or n, dtype=np.int64)
        return self._limit(rng.permutation(n).astype(np.int64))

    def count(self, n: int) -> int:
        if self.replacement:
            return self.num_samples or n
        return min(n, self.num_samples) if self.num_samples else n

    def is_shuffled(self) -> bool:
        return True


class DistributedSampler(Sampler):
    """Shard ``shard_id`` of ``num_shards`` equal shards (see the module docstring for the padding rule)."""

    def __init__(self, num_shards: int, shard_id: int, shuffle: bool = True, num_samples: int | None = None,
                 offset: int = -1):
        check_shards(num_shards, shard_id, "DistributedSampler")
        if offset != -1:
            raise DatasetError("DistributedSampler: offset is not supported by graphpar (only the default -1)")
        self.num_shards, self.shard_id = int(num_shards), int(shard_id)
        self.shuffle = bool(shuffle)
        self.num_samples = _count(num_samples, "num_samples", "DistributedSampler")
        self.offset = offset

    def indices(self, n: int, seed: int) -> np.ndarray:
        if n == 0:
            return np.zeros(0, np.int64)
        order = np.random.default_rng(seed).permutation(n) if self.shuffle else np.arange(n)
        per_shard = -(-n // self.num_shards)
        positions = self.shard_id + self.num_shards * np.arange(per_shard)
        return self._limit(order[positions % n].astype(np.int64))

    def count(self, n: int) -> int:
        per_shard = -(-n // self.num_shards) if n else 0
        return min(per_shard, self.num_samples) if self.num_samples else per_shard

    def is_shuffled(self) -> bool:
        return self.shuffle

    def is_sharded(self) -> bool:
        return True


class SubsetSampler(Sampler):
    """Exactly ``indices``, in the given order."""

    def __init__(self, indices: Iterable[int], num_samples: int | None = None):
        self.indices_list = np.asarray(list(indices), dtype=np.int64)
        if self.indices_list.ndim != 1:
            raise DatasetError(f"{type(self).__name__}: indices must be a flat sequence of ints")
        self.num_samples = _count(num_samples, "num_samples", type(self).__name__)

    def _checked(self, n: int) -> np.ndarray:
        bad = self.indices_list[(self.indices_list < 0) | (self.indices_list >= n)]
        if bad.size:
            raise DatasetError(f"{type(self).__name__}: index {int(bad[0])} is outside the dataset's {n} rows")
        return self.indices_list

    def indices(self, n: int, seed: int) -> np.ndarray:
        return self._limit(self._checked(n))

    def count(self, n: int) -> int:
        size = len(self.indices_list)
        return min(size, self.num_samples) if self.num_samples else size


class SubsetRandomSampler(SubsetSampler):
    """``indices`` in a fresh random order every epoch."""

    def indices(self, n: int, seed: int) -> np.ndarray:
        return self._limit(np.random.default_rng(seed).permutation(self._checked(n)))

    def is_shuffled(self) -> bool:
        return True


def check_shards(num_shards: Any, shard_id: Any, who: str) -> None:
    """MindSpore's rules: both or neither, ``num_shards >= 1``, ``0 <= shard_id < num_shards``."""
    if (num_shards is None) != (shard_id is None):
        raise DatasetError(f"{who}: num_shards and shard_id must be given together (got num_shards={num_shards!r}, "
                           f"shard_id={shard_id!r})")
    if num_shards is None:
        return
    for name, value in (("num_shards", num_shards), ("shard_id", shard_id)):
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
            raise DatasetError(f"{who}: {name} must be an int, got {value!r}")
    if num_shards < 1:
        raise DatasetError(f"{who}: num_shards must be >= 1, got {num_shards}")
    if not 0 <= shard_id < num_shards:
        raise DatasetError(f"{who}: shard_id must be in [0, {num_shards - 1}] for num_shards={num_shards}, "
                           f"got {shard_id}")


def select_sampler(who: str, sampler: Any, shuffle: bool | None, num_samples: int | None,
                   num_shards: int | None, shard_id: int | None) -> Sampler:
    """The sampler a source uses, from MindSpore's sampler/shuffle/num_samples/shard arguments."""
    check_shards(num_shards, shard_id, who)
    num_samples = _count(num_samples, "num_samples", who)
    if shuffle is not None and not isinstance(shuffle, bool):
        raise DatasetError(f"{who}: shuffle must be True, False or None, got {shuffle!r}")
    if sampler is not None:
        if shuffle is not None:
            raise DatasetError(f"{who}: sampler and shuffle cannot be given together; the sampler sets the order")
        if num_shards is not None:
            raise DatasetError(f"{who}: sampler and num_shards/shard_id cannot be given together; use a "
                               "DistributedSampler")
        if isinstance(sampler, Sampler):
            return sampler
        try:
            return SubsetSampler(sampler, num_samples)
        except TypeError as exc:
            raise DatasetError(f"{who}: sampler must be a graphpar.dataset sampler or an iterable of indices, "
                               f"got {sampler!r}") from exc
    if num_shards is not None:
        return DistributedSampler(num_shards, shard_id, shuffle=shuffle is not False, num_samples=num_samples)
    if shuffle is False:
        return SequentialSampler(num_samples=num_samples)
    return RandomSampler(num_samples=num_samples)
