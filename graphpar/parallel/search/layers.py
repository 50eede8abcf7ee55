"""Repeated identical layers: Cell instances whose subgraphs are the same, so that one solution serves them all.

Deep models repeat one layer class (transformer blocks, ResNet stages' blocks, the Dense layers of an MLP). Two Cell
instances are *copies* when their Cell class is the same and their op nodes match one to one in graph order: same
kind, attributes, shapes and dtypes, same hint, and the same wiring (each input is the output of the same local node,
or the k-th distinct outside value). The search then gives every copy's k-th node one shared set of decision
variables (an *alias set*, as ColossalAI's solver does), so the problem's size no longer grows with the depth:
costs are counted once per copy, only the edges crossing copies' boundaries add terms.

Copies are found top-down: the shallowest Cell instances that have a copy are tied, their sub-cells are not looked
at again. Nodes in no tied Cell are their own singleton.
"""

from __future__ import annotations

from collections import defaultdict

from graphpar.ir.graph import Graph, Node


def _class_of(component: str) -> str:
    return component.rsplit("-", 1)[-1]


def _prefixes(scope: str) -> list[str]:
    parts = scope.split("/") if scope else []
    return ["/".join(parts[:k]) for k in range(1, len(parts) + 1)]


def _attr_text(node: Node) -> str:
    return repr(sorted((k, repr(v)) for k, v in node.attrs.items()))


def _signature(prefix: str, nodes: list[Node], graph: Graph) -> tuple:
    local = {}
    outside: dict[int, int] = {}
    items = []
    for k, node in enumerate(nodes):
        wiring = []
        for vid in node.inputs:
            value = graph.values[vid]
            if value.producer is not None and value.producer in local:
                wiring.append(("n", local[value.producer], graph.nodes[value.producer].outputs.index(vid)))
            else:
                wiring.append(("x", outside.setdefault(vid, len(outside)), value.kind))
        local[node.id] = k
        shapes = tuple((graph.values[v].shape, str(graph.values[v].dtype)) for v in node.inputs + node.outputs)
        items.append((node.kind, node.scope[len(prefix):], _attr_text(node), shapes, tuple(wiring),
                      repr(node.hint), repr(node.out_hint), node.strategy is not None))
    return (_class_of(prefix.rsplit("/", 1)[-1]), tuple(items))


def repeated_layers(graph: Graph) -> list[list[list[int]]]:
    """Groups of copies; each copy is its node ids in graph order (copies of a group align position by position)."""
    members: dict[str, list[Node]] = defaultdict(list)
    depth: dict[str, int] = {}
    for node in graph.node_list():
        for k, prefix in enumerate(_prefixes(node.scope)):
            members[prefix].append(node)
            depth[prefix] = k
    tied: set[str] = set()
    out = []
    for d in sorted(set(depth.values())):
        level = [p for p, k in depth.items() if k == d and not any(p.startswith(t + "/") for t in tied)]
        by_sig: dict[tuple, list[str]] = defaultdict(list)
        for prefix in sorted(level, key=lambda p: members[p][0].id):
            nodes = members[prefix]
            if len(nodes) < 1:
                continue
            by_sig[_signature(prefix, nodes, graph)].append(prefix)
        for prefixes in by_sig.values():
            if len(prefixes) < 2:
                continue
            tied.update(prefixes)
            out.append([[n.id for n in members[p]] for p in prefixes])
    out.sort(key=lambda g: g[0][0])
    return out
