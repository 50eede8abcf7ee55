"""Dumps as text: the tables ``graphpar ir show|summary|diff|explain`` print, and ``PlanView``'s text views.

Each ``print_*`` renders one dict of :mod:`graphpar.dump.views` to standard output: ``rich`` tables on a terminal,
plain aligned text otherwise (multi-line cells allowed).
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from typing import Any

from graphpar.dump.model import TensorType, layout_text, strategy_text
from graphpar.planner.search.report import print_choices

_NO_WRAP = {"node", "op", "kind", "strategy", "strategy A", "strategy B", "bytes", "wire bytes", "measured",
            "predicted", "bytes A", "bytes B", "delta", "edge cost", "status", "split", "role", "collectives"}


WRAP = 40  # plain text: a long cell (scope, provenance, shapes, collectives) wraps at this width


def wrap_cell(text: str, width: int = WRAP) -> str:
    """``text`` folded into lines of at most ``width`` characters, broken after a space or a ``/`` (a scope breaks
    between its Cells), a word longer than ``width`` on its own line."""
    lines = []
    for line in text.split("\n"):
        out = ""
        for token in re.findall(r"[^ /]*[ /]*", line):
            if out and len(out) + len(token.rstrip()) > width:
                lines.append(out.rstrip())
                out = ""
            out += token
        lines.append(out.rstrip())
    return "\n".join(lines)


def emit_table(columns: list[str], rows: list[list[str]], title: str | None = None) -> None:
    """A rich table on a terminal; plain aligned columns (multi-line cells allowed) otherwise, long cells wrapped
    (:func:`wrap_cell`) so a table of a real model stays about as wide as a terminal."""
    if sys.stdout.isatty():
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text

        table = Table(title=title, title_justify="left")
        for name in columns:  # short fields stay on one line; long ones wrap whole rather than truncate
            table.add_column(name, no_wrap=name in _NO_WRAP, overflow="fold")
        for row in rows:
            table.add_row(*(Text(cell) for cell in row))  # Text: "[...]" in a cell is not rich markup
        Console().print(table)
        return
    if title:
        print(title)
    rows = [[c if name in _NO_WRAP else wrap_cell(c) for name, c in zip(columns, row)] for row in rows]
    cells = [[c.split("\n") for c in row] for row in [columns] + rows]
    widths = [max(len(line) for row in cells for line in row[i]) for i in range(len(columns))]
    for row in cells:
        for k in range(max(len(c) for c in row)):
            parts = [(c[k] if k < len(c) else "").ljust(w) for c, w in zip(row, widths)]
            print("  ".join(parts).rstrip())


def fmt_strategy(value: list | None) -> str:
    return "-" if value is None else strategy_text(tuple(tuple(r) for r in value))


def _fmt_shapes(shapes: dict[str, list] | None) -> str:
    if shapes is None:
        return "-"
    fmt = lambda xs: ", ".join(str(tuple(s)) for s in xs)  # noqa: E731
    return f"{fmt(shapes['inputs'])} -> {fmt(shapes['outputs'])}"


def _fmt_provenance(p: dict[str, Any] | None) -> str:
    if p is None:
        return "-"
    if p["kind"] == "propagated":
        src = f"{p['source_name']} (node {p['source']})" if p["source"] is not None else "?"
        return f"from {src}, {p['cost']:g} B"
    return p["text"]


def _fmt_collective(c: dict[str, Any]) -> str:
    op = f"({c['op']})" if c["op"] else ""
    cause = "" if c["cause"] == "operator" else " [" + c["cause"].replace("redistribution of", "redistributes") + "]"
    group = ",".join(str(r) for r in c["group"])  # "0,4": MindSpore's "0-4" reads as the range 0..4
    when = {"forward": "fwd ", "backward": "bwd "}.get(c["pass"], "")
    return f"{c['kind']}{op} {when}{c['bytes']} B ranks {group}{cause}"


def mesh_words(data: dict[str, Any]) -> str:
    """The mesh of a dump's header in words. DATA_PARALLEL plans the graph unsplit (mesh m0=1) and runs one
    replica per device, which "mesh m0=1" alone would hide on 8 devices."""
    mesh = "mesh " + " ".join(f"{k}={v}" for k, v in data["mesh"].items())
    if data["parallel_mode"] == "data_parallel" and (data["n_ranks"] or 1) > 1:
        return f"{data['n_ranks']} data-parallel replicas of the unsplit graph ({mesh})"
    return mesh


def print_show(data: dict[str, Any]) -> None:
    print(f"{data['file']}: {data['kind']} dump (format {data['format'] or 'unversioned'})")
    print(f"graph {data['graph']} ({data['purpose']}), rank {data['rank']} of {data['n_ranks']}, "
          f"{data['parallel_mode']} / {data['search_mode']}, {mesh_words(data)}")
    if data["note"]:
        print(f"note: {data['note']}")
    print()
    emit_table(["input", "role", "type", "layout", "split"],
                [[i["name"], i["role"], str(TensorType(i["dtype"], tuple(i["shape"]))),
                  layout_text(tuple(tuple(a) for a in i["layout"])), str(tuple(i["split"]))]
                 for i in data["inputs"]], title="inputs")
    print()
    per_device = data["kind"] == "execute"
    rows = []
    for n in data["nodes"]:
        shapes = {"inputs": [t["shape"] for t in n["input_types"]], "outputs": [t["shape"] for t in n["output_types"]]}
        rows.append([str(n["node"]), n["instance_name"], n["kind"], fmt_strategy(n["strategy"]),
                     _fmt_provenance(n["provenance"]), _fmt_shapes(shapes),
                     "\n".join(_fmt_collective(c) for c in n["collectives"]), n["scope"]])
    columns = ["node", "op", "kind", "strategy", "provenance",
               "per-device shapes" if per_device else "global shapes", "collectives", "scope"]
    if not per_device:
        columns.pop(6)
        rows = [r[:6] + r[7:] for r in rows]
    emit_table(columns, rows, title="nodes")
    if data["unattributed_collectives"]:
        print()
        emit_table(["collective"], [[_fmt_collective(c)] for c in data["unattributed_collectives"]],
                    title="collectives not attributed to an op")
    _print_conflicts(data["parameter_conflicts"])
    if data["returns"]:
        print("\nreturn " + ", ".join(data["returns"]))
    if data["total_collective_bytes"] is not None:
        print(f"total collective bytes per step (rank {data['rank']}): {data['total_collective_bytes']}")


def _print_conflicts(conflicts: list[dict[str, Any]]) -> None:
    for c in conflicts:
        wanted = ", ".join(f"{w['instance_name']} (node {w['node']}) as "
                           f"{layout_text(tuple(tuple(a) for a in w['layout']))}" for w in c["wanted"])
        print(f"parameter conflict: {c['parameter']} stored as {layout_text(tuple(tuple(a) for a in c['stored']))}"
              f"; wanted by {wanted}; redistribution {c['cost_bytes']:g} B per device")


def _fmt_bytes(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def print_summary(data: dict[str, Any]) -> None:
    ranks = data["ranks"]
    note = f" (rank dirs {ranks[0]}-{ranks[-1]} under {data['source']}; --rank R for another)" if len(ranks) > 1 \
        else ""
    others = [i for i in data["indexes"] if i != data["index"]]
    index = f"{data['index']:04d}" if data["index"] is not None else "-"
    print(f"graph {data['graph']} ({data['purpose']}), index {index}, rank {data['rank']} of {data['n_ranks']}{note}")
    if others:
        print("other graphs here: " + ", ".join(f"{i:04d}" for i in others) + " (--index NNNN)")
    print(f"{data['parallel_mode']} / {data['search_mode']}, {mesh_words(data)}")
    if data["note"]:
        print(f"note: {data['note']}")
    missing = "- (not compiled yet: no per-device shapes or collectives)"
    print(f"begin:   {data['begin'] or '-'}\nexecute: {data['execute'] or missing}")
    print()
    rows = [[str(o["node"]), o["instance_name"], o["kind"], fmt_strategy(o["strategy"]),
             _fmt_provenance(o["provenance"]), _fmt_shapes(o["device_shapes"]),
             "\n".join(_fmt_collective(c) for c in o["collectives"]),
             "-" if o["collective_bytes"] is None else str(o["collective_bytes"]),
             _fmt_bytes(o.get("measured_bytes")), _fmt_bytes(o.get("predicted_bytes")), o["scope"]]
            for o in data["ops"]]
    for c in data["unattributed_collectives"]:
        label = "(gradient reduction)" if c.get("parameters") else "(not attributed)"
        params = list(c.get("parameters", ()))
        more = ", ... (--json lists all)" if len(params) > 3 else ""
        carried = f"{len(params)} parameters: " + ", ".join(params[:3]) + more if params else ""
        rows.append(["-", label, "", "", carried, "", _fmt_collective(c), str(c["bytes"]),
                     _fmt_bytes(c.get("wire_bytes")), "", ""])
    # measured: wire bytes counted as predicted is (an output's redistribution on its reader, fused gradient
    # reductions on the readers of their Parameters: graphpar.dump.attribution); the gradient reduction rows show
    # their own wire bytes, already shared out above
    emit_table(["node", "op", "kind", "strategy", "provenance", "per-device shapes", "collectives", "bytes",
                 "measured", "predicted", "scope"], rows)
    _print_conflicts(data["parameter_conflicts"])
    if data["total_collective_bytes"] is not None:
        print(f"\ntotal collective bytes per step (rank {data['rank']}): {data['total_collective_bytes']}")
    if data.get("total_wire_bytes") is not None:
        print(f"collective wire bytes per step (rank {data['rank']}): measured {data['total_wire_bytes']:g}, "
              f"predicted {data['total_predicted_bytes']:g}")
    if data.get("pipeline"):
        _print_pipeline(data["pipeline"])


def _print_pipeline(p: dict[str, Any]) -> None:
    """The schedule of a pipeline stage's graph (graphpar.dump.pipeline)."""
    print(f"\npipeline: {p['stages']} stages, micro_size {p['micro_size']}, scheduler {p['scheduler']}; "
          f"{p['transfers_per_step']} activation transfers per step between stages (a stage's forward and backward "
          f"programs, whose collectives are listed above, run once per micro-batch)")
    if p.get("segments"):
        print(f"virtual stages: {p['segments']} segments per stage; (stage, segment) of each in model order: "
              + " ".join(f"{c}=({s},{g})" for c, (s, g) in enumerate(p["chunks"])))
    idle = p.get("idle", {})
    emit_table(["stage", "ranks", "order", "peak live micro-batches (schedule / measured)", "idle (schedule)"],
                [[str(s), o["ranks"], " ".join(o["actions"]), f"{o['peak_live']} / {p['peak_live'].get(s, '-')}",
                  f"{idle[s]:.3f}" if s in idle else "-"] for s, o in sorted(p["orders"].items())], title="schedule")
    if idle:
        print(f"idle fraction: waiting time over the step, from the schedule with costs {p['costs']}")
    rows = [[t["pass"], str(t["micro"]), f"{t['src_stage']} -> {t['dest_stage']}", "send" if k == "sends" else "receive",
             str(t["bytes"]), f"{t['wire_bytes']:g}" if "wire_bytes" in t else "-"]
            for k in ("sends", "receives") for t in p[k]]
    emit_table(["pass", "micro", "stages", "this rank", "bytes", "wire bytes"], rows,
                title="transfers of this rank's stage")
    for kind, total in p.get("totals", {}).items():
        print(f"{kind} bytes per step per device (rank's stage): raw {total['bytes']}, wire {total['wire_bytes']:g}")


