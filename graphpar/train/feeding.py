"""From a dataset to the global batches a compiled step takes.

MindSpore runs one process per device, and a dataset's batch is that device's batch. graphpar drives several
devices from one process, so with ``dataset_strategy="data_parallel"`` it draws one batch per local device and
concatenates them into the global batch (the quickstart's 2-row batches on 8 devices make a 16-row global batch).
If the dataset is sharded over every rank of the job (``num_shards == get_group_size()``, as the seeds'
``create_dataset`` does), each local device reads its own shard. Otherwise every local device reads the dataset as
given, exactly as every MindSpore process reads an unsharded dataset in full: the same batch goes to each device
(the pipeline is deterministic for a seed, so one iterator serves them all). With ``full_batch`` the dataset's
batch is the global batch. A ``dataset_strategy`` tuple that splits other dimensions (``((1, 8), (1, 1))``) places
each device's batch as its block of the global input instead: the global shape is the device's shape times the
splits (``compile.plans.global_batch``).
"""

from __future__ import annotations

import logging

import contextvars
import inspect
import itertools
import os
import queue
import threading
import time
from collections.abc import Callable, Generator, Iterable, Iterator
from typing import Any, Protocol, runtime_checkable

import numpy as np

from graphpar._logging import notice_once
from graphpar.compile.plans.global_batch import assemble_blocks, input_splits, make_global


@runtime_checkable
class EpochSource(Protocol):
    """A dataset that is not a graphpar pipeline but can still feed ``Model.train``: it says how many batches an
    epoch has and yields them (``iter_epoch(epoch)``, optionally with ``start_batch=`` to seek)."""

    def get_dataset_size(self) -> int: ...

    def iter_epoch(self, epoch: int) -> Iterable[tuple]: ...


@runtime_checkable
class TupleSource(Protocol):
    """A MindSpore-style dataset (its own datasets, or a test's mock): ``Model.train`` reads an epoch as
    MindSpore's does without sinking, ``create_tuple_iterator(num_epochs=..., do_copy=True)``."""

    def create_tuple_iterator(self, num_epochs: int = -1, do_copy: bool = True) -> Iterable[tuple]: ...


@runtime_checkable
class ShardableSource(Protocol):
    """A dataset that can be read by shard (graphpar's datasets are; MindSpore's take ``num_shards``/``shard_id``):
    each local device then reads its own shard of a dataset sharded over the job's ranks."""

    def shard_info(self) -> tuple[int | None, int | None]: ...

    def with_shard(self, num_shards: int, shard_id: int) -> Any: ...


def _is_pipeline(dataset: Any) -> bool:
    """Whether ``dataset`` is a graphpar pipeline (it seeks, reads ahead and names its workers)."""
    # local: graphpar.dataset loads grain (and orbax through it: 0.5 s, and absl's logging setup); only a train
    # call with a dataset needs it, so that `import graphpar` does not pay for it
    from graphpar.dataset._pipeline import Dataset

    return isinstance(dataset, Dataset)


class FeedTuning(Protocol):
    """What the loop tells a pipeline's tuner (``dataset.autotune.FeedTuner``) and asks it."""

    def start_epoch(self, epoch: int) -> None: ...

    def observe_step(self, waited: float, elapsed: float) -> bool: ...

    def advice(self) -> str: ...


def _epoch_iter(dataset: Any, epoch: int, start: int = 0, read_ahead: bool = True,
                tuner: FeedTuning | None = None) -> Iterator[tuple]:
    """Batches of ``epoch`` from batch ``start`` on: graphpar datasets seek (``iter_epoch(epoch, start_batch)``),
    other iterables are read from the beginning and the first ``start`` batches dropped. ``read_ahead=False``: the
    caller reads ahead itself (a graphpar pipeline then runs on its thread). ``tuner``: a graphpar pipeline's
    workers and read-ahead follow it."""
    if _is_pipeline(dataset):
        return iter(dataset.iter_epoch(epoch, start_batch=start, read_ahead=read_ahead, tuner=tuner))
    if isinstance(dataset, EpochSource):
        if start and "start_batch" in inspect.signature(dataset.iter_epoch).parameters:
            return iter(dataset.iter_epoch(epoch, start_batch=start))
        it = iter(dataset.iter_epoch(epoch))
    elif isinstance(dataset, TupleSource):
        it = iter(dataset.create_tuple_iterator(num_epochs=1, do_copy=True))
    else:
        raise TypeError(f"Model.train: the dataset ({type(dataset).__name__}) has neither iter_epoch(epoch) nor "
                        "create_tuple_iterator(num_epochs, do_copy); give a graphpar dataset, or an object with one "
                        "of those (see graphpar.train.feeding.EpochSource / TupleSource)")
    return itertools.islice(it, start, None) if start else it


