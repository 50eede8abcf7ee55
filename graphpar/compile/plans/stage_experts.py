"""The routed experts inside the stage search's repeated layer (its ``MoE`` Cells): what expert parallel splits,
what its AlltoAlls move, and the experts' split over the tensor group the layer is profiled on.

Expert parallel (ep) is priced by the stage model from the layer profiled at ep 1 (``planner.stages.model``:
``expert_time``, ``layer_weights``). Tensor parallel of the experts is profiled: on a tensor group of ``tp``
devices, an MoE built without a split of its own (``MoEParallelConfig(1, 1, 1)``, the default) is traced with
MindSpore's experts' strategies for ``model_parallel=tp`` (the inner feed-forward dimension split ``tp`` ways:
``((1, 1, 1, 1), (1, 1, tp))`` into the first matmul, ``((1, 1, 1, tp), (1, tp, 1))`` into the second), so the
intra-op search plans the rest of the layer around them; the routing keeps its own strategies (replicated over
the group, as MindSpore's MoE with ``data_parallel=1`` replicates it over ``model_parallel``). An MoE built with a
split of its own keeps it (hints are fixed).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterator

from graphpar.ir.graph import Graph
from graphpar.nn.cell import Cell
from graphpar.nn.transformer import MoE
from graphpar.planner.cost import block_bytes, replicated_spec


@dataclasses.dataclass(frozen=True)
class Experts:
    """The routed experts inside the layer: how many (the count every expert parallel must divide), their
    weights' names, the names of the weights their first matmul reads (its other input is the dispatched tokens:
    what expert parallel's AlltoAll moves), and each MoE's feed-forward (its split is set per tensor group)."""

    count: int = 0
    weights: frozenset[str] = frozenset()
    first: frozenset[str] = frozenset()
    feed_forwards: tuple[Cell, ...] = ()


def layer_experts(layer: Cell) -> Experts:
    moes = [c for _, c in layer.cells_and_names() if isinstance(c, MoE) and c.expert_dim > 1]
    if not moes:
        return Experts()
    return Experts(math.gcd(*(m.expert_dim for m in moes)),
                   frozenset(p.name for m in moes for p in m.ffn.trainable_params()),
                   frozenset(m.ffn.mapping.weight.name for m in moes), tuple(m.ffn for m in moes))


def expert_split(experts: Experts, tp: int) -> int:
    """The ways the experts' inner dimension is split on a tensor group of ``tp`` devices: ``tp`` when every MoE
    was built unsplit and ``tp`` divides its hidden and feed-forward sizes, else 1 (each keeps its own)."""
    if tp == 1 or not experts.feed_forwards:
        return 1
    if all(f.expert_split == (1, 1, 1) and all(size % tp == 0 for size in f.sizes) for f in experts.feed_forwards):
        return tp
    return 1


@contextlib.contextmanager
def experts_split(experts: Experts, mp: int) -> Iterator[None]:
    """The experts' strategies for ``model_parallel=mp`` while the layer is traced (the trace records the
    strategies), the built ones put back after."""
    if mp == 1:
        yield
        return
    try:
        for ffn in experts.feed_forwards:
            ffn.split(1, mp, 1)
        yield
    finally:
        for ffn in experts.feed_forwards:
            ffn.split(1, 1, 1)


def expert_bytes(planned: Graph, experts: Experts) -> tuple[float, float]:
    """Per device on the planned layer: the routed experts' weight bytes, and the dispatched tokens' block (the
    input of each MoE's first expert matmul in the layout that matmul reads)."""
    if not experts.count:
        return 0.0, 0.0
    mesh, specs = planned.plan.mesh, planned.plan.value_specs
    weights = sum(block_bytes(v, specs.get(vid, replicated_spec(len(v.shape))), mesh)
                  for vid, v in planned.values.items() if v.name in experts.weights and v.is_array)
    dispatched = 0.0
    for node in planned.node_list():
        names = [planned.values[v].name for v in node.inputs]
        if any(n in experts.first for n in names):
            i = next(k for k, n in enumerate(names) if n not in experts.first)
            dispatched += block_bytes(planned.values[node.inputs[i]], node.strategy.input_spec(i), mesh)
    return weights, dispatched
