"""Feeding that adapts: the pipeline's worker count and read-ahead for ``Model.train``, chosen from the platform, the
cores and what the training loop measures, unless the user set them.

MindSpore runs every operation on 8 C++ threads by default and can tune them (``set_enable_autotune``); tf.data's
AUTOTUNE and grain's performance configuration choose parallelism and buffers from measured costs and a RAM budget.
graphpar's pipeline runs in the calling process until the loop shows that the devices wait for it: each window of
:data:`WINDOW` steps, :func:`choose_setting` compares the time between two batches with the loop's own time per step
and raises the worker count (and, with it, the read-ahead) to what keeps the devices fed, within

- the cores: on an accelerator all but one (the loop and the device transfers keep one busy), shared between the
  pipelines read side by side (one per local device when each reads its own shard);
- on a CPU, the step's cores: XLA computes the step on every core, so workers may only overlap the pipeline's
  *waiting* (file reads, sleeps: its wall time beyond its CPU time, measured per batch on the thread that computes
  it); the pipeline's CPU demand stays the one core it had. CPU workers are threads (nothing to spawn);
- the memory: ``workers * (prefetch + 1)`` batches within half the available memory (tf.data's default RAM budget;
  grain's ``pick_performance_config`` divides a RAM budget by the element size the same way).

Changing the setting changes nothing in the data: an output is a pure function of (seed, epoch, position), so the
pipeline's stream is reopened at the same position with the new setting and yields the same batches in the same
order (``_iterators.EpochIterator``). A setting the user fixed (``num_parallel_workers`` on an operation,
``ds.config.set_num_parallel_workers``, ``ds.config.set_prefetch_size``) is kept exactly; the stall notice then
says which one to change.
"""

from __future__ import annotations

import math
import os
import threading
from dataclasses import dataclass

from graphpar import _logging

WINDOW = 8  # steps per measurement window
SETTLE = 2  # steps left out after a change (the new workers start and fill their buffers)
STALL = 0.25  # share of a window spent waiting for batches that counts as the devices waiting for data
HEADROOM = 1.5  # workers beyond the bare need: per-batch costs vary, and the main process copies each batch out
MAX_PREFETCH = 16
CPU_BOUND = 0.9  # the pipeline's CPU demand that one worker may reach on a CPU platform (the step has the rest)


@dataclass(frozen=True)
class Setting:
    """How a pipeline runs: ``workers`` (1: in the calling process), ``prefetch`` outputs read ahead per worker,
    worker ``processes`` (else threads)."""

    workers: int
    prefetch: int
    processes: bool = True

    def describe(self) -> str:
        kind = ("in the calling process" if self.workers == 1 else "worker processes" if self.processes
                else "threads")
        return f"num_parallel_workers={self.workers} ({kind}), prefetch {self.prefetch}"


@dataclass(frozen=True)
class Host:
    """Where the pipeline runs: the devices' ``platform`` ("cpu", "gpu", "tpu"...), the ``cores`` this process may
    use, the bytes the read-ahead may hold, and how many pipelines are read side by side."""

    platform: str
    cores: int
    ram_budget: int
    streams: int = 1

    @property
    def accelerator(self) -> bool:
        return self.platform != "cpu"


@dataclass(frozen=True)
class Window:
    """What the loop measured over ``steps`` steps: seconds waited for batches, seconds in all; and, when the
    pipeline computed its batches on one thread, the wall and CPU seconds it spent per batch (else None); the bytes
    of one batch."""

    steps: int
    waited: float
    elapsed: float
    pipeline_wall: float | None = None
    pipeline_cpu: float | None = None
    batch_bytes: int = 0

    @property
    def share(self) -> float:
        return self.waited / self.elapsed if self.elapsed > 0 else 0.0