class BatchFeeder:
    """Global batches for ``draws`` local devices whose first rank is ``first_rank`` in a job of ``world`` ranks.

    With a ``platform`` (the devices' platform: ``Model.train`` gives it), a graphpar pipeline's workers and
    read-ahead adapt to what the loop measures (:attr:`tuner`, ``dataset/autotune.py``); the batches do not change.
    """

    def __init__(self, dataset: Any, draws: int, first_rank: int = 0, world: int = 1, platform: str | None = None):
        self.dataset = dataset
        self.draws = max(int(draws), 1)
        self.ranks = [first_rank + i for i in range(self.draws)]
        self.world = max(int(world), self.draws)
        shardable = isinstance(dataset, ShardableSource)
        num_shards, shard_id = dataset.shard_info() if shardable else (None, None)
        self.per_device_shards = shardable and self.draws > 1 and num_shards is not None and num_shards == world
        if self.per_device_shards:
            start = shard_id if shard_id is not None else first_rank
            self.views = [dataset.with_shard(num_shards, start + i) for i in range(self.draws)]
        else:
            self.views = [dataset]
            if self.draws > 1:
                shards = f"num_shards={num_shards}" if num_shards is not None else "not sharded"
                notice_once(f"feeder-same-batch:{self.draws}:{num_shards}",
                            f"the dataset is {shards} for {world} ranks, so each of the {self.draws} local devices "
                            "gets the same batch (as each MindSpore process reading the whole dataset would): "
                            f"{self.draws} identical slices per step. For distinct batches per device, shard it as "
                            "the tutorials' create_dataset does: num_shards=get_group_size(), shard_id=get_rank()",
                            # Unsharded is MindSpore's own behaviour (every process reads the whole dataset): a
                            # fact worth stating, not a fault; shards cut for another rank count are one.
                            logging.INFO if num_shards is None else logging.WARNING)
        self.tuner: FeedTuning | None = (dataset.feed_tuner(platform, len(self.views))
                                         if platform is not None and _is_pipeline(dataset) else None)

    def steps_per_epoch(self) -> int:
        return min(int(v.get_dataset_size()) for v in self.views)

    def epoch(self, epoch: int, start: int = 0, read_ahead: bool = True) -> Iterator[tuple[np.ndarray, ...]]:
        """The global batches of one epoch, in order, from global batch ``start`` on (a resumed run);
        ``read_ahead=False`` when the consumer is a read-ahead thread itself (:class:`DevicePrefetch`)."""
        steps = self.steps_per_epoch()
        iters = [_epoch_iter(v, epoch, start, read_ahead, self.tuner) for v in self.views]
        for _ in range(start, steps):
            try:  # an iterator that ends before its get_dataset_size() ends the epoch there, as in MindSpore
                parts = [next(it) for it in iters] if self.per_device_shards else [next(iters[0])] * self.draws
            except StopIteration:
                return
            yield assemble_batch(parts, self.ranks, self.world)

    def forever(self, first_epoch: int = 0, start: int = 0) -> Iterator[tuple[np.ndarray, ...]]:
        """Global batches across epochs without end (sink mode with a ``sink_size``), from batch ``start`` of
        ``first_epoch`` on."""
        epoch = first_epoch
        while True:
            yield from self.epoch(epoch, start)
            epoch, start = epoch + 1, 0


def assemble_batch(parts: list, ranks: list[int], world: int) -> tuple[np.ndarray, ...]:
    """This process's part of the global batch from its devices' batches (``parts[i]`` for rank ``ranks[i]`` of
    ``world``): rows stacked on dimension 0, or each column's blocks where a ``dataset_strategy`` tuple puts them."""
    columns = []
    for c in range(len(parts[0])):
        splits = input_splits(c, np.ndim(parts[0][c]))
        if splits is None:
            columns.append(concat_batches([(p[c],) for p in parts])[0])
        else:
            columns.append(assemble_blocks([p[c] for p in parts], ranks, splits, world, c))
    return tuple(columns)


