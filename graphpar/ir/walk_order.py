"""The order MindSpore's parallel pass walks a graph, which its names and its propagation order follow.

MindSpore's auto-parallel step lists a graph's nodes with ``DeepScopedGraphSearch`` from the return node: depth
first, a node before its inputs, the last input (the last output at the root) first. Two things follow that order:
the ``-op{n}`` numbers of its CNode names (one counter per scope and kind, ``compile.plans.op_strategies``), and
the running count (``TOTAL_OPS``) each operator's ``OperatorInfo`` is created with, which names it
(``"{Kind}Info{n}{n}"``) and indexes it (``topo_index``); sharding propagation orders its configured ops by that
name (``planner.passes.propagation_order``)."""

from __future__ import annotations

from graphpar.ir.graph import Graph, Node


def output_first_order(graph: Graph) -> list[Node]:
    """The graph's nodes in the order of MindSpore's walk (module docstring). Nodes no output depends on follow in
    graph order (MindSpore's compile drops them; a graph here may keep them)."""
    stack = [graph.producer(v) for v in graph.outputs]
    seen: set[int] = set()
    order: list[Node] = []
    while stack:
        node = stack.pop()
        if node is None or node.id in seen:
            continue
        seen.add(node.id)
        order.append(node)
        stack.extend(graph.producer(v) for v in node.inputs)  # popped last-first: the last input is walked first
    return order + [n for n in graph.node_list() if n.id not in seen]
