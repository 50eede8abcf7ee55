"""Iterators over a pipeline, with a checkpointable state.

The state of every iterator is ``{"epoch": e, "position": k}``: the next output is output ``k`` of epoch ``e``.
Because an epoch is a pure function of (seed, epoch), a new iterator given that state continues exactly where the
old one stopped, with any worker count. The state is plain JSON.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphpar.dataset import _stream
from graphpar.dataset._rows import Row, names, positions
from graphpar.errors import DatasetError


def _check_state(state: Any) -> tuple[int, int]:
    try:
        epoch, position = state["epoch"], state["position"]
    except (TypeError, KeyError) as exc:
        raise DatasetError(f"set_state: expected {{'epoch': int, 'position': int}} from get_state(), got {state!r}") \
            from exc
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (epoch, position)):
        raise DatasetError(f"set_state: epoch and position must be ints >= 0, got {state!r}")
    return epoch, position


class EpochIterator:
    """The outputs (tuples of numpy arrays) of one epoch, from ``start`` on (graphpar's ``iter_epoch``).

    With a ``tuner`` (``autotune.FeedTuner``) the workers and read-ahead follow its setting: when it changes, the
    stream is reopened at the current position with the new one (same outputs, same order), and the batches this
    thread computes itself are timed for it."""

    def __init__(self, dataset: Any, epoch: int, start: int = 0, read_ahead: bool = True, tuner: Any = None):
        for name, value in (("epoch", epoch), ("start_batch", start)):
            if not isinstance(value, (int, np.integer)) or value < 0:
                raise DatasetError(f"iter_epoch: {name} must be an int >= 0, got {value!r}")
        self._dataset, self._epoch, self._position = dataset, int(epoch), int(start)
        self._tuner, self._read_ahead = tuner, read_ahead
        self._tuned = tuner.setting if tuner is not None else None
        self._settings = (dataset._run_settings(read_ahead) if tuner is None
                          else dataset._settings_for(self._tuned, read_ahead))
        self._length = dataset._epoch_length()
        self._stream: Any = None

    def __iter__(self) -> EpochIterator:
        return self

    def __next__(self) -> Row:
        if self._length is not None and self._position >= self._length:
            self.close()
            raise StopIteration
        tuner = self._tuner
        if tuner is not None and tuner.setting is not self._tuned:
            self._retune(tuner.setting)
        if self._stream is None:
            self._stream = self._dataset._open(self._settings, self._epoch, self._position)
        timed = tuner is not None and self._settings[1] == 1 and self._settings[2] == 0  # computed on this thread
        if timed:
            wall, cpu = time.perf_counter(), time.thread_time()
        try:
            row = next(self._stream)
        except StopIteration:
            self._stream = None
            raise
        if timed:
            tuner.observe_pipeline(time.perf_counter() - wall, time.thread_time() - cpu,
                                   sum(np.asarray(v).nbytes for v in row))
        self._position += 1
        if self._length is not None and self._position == self._length:
            self._dataset._park(self._settings, self._epoch + 1, self._stream)
            self._stream = None
        return row

    def _retune(self, setting: Any) -> None:
        """Run on ``setting`` from the current position on (the seed read at creation stays)."""
        self._tuned = setting
        settings = self._dataset._settings_for(setting, self._read_ahead, self._settings[0])
        if settings != self._settings:
            self.close()
            self._settings = settings

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def position(self) -> int:
        return self._position

    def get_state(self) -> dict[str, int]:
        return {"epoch": self._epoch, "position": self._position}

    def set_state(self, state: dict[str, int]) -> None:
        self.close()
        self._epoch, self._position = _check_state(state)

    def close(self) -> None:
        """Stop the read-ahead (and worker processes) of this iterator now rather than when it is collected."""
        if self._stream is not None:
            _stream.close(self._stream)
            self._stream = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - never raise from a finalizer
            pass


def _to_tensor(value: np.ndarray) -> Any:
    if value.dtype.kind in "biufc":
        import jax.numpy as jnp

        return jnp.asarray(value)
    return value


class TupleIterator:
    """MindSpore's tuple iterator: each ``for`` loop over it is one epoch, for ``num_epochs`` epochs (-1: no end)."""

    def __init__(self, dataset: Any, columns: str | Sequence[str] | None = None, num_epochs: int = -1,
                 output_numpy: bool = False):
        if not isinstance(num_epochs, int) or (num_epochs < 1 and num_epochs != -1):
            raise DatasetError(f"num_epochs must be -1 (no end) or an int >= 1, got {num_epochs!r}")
        all_columns = dataset.get_col_names()
        wanted = names(columns, "columns")
        self._pos = positions(wanted, all_columns, "create_tuple_iterator") if wanted else None
        self._names = wanted or all_columns
        self._dataset, self._num_epochs, self._numpy = dataset, num_epochs, bool(output_numpy)
        self._epoch, self._start = 0, 0
        self._current: EpochIterator | None = None

    def __iter__(self) -> TupleIterator:
        return self

    def _next_row(self) -> Row:
        if self._current is None:
            if self._num_epochs != -1 and self._epoch >= self._num_epochs:
                raise StopIteration
            self._current = EpochIterator(self._dataset, self._epoch, self._start)
            self._start = 0
        try:
            row = next(self._current)
        except StopIteration:
            self._current = None
            self._epoch += 1
            raise
        if self._pos is not None:
            row = tuple(row[i] for i in self._pos)
        return row

    def __next__(self) -> list:
        row = self._next_row()
        return [v if self._numpy else _to_tensor(v) for v in row]

    def get_state(self) -> dict[str, int]:
        if self._current is not None:
            return self._current.get_state()
        return {"epoch": self._epoch, "position": self._start}

    def set_state(self, state: dict[str, int]) -> None:
        self.stop()
        self._epoch, self._start = _check_state(state)

    def stop(self) -> None:
        """Release the workers and read-ahead of this iterator (MindSpore's ``stop``)."""
        if self._current is not None:
            self._current.close()
            self._current = None


class DictIterator(TupleIterator):
    """Like :class:`TupleIterator`, yielding ``{column name: value}``."""

    def __next__(self) -> dict:  # type: ignore[override]
        row = self._next_row()
        return {n: (v if self._numpy else _to_tensor(v)) for n, v in zip(self._names, row)}