def concat_batches(parts: list) -> tuple[np.ndarray, ...]:
    if len(parts) == 1:
        return tuple(np.asarray(c) for c in parts[0])
    return tuple(np.concatenate([np.asarray(p[c]) for p in parts], axis=0) for c in range(len(parts[0])))


def stack_steps(batches: list[tuple[np.ndarray, ...]]) -> tuple[np.ndarray, ...]:
    return tuple(np.stack([b[c] for b in batches]) for c in range(len(batches[0])))


def sink_calls(batches: list[tuple[np.ndarray, ...]]) -> list[tuple[np.ndarray, ...]]:
    """The stacked inputs of the device calls that run ``batches`` in order: one call per run of consecutive
    batches of the same shapes. A sink's steps are one program over a stack of equal batches, so a batch of
    another shape (an epoch's partial last batch, with ``drop_remainder=False``) starts a call of its own, and
    each step still sees its batch as non-sink mode does."""
    calls: list[list[tuple]] = []
    for batch in batches:
        shapes = [np.shape(x) for x in batch]
        if not calls or [np.shape(x) for x in calls[-1][0]] != shapes:
            calls.append([])
        calls[-1].append(batch)
    return [stack_steps(run) for run in calls]


class DevicePrefetch:
    """Global batches converted and transferred to the devices ``depth`` steps ahead of the step that uses them.

    A background thread pulls host batches from ``batches`` and runs ``place`` on each (the train program's
    ``place_inputs``: ``device_put`` with the plan's input shardings, or the multi-process global array), so the
    copy to the devices overlaps the running step instead of preceding the next one. Iterating yields
    ``(host_batch, placed_batch)``; errors from the pipeline or the placement are raised here, in order.
    ``close()`` stops the thread (the rest of ``batches`` is not read).
    """

    _END = object()

    def __init__(self, batches: Iterator[tuple], place: Callable[[tuple], Any], depth: int):
        if depth < 1:
            raise ValueError(f"DevicePrefetch: depth must be >= 1, got {depth}")
        self._batches, self._place = batches, place
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        context = contextvars.copy_context()  # the caller's graphpar context, in the thread
        self._thread = threading.Thread(target=context.run, args=(self._fill,), name="graphpar-device-prefetch",
                                        daemon=True)
        self._thread.start()

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _fill(self) -> None:
        try:
            for batch in self._batches:
                if self._stop.is_set() or not self._put((batch, self._place(batch))):
                    return
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, raised there
            self._put(exc)
            return
        self._put(self._END)

    def __iter__(self) -> DevicePrefetch:
        return self

    def __next__(self) -> tuple[tuple, Any]:
        item = self._queue.get()
        if item is self._END:
            self._thread.join()
            raise StopIteration
        if isinstance(item, BaseException):
            self._thread.join()
            raise item
        return item

    def close(self) -> None:
        self._stop.set()
        while True:  # unblock a producer waiting on a full queue
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        self._thread.join()


