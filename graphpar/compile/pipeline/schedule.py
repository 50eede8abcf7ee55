"""Pipeline schedules: the order in which each stage runs its micro-batches' forward and backward programs.

* ``gpipe``: every stage runs all forwards, then all backwards. A stage holds the activations (the residuals its
  backward needs) of all ``micro_size`` micro-batches at its peak.
* ``1f1b`` (MindSpore's default, PipeDream-flush): stage ``s`` runs ``S - s - 1`` warm-up forwards, then alternates
  one forward and one backward, then drains the remaining backwards; it never holds more than ``S - s`` micro-batches.

:func:`dispatch_order` interleaves the per-stage orders into the one order a single process dispatches them in, by
simulating unit-time steps in which a stage runs its next action once its inputs exist (the forward of micro-batch
``k`` on stage ``s - 1``; the backward of ``k`` on stage ``s + 1``). The result is the timeline the dumps show.
"""

from __future__ import annotations

from dataclasses import dataclass

SCHEDULERS = ("1f1b", "gpipe")


@dataclass(frozen=True)
class Action:
    stage: int
    kind: str  # "F" (forward) or "B" (backward)
    micro: int

    @property
    def text(self) -> str:
        return f"{self.kind}{self.micro}"


def stage_orders(scheduler: str, n_stages: int, micro_size: int) -> list[list[Action]]:
    """Each stage's own sequence of actions."""
    if scheduler not in SCHEDULERS:
        raise ValueError(f"unknown pipeline scheduler {scheduler!r}; valid: {', '.join(SCHEDULERS)}")
    orders = []
    for s in range(n_stages):
        fwd = [Action(s, "F", k) for k in range(micro_size)]
        bwd = [Action(s, "B", k) for k in range(micro_size)]
        if scheduler == "gpipe":
            orders.append(fwd + bwd)
            continue
        warm = min(n_stages - s - 1, micro_size)
        order = fwd[:warm]
        for i in range(micro_size - warm):
            order += [fwd[warm + i], bwd[i]]
        orders.append(order + bwd[micro_size - warm:])
    return orders


def dispatch_order(orders: list[list[Action]]) -> list[list[Action]]:
    """The actions grouped by time step (each step: at most one action per stage, in stage order)."""
    n_stages = len(orders)
    done: set[tuple[int, str, int]] = set()
    position = [0] * n_stages
    ticks: list[list[Action]] = []
    while any(p < len(o) for p, o in zip(position, orders)):
        ready = []
        for s, order in enumerate(orders):
            if position[s] >= len(order):
                continue
            a = order[position[s]]
            if a.kind == "F":
                ok = s == 0 or (s - 1, "F", a.micro) in done
            else:
                ok = (s, "F", a.micro) in done and (s == n_stages - 1 or (s + 1, "B", a.micro) in done)
            if ok:
                ready.append(a)
        if not ready:  # pragma: no cover - the two schedules above always progress
            raise RuntimeError(f"pipeline schedule deadlocks at positions {position}")
        for a in ready:
            done.add((a.stage, a.kind, a.micro))
            position[a.stage] += 1
        ticks.append(ready)
    return ticks


def peak_in_flight(order: list[Action]) -> int:
    """The most micro-batches whose forward ran and backward did not yet, along one stage's order."""
    live = peak = 0
    for a in order:
        live += 1 if a.kind == "F" else -1
        peak = max(peak, live)
    return peak
