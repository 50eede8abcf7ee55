"""What ``graphpar ir`` and a ``PlanView`` show of dumps, as JSON-able dicts with stable keys.

``show_data``, ``summary_data``, ``diff_data`` and ``explain_data`` each turn dumps into one dict: ``graphpar ir
--json`` prints it as is; ``graphpar.viz.text`` renders it as tables (the text commands, ``PlanView.summary()``) and
``graphpar.viz`` draws it in HTML.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from graphpar.dump.attribution import measured_wire
from graphpar.dump.loading import DumpSet
from graphpar.dump.model import Collective, Dump, DumpError, Node, TensorType
from graphpar.dump.model import strategy_text
from graphpar.dump.pipeline import schedule_for
from graphpar.planner.search.report import search_records

_ARROW = "\u2190"  # ←

def _strategy(value: tuple | None) -> list | None:
    return None if value is None else [list(row) for row in value]


def _types(types: list[TensorType]) -> list[dict[str, Any]]:
    return [{"dtype": t.dtype, "shape": list(t.shape)} for t in types]


def _layout(layout: tuple) -> list[list[str]]:
    return [list(axes) for axes in layout]


def _collective(c: Collective) -> dict[str, Any]:
    return {"name": c.name, "kind": c.kind, "op": c.op, "group": list(c.group), "bytes": c.bytes, "pass": c.pass_,
            "cause": c.cause, "hlo": c.hlo, "node": c.node, "arg": c.arg or None,
            "types": _types(c.output_types), "wire_bytes": c.wire_bytes, "parameters": list(c.parameters)}


def _provenance(node: Node) -> dict[str, Any] | None:
    p = node.provenance
    if p is None:
        return None
    return {"kind": p.kind, "source": p.source, "source_name": p.source_name, "cost": p.cost, "detail": p.detail,
            "breakdown": p.breakdown,
            "text": p.text}


def _conflicts(dump: Dump | None) -> list[dict[str, Any]]:
    return [] if dump is None else [
        {"parameter": c.parameter, "stored": _layout(c.stored), "cost_bytes": c.cost_bytes,
         "wanted": [{"instance_name": n, "node": i, "layout": _layout(lay)} for n, i, lay in c.wanted]}
        for c in dump.conflicts]


def _node(node: Node) -> dict[str, Any]:
    return {"node": node.id, "instance_name": node.instance_name, "kind": node.kind, "scope": node.scope,
            "args": node.args, "outputs": node.outputs, "strategy": _strategy(node.in_strategy),
            "hint": _strategy(node.hint), "provenance": _provenance(node),
            "device_matrix": list(node.device_matrix) if node.device_matrix is not None else None,
            "in_layouts": [_layout(x) for x in node.in_layouts],
            "out_layouts": [_layout(x) for x in node.out_layouts], "input_types": _types(node.input_types),
            "output_types": _types(node.output_types),
            "primitive_attrs": {k: _jsonable(v) for k, v in node.primitive_attrs.items()},
            "collectives": [_collective(c) for c in node.collectives]}


def _jsonable(value: Any) -> Any:
    return [_jsonable(v) for v in value] if isinstance(value, tuple) else value


def show_data(dump: Dump) -> dict[str, Any]:
    """Everything in one dump file."""
    return {"file": dump.path, "kind": dump.kind, "format": dump.format_version, "graph": dump.graph,
            "purpose": dump.purpose, "rank": dump.rank, "n_ranks": dump.n_ranks,
            "parallel_mode": dump.parallel_mode, "search_mode": dump.search_mode, "mesh": dump.mesh,
            "passes_ms": dump.passes, "note": dump.header.get("note"), "header": dump.header,
            "inputs": [{"name": i.name, "role": i.role, "dtype": i.type.dtype, "shape": list(i.type.shape),
                        "layout": _layout(i.layout), "split": list(i.split)} for i in dump.inputs],
            "nodes": [_node(n) for n in dump.nodes],
            "unattributed_collectives": [_collective(c) for c in dump.unattributed],
            "parameter_conflicts": _conflicts(dump), "returns": dump.returns,
            "total_collective_bytes": dump.total_bytes}


def _shapes(types: tuple[list[TensorType], list[TensorType]] | None) -> dict[str, list] | None:
    if types is None:
        return None
    return {"inputs": [list(t.shape) for t in types[0]], "outputs": [list(t.shape) for t in types[1]]}


def _total(dset: DumpSet) -> int | None:
    ex = dset.execute
    if ex is None:
        return None
    return ex.total_bytes if ex.total_bytes is not None else sum(c.bytes for c in ex.collectives)


def summary_data(dset: DumpSet) -> dict[str, Any]:
    """One row per op: strategy, provenance, global and per-device shapes, collectives and bytes."""
    main = dset.main
    measured = measured_wire(dset.execute) if dset.execute else {}
    ops = []
    for node in main.nodes:
        row = _node(node)
        ops.append({k: row[k] for k in ("node", "instance_name", "kind", "scope", "strategy", "hint", "provenance",
                                        "device_matrix")}
                   | {"global_shapes": _shapes(dset.global_types(node)),
                      "device_shapes": _shapes((node.input_types, node.output_types)) if dset.execute else None,
                      "collectives": row["collectives"],
                      "collective_bytes": node.collective_bytes if dset.execute else None,
                      "wire_bytes": node.wire_bytes if dset.execute else None,
                      # counted as predicted_bytes is: output redistributions on the reader, gradient shares
                      "measured_bytes": measured.get(node.id, 0.0) if dset.execute else None,
                      "predicted_bytes": node.predicted_bytes})
    unattributed = [_collective(c) for c in dset.execute.unattributed] if dset.execute else []
    pipeline = schedule_for((dset.execute or dset.begin).path, dset.index)
    return {"source": dset.source, "graph": main.graph, "purpose": main.purpose, "index": dset.index,
            "indexes": dset.indexes, "rank": main.rank, "n_ranks": main.n_ranks, "ranks": dset.ranks,
            "parallel_mode": main.parallel_mode, "search_mode": main.search_mode, "mesh": main.mesh,
            "note": main.header.get("note"), "begin": dset.begin.path if dset.begin else None,
            "execute": dset.execute.path if dset.execute else None, "ops": ops,
            "unattributed_collectives": unattributed, "parameter_conflicts": _conflicts(dset.begin),
            "total_collective_bytes": _total(dset),
            "total_wire_bytes": dset.execute.total_wire_bytes if dset.execute else None,
            "total_predicted_bytes": dset.execute.total_predicted_bytes if dset.execute else None} | ({"pipeline": pipeline} if pipeline else {})


def _keyed(dump: Dump) -> dict[tuple[str, str, int], Node]:
    seen: Counter = Counter()
    out = {}
    for node in dump.nodes:
        key = (node.scope, node.instance_name)
        out[key + (seen[key],)] = node
        seen[key] += 1
    return out


def diff_data(a: DumpSet, b: DumpSet) -> dict[str, Any]:
    """Ops matched by (scope, instance name, occurrence): their strategies and collective bytes in A and B."""
    ka, kb = _keyed(a.main), _keyed(b.main)
    ops = []
    for key in list(ka) + [k for k in kb if k not in ka]:
        na, nb = ka.get(key), kb.get(key)
        sa = _strategy(na.in_strategy) if na else None
        sb = _strategy(nb.in_strategy) if nb else None
        ba = na.collective_bytes if na and a.execute else None
        bb = nb.collective_bytes if nb and b.execute else None
        status = "only_a" if nb is None else "only_b" if na is None else "changed" if sa != sb else "same"
        ops.append({"instance_name": key[1], "scope": key[0], "kind": (na or nb).kind,
                    "node_a": na.id if na else None, "node_b": nb.id if nb else None, "status": status,
                    "strategy_a": sa, "strategy_b": sb, "collective_bytes_a": ba, "collective_bytes_b": bb,
                    "collective_bytes_delta": None if ba is None or bb is None else bb - ba})
    ta, tb = _total(a), _total(b)
    ua = sum(c.bytes for c in a.main.unattributed) if a.execute else None
    ub = sum(c.bytes for c in b.main.unattributed) if b.execute else None
    side = lambda d: {"source": d.source, "graph": d.main.graph, "index": d.index, "rank": d.main.rank,  # noqa: E731
                      "parallel_mode": d.main.parallel_mode, "search_mode": d.main.search_mode}
    return {"a": side(a), "b": side(b), "ops": ops, "unattributed_bytes_a": ua, "unattributed_bytes_b": ub,
            "total_collective_bytes_a": ta, "total_collective_bytes_b": tb,
            "total_collective_bytes_delta": None if ta is None or tb is None else tb - ta}


def find_op(dset: DumpSet, op: str) -> Node:
    """``op`` as ``node:N``, an instance name, or ``SCOPE/instance``; an error lists what would match."""
    nodes = dset.main.nodes
    if op.startswith("node:"):
        found = [n for n in nodes if str(n.id) == op[5:].strip()]
    else:
        found = [n for n in nodes if n.instance_name == op or f"{n.scope}/{n.instance_name}" == op]
    if len(found) == 1:
        return found[0]
    if not found:
        names = ", ".join(dict.fromkeys(n.instance_name for n in nodes))
        raise DumpError(dset.main.path, f"no op {op!r}; ops: {names} (or node:N)")
    where = "; ".join(f"node:{n.id} ({n.scope})" for n in found)
    raise DumpError(dset.main.path, f"{op!r} names {len(found)} ops: {where}; pick one with node:N")


def explain_data(dset: DumpSet, op: str) -> dict[str, Any]:
    """The provenance chain from ``op`` back to where its strategy came from (a user hint, a default)."""
    node, chain, seen = find_op(dset, op), [], set()
    while node is not None and node.id not in seen:
        seen.add(node.id)
        p = node.provenance
        chain.append({"node": node.id, "instance_name": node.instance_name, "kind": node.kind, "scope": node.scope,
                      "strategy": _strategy(node.in_strategy), "provenance": _provenance(node),
                      "edge_cost": p.cost if p is not None and p.kind == "propagated" else None})
        node = dset.main.node(p.source) if p is not None and p.source is not None else None
    root = chain[-1]
    last = dset.main.node(root["node"])
    reason = root["provenance"]["kind"] if root["provenance"] else "unknown"
    if reason == "user":
        why = f"user hint {strategy_text(last.hint or last.in_strategy or ())}"
    elif reason == "propagated":  # its source is missing or loops back
        why = f"propagated from {root['provenance']['source_name'] or 'an unknown node'}"
    else:
        why = root["provenance"]["text"] if root["provenance"] else "no provenance recorded"
    text = f" {_ARROW} ".join(c["instance_name"] for c in chain) + f" ({why})"
    records, _ = search_records(dset.main)
    return {"source": dset.source, "op": op, "node": chain[0]["node"], "chain": chain,
            "root": {"node": root["node"], "instance_name": root["instance_name"], "reason": reason,
                     "hint": _strategy(last.hint)},
            "total_cost": sum(c["edge_cost"] or 0.0 for c in chain), "summary": text,
            "search": records.get(chain[0]["node"])}
