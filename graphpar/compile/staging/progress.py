"""Telling the user what a long compile is doing: a status line naming the stage and the elapsed time.

A compile that finishes within ``NOTICE_AFTER_S`` seconds says nothing. A longer one shows a live status line on a
terminal (rich), ``graphpar: compiling TrainOneStepCell train step — XLA compile 12.3 s``, updated as the stages
advance, and logs one summary line of the stage times when it is done (once per program).
"""

from __future__ import annotations

import logging

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from graphpar._logging import notice_once

NOTICE_AFTER_S = 3.0


class CompileProgress:
    """Stage times of one build; ``stage(name)`` brackets a stage. Thread-safe against its own status timer.

    ``seconds``: wall clock per stage; ``cpu_seconds``: the process's CPU time in it, every thread's (XLA compiles
    on its own threads), steadier than wall on a loaded machine (what benchmarks compare stages by)."""

    def __init__(self, what: str, notice_after_s: float = NOTICE_AFTER_S):
        self.what = what
        self.seconds: dict[str, float] = {}
        self.cpu_seconds: dict[str, float] = {}
        self._started = time.perf_counter()
        self._current = "starting"
        self._after = notice_after_s
        self._status = None
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    def __enter__(self) -> "CompileProgress":
        self._timer = threading.Timer(self._after, self._show)
        self._timer.daemon = True
        self._timer.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._timer is not None:
            self._timer.cancel()
        with self._lock:
            if self._status is not None:
                self._status.stop()
                self._status = None
        total = time.perf_counter() - self._started
        if total >= self._after and exc[0] is None:
            stages = ", ".join(f"{k} {v:.1f} s" for k, v in self.seconds.items())
            notice_once(f"slow-compile:{self.what}", f"compiling {self.what} took {total:.1f} s ({stages})",
                        logging.INFO)

    def _text(self) -> str:
        return f"graphpar: compiling {self.what} — {self._current} {time.perf_counter() - self._started:.1f} s"

    def _show(self) -> None:
        from rich.console import Console

        console = Console(stderr=True)
        if not console.is_terminal:
            return  # not a terminal: the summary line at the end says it
        with self._lock:
            self._status = console.status(_Line(self))  # re-rendered on every refresh: the time keeps moving
            self._status.start()

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        self._current = name
        started, cpu = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - started
            self.cpu_seconds[name] = self.cpu_seconds.get(name, 0.0) + time.process_time() - cpu


class _Line:
    def __init__(self, progress: CompileProgress):
        self.progress = progress

    def __rich__(self) -> str:
        return self.progress._text()
