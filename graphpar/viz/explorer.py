"""A plan as Model Explorer's graph JSON: ops nested by Cell scope, their strategies and bytes, redistributions on
the edges.

Model Explorer (the ``ai-edge-model-explorer`` package, ``pip install -e '.[explorer]'``) draws a graph given as JSON
(``graphs`` of nodes with ``namespace``, ``attrs``, ``incomingEdges``, ``inputsMetadata``/``outputsMetadata`` and
``tasksData`` edge overlays) and colours nodes by "node data" (a number per node id). This module builds both from
the dumps of one graph on one rank (:class:`graphpar.dump.loading.DumpSet`: the ``step_parallel_begin`` dump, and
the ``execute`` dump once compiled), as plain dicts, standard library only; :mod:`graphpar.viz.explorer_server`
serves them. What a node shows:

- its ``namespace`` is its MindSpore scope without the ``Default/`` root (``network-WithLossCell/_backbone-GPT/
  0-Block/attention-Attention/dense_q-Linear``), so every Cell is a layer that collapses and expands, and the
  ``matmul`` of ``dense_q`` is told from the one of ``dense_k`` by the layer it sits in;
- ``attrs``: the op kind, instance name, scope, strategy and where it came from, the device matrix, each input's
  layout, the collectives compiled for it and the collective bytes per device the cost model predicted and XLA
  compiled (``predicted bytes`` / ``measured bytes``: wire bytes one device sends, the unit of ``graphpar ir``;
  measured bytes are counted where the cost model counts them, :func:`graphpar.dump.attribution.measured_wire`);
- graph inputs (Parameters, optimizer State, the batch) are nodes too, in the layer of the Cells that use them, with
  their layout, split and bytes per device;
- an edge overlay ``redistributions`` labels every edge where a value changes layout on its way into an op: the
  collective and its bytes when the step was compiled (``AllGather 192 B``), else the two layouts.

Node data (one number per node): predicted bytes, measured bytes and per-device memory (output of an op, or a graph
input), each with a colour gradient, so the graph can be coloured by any of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from graphpar.dump.loading import DumpSet
from graphpar.dump.model import Collective, Dump, Input, Node, TensorType, layout_text
from graphpar.dump.attribution import gradient_shares, measured_wire, tensor_bytes
from graphpar.viz.svg import human_bytes, redistribution_labels

OVERLAYS = ("predicted bytes", "measured bytes", "memory per device")
_GRADIENT = [{"stop": 0, "bgColor": "#ffffff"}, {"stop": 0.5, "bgColor": "#ffd8a8"}, {"stop": 1, "bgColor": "#e8590c"}]


def namespace(scope: str) -> str:
    """The Model Explorer layer path of a MindSpore scope: its Cells below the ``Default`` root."""
    parts = [p for p in scope.strip("()").split("/") if p]
    return "/".join(parts[1:] if parts[:1] == ["Default"] else parts)


def input_label(name: str) -> str:
    """``%para3_blocks.0.attention.dense_q.weight`` -> ``blocks.0.attention.dense_q.weight``; ``%data38_input0`` ->
    ``input0``."""
    bare = name.lstrip("%")
    head, sep, rest = bare.partition("_")
    return rest if sep and head.rstrip("0123456789") in ("para", "data", "state") else bare


def _common(paths: Sequence[str]) -> str:
    split = [p.split("/") if p else [] for p in paths]
    out = []
    for parts in zip(*split):
        if len(set(parts)) > 1:
            break
        out.append(parts[0])
    return "/".join(out)


def _kv(key: str, value: Any) -> dict[str, str]:
    return {"key": key, "value": str(value)}


def _collective_text(c: Collective) -> str:
    return (f"{c.kind} {human_bytes(c.wire_bytes if c.wire_bytes is not None else c.bytes)} ({c.pass_}, {c.cause}, "
            f"group {{{', '.join(map(str, c.group))}}})")


def _op_node(node: Node, dset: DumpSet, labels: Mapping[tuple[str, int, int], str],
             producers: Mapping[str, int], shares: tuple[Mapping[int | None, float], Mapping[int | None, float]],
             memory: dict[str, float],
             predicted: dict[str, float], measured: dict[str, float]) -> dict[str, Any]:
    nid = f"n{node.id}"
    global_types = dset.global_types(node)
    attrs = [_kv("op", node.kind), _kv("instance name", node.instance_name), _kv("node", node.id),
             _kv("scope", node.scope), _kv("strategy", node.strategy_text or "-"),
             _kv("provenance", node.provenance.text if node.provenance else "-")]
    if node.device_matrix is not None:
        attrs.append(_kv("device matrix", node.device_matrix))
    if node.hint is not None:
        attrs.append(_kv("shard() hint", node.hint))
    if node.predicted_bytes is not None:
        attrs.append(_kv("predicted bytes", f"{node.predicted_bytes:g}"))
        predicted[nid] = node.predicted_bytes
    if dset.execute is not None:
        total, share = shares[0].get(node.id, 0.0), shares[1].get(node.id, 0.0)
        attrs.append(_kv("measured bytes", f"{total:g}"))
        if share:
            attrs.append(_kv("of which fused gradient reductions", f"{share:g}"))
        measured[nid] = total
        out_bytes = sum(tensor_bytes(t) for t in node.output_types)
        attrs.append(_kv("output bytes per device", out_bytes))
        memory[nid] = out_bytes
    for i, c in enumerate(node.collectives):
        attrs.append(_kv(f"collective {i}", _collective_text(c)))
    edges, inputs_meta = [], []
    for k, arg in enumerate(node.args):
        source = f"n{producers[arg]}" if arg in producers else arg
        edges.append({"sourceNodeId": source, "sourceNodeOutputId": "0", "targetNodeInputId": str(k)})
        meta = [_kv("__tensor_tag", arg)]
        if k < len(node.in_layouts):
            meta.append(_kv("layout", layout_text(node.in_layouts[k])))
        if k < len(node.input_types):
            meta.append(_kv("shape", node.input_types[k]))
        if (source, node.id, k) in labels:
            meta.append(_kv("redistribution", labels[(source, node.id, k)]))
        inputs_meta.append({"id": str(k), "attrs": meta})
    outputs_meta = []
    for k, t in enumerate(node.output_types):
        meta = [_kv("__tensor_tag", node.outputs[k] if k < len(node.outputs) else f"output {k}"),
                _kv("shape per device" if dset.execute is not None else "shape", t)]
        if global_types is not None and dset.execute is not None and k < len(global_types[1]):
            meta.append(_kv("global shape", global_types[1][k]))
        outputs_meta.append({"id": str(k), "attrs": meta})
    return {"id": nid, "label": node.instance_name, "namespace": namespace(node.scope), "attrs": attrs,
            "incomingEdges": edges, "inputsMetadata": inputs_meta, "outputsMetadata": outputs_meta}


def _input_node(inp: Input, where: str, execute: Dump | None, memory: dict[str, float]) -> dict[str, Any]:
    local = next((i for i in execute.inputs if i.name == inp.name), None) if execute is not None else None
    shape = local.type.shape if local is not None else tuple(s // w if w else s
                                                              for s, w in zip(inp.type.shape, inp.split))
    per_device = tensor_bytes(TensorType(inp.type.dtype, shape))
    memory[inp.name] = per_device
    attrs = [_kv("op", inp.role), _kv("name", inp.name), _kv("shape", inp.type), _kv("layout", layout_text(inp.layout)),
             _kv("split", inp.split), _kv("shape per device", shape), _kv("bytes per device", per_device)]
    return {"id": inp.name, "label": input_label(inp.name), "namespace": where, "attrs": attrs,
            "outputsMetadata": [{"id": "0", "attrs": [_kv("__tensor_tag", inp.name),
                                                      _kv("layout", layout_text(inp.layout))]}]}


def graph_id(dset: DumpSet) -> str:
    main = dset.main
    return f"{main.graph or 'graph'} rank {main.rank if main.rank is not None else 0}"


def explorer_graph(dset: DumpSet) -> tuple[dict[str, Any], dict[str, dict[str, float]]]:
    """One graph of Model Explorer's JSON for ``dset``, and its node data: ``{overlay name: {node id: value}}``
    (the overlays of :data:`OVERLAYS` that the dumps hold figures for)."""
    main = dset.main
    producers = {out: n.id for n in main.nodes for out in n.outputs}
    labels = redistribution_labels(main)
    memory: dict[str, float] = {}
    predicted: dict[str, float] = {}
    measured: dict[str, float] = {}
    shares = ((measured_wire(dset.execute), gradient_shares(dset.execute)) if dset.execute is not None
              else ({}, {}))
    nodes = [_op_node(n, dset, labels, producers, shares, memory, predicted, measured) for n in main.nodes]
    consumers: dict[str, list[str]] = {}
    for n in main.nodes:
        for arg in n.args:
            consumers.setdefault(arg, []).append(namespace(n.scope))
    for inp in (dset.begin or main).inputs:
        if inp.name in consumers:  # an input no op reads (a fused gradient's bookkeeping) is left out
            nodes.append(_input_node(inp, _common(consumers[inp.name]), dset.execute, memory))
    overlay = {"name": "redistributions", "edgeColor": "#c92a2a", "edgeWidth": 3, "edgeLabelFontSize": 9,
               "edges": [{"sourceNodeId": s, "targetNodeId": f"n{t}", "label": text}
                         for (s, t, _), text in labels.items()]}
    summary = {"graph": main.graph, "purpose": main.purpose, "rank": str(main.rank),
               "parallel mode": main.parallel_mode, "search mode": main.search_mode,
               "mesh": " ".join(f"{a}={s}" for a, s in main.mesh.items()) or "-"}
    if dset.execute is not None and dset.execute.total_bytes is not None:
        ex = dset.execute
        summary["collective bytes per step"] = (f"{ex.total_wire_bytes:g} wire (predicted "
                                                f"{ex.total_predicted_bytes:g}), {len(ex.unattributed)} "
                                                f"gradient reductions not attributed to an op")
    graph = {"id": graph_id(dset), "nodes": nodes, "groupNodeAttributes": {"": summary},
             "tasksData": {"edgeOverlaysDataListLeftPane": [{"type": "edge_overlays", "name": "graphpar",
                                                             "overlays": [overlay]}],
                           "edgeOverlaysDataListRightPane": []}}
    data = {"predicted bytes": predicted, "measured bytes": measured, "memory per device": memory}
    return graph, {k: v for k, v in data.items() if v}


def node_data(graph: Mapping[str, Any], values: Mapping[str, float], name: str) -> dict[str, Any]:
    """Model Explorer's node data of one overlay for ``graph`` (``{graph id: {results, gradient}}``), coloured from
    white (0) to orange (the largest value)."""
    top = max(values.values(), default=0) or 1
    return {graph["id"]: {"name": name, "results": {nid: {"value": v} for nid, v in values.items()},
                          "gradient": [dict(g, stop=g["stop"] * top) for g in _GRADIENT]}}


def explorer_graphs(sets: Sequence[DumpSet]) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]:
    """Model Explorer's ``{"graphs": [...]}`` for the dump sets (one graph each, e.g. one per rank) and its node
    data as ``(name, node data)`` pairs, one per overlay."""
    graphs, data = [], []
    for dset in sets:
        graph, overlays = explorer_graph(dset)
        graphs.append(graph)
        data += [(f"{name} ({graph['id']})", node_data(graph, values, name)) for name, values in overlays.items()]
    return {"graphs": graphs}, data
