"""Pipeline schedules: the order in which each device group runs its micro-batches' forward and backward programs.

A pipeline's model is cut into *virtual stages* (chunks) in model order ``0 .. C-1``; device group ``s`` (MindSpore's
``pipeline_stage``) holds one chunk per *segment* (MindSpore's ``pipeline_segment``): :class:`VirtualLayout` says
which. Without interleaving every group holds one chunk (chunk ``s``). The schedules:

* ``gpipe``: every stage runs all forwards, then all backwards. A stage holds the activations (the residuals its
  backward needs) of all ``micro_size`` micro-batches at its peak.
* ``1f1b`` (MindSpore's default, PipeDream-flush): stage ``s`` runs ``S - s - 1`` warm-up forwards, then alternates
  one forward and one backward, then drains the remaining backwards; it never holds more than ``S - s`` micro-batches.
* ``1f1b`` with ``pipeline_interleave`` and ``v`` segments (``schedule_virtual``): Megatron's interleaved 1F1B.
* ``zero_bubble_v`` (``schedule_virtual``): ZB-V, with the backward split into ``B`` (input gradient) and ``W``
  (weight gradient) actions.

A schedule is a plain list per device group of :class:`Action` s (group, kind, micro-batch, segment), in the order
that group runs them. :func:`dispatch_order` interleaves them into the one order a single process dispatches them in,
by simulating unit-time steps in which a group runs its next action once its inputs exist (:func:`inputs_of`). The
result is the timeline the dumps show; ``schedule_cost`` gives the same orders durations and measures idle time.
"""

from __future__ import annotations

from dataclasses import dataclass

SCHEDULERS = ("1f1b", "gpipe")  # without interleaving; see VirtualLayout and schedule_virtual for the others


@dataclass(frozen=True)
class VirtualLayout:
    """Where each virtual stage (chunk) of the model runs: ``stages`` device groups, ``segments`` chunks per group.

    Chunk ``c`` in model order is segment ``c // stages`` of its group. Interleaved 1F1B places the segments in the
    same direction (group ``s`` holds chunks ``s, s + S, s + 2S, ...``: MindSpore's "stage 0 has layers 0 and 4");
    ``v_shape`` (zero_bubble_v) reverses every odd segment, so group ``s`` holds chunks ``s`` and ``2S - 1 - s``
    (MindSpore's "stage 0 has layer 0 and 7") and the last chunk, with the loss, is on group 0."""

    stages: int
    segments: int = 1
    v_shape: bool = False

    @property
    def chunks(self) -> int:
        return self.stages * self.segments

    @property
    def virtual(self) -> bool:
        """True when a group holds more than one chunk (the dumps then name every action's segment)."""
        return self.segments > 1

    def chunk(self, stage: int, segment: int) -> int:
        """The model-order index of segment ``segment`` of group ``stage``."""
        flip = self.v_shape and segment % 2 == 1
        return segment * self.stages + (self.stages - 1 - stage if flip else stage)

    def place(self, chunk: int) -> tuple[int, int]:
        """``(stage, segment)`` of chunk ``chunk``."""
        segment, r = divmod(chunk, self.stages)
        return (self.stages - 1 - r if self.v_shape and segment % 2 == 1 else r), segment

    def describe(self, chunk: int) -> str:
        """How errors and dumps name a chunk: ``stage 1`` or ``stage 1 segment 0 (virtual stage 1)``."""
        stage, segment = self.place(chunk)
        return f"stage {stage}" if not self.virtual else f"stage {stage} segment {segment} (virtual stage {chunk})"


@dataclass(frozen=True)
class Action:
    """One program run of a schedule: on device group ``stage``, for micro-batch ``micro`` and segment
    ``segment``, ``kind`` ``"F"`` (forward), ``"B"`` (backward: the whole backward, or only the input gradient in a
    schedule that has ``"W"`` actions) or ``"W"`` (the weight gradient of a split backward)."""

    stage: int
    kind: str
    micro: int
    segment: int = 0

    @property
    def text(self) -> str:
        return f"{self.kind}{self.micro}"

    def label(self, virtual: bool) -> str:
        """``F3`` or, when groups hold several segments, ``F3s1`` (forward of micro-batch 3 in segment 1)."""
        return f"{self.kind}{self.micro}s{self.segment}" if virtual else self.text


def stage_orders(scheduler: str, n_stages: int, micro_size: int) -> list[list[Action]]:
    """Each stage's own sequence of actions (one chunk per stage)."""
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


def splits_backward(orders: list[list[Action]]) -> bool:
    """True when the schedule runs the weight gradients as separate ``W`` actions."""
    return any(a.kind == "W" for order in orders for a in order)


def inputs_of(a: Action, layout: VirtualLayout) -> list[tuple[int, str, int]]:
    """``(chunk, kind, micro)`` of the actions whose results ``a`` needs: a forward needs the previous chunk's
    forward; a backward its own forward and the next chunk's backward (input gradient); a weight gradient its
    backward."""
    c = layout.chunk(a.stage, a.segment)
    if a.kind == "F":
        return [(c - 1, "F", a.micro)] if c > 0 else []
    if a.kind == "W":
        return [(c, "B", a.micro)]
    return [(c, "F", a.micro)] + ([(c + 1, "B", a.micro)] if c < layout.chunks - 1 else [])


def key_of(a: Action, layout: VirtualLayout) -> tuple[int, str, int]:
    return layout.chunk(a.stage, a.segment), a.kind, a.micro


def dispatch_order(orders: list[list[Action]], layout: VirtualLayout | None = None) -> list[list[Action]]:
    """The actions grouped by time step (each step: at most one action per group, in group order)."""
    layout = layout or VirtualLayout(len(orders))
    done: set[tuple[int, str, int]] = set()
    position = [0] * len(orders)
    ticks: list[list[Action]] = []
    while any(p < len(o) for p, o in zip(position, orders)):
        ready = [order[position[s]] for s, order in enumerate(orders) if position[s] < len(order)
                 and all(k in done for k in inputs_of(order[position[s]], layout))]
        if not ready:
            raise RuntimeError(f"pipeline schedule deadlocks at positions {position}")
        for a in ready:
            done.add(key_of(a, layout))
            position[a.stage] += 1
        ticks.append(ready)
    return ticks


def peak_in_flight(order: list[Action]) -> int:
    """The most micro-batch chunks whose forward ran and whose residuals were not yet released (by the backward,
    or by the weight gradient when the schedule splits it), along one group's order."""
    split = any(a.kind == "W" for a in order)
    live = peak = 0
    for a in order:
        live += 1 if a.kind == "F" else -1 if a.kind == ("W" if split else "B") else 0
        peak = max(peak, live)
    return peak
