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


def _signature(prefix: str, nodes: list[Node], graph: Graph, scoped: bool = True) -> tuple:
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
        items.append((node.kind, node.scope[len(prefix):] if scoped else _class_path(node.scope), _attr_text(node), shapes, tuple(wiring),
                      repr(node.hint), repr(node.out_hint), node.strategy is not None))
    return (_class_of(prefix.rsplit("/", 1)[-1]) if scoped else "", tuple(items))


def _class_path(scope: str) -> str:
    """A scope without the instance names (``layers-CellList/3-Block/attn-Attention`` -> ``CellList/Block/...``)."""
    return "/".join(_class_of(p) for p in scope.split("/"))


def _segments(copies: list[list[int]], graph: Graph) -> list[list[int]] | None:
    """Widen copies that follow one another to the nodes between them (an activation Cell shared by every layer,
    a residual add written in the parent's construct): copy i becomes every node from its first node up to the
    first node of copy i+1; the last copy takes as many nodes. None when the widened copies do not all match."""
    index = {nid: k for k, nid in enumerate(graph.order)}
    starts = [index[c[0]] for c in copies]
    if starts != sorted(starts):
        return None
    width = starts[1] - starts[0]
    if any(b - a != width for a, b in zip(starts, starts[1:])) or starts[-1] + width > len(graph.order):
        return None
    segments = [graph.order[a:a + width] for a in starts]
    if any(not set(c) <= set(seg) for c, seg in zip(copies, segments)):
        return None
    sigs = {_signature("", [graph.nodes[n] for n in seg], graph, scoped=False) for seg in segments}
    return segments if len(sigs) == 1 else None


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
            copies = [[n.id for n in members[p]] for p in prefixes]
            out.append(_segments(copies, graph) or copies)
    out.sort(key=lambda g: g[0][0])
    return out
