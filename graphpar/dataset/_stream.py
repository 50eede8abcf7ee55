"""From a pipeline to a running stream of outputs, on grain.

A pipeline over a random-access source is rebuilt for every pass as a ``grain.MapDataset`` whose element ``i``
depends only on (seed, epoch, repeat pass, i). Epochs are laid end to end in one endless ``grain.MapDataset``
(:class:`Passes`), so position ``(epoch, k)`` is index ``k`` of the stream opened at ``epoch``: opening a stream at
a checkpointed position is a slice, not a replay, and the state of an iterator is just that position — valid for
any worker count. A stream that finished an epoch is kept (:class:`StreamPool`) so the next epoch continues on the
same worker processes, whose read-ahead already crossed the boundary.

Parallel work: ``num_parallel_workers > 1`` runs the pipeline in grain worker processes (``mp_prefetch``, spawn
start method). Processes need the pipeline to pickle (grain uses cloudpickle, so lambdas are fine; open files,
locks and the like are not) and a main script that guards its entry point with ``if __name__ == "__main__":``
(spawned workers re-import it); otherwise graphpar uses that many threads and says so once. Pipelines over Python
iterables run in the calling process.
"""

from __future__ import annotations

import atexit
import sys
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grain
import numpy as np

from graphpar import _logging
from graphpar.dataset._rng import derive_seed


@dataclass(frozen=True)
class Build:
    """What a node needs to build one pass: the pipeline seed and the key naming the pass (epoch, repeat passes)."""

    seed: int
    key: tuple[int, ...]

    def op_seed(self, depth: int) -> int:
        """The seed of the operation at ``depth`` (0 = source) for this pass; equal on every shard and worker."""
        return derive_seed(self.seed, depth, *self.key)

    def child(self, index: int) -> Build:
        return Build(self.seed, self.key + (index,))


class Passes(grain.MapDataset):
    """Passes ``first, first + 1, ...`` (``count`` of them, or endless) of ``node`` laid end to end.

    Pass ``p`` is ``node`` built under key ``key + (p,)``; every pass has ``pass_len`` elements.
    """

    def __init__(self, node: Any, seed: int, key: tuple[int, ...], first: int, count: int | None, pass_len: int):
        super().__init__()
        self._node, self._seed, self._key, self._first = node, seed, key, first
        self._count, self._pass_len = count, pass_len
        self._built: dict[int, grain.MapDataset] = {}

    def __len__(self) -> int:
        return sys.maxsize if self._count is None else self._count * self._pass_len

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.slice(index)
        p, j = divmod(index, self._pass_len)
        return self._pass(self._first + p)[j]

    def _pass(self, p: int) -> grain.MapDataset:
        built = self._built  # read once: reader threads may replace it concurrently
        ds = built.get(p)
        if ds is None:
            ds = self._node._grain(Build(self._seed, self._key + (p,)))
            keep = {q: d for q, d in built.items() if q == p - 1}
            keep[p] = ds
            self._built = keep
        return ds

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_built"] = {}
        return state

    def __str__(self) -> str:
        return f"Passes(first={self._first}, count={self._count}, pass_len={self._pass_len})"


class Permuted(grain.MapDataset):
    """``parent`` in a seeded random order: the whole permutation drawn once per pass (O(1) per element; grain's
    ``shuffle`` computes a Feistel network per element, which costs as much as a small image's augmentation)."""

    def __init__(self, parent: grain.MapDataset, seed: int):
        super().__init__(parent)
        self._seed = seed
        self._order: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self._parent)

    def _permutation(self) -> np.ndarray:
        order = self._order  # read once: reader threads may race to build it, with equal results
        if order is None:
            order = self._order = np.random.default_rng(self._seed).permutation(len(self._parent))
        return order

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.slice(index)
        return self._parent[int(self._permutation()[index])]

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_order"] = None
        return state

    def __str__(self) -> str:
        return f"Permuted(seed={self._seed})"


class Mapped(grain.MapDataset):
    """``fn(row, rng)`` on each element of ``parent``; ``rng`` is the element's generator from ``streams``
    (``_rng.SampleStreams``: the stream grain's ``random_map`` would give it), or None when ``streams`` is None.

    A direct subclass rather than grain's ``map``/``random_map``: those time every element and estimate its output
    spec for their statistics, which costs about as much as cropping and flipping a 32x32 image."""

    def __init__(self, parent: grain.MapDataset, fn: Any, streams: Any = None):
        super().__init__(parent)
        self._fn, self._streams = fn, streams

    def __len__(self) -> int:
        return len(self._parent)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.slice(index)
        row = self._parent[index]
        streams = self._streams
        return self._fn(row, None if streams is None else streams.generator(index))

    def __str__(self) -> str:
        return f"Mapped({getattr(self._fn, 'describe', lambda: type(self._fn).__name__)()})"


