"""The layer plans the stage search adds for what the intra-op objective does not see: its weights' cost in a stage.

The profile plans the repeated layer on a tensor group with the intra-op search's time objective
(``stage_profile``). That objective prices one micro-batch's compute and tensor-group collectives; it sees neither
what a pipeline stage pays per byte of weight on each device (the weights, their gradients and optimizer state
resident for every layer of the stage, and the data-parallel reduction of their gradients after every
micro-batch's backward, ``planner.stages.model.reduce_time``), nor the stage's memory budget. So at a large
micro-batch it may replicate weights over the group to save activation collectives (GPT-3's layer on 8 devices
for 8 sequences: 2.42 GB of weights per device where Megatron's column / row split keeps 0.91 GB), a plan the
stage search then prices as too slow or too big, with no other plan of that (group, micro-batch) to choose.

:func:`bounded_plans` gives the search the plans the intra-op ILP finds when it must also keep the weights small:
the layer re-solved under a per-device memory bound (``SearchSettings.memory_budget``, the ILP's own memory rows)
that takes away the weights' excess over a full split over the group (the plan's weight bytes per device minus
their whole bytes over ``tp``, with the optimizer state each carries), tightened by what is left while a plan
still keeps more than the full split and the bound is feasible (at most :data:`STEPS` re-solves; a re-solve that
meets the bound by cutting activations instead is not kept, and the bound tightens again). Each plan is then
priced as any layer plan (``stage_profile._price_layer``: its own FLOPs, collectives, weights and activations),
and the stage search picks among all a (group, micro-batch) has by predicted step time
(``planner.stages.sequence.variants``), so a bounded plan is chosen only where it makes the step faster. The same
ladder is re-solved for the strategy file (``planned_layer(weight_bound=k)``: deterministic), so a run compiles
the plan that was priced.
"""

from __future__ import annotations

from collections.abc import Callable

from graphpar.ir.graph import Graph
from graphpar.planner.memory_model import DEFAULT_OPTIMIZER_SLOTS

STEPS = 3  # re-solves per (group, micro-batch) at most
# a plan within this share of the full split keeps its weights fully split (the LayerNorms' and biases' vectors
# may stay whole), and a re-solve must cut the weights by more to count as a variant of its own
TOLERANCE = 0.02


def whole_weight_bytes(graph: Graph, skip: Callable[[str], bool]) -> float:
    """The layer's trainable Parameters' whole bytes (``skip``: names left out, the profile's probe)."""
    return float(sum(v.nbytes for v in graph.values.values() if v.kind == "param" and not skip(v.name)))


def bounded_plans(planned: Graph, tp: int, full: float, weights: Callable[[Graph], float],
                  replan: Callable[[float], Graph | None]) -> list[Graph]:
    """The ladder of weight-bounded plans after the searched ``planned`` on ``tp`` devices: each re-solved by
    ``replan(budget)`` (None: no plan fits), ``weights`` reads a plan's weight bytes per device, ``full`` is the
    layer's weights split over the whole group. Empty when the searched plan already splits them fully."""
    out: list[Graph] = []
    held = weights(planned)
    budget = planned.plan.search.memory_bytes if planned.plan.search is not None else None
    for _ in range(STEPS):
        excess = held - full
        if tp <= 1 or budget is None or excess <= TOLERANCE * full:
            break
        budget -= excess * (1.0 + DEFAULT_OPTIMIZER_SLOTS)
        current = replan(budget)
        if current is None:
            break
        if weights(current) < held * (1.0 - TOLERANCE):  # a plan that keeps less weight: a variant
            out.append(current)
            held = weights(current)
        # else the bound was met by cutting activations: tighten it by the same excess again
    return out
