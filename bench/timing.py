"""Timing helpers: interleaved A/B measurement so that machine noise hits both sides alike."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def per_call_seconds(fn: Callable[[], object], calls: int, in_flight: int = 2,
                     clock: Callable[[], float] = time.perf_counter) -> float:
    """Seconds per call with at most ``in_flight`` results outstanding (graphpar's own dispatch limit; XLA's CPU
    collectives deadlock with deep queues of multi-device programs), applied to both sides alike. ``clock``: wall
    time, or ``time.process_time`` for the CPU time of the whole process (the devices' threads included: steadier
    than wall on a loaded machine)."""
    queue = []
    started = clock()
    for _ in range(calls):
        out = fn()
        queue.append(out)
        if len(queue) > in_flight:
            queue.pop(0).block_until_ready()
    for out in queue:
        out.block_until_ready()
    return (clock() - started) / calls


def compare(a: Callable[[], object], b: Callable[[], object], calls: int = 50, rounds: int = 15,
            warmup: int = 5, clock: Callable[[], float] = time.perf_counter) -> tuple[float, float, float]:
    """Median seconds per call of ``a`` and ``b`` over interleaved rounds, and the median of the per-round ratios
    a/b (each round times both back to back, so the ratio cancels slow phases of the machine); ``clock`` as in
    :func:`per_call_seconds`."""
    for _ in range(warmup):
        a().block_until_ready()  # drained: a backlog of queued warm-up steps would be timed in round 0's first side
        b().block_until_ready()
    ta, tb, ratios = [], [], []
    for r in range(rounds):
        if r % 2:
            x, y = per_call_seconds(b, calls, clock=clock), per_call_seconds(a, calls, clock=clock)
            ta.append(y), tb.append(x)
        else:
            ta.append(per_call_seconds(a, calls, clock=clock))
            tb.append(per_call_seconds(b, calls, clock=clock))
        ratios.append(ta[-1] / tb[-1])
    return statistics.median(ta), statistics.median(tb), statistics.median(ratios)
