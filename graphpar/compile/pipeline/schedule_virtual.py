"""The schedules of groups that hold several virtual stages: interleaved 1F1B and zero_bubble_v (ZB-V).

* **Interleaved 1F1B** (``pipeline_interleave=True``, ``pipeline_scheduler="1f1b"``; Megatron-LM's schedule, which
  MindSpore's docs describe): group ``s`` of ``S`` holds the ``v`` chunks ``s, s + S, ...``. Its forwards run in
  rounds of ``S`` micro-batches, each round through segment 0, then segment 1, ...; its backwards in the same rounds
  with the segments reversed. Group ``s`` runs ``2 (S - s - 1) + (v - 1) S`` warm-up forwards, then alternates one
  forward and one backward, then drains. Each chunk is ``1/v`` of a stage, so the fill and drain shrink by ``v``
  (MindFormers' bubble ratio ``(p - 1) / (v m + p - 1)``) at the price of ``v`` times the activation transfers.
  (MindSpore's own variant delays some forwards to hold fewer micro-batches at the peak; the dependencies are the
  same.)
* **zero_bubble_v** (Qi et al., "Zero Bubble Pipeline Parallelism"; MindSpore's ``pipeline_scheduler=
  "zero_bubble_v"``): two segments in a V (:class:`~graphpar.compile.pipeline.schedule.VirtualLayout` with
  ``v_shape``: group ``s`` holds chunks ``s`` and ``2S - 1 - s``, so the loss is on group 0) and every backward split
  into ``B`` (the input gradient, which the previous chunk waits for) and ``W`` (the weight gradient, which nothing
  waits for). :func:`zero_bubble_v_orders` builds each group's order by list scheduling in unit time steps: a free
  group runs a ready ``B`` first (the critical path), else a ready forward while it holds fewer than ``2 S``
  chunk-activations (1F1B's peak memory: ``S`` micro-batches of a whole stage), else a deferred ``W`` (filling what
  would be a bubble); ties go to the later chunk, then the earlier micro-batch.

Both return plain per-group lists of :class:`~graphpar.compile.pipeline.schedule.Action` s, like the non-interleaved
schedules, so any runtime that runs those runs these.
"""

from __future__ import annotations

from graphpar.compile.pipeline.schedule import Action, VirtualLayout, inputs_of, key_of, stage_orders


def schedule_orders(scheduler: str, layout: VirtualLayout, micro_size: int) -> list[list[Action]]:
    """Each group's actions for ``scheduler`` on ``layout`` (the settings were checked: ``settings``)."""
    if scheduler == "zero_bubble_v":
        return zero_bubble_v_orders(layout, micro_size)
    if layout.segments > 1:
        return interleaved_1f1b_orders(layout, micro_size)
    return stage_orders(scheduler, layout.stages, micro_size)


def _rounds(layout: VirtualLayout, micro_size: int, backward: bool) -> list[tuple[int, int]]:
    """``(segment, micro)`` in the order a group runs its forwards (or backwards): rounds of ``S`` micro-batches,
    each through every segment (reversed for the backwards)."""
    s, v = layout.stages, layout.segments
    out = []
    for start in range(0, micro_size, s):
        for seg in range(v):
            out += [(v - 1 - seg if backward else seg, k) for k in range(start, min(start + s, micro_size))]
    return out


def interleaved_1f1b_orders(layout: VirtualLayout, micro_size: int) -> list[list[Action]]:
    """Interleaved 1F1B (see the module docstring) for ``layout.segments`` chunks per group."""
    s_count, v = layout.stages, layout.segments
    total = micro_size * v
    fwd_seq, bwd_seq = _rounds(layout, micro_size, False), _rounds(layout, micro_size, True)
    orders = []
    for s in range(s_count):
        fwd = [Action(s, "F", k, seg) for seg, k in fwd_seq]
        bwd = [Action(s, "B", k, seg) for seg, k in bwd_seq]
        warm = min(2 * (s_count - s - 1) + (v - 1) * s_count, total)
        order = fwd[:warm]
        for i in range(total - warm):
            order += [fwd[warm + i], bwd[i]]
        orders.append(order + bwd[total - warm:])
    return orders


def zero_bubble_v_orders(layout: VirtualLayout, micro_size: int) -> list[list[Action]]:
    """ZB-V (see the module docstring): each group's order of ``F``, ``B`` and ``W`` actions."""
    s_count = layout.stages
    cap = 2 * s_count  # chunk-activations held at once: 1F1B's peak of S whole-stage micro-batches
    todo = [[Action(s, kind, k, seg) for seg in range(layout.segments) for k in range(micro_size)
             for kind in ("F", "B", "W")] for s in range(s_count)]
    done: set[tuple[int, str, int]] = set()
    held = [0] * s_count
    orders: list[list[Action]] = [[] for _ in range(s_count)]

    def rank(a: Action) -> tuple[int, int, int]:
        kind = {"B": 0, "F": 1, "W": 2}[a.kind]
        return kind, -layout.chunk(a.stage, a.segment), a.micro

    while any(todo):
        ran = []
        for s in range(s_count):
            ready = [a for a in todo[s] if all(k in done for k in inputs_of(a, layout))
                     and not (a.kind == "F" and held[s] >= cap)]
            if ready:
                a = min(ready, key=rank)
                todo[s].remove(a)
                orders[s].append(a)
                held[s] += 1 if a.kind == "F" else -1 if a.kind == "W" else 0
                ran.append(a)
        if not ran:
            raise RuntimeError(f"zero_bubble_v schedule deadlocks for {layout} and {micro_size} micro-batches")
        done.update(key_of(a, layout) for a in ran)
    return orders
