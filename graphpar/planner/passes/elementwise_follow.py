"""``set_algo_parameters(elementwise_op_strategy_follow=True)``: an elementwise op takes the strategy of the op
that consumes its output (MindSpore: "Add's output goes to ReLU: ReLU (8, 1) and Add ((8, 1), (8, 1))").

Run by the ``propagate`` and ``search`` passes at their end, on the strategies they chose: in reverse graph order
(so a chain of elementwise ops follows the op at its end), each elementwise op (``rules.op_rules.ELEMENTWISE``)
whose first decided consumer reads its output in another layout takes the candidate that produces that layout,
when it has one. Ops with a user strategy or a strategy file's are never changed.
"""

from __future__ import annotations

import dataclasses

from graphpar.ir.graph import Graph, Provenance
from graphpar.planner.passes.context import PlanContext
from graphpar.planner.rules.op_rules import ELEMENTWISE
from graphpar.planner.strategy import NodeStrategy


def follow_consumers(graph: Graph, ctx: PlanContext, strategies: dict[int, NodeStrategy],
                     provenance: dict[int, Provenance]) -> None:
    """Update ``strategies`` and ``provenance`` (the undecided-before-this-pass nodes' choices, by node id) in
    place; nodes not in ``provenance`` keep what they have."""
    if not ctx.request.algo.elementwise_op_strategy_follow:
        return
    for node in reversed(graph.node_list()):
        if node.id not in provenance or node.kind not in ELEMENTWISE or len(node.outputs) != 1:
            continue
        current = strategies.get(node.id)
        consumers = [(c, k) for c, k in graph.consumers(node.outputs[0]) if c.id in strategies]
        if current is None or not consumers:
            continue
        consumer, k = consumers[0]
        want = strategies[consumer.id].input_spec(k)
        if current.output_spec(0) == want:
            continue
        for cand in ctx.candidates(node, graph):
            if cand.output_spec(0) == want:
                strategies[node.id] = cand
                provenance[node.id] = dataclasses.replace(
                    provenance[node.id], source=consumer.id, detail="follows its consumer "
                    f"'{consumer.instance_name}' (elementwise_op_strategy_follow)")
                break
