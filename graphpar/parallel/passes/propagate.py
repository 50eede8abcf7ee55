"""Pass ``propagate``: MindSpore's sharding propagation (AUTO_PARALLEL, search_mode="sharding_propagation").

Reads: the user strategies (``apply_hints`` ran first), the dataset layouts of graph inputs, rules and shapes.
Adds: a strategy on every node reachable from a configured node, with provenance "propagated from X at cost C".

Breadth first from the configured nodes, in graph order: each undecided neighbour of a decided node gets, among
all of its strategies on the mesh, the one with the least redistribution cost (bytes per device) against every
decided neighbour and every graph input it reads. Ties go to the strategy using the most devices, then to the one
that keeps the splits the neighbour already has (so ``ReLU`` after ``MatMul((2, 4), (4, 1))`` is ``(2, 4)``, as in
MindSpore), then to graph order. Configured nodes are never changed: a conflict becomes a redistribution, priced
and visible in the dumps. Nodes no configured node reaches are left to ``default_strategies``.

Does not handle: costs of an op's own collectives (partial sums) — only edge redistributions are priced, as the
issue's definition of propagation asks.
"""

from __future__ import annotations

from collections import deque

from graphpar.errors import StrategyError
from graphpar.ir.graph import Graph, Node, Provenance
from graphpar.parallel.cost import redistribution_bytes
from graphpar.parallel.dims import shapes_of
from graphpar.parallel.passes.context import PlanContext
from graphpar.parallel.strategy import NodeStrategy, Spec, enumerate_strategies


def _value_layout(graph: Graph, ctx: PlanContext, strategies: dict[int, NodeStrategy], vid: int) -> Spec | None:
    value = graph.values[vid]
    if value.producer is not None:
        s = strategies.get(value.producer)
        if s is None:
            return None
        return s.output_spec(graph.nodes[value.producer].outputs.index(vid))
    return ctx.input_specs.get(vid)


def _score(node: Node, cand: NodeStrategy, graph: Graph, ctx: PlanContext, strategies: dict[int, NodeStrategy],
           source: Node) -> tuple[float, float, int]:
    """(total cost, cost on the edges with ``source``, split changes on those edges)."""
    total = edge = 0.0
    changes = 0
    for i, vid in enumerate(node.inputs):
        value = graph.values[vid]
        src = _value_layout(graph, ctx, strategies, vid)
        if src is None or not value.is_array:
            continue
        dst = cand.input_spec(i)
        c = redistribution_bytes(src, dst, value.shape, value.itemsize, ctx.mesh)
        total += c
        if value.producer == source.id:
            edge += c
            changes += sum(1 for a, b in zip(src, dst) if a and a != b)
    for j, vid in enumerate(node.outputs):
        value = graph.values[vid]
        if not value.is_array:
            continue
        src = cand.output_spec(j)
        for consumer, k in graph.consumers(vid):
            s = strategies.get(consumer.id)
            if s is None:
                continue
            dst = s.input_spec(k)
            c = redistribution_bytes(src, dst, value.shape, value.itemsize, ctx.mesh)
            total += c
            if consumer.id == source.id:
                edge += c
                changes += sum(1 for a, b in zip(dst, src) if a and a != b)
    return total, edge, changes


def propagate(graph: Graph, ctx: PlanContext) -> Graph:
    configured = [n for n in graph.node_list() if n.strategy is not None and n.provenance is not None
                  and n.provenance.kind == "user"]
    if not configured:
        raise StrategyError(
            "(network)", None, "AUTO_PARALLEL with search_mode='sharding_propagation' needs at least one op with a "
            "shard() strategy to propagate from, and this network has none", None,
            "Call .shard(...) on at least one op (e.g. the first MatMul), or use search_mode='recursive_programming' "
            "or parallel_mode=ParallelMode.DATA_PARALLEL")
    strategies = {n.id: n.strategy for n in graph.node_list() if n.strategy is not None}
    provenance: dict[int, Provenance] = {}
    queue = deque(configured)
    while queue:
        current = queue.popleft()
        for neighbour in graph.neighbors(current):
            if neighbour.id in strategies:
                continue
            dims = ctx.dims(neighbour, graph)
            if dims is None:
                continue  # left to the fallback in default_strategies
            ins, outs = shapes_of(neighbour, graph)
            best_key, best, best_edge = None, None, 0.0
            for index, cand in enumerate(enumerate_strategies(dims, ins, outs, ctx.mesh)):
                total, edge, changes = _score(neighbour, cand, graph, ctx, strategies, current)
                key = (round(total, 6), -cand.devices_used, changes, index)
                if best_key is None or key < best_key:
                    best_key, best, best_edge = key, cand, edge
            if best is None:
                continue
            strategies[neighbour.id] = best
            provenance[neighbour.id] = Provenance("propagated", current.id, best_edge)
            queue.append(neighbour)
    updates = {nid: {"strategy": strategies[nid], "provenance": prov} for nid, prov in provenance.items()}
    return graph.with_annotations(updates)
