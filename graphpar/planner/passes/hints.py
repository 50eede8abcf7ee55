"""Pass ``apply_hints``: turn each user ``shard()`` hint into a validated strategy (provenance: user).

Reads: node hints, shapes, the mesh. Adds: ``strategy`` and ``provenance`` on hinted nodes. Errors: a
:class:`~graphpar.errors.StrategyError` for a hint that cannot hold (wrong rank, a split that does not divide its
dimension, a product above the device count, contracted splits that disagree, a dimension the op cannot split).
A hint on an op kind without a sharding rule is an error too: graphpar will not silently replicate it. A hint on an
op whose layout follows its input (``Reshape``, ``graphpar.planner.follow``) is ignored with a one-time warning, as
MindSpore ignores it.
"""

from __future__ import annotations

from graphpar.errors import StrategyError
from graphpar.ir.graph import Graph, Provenance
from graphpar.planner.dims import shapes_of
from graphpar.planner.follow import follows_input, ignore_hint
from graphpar.planner.passes.context import PlanContext
from graphpar.planner.strategy import from_hint


def apply_hints(graph: Graph, ctx: PlanContext) -> Graph:
    updates = {}
    for node in graph.node_list():
        if node.hint is None:
            continue
        if follows_input(node):
            ignore_hint(node)
            continue
        dims = ctx.dims(node, graph)
        if dims is None:
            raise StrategyError(node.instance_name, node.hint, f"graphpar has no sharding rule for {node.kind}",
                                node.scope, "Remove the shard() call; the op will be replicated")
        ins, outs = shapes_of(node, graph)
        strategy = from_hint(node, dims, node.hint, ins, outs, ctx.mesh)
        updates[node.id] = {"strategy": strategy, "provenance": Provenance("user")}
    return graph.with_annotations(updates)