class StallWatch:
    """The training loop's wait for its batches over one epoch: each step's wait goes to the pipeline's tuner (which
    raises the workers and read-ahead when the devices wait for data, and says what it changed), and a notice
    (once) when the data was what the devices waited for all the same.

    Wraps the epoch's ``(host_batch, placed_batch)`` iterator and times each ``next`` past the first (the first
    includes starting the pipeline and planning the placement) and the time between them. With prefetching, a
    ``next`` returns at once while the pipeline keeps ahead of the devices; when it does not, the loop sits in
    ``next`` and the devices idle. When, over at least ``MIN_SECONDS`` of an epoch (toy runs are not worth a line)
    since its start or since the tuner's last change settled (the new workers started), the loop waited ``THRESHOLD`` of the time or more, :meth:`report`
    says so once, with what to change: the setting the user fixed, or why graphpar went no further
    (docs/datasets.md)."""

    THRESHOLD = 0.25
    MIN_SECONDS = 1.0

    def __init__(self, batches: Generator[tuple, None, None], tuner: FeedTuning | None = None, epoch: int = 1):
        self._batches, self._tuner = batches, tuner
        self.waited = 0.0
        self.count = 0
        self._started: float | None = None
        self._last = 0.0
        if tuner is not None:
            tuner.start_epoch(epoch)

    def __iter__(self) -> StallWatch:
        return self

    def __next__(self) -> tuple:
        began = time.perf_counter()
        item = next(self._batches)
        now = time.perf_counter()
        if self._started is None:
            self._started = now
        else:
            self.waited += now - began
            if self._tuner is not None and not self._tuner.observe_step(now - began, now - self._last):
                self._started, self.waited, self.count = now, 0.0, 0  # judged from the new setting's start on
        self._last = now
        self.count += 1
        return item

    def close(self) -> None:
        self._batches.close()

    def report(self, dataset: Any, epoch: int, depth: int) -> None:
        """Say once when, with prefetching on, the loop waited ``THRESHOLD`` of the epoch (since the tuner's last
        change: its changes are said when made) over more than ``MIN_SECONDS``; without prefetching the wait is the
        feeding itself, which the asynchronous dispatch overlaps."""
        if depth <= 0 or self._started is None or self.count < 3:
            return
        elapsed = time.perf_counter() - self._started
        share = self.waited / elapsed
        if elapsed < self.MIN_SECONDS or share < self.THRESHOLD:
            return
        per_step = self.waited / (self.count - 1) * 1e3
        if self._tuner is not None:
            advice = self._tuner.advice()
        else:
            what = "the pipeline" if _is_pipeline(dataset) else "the dataset"
            advice = (f"{what} is not adapted here; give it more workers (this machine has {os.cpu_count()} cores) "
                      "or make its map cheaper")
        notice_once("feeding-stall", f"data stall: Model.train waited for the dataset {share:.0%} of epoch {epoch} "
                    f"({per_step:.1f} ms a step; device prefetch {depth}): the devices idle for data. {advice} "
                    "(docs/datasets.md, 'Parallel workers').")


def _placer(place: Callable[[tuple], Any], first: tuple, placed: Any) -> Callable[[tuple], Any]:
    """Place later batches where ``place`` put ``first``: one ``device_put`` of the whole batch straight into the
    same shardings (no planning, one call for every column: half the cost of a call per column on 8 devices); a
    batch of another shape (a last, smaller batch) goes through ``place`` again."""
    import jax

    shapes = [np.shape(x) for x in first]
    shardings = [p.sharding for p in placed]
    global_shapes = [p.shape for p in placed]
    if jax.process_count() > 1:  # each process holds its part of the global batch
        from jax.sharding import NamedSharding

        def put(batch: tuple) -> list:
            return [make_global(np.asarray(x), s, g) if isinstance(s, NamedSharding) else jax.device_put(x, s)
                    for x, s, g in zip(batch, shardings, global_shapes)]
    else:
        def put(batch: tuple) -> list:
            return jax.device_put([np.asarray(x) for x in batch], shardings)

    def place_like(batch: tuple) -> Any:
        if len(batch) != len(shapes) or any(np.shape(x) != shape for x, shape in zip(batch, shapes)):
            return place(batch)
        return put(batch)

    return place_like


def prefetched(batches: Iterator[tuple], place: Callable[[tuple], Any] | None,
               depth: int) -> Generator[tuple, None, None]:
    """``(host_batch, placed_batch)`` pairs: placed ``depth`` ahead by a :class:`DevicePrefetch`, or placed on
    demand on the calling thread when ``depth`` is 0 (``placed_batch`` is the host batch when there is nothing to
    place with: an eager program places its own inputs)."""
    if place is None:
        for batch in batches:
            yield batch, batch
        return
    first = next(batches, None)
    if first is None:
        return
    placed = place(first)  # the first placement traces and plans: on the caller's thread
    yield first, placed
    import jax

    placer = _placer(place, first, placed) if all(isinstance(p, jax.Array) for p in placed) else place
    if depth <= 0:
        for batch in batches:
            yield batch, placer(batch)
        return
    ahead = DevicePrefetch(batches, placer, depth)
    try:
        yield from ahead
    finally:
        ahead.close()