def this_host(platform: str, streams: int = 1) -> Host:
    """The host this process runs on: the cores it may be scheduled on (its affinity, not the machine's count)
    and half the memory available now."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    try:
        available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        available = 8 << 30
    return Host(platform, cores, available // 2, max(int(streams), 1))


def worker_limit(host: Host, window: Window, prefetch: int) -> int:
    """The most workers ``host`` gives one pipeline (see the module docstring)."""
    if host.accelerator:
        limit = max(1, (host.cores - 1) // host.streams)
    else:
        limit = max(1, host.cores // host.streams)
        wall, cpu = window.pipeline_wall, window.pipeline_cpu
        busy = cpu / wall if wall and cpu is not None else 1.0  # unknown: assume the pipeline computes
        limit = min(limit, max(1, math.floor(CPU_BOUND / busy)) if busy > 0 else limit)
    if window.batch_bytes > 0:
        limit = min(limit, max(1, host.ram_budget // (window.batch_bytes * (prefetch + 1) * host.streams)))
    return limit


def choose_setting(host: Host, current: Setting, window: Window, fixed_workers: bool = False,
                   fixed_prefetch: bool = False) -> Setting:
    """The setting for the next window, given what ``window`` measured under ``current``.

    Nothing changes unless the loop waited :data:`STALL` of the window or more. Then ``current.workers`` deliver a
    batch every ``elapsed / steps`` seconds, so one worker takes ``workers`` times that, and keeping up with the
    loop's own ``(elapsed - waited) / steps`` seconds per step takes that ratio of workers (times
    :data:`HEADROOM`), within :func:`worker_limit`. When the workers rise, the read-ahead per worker doubles too (as
    tf.data grows a buffer its consumer found empty), within :data:`MAX_PREFETCH` and the memory; alone, a deeper
    read-ahead cannot make a pipeline that is too slow keep up, so it does not rise alone. New workers are
    processes on an accelerator and threads on a CPU. Settings only rise: a pipeline that keeps up is left alone.
    While the devices wait, the loop's own time per step is at most the device's (dispatch is asynchronous), so
    the count errs high, within the limit: idle workers cost memory, too few cost the devices' time.
    Fixed settings stay as they are.
    """
    if window.steps < 1 or window.share < STALL:
        return current
    step = max((window.elapsed - window.waited) / window.steps, 1e-6)
    per_worker = window.elapsed / window.steps * current.workers
    need = math.ceil(per_worker / step * HEADROOM)
    workers = current.workers
    if not fixed_workers:
        workers = max(current.workers, min(need, worker_limit(host, window, current.prefetch)))
    prefetch = current.prefetch
    if not fixed_prefetch and workers > current.workers:
        prefetch = min(MAX_PREFETCH, current.prefetch * 2)
        if window.batch_bytes > 0:
            fits = host.ram_budget // (window.batch_bytes * workers * host.streams) - 1
            prefetch = max(current.prefetch, min(prefetch, fits))
    processes = host.accelerator if workers != current.workers else current.processes
    return Setting(workers, prefetch, processes)


@dataclass(frozen=True)
class Change:
    """One adaptation: after ``step`` steps of the train call's epoch ``epoch`` the loop had waited ``share`` of
    the window; the setting went from ``old`` to ``new``."""

    epoch: int
    step: int
    share: float
    old: Setting
    new: Setting

    def describe(self) -> str:
        parts = []
        if self.new.workers != self.old.workers:
            kind = "worker processes" if self.new.processes else "threads"
            parts.append(f"raised num_parallel_workers {self.old.workers} -> {self.new.workers} ({kind})")
        if self.new.prefetch != self.old.prefetch:
            parts.append(f"prefetch {self.old.prefetch} -> {self.new.prefetch}")
        return ", ".join(parts)


class FeedTuner:
    """The setting one ``Model.train`` call feeds with, adapted window by window.

    The loop reports each step (:meth:`observe_step`: seconds waited, seconds in all), the pipeline each batch it
    computed on one thread (:meth:`observe_pipeline`); :attr:`setting` is read by the pipeline's iterators, which
    reopen their stream at their position when it changes (a new frozen value, replaced as a whole: the reading
    thread sees the old one or the new one). ``fixed_workers`` / ``fixed_prefetch`` name what the user set (None:
    graphpar chooses)."""

    def __init__(self, host: Host, start: Setting, fixed_workers: str | None = None,
                 fixed_prefetch: str | None = None):
        self.host, self.setting = host, start
        self.fixed_workers, self.fixed_prefetch = fixed_workers, fixed_prefetch
        self.changes: list[Change] = []
        self.epoch = 0
        self._lock = threading.Lock()
        self._steps = self._waited = self._elapsed = 0.0
        self._wall = self._cpu = 0.0
        self._batches = 0
        self._per_batch: tuple[float | None, float | None] = (None, None)
        self._bytes = 0
        self._settle = 0
        self._step_in_epoch = 0

    def start_epoch(self, epoch: int) -> None:
        self.epoch, self._step_in_epoch = epoch, 1  # the loop reports steps from the second on

    def observe_pipeline(self, wall: float, cpu: float, nbytes: int) -> None:
        with self._lock:
            self._wall += wall
            self._cpu += cpu
            self._batches += 1
            self._bytes = max(self._bytes, int(nbytes))

    def observe_step(self, waited: float, elapsed: float) -> bool:
        """One step of the loop: ``waited`` seconds for its batch, ``elapsed`` in all. False when the step does not
        count: the one that changed the setting and the :data:`SETTLE` after it (the new workers start)."""
        self._step_in_epoch += 1
        if self._settle:
            self._settle -= 1
            return False
        self._steps += 1
        self._waited += waited
        self._elapsed += elapsed
        return self._decide() if self._steps >= WINDOW else True

    def _decide(self) -> bool:
        """Choose the setting for the next window; False when it changed."""
        with self._lock:
            if self._batches:  # else the workers compute the batches: the last thread measurement stands
                self._per_batch = (self._wall / self._batches, self._cpu / self._batches)
            window = Window(int(self._steps), self._waited, self._elapsed, *self._per_batch, self._bytes)
            self._steps = self._waited = self._elapsed = 0.0
            self._wall = self._cpu = 0.0
            self._batches = 0
        old = self.setting
        new = choose_setting(self.host, old, window, self.fixed_workers is not None,
                             self.fixed_prefetch is not None)
        if new == old:
            return True
        change = Change(self.epoch, self._step_in_epoch, window.share, old, new)
        self.changes.append(change)
        self.setting = new
        self._settle = SETTLE
        _logging.notice_once(f"feeding-tuned:{old}:{new}",
                             f"data stall: Model.train waited for the dataset {window.share:.0%} of the last "
                             f"{window.steps} steps (step {change.step} of epoch {change.epoch}); "
                             f"{change.describe()} ({self.host.cores} cores, {self.host.platform}). The batches "
                             "and their order do not change (docs/datasets.md, 'Parallel workers').")
        return False

    def advice(self) -> str:
        """What to change when the loop still waits: the setting the user fixed, or, when graphpar chose it, why it
        went no further."""
        s = self.setting
        if self.fixed_workers is not None:
            return (f"{self.fixed_workers} fixes the worker count, so graphpar leaves it: raise it (this process may "
                    f"use {self.host.cores} cores) or drop it to let graphpar choose")
        if self.host.accelerator:
            return (f"graphpar runs it on {s.describe()}, the most this host gives it ({self.host.cores} cores, "
                    f"{self.host.streams} pipeline(s)): make the pipeline's map cheaper")
        return (f"graphpar runs it on {s.describe()}: on a CPU the step computes on every core, so graphpar adds "
                "workers only to overlap the pipeline's waiting; make the pipeline's map cheaper")
