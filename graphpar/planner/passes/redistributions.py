"""Pass ``report_redistributions``: say which redistributions the plan inserts (SEMI_AUTO / AUTO), once per pattern.

MindSpore logs each redistribution it inserts at DEBUG (``step_parallel``'s "Redistribution for pre_node ...
next_node ..."), and warns "Inconsistency occurred at edge" only when sharding propagation finds no strategy that
agrees with its neighbour's. graphpar does the same at those levels, priced: every edge is a DEBUG line (op pair,
input, scope, tensor, from -> to layout, wire bytes per device, ``graphpar.planner.cost``), and the edges that share
a pattern (the same producer and consumer ops, input, tensor shape and layouts: the repeated layers of a deep
network) are summed up in one line with their count and first and last scopes: a WARNING when propagation found
no free strategy for an end of the edge (MindSpore's warning), else INFO (a free slice as propagation counts it, the
user's own strategies, defaults or a searched plan, where MindSpore says nothing above DEBUG). Free
redistributions (a slice whose cotangent needs no gather) are not reported.

Reads: node strategies and provenance, ``graph.plan.value_specs`` (storage layouts of parameters and inputs).
Adds: ``graph.plan.redistributions`` (one record per priced edge, for dumps and tools). Changes no strategy.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from graphpar._logging import is_enabled, notice_once
from graphpar.ir.graph import Graph, Node
from graphpar.planner.cost import grad_values, redistribution_cost
from graphpar.planner.passes.context import PlanContext
from graphpar.planner.strategy import spec_text


@dataclasses.dataclass
class _Group:
    """The edges of one pattern, in graph order."""

    origin: str  # the producer as the line names it: 'matmul', input 'input0'; for several stored values, their kind
    first_origin: str  # the first edge's producer, by name ('param 'body.0.weight'')
    edges: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    scopes: list[str] = dataclasses.field(default_factory=list)
    inconsistent: bool = False  # propagation found no free strategy for an end of some edge (MindSpore warns)


def _propagated_at_a_cost(node: Node | None) -> bool:
    """Sharding propagation chose ``node``'s strategy and no candidate was free on the edges it priced: MindSpore's
    "Inconsistency occurred at edge" case (its propagation counts a slice as free, so an edge whose forward is a
    slice and whose backward gathers is INFO here, as MindSpore says nothing of it)."""
    prov = None if node is None else node.provenance
    return prov is not None and prov.kind == "propagated" and prov.cost > 0


def _collectives(n: int) -> str:
    return f"{n} collective{'s' if n != 1 else ''}"


def _edge_line(origin: str, node: Node, k: int, shape: tuple, record: dict[str, Any]) -> str:
    return (f"redistribution inserted at edge {origin} -> '{node.instance_name}' input {k} (scope "
            f"{node.scope or '(top level)'}): tensor {shape} from {spec_text(record['from'])} to "
            f"{spec_text(record['to'])}, {record['bytes']:g} B per device per step ({_collectives(record['messages'])})")


def _group_line(group: _Group, node_name: str, k: int, shape: tuple, src: Any, dst: Any) -> str:
    first = group.edges[0]
    n = len(group.edges)
    if n == 1:
        return (f"redistribution inserted at edge {group.first_origin} -> '{node_name}' input {k} (scope "
                f"{group.scopes[0] or '(top level)'}): tensor {shape} from {spec_text(src)} to {spec_text(dst)}, "
                f"{first['bytes']:g} B per device per step ({_collectives(first['messages'])})")
    total = sum(e["bytes"] for e in group.edges)
    return (f"redistribution inserted at {n} edges {group.origin} -> '{node_name}' input {k} (scopes "
            f"{group.scopes[0] or '(top level)'} ... {group.scopes[-1] or '(top level)'}): tensor {shape} from "
            f"{spec_text(src)} to {spec_text(dst)}, {first['bytes']:g} B per device per step each "
            f"({_collectives(first['messages'])} each; {total:g} B in all). Every edge: the graphpar logger at "
            "DEBUG, or the step_parallel_begin dump")


def report_redistributions(graph: Graph, ctx: PlanContext) -> Graph:
    specs = graph.plan.value_specs
    grads = grad_values(graph)
    debug = is_enabled(logging.DEBUG)
    records = []
    groups: dict[tuple, _Group] = {}
    for node in graph.node_list():
        for k, vid in enumerate(node.inputs):
            value = graph.values[vid]
            if not value.is_array:
                continue
            producer = None
            if value.producer is not None:
                producer = graph.nodes[value.producer]
                src = producer.strategy.output_spec(producer.outputs.index(vid))
                origin = f"'{producer.instance_name}'"
                pattern_origin = origin
            elif vid in specs:
                src, origin = specs[vid], f"{value.kind} '{value.name}'" if value.name else value.kind
                pattern_origin = value.kind  # every layer's weight is one pattern, whatever its name
            else:
                continue
            dst = node.strategy.input_spec(k)
            if src == dst:
                continue
            cost = redistribution_cost(value, src, dst, ctx.mesh, needs_grad=vid in grads)
            if cost.comm_bytes <= 0:
                continue
            record = {"node": node.id, "input": k, "value": vid, "from": src, "to": dst,
                      "bytes": cost.comm_bytes, "messages": cost.messages}
            records.append(record)
            shape = tuple(value.shape)
            if debug:
                notice_once(f"redistribution-edge:{graph.name}:{node.scope}/{node.instance_name}#{node.id}:{k}:{src}:"
                            f"{dst}", _edge_line(origin, node, k, shape, record), logging.DEBUG)
            key = (pattern_origin, node.instance_name, node.kind, k, shape, src, dst, cost.comm_bytes, cost.messages)
            group = groups.get(key)
            if group is None:
                group = groups[key] = _Group(pattern_origin, origin)
            group.edges.append(record)
            group.scopes.append(node.scope)
            group.inconsistent |= any(_propagated_at_a_cost(p) for p in (node, producer))
    for key, group in groups.items():
        _, node_name, _, k, shape, src, dst, _, _ = key
        level = logging.WARNING if group.inconsistent else logging.INFO
        first = graph.nodes[group.edges[0]["node"]]
        notice_once(f"redistribution:{graph.name}:{first.scope}/{node_name}#{first.id}:{k}:{src}:{dst}:"
                    f"{len(group.edges)}", _group_line(group, node_name, k, shape, src, dst), level)
    return graph.with_plan(redistributions=tuple(records))