class Tagged(grain.MapDataset):
    """Each element of ``parent`` with its index appended (after its columns): the sample index whose generator the
    random operations moved to the batch draw from (``dataset/_batched.py``)."""

    def __len__(self) -> int:
        return len(self._parent)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.slice(index)
        return self._parent[index] + (index,)

    def __str__(self) -> str:
        return "Tagged"


def _mark_absl_flags_parsed() -> None:
    # grain's worker start reads absl flags; a program that never ran absl.app has not parsed them.
    from absl import flags

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()


def _unguarded_main_script() -> str | None:
    """The main script's path if spawned workers would re-run it (it has no ``__name__`` guard)."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if path is None:  # interactive or ``python -c``: spawn re-runs nothing
        return None
    try:
        with open(path, encoding="utf-8") as f:
            source = f.read()
    except OSError:
        return path
    return None if "__name__" in source and "__main__" in source else path


def _process_blocker(ds: grain.MapDataset) -> str | None:
    """Why ``ds`` cannot run in spawned worker processes (None if it can)."""
    script = _unguarded_main_script()
    if script is not None:
        return f"{script} has no `if __name__ == \"__main__\":` guard, and spawned workers would re-run it"
    import cloudpickle  # what grain serializes the pipeline with (by value, so lambdas travel too)

    try:
        cloudpickle.dumps(ds)
    except Exception as exc:  # noqa: BLE001 - any serialization failure means "use threads"
        return f"the pipeline does not pickle ({type(exc).__name__}: {exc})"
    return None


def open_stream(node: Any, seed: int, epoch: int, start: int, pass_len: int, workers: int,
                prefetch: int, processes: bool = True) -> Iterator[tuple]:
    """An endless iterator over ``node``'s outputs from position (``epoch``, ``start``) on; ``workers > 1`` run in
    processes where they can, or in threads when ``processes`` is False (grain's threads keep the order)."""
    ds = Passes(node, seed, (), epoch, None, pass_len)[start:]
    if workers > 1 and not processes:
        return iter(ds.to_iter_dataset(grain.ReadOptions(num_threads=workers,
                                                         prefetch_buffer_size=max(prefetch, workers))))
    if workers > 1:
        blocker = _process_blocker(ds)
        if blocker is None:
            _mark_absl_flags_parsed()
            options = grain.MultiprocessingOptions(num_workers=workers, per_worker_buffer_size=prefetch)
            read = grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)
            return _track(_OwnedArrays(iter(ds.to_iter_dataset(read).mp_prefetch(options))))
        _logging.notice_once(f"dataset-threads:{blocker}", f"graphpar.dataset: num_parallel_workers={workers} runs "
                             f"in {workers} threads instead of processes because {blocker}.")
        return iter(ds.to_iter_dataset(grain.ReadOptions(num_threads=workers,
                                                         prefetch_buffer_size=max(prefetch, workers))))
    return iter(ds.to_iter_dataset(grain.ReadOptions(num_threads=1 if prefetch else 0, prefetch_buffer_size=prefetch)))


class _OwnedArrays:
    """Rows from worker processes copied out of grain's shared-memory arrays, so a caller may keep them for as long
    as it likes (a kept shared-memory array pins a segment, and one alive at interpreter exit cannot be freed)."""

    def __init__(self, stream: Any):
        self._stream = stream

    def __iter__(self) -> _OwnedArrays:
        return self

    def __next__(self) -> tuple:
        return tuple(np.array(v) for v in next(self._stream))

    def close(self) -> None:
        close(self._stream)


_live: weakref.WeakSet | None = None


def _track(stream: Any) -> Any:
    """Remember a stream with worker processes, so they are stopped (and their shared memory freed) at exit even
    when the interpreter tears objects down in an order that defeats grain's own finalizers."""
    global _live
    if _live is None:
        _live = weakref.WeakSet()
        atexit.register(_close_all)
    _live.add(stream)
    return stream


def _close_all() -> None:
    for stream in list(_live or ()):
        close(stream)


def close(stream: Any) -> None:
    closer = getattr(stream, "close", None)
    if closer is not None:
        closer()


class StreamPool:
    """Keeps the one stream that finished an epoch, for the iterator that asks for the next epoch's start."""

    def __init__(self) -> None:
        self._parked: tuple[tuple, Any] | None = None

    def take(self, key: tuple) -> Any | None:
        parked, self._parked = self._parked, None
        if parked is None:
            return None
        if parked[0] == key:
            return parked[1]
        close(parked[1])
        return None

    def park(self, key: tuple, stream: Any) -> None:
        if self._parked is not None:
            close(self._parked[1])
        self._parked = (key, stream)

    def clear(self) -> None:
        if self._parked is not None:
            close(self._parked[1])
            self._parked = None