def print_diff(data: dict[str, Any], show_all: bool) -> None:
    for side in ("a", "b"):
        s = data[side]
        index = f"{s['index']:04d}" if s["index"] is not None else "-"
        print(f"{side.upper()}: {s['source']} (graph {s['graph']}, index {index}, rank {s['rank']}, "
              f"{s['parallel_mode']} / {s['search_mode']})")
    print()
    names = Counter(o["instance_name"] for o in data["ops"])
    fmt_bytes = lambda v: "-" if v is None else str(v)  # noqa: E731
    rows = []
    for o in data["ops"]:
        if not show_all and o["status"] == "same" and not o["collective_bytes_delta"]:
            continue
        node = o["node_a"] if o["node_a"] == o["node_b"] or o["node_b"] is None else (
            o["node_b"] if o["node_a"] is None else f"{o['node_a']}->{o['node_b']}")
        name = o["instance_name"] + (f" (node {node})" if names[o["instance_name"]] > 1 else "")
        delta = o["collective_bytes_delta"]
        rows.append([name, o["kind"], o["status"], fmt_strategy(o["strategy_a"]), fmt_strategy(o["strategy_b"]),
                     fmt_bytes(o["collective_bytes_a"]), fmt_bytes(o["collective_bytes_b"]),
                     "-" if delta is None else f"{delta:+d}"])
    ua, ub = data["unattributed_bytes_a"], data["unattributed_bytes_b"]
    if ua is not None and ub is not None and (ua != ub or show_all):
        rows.append(["(not attributed)", "", "", "", "", str(ua), str(ub), f"{ub - ua:+d}"])
    if rows:
        emit_table(["op", "kind", "status", "strategy A", "strategy B", "bytes A", "bytes B", "delta"], rows)
    else:
        print("no op changed its strategy or its collective bytes")
    ta, tb, d = (data["total_collective_bytes_a"], data["total_collective_bytes_b"],
                 data["total_collective_bytes_delta"])
    print(f"\ntotal collective bytes per step: A {fmt_bytes(ta)}, B {fmt_bytes(tb)}"
          + (f", delta {d:+d}" if d is not None else " (an execute dump is missing)"))


def print_explain(data: dict[str, Any]) -> None:
    print(data["summary"])
    print()
    rows = []
    for c in data["chain"]:
        p = c["provenance"]
        if p is None:
            origin = "-"
        elif p["kind"] == "propagated":
            origin = f"{p['source_name']} (node {p['source']})" if p["source"] is not None else "propagated"
        elif p["kind"] == "user":
            origin = "user hint (shard)"
        else:
            origin = p["text"]
        cost = "" if c["edge_cost"] is None else f"{c['edge_cost']:g} B"
        rows.append([str(c["node"]), c["instance_name"], c["kind"], fmt_strategy(c["strategy"]), origin, cost,
                     c["scope"]])
    emit_table(["node", "op", "kind", "strategy", "from", "edge cost", "scope"], rows)
    print(f"\nredistribution cost along the chain: {data['total_cost']:g} B per device")
    if data.get("search"):
        print_choices(data["search"])
