"""``DatasetNode``: a pipeline node, its metadata, and iteration (the chaining methods are ``Dataset``'s, in
``_pipeline``).

A pipeline is a chain: one source (a reader or ``GeneratorDataset``) and the operations chained on it. Every node
answers four questions: its columns, its length per epoch (without a pass when the source has a length), how to
build one pass as a ``grain.MapDataset`` (random-access sources), and how to yield one pass row by row (Python
iterables). ``_stream`` turns the first into running streams; ``_iterators`` wraps those with checkpointable state.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from graphpar import _logging
from graphpar.dataset import _stream, autotune, config
from graphpar.dataset._iterators import DictIterator, EpochIterator, TupleIterator
from graphpar.dataset._rows import Row
from graphpar.errors import DatasetError


class DatasetNode:
    """Base of every dataset node. Subclasses implement the node protocol (``_columns``, ``_length``, ``_grain``,
    ``_rows``); users only chain (``Dataset``) and iterate."""

    def __init__(self, child: DatasetNode | None = None, num_parallel_workers: int | None = None):
        if num_parallel_workers is not None and (not isinstance(num_parallel_workers, int)
                                                 or isinstance(num_parallel_workers, bool)
                                                 or num_parallel_workers < 1):
            raise DatasetError(f"{type(self).__name__}: num_parallel_workers must be an int >= 1, "
                               f"got {num_parallel_workers!r}")
        self._child = child
        self._depth = 0 if child is None else child._depth + 1
        self._workers = num_parallel_workers
        self._reset_caches()

    def _reset_caches(self) -> None:
        self._pool = _stream.StreamPool()
        self._counted: int | None = None

    # ----- node protocol -----
    def _columns(self) -> list[str]:
        return self._child._columns()

    def _length(self) -> int | None:
        """Outputs per epoch, or None when only a pass can tell (a source without a length)."""
        raise NotImplementedError

    def _random_access(self) -> bool:
        return self._child._random_access()

    def _grain(self, build: _stream.Build) -> Any:
        """One pass as a ``grain.MapDataset`` (random-access pipelines)."""
        raise NotImplementedError

    def _rows(self, build: _stream.Build) -> Iterator[Row]:
        """One pass, row by row (pipelines over Python iterables)."""
        raise NotImplementedError

    def _source(self) -> Any:
        return self._child._source() if self._child is not None else self

    def _chain(self) -> list[DatasetNode]:
        node, out = self, []
        while node is not None:
            out.append(node)
            node = node._child
        return out

    # ----- metadata -----
    def get_col_names(self) -> list[str]:
        return list(self._columns())

    def get_dataset_size(self) -> int:
        """Outputs per epoch (rows, or batches after ``.batch``) of this shard, repeats included. Computed from
        lengths when the source has one; a pipeline over a generator makes one pass (once) to count."""
        n = self._length()
        if n is not None:
            return n
        if self._counted is None:
            self._counted = sum(1 for _ in self._rows(_stream.Build(config.get_seed(), (0,))))
        return self._counted

    def _first_output(self) -> Row:
        """Output 0 of epoch 0, computed in this process (no read-ahead, no worker processes)."""
        build = _stream.Build(config.get_seed(), (0,))
        if self._random_access():
            if self.get_dataset_size() > 0:
                return self._grain(build)[0]
        else:
            for row in self._rows(build):
                return row
        raise DatasetError("the dataset yields no output in epoch 0, so it has no shapes or types")

    def output_shapes(self) -> list[list[int]]:
        """Shape of each column of the first output (MindSpore reads them from the first row too)."""
        return [list(v.shape) for v in self._first_output()]

    def output_types(self) -> list[np.dtype]:
        return [v.dtype for v in self._first_output()]

    def num_classes(self) -> int | None:
        """Number of classes for classification readers (None where the source has no notion of classes)."""
        return getattr(self._source(), "_num_classes", None)

    # ----- sharding (graphpar extensions used by Model) -----
    def shard_info(self) -> tuple[int | None, int | None]:
        """``(num_shards, shard_id)`` of the source, or ``(None, None)`` when it is not sharded."""
        return self._source()._shard_info()

    def with_shard(self, num_shards: int, shard_id: int) -> DatasetNode:
        """A copy of the whole pipeline whose source reads shard ``shard_id`` of ``num_shards``."""
        if self._child is None:
            return self._resharded(num_shards, shard_id)
        node = copy.copy(self)
        node._child = self._child.with_shard(num_shards, shard_id)
        node._reset_caches()
        return node

    def _resharded(self, num_shards: int, shard_id: int) -> DatasetNode:
        raise DatasetError(f"{type(self).__name__} cannot be sharded")

    # ----- iteration -----
    def _run_settings(self, read_ahead: bool = True) -> tuple[int, int, int, bool]:
        """(seed, workers, read-ahead, processes), read from the config when an iterator is created. Without
        ``read_ahead`` a one-worker pipeline runs on the thread that iterates it (worker processes always read
        ahead)."""
        default = config.get_num_parallel_workers()
        workers = max((n._workers if n._workers is not None else default) for n in self._chain())
        return self._settings_for(autotune.Setting(workers, config.get_prefetch_size()), read_ahead)

    def _settings_for(self, setting: autotune.Setting, read_ahead: bool,
                      seed: int | None = None) -> tuple[int, int, int, bool]:
        """The run settings of ``setting`` (a ``Model.train`` call's :class:`autotune.FeedTuner` chooses it)."""
        seed = config.get_seed() if seed is None else seed
        prefetch = setting.prefetch if read_ahead or setting.workers > 1 else 0
        return seed, setting.workers, prefetch, setting.processes

    def worker_count(self) -> int:
        """The workers an iterator created now would run this pipeline on (the largest ``num_parallel_workers`` of
        its operations, or the config's default)."""
        return self._run_settings()[1]

    def feed_tuner(self, platform: str, streams: int = 1) -> autotune.FeedTuner:
        """The tuner of one ``Model.train`` call feeding from this pipeline on ``platform``'s devices, ``streams``
        pipelines side by side: it starts from the user's settings or graphpar's start (one worker, prefetch 2) and
        adapts what the user did not set (dataset/autotune.py)."""
        named = [n for n in self._chain() if n._workers is not None]
        fixed_workers = None
        if named:
            node = max(named, key=lambda n: n._workers)
            fixed_workers = f"{type(node).__name__}(num_parallel_workers={node._workers})"
        elif config.num_parallel_workers_set() is not None:
            fixed_workers = f"ds.config.set_num_parallel_workers({config.num_parallel_workers_set()})"
        fixed_prefetch = (None if config.prefetch_size_set() is None
                          else f"ds.config.set_prefetch_size({config.prefetch_size_set()})")
        start = autotune.Setting(self.worker_count(), config.get_prefetch_size())
        return autotune.FeedTuner(autotune.this_host(platform, streams), start, fixed_workers, fixed_prefetch)

    def _epoch_length(self) -> int | None:
        return self.get_dataset_size() if self._random_access() else None

    def _open(self, settings: tuple[int, int, int, bool], epoch: int, start: int) -> Iterator[Row]:
        seed, workers, prefetch, processes = settings
        if not self._random_access():
            if workers > 1:
                _logging.notice_once("dataset-iterable-workers", "graphpar.dataset: a pipeline over a Python "
                                     "iterable runs in the calling process; num_parallel_workers applies to "
                                     "random-access sources only.")
            return itertools.islice(self._rows(_stream.Build(seed, (epoch,))), start, None)
        stream = self._pool.take((settings, epoch, start))
        if stream is None:
            stream = _stream.open_stream(self, seed, epoch, start, self.get_dataset_size(), workers, prefetch,
                                         processes)
        return stream

    def _park(self, settings: tuple[int, int, int, bool], epoch: int, stream: Iterator[Row]) -> None:
        self._pool.park((settings, epoch, 0), stream)

    def iter_epoch(self, epoch: int, start_batch: int = 0, read_ahead: bool = True,
                   tuner: autotune.FeedTuner | None = None) -> EpochIterator:
        """The outputs (tuples of numpy arrays, column order) of epoch ``epoch`` from output ``start_batch`` on.

        They depend only on (seed, epoch, sample), so a later call with the same arguments reproduces them; the
        iterator's ``get_state``/``set_state`` checkpoint its position. ``read_ahead=False`` computes a one-worker
        pipeline on the iterating thread, for a consumer that is itself a read-ahead thread (``Model.train``'s
        device prefetch): a second thread would only add a hand-over per batch. ``tuner``: the worker count and
        read-ahead follow its setting (``Model.train``'s adaptation); the outputs do not change.
        """
        return EpochIterator(self, epoch, start_batch, read_ahead, tuner)

    def create_tuple_iterator(self, columns: str | Sequence[str] | None = None, num_epochs: int = -1,
                              output_numpy: bool = False, do_copy: bool = True) -> TupleIterator:
        """Lists of column values: ``jax.Array`` (graphpar Tensors), or numpy arrays with ``output_numpy``."""
        return TupleIterator(self, columns, num_epochs, output_numpy)

    def create_dict_iterator(self, num_epochs: int = -1, output_numpy: bool = False) -> DictIterator:
        return DictIterator(self, None, num_epochs, output_numpy)

    def __iter__(self) -> TupleIterator:
        """One epoch of Tensors, as MindSpore's ``for data in dataset``."""
        return self.create_tuple_iterator(num_epochs=1)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_pool", None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._pool = _stream.StreamPool()

    def __repr__(self) -> str:
        return " -> ".join(type(n).__name__ for n in reversed(self._chain()))
