"""What the pipelined runtime records of a step: its transfers (for the dumps), its live residuals, and, when asked
(``PipelineProgram.trace_step``), how long each action of the schedule took.

**The trace.** On one host the device groups of a CPU job are simulated devices sharing the same cores, so the wall
clock of a step whose groups run concurrently measures how the cores were shared, not the pipeline's bubbles. A
traced step therefore runs the schedule's actions one at a time: each action is dispatched, waited for (its programs
and the sends of its results), and its start and end recorded. :class:`StepTrace` places those measured durations on
the schedule's dependencies (``schedule_cost.measured_timeline``: each group runs its order, an action starts once
its group is free and its inputs exist) and reports each group's idle fraction: the schedule's bubbles with the real
relative costs of this model's forward, input-gradient and weight-gradient programs, in place of the cost model's.
Each action's process CPU time is recorded too: on a machine shared with other work, the wall clock of an action
includes the time other processes held the cores, its CPU time does not (``cpu=True`` below).
On hardware where groups really run concurrently the same records would be read as they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from graphpar.compile.pipeline.schedule import Action, VirtualLayout
from graphpar.compile.pipeline.schedule_cost import Timeline, measured_timeline


@dataclass(frozen=True)
class ActionTiming:
    """One action of a traced step: when it ran (``time.perf_counter`` seconds, waited for) and the process CPU
    seconds it took."""

    action: Action
    start: float
    end: float
    cpu: float


@dataclass(frozen=True)
class StepTrace:
    """The actions of one traced step (see the module docstring), with the schedule they followed."""

    orders: tuple[tuple[Action, ...], ...]
    layout: VirtualLayout
    timings: tuple[ActionTiming, ...]

    def seconds(self, cpu: bool = False) -> dict[Action, float]:
        """Each action's measured wall-clock seconds (``cpu``: process CPU seconds)."""
        return {t.action: t.cpu if cpu else t.end - t.start for t in self.timings}

    def kind_seconds(self, cpu: bool = False) -> dict[str, float]:
        """Mean measured seconds of each kind of action (``F``, ``B``, ``W``)."""
        by_kind: dict[str, list[float]] = {}
        for action, sec in self.seconds(cpu).items():
            by_kind.setdefault(action.kind, []).append(sec)
        return {k: float(np.mean(v)) for k, v in sorted(by_kind.items())}

    def timeline(self, cpu: bool = False) -> Timeline:
        """The schedule with each action's measured duration."""
        return measured_timeline([list(o) for o in self.orders], self.layout, self.seconds(cpu))


def median_timeline(traces: Sequence[StepTrace], cpu: bool = False) -> Timeline:
    """The schedule of ``traces`` (steps of one program) with each action's median measured duration: one step's
    durations on a shared machine are noisy, the median of several is the steadier figure."""
    seconds: dict[Action, list[float]] = {}
    for trace in traces:
        for action, sec in trace.seconds(cpu).items():
            seconds.setdefault(action, []).append(sec)
    first = traces[0]
    return measured_timeline([list(o) for o in first.orders], first.layout,
                             {a: float(np.median(v)) for a, v in seconds.items()})


def residual_bytes(held: list[Any], params: list[Any]) -> int:
    """Bytes on one device of the buffers the VJP objects ``held`` keep (each buffer once; the stage's parameters,
    which a VJP also holds, are not activations)."""
    seen = {p.addressable_shards[0].data.unsafe_buffer_pointer() for p in params if isinstance(p, jax.Array)}
    nbytes = 0
    for leaf in (x for vjp in held for x in jax.tree.leaves(vjp) if isinstance(x, jax.Array)):
        shard = leaf.addressable_shards[0].data
        if shard.unsafe_buffer_pointer() not in seen:
            seen.add(shard.unsafe_buffer_pointer())
            nbytes += shard.nbytes
    return nbytes


def log_entry(direction: str, micro: int, src: int, dst: int, vid: int, graph: Any, x: Any) -> dict[str, Any]:
    """One transfer between stages (chunks ``src`` and ``dst``) as the schedule dump lists it."""
    value = graph.values[vid]
    producer = graph.nodes[value.producer]
    return {"pass": direction, "micro": micro, "src_stage": src, "dst_stage": dst, "value": vid,
            "producer": producer.instance_name, "scope": producer.scope, "dtype": str(np.dtype(x.dtype)),
            "shape": list(x.shape), "bytes": int(x.nbytes),
            "device_bytes": int(x.addressable_shards[0].data.nbytes)}
