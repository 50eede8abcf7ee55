"""How much of a step each device group of a pipeline schedule is idle: from a cost model, or from measured times.

:func:`timeline` places a schedule's actions in time: each group runs its own order one action after the other, and
an action starts once its group is free and the actions it needs (``schedule.inputs_of``) have ended. Its durations
come either from :class:`ScheduleCosts` (the schedule's figure) or from a trace of a real run
(``PipelineProgram.trace_step``: each action's measured seconds). :func:`idle_fractions` is, per group, the time it
waits inside the step (from the step's start to the end of the last action of any group) over the step's length.

The cost model (:class:`ScheduleCosts`, defaults ``F = B = W = 1``: the zero-bubble paper's assumption
``T_F = T_B = T_W``) is per micro-batch of a whole stage: a forward costs ``f``, the input gradient ``b``, the weight
gradient ``w``, so a backward that is not split costs ``b + w``. A chunk of a group holding ``v`` segments does
``1/v`` of a stage's work, so each of its actions costs ``1/v`` as much. Sends between groups cost nothing here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from graphpar.compile.pipeline.schedule import Action, VirtualLayout, inputs_of, key_of, splits_backward


@dataclass(frozen=True)
class ScheduleCosts:
    """Relative cost of one micro-batch's forward (``f``), input gradient (``b``) and weight gradient (``w``)
    through a whole stage (see the module docstring)."""

    f: float = 1.0
    b: float = 1.0
    w: float = 1.0

    def duration(self, a: Action, layout: VirtualLayout, split: bool) -> float:
        whole = {"F": self.f, "B": self.b if split else self.b + self.w, "W": self.w}[a.kind]
        return whole / layout.segments


@dataclass(frozen=True)
class Timeline:
    """Each action's ``(start, end)``, the step's length, and per group its busy time."""

    spans: dict[Action, tuple[float, float]]
    length: float
    busy: tuple[float, ...]

    @property
    def idle(self) -> tuple[float, ...]:
        """Per group: idle time over the step's length."""
        return tuple(1.0 - b / self.length for b in self.busy) if self.length else tuple(0.0 for _ in self.busy)

    @property
    def idle_total(self) -> float:
        """All groups together: idle time over (groups x the step's length)."""
        return 1.0 - sum(self.busy) / (len(self.busy) * self.length) if self.length else 0.0


def timeline(orders: list[list[Action]], layout: VirtualLayout, duration: Callable[[Action], float]) -> Timeline:
    """Place ``orders`` in time with ``duration(action)`` (see the module docstring)."""
    ended: dict[tuple[int, str, int], float] = {}
    spans: dict[Action, tuple[float, float]] = {}
    free = [0.0] * len(orders)
    position = [0] * len(orders)
    busy = [0.0] * len(orders)
    while any(p < len(o) for p, o in zip(position, orders)):
        best = None
        for s, order in enumerate(orders):
            if position[s] >= len(order):
                continue
            a = order[position[s]]
            needs = inputs_of(a, layout)
            if all(k in ended for k in needs):
                start = max([free[s]] + [ended[k] for k in needs])
                if best is None or start < best[0]:
                    best = (start, a)
        if best is None:
            raise RuntimeError(f"pipeline schedule deadlocks at positions {position}")
        start, a = best
        end = start + duration(a)
        spans[a] = (start, end)
        ended[key_of(a, layout)] = end
        free[a.stage] = end
        busy[a.stage] += end - start
        position[a.stage] += 1
    return Timeline(spans, max(free) if free else 0.0, tuple(busy))


def schedule_timeline(orders: list[list[Action]], layout: VirtualLayout,
                      costs: ScheduleCosts = ScheduleCosts()) -> Timeline:
    """The schedule's timeline under the cost model."""
    split = splits_backward(orders)
    return timeline(orders, layout, lambda a: costs.duration(a, layout, split))


def measured_timeline(orders: list[list[Action]], layout: VirtualLayout,
                      seconds: Mapping[Action, float]) -> Timeline:
    """The schedule's timeline with each action's measured seconds (a trace of a real run)."""
    return timeline(orders, layout, lambda a: seconds[a])


def idle_fractions(orders: list[list[Action]], layout: VirtualLayout,
                   costs: ScheduleCosts = ScheduleCosts()) -> tuple[float, ...]:
    """Per group, the idle fraction of the schedule under the cost model."""
    return schedule_timeline(orders, layout, costs).idle
