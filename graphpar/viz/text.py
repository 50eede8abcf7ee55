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

_NO_WRAP = {"node", "op", "strategy", "strategy A", "strategy B", "bytes", "wire bytes", "measured",
            "predicted", "bytes A", "bytes B", "delta", "edge cost", "status", "split", "role"}


WRAP = 40  # plain text: a long cell (scope, provenance, shapes, collectives) wraps at this width ...
WIDTHS = {"kind": 20, "provenance": 34, "per-device shapes": 30, "global shapes": 30, "collectives": 40}  # ... or this
_BREAK = re.compile(r"(?<=[._,])|(?<=[a-z])(?=[A-Z])")  # where a word longer than a line may break


def _pieces(token: str, width: int) -> list[str]:
    """A word longer than ``width`` cut after a ``.``, ``_`` or ``,``, or before a capital that follows a small
    letter (``blocks.0.attention.`` / ``dense_q.weight``, ``SoftmaxCrossEntropy`` / ``WithLogits``), else whole."""
    if len(token.rstrip()) <= width:
        return [token]
    out, cur = [], ""
    for part in _BREAK.split(token):
        if cur and len(cur) + len(part.rstrip()) > width:
            out.append(cur)
            cur = ""
        cur += part
    return out + [cur]


def wrap_cell(text: str, width: int = WRAP) -> str:
    """``text`` folded into lines of at most ``width`` characters, broken after a space or a ``/`` (a scope breaks
    between its Cells), a longer word where :func:`_pieces` finds a break (else on its own line)."""
    lines = []
    for line in text.split("\n"):
        out = ""
        for word in re.findall(r"[^ /]*[ /]*", line):
            for token in _pieces(word, width):
                if out and len(out) + len(token.rstrip()) > width:
                    lines.append(out.rstrip())
                    out = ""
                out += token
        lines.append(out.rstrip())
    return "\n".join(lines)


def _wrapped(columns: list[str], rows: list[list[str]], wide: bool) -> list[list[list[str]]]:
    return [[(c if wide or name in _NO_WRAP else wrap_cell(c, WIDTHS.get(name, WRAP))).split("\n")
             for name, c in zip(columns, row)] for row in rows]


def emit_table(columns: list[str], rows: list[list[str]], title: str | None = None,
               groups: list[str] | None = None, wide: bool = False) -> None:
    """A rich table on a terminal; plain aligned columns (multi-line cells allowed) otherwise, long cells wrapped
    (:func:`wrap_cell`, at :data:`WIDTHS`) so a table of a real model stays about as wide as a terminal, or not
    wrapped at all when ``wide``. ``groups``: a heading per row (an op's Cell scope), printed as its own line above
    the rows where it changes instead of repeating it in a column."""
    cells = _wrapped(columns, rows, wide)
    head = [[c] for c in columns]
    widths = [max(len(line) for row in [head] + cells for line in row[i]) for i in range(len(columns))]
    runs: list[tuple[str | None, list[int]]] = []
    for k in range(len(rows)):
        heading = groups[k] if groups is not None else None
        if not runs or runs[-1][0] != heading:
            runs.append((heading, []))
        runs[-1][1].append(k)
    if sys.stdout.isatty():
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text

        console = Console()
        if title:
            console.print(Text(title))
        for n, (heading, members) in enumerate(runs or [(None, [])]):
            if heading is not None:
                console.print(Text(heading, style="bold"))
            table = Table(show_header=n == 0)
            for name, w in zip(columns, widths):  # one width per column in every group's table: they line up
                table.add_column(name, no_wrap=name in _NO_WRAP or wide, overflow="fold",
                                 width=w if groups is not None else None)
            for k in members:
                table.add_row(*(Text(cell) for cell in rows[k]))  # Text: "[...]" in a cell is not rich markup
            console.print(table)
        return
    if title:
        print(title)
    _print_row(head, widths)
    for heading, members in runs:
        if heading is not None:
            print(heading)
        for k in members:
            _print_row(cells[k], widths)


def _print_row(row: list[list[str]], widths: list[int]) -> None:
    for k in range(max(len(c) for c in row)):
        print("  ".join((c[k] if k < len(c) else "").ljust(w) for c, w in zip(row, widths)).rstrip())


def fmt_strategy(value: list | None) -> str:
    return "-" if value is None else strategy_text(tuple(tuple(r) for r in value))


def fold(segments: list[str], width: int | None) -> str:
    """Segments joined by spaces, a new line started where the next would pass ``width`` (None: one line): a
    cell that breaks between its parts (a shape, ``ranks ...``) rather than inside one."""
    lines: list[str] = []
    for seg in segments:
        if lines and (width is None or len(lines[-1]) + 1 + len(seg) <= width):
            lines[-1] += " " + seg
        else:
            lines.append(seg)
    return "\n".join(lines)


def _fmt_shapes(shapes: dict[str, list] | None, width: int | None = WIDTHS["per-device shapes"]) -> str:
    if shapes is None:
        return "-"
    ins = [str(tuple(s)) + "," for s in shapes["inputs"]]
    outs = [str(tuple(s)) + "," for s in shapes["outputs"]]
    if ins:
        ins[-1] = ins[-1][:-1]
    if outs:
        outs[-1] = outs[-1][:-1]
    # "(64, 64), (16, 64) -> (64, 16)", folded between whole shapes (at the shapes column's width)
    return fold(ins + ["->" + (" " + outs[0] if outs else "")] + outs[1:], width)


def _fmt_provenance(p: dict[str, Any] | None) -> str:
    if p is None:
        return "-"
    if p["kind"] == "propagated":
        src = f"{p['source_name']} (node {p['source']})" if p["source"] is not None else "?"
        return f"from {src}, {p['cost']:g} B"
    return p["text"]


def _fmt_collective(c: dict[str, Any], width: int | None = WIDTHS["collectives"]) -> str:
    op = f"({c['op']})" if c["op"] else ""
    cause = "" if c["cause"] == "operator" else " [" + c["cause"].replace("redistribution of", "redistributes") + "]"
    group = ",".join(str(r) for r in c["group"])  # "0,4": MindSpore's "0-4" reads as the range 0..4
    when = {"forward": "fwd ", "backward": "bwd "}.get(c["pass"], "")
    # folded before "ranks" and the cause (at the collectives column's width), not inside them
    return fold([f"{c['kind']}{op} {when}{c['bytes']} B", f"ranks {group}"] + ([cause.strip()] if cause else []),
                width)


def mesh_words(data: dict[str, Any]) -> str:
    """The mesh of a dump's header in words. DATA_PARALLEL plans the graph unsplit (mesh m0=1) and runs one
    replica per device, which "mesh m0=1" alone would hide on 8 devices."""
    mesh = "mesh " + " ".join(f"{k}={v}" for k, v in data["mesh"].items())
    if data["parallel_mode"] == "data_parallel" and (data["n_ranks"] or 1) > 1:
        return f"{data['n_ranks']} data-parallel replicas of the unsplit graph ({mesh})"
    return mesh


def print_show(data: dict[str, Any], wide: bool = False) -> None:
    """``graphpar ir show``: a dump's inputs and nodes (under their Cell scope unless ``wide``) and totals."""
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
    width = ({} if wide else WIDTHS).get  # wide: nothing folded
    rows = []
    for n in data["nodes"]:
        shapes = {"inputs": [t["shape"] for t in n["input_types"]], "outputs": [t["shape"] for t in n["output_types"]]}
        rows.append([str(n["node"]), n["instance_name"], n["kind"], fmt_strategy(n["strategy"]),
                     _fmt_provenance(n["provenance"]), _fmt_shapes(shapes, width("per-device shapes")),
                     ("; " if wide else "\n").join(_fmt_collective(c, width("collectives"))
                                                   for c in n["collectives"]), n["scope"]])
    columns = ["node", "op", "kind", "strategy", "provenance",
               "per-device shapes" if per_device else "global shapes", "collectives", "scope"]
    if not per_device:
        columns.pop(6)
        rows = [r[:6] + r[7:] for r in rows]
    if wide:
        emit_table(columns, rows, title="nodes", wide=True)
    else:
        emit_table(columns[:-1], [r[:-1] for r in rows], title="nodes",
                   groups=[_scope_heading(r[-1]) for r in rows])
    if data["unattributed_collectives"]:
        print()
        emit_table(["collective"], [[_fmt_collective(c, width("collectives"))] for c in data["unattributed_collectives"]],
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


def _scope_heading(scope: str) -> str:
    return f"scope {scope or '(none)'}:"


_NO_OP = "collectives of no op (shared out to the ops above):"


def print_summary(data: dict[str, Any], wide: bool = False) -> None:
    """The per-op table of ``graphpar ir summary``: the ops under a line naming their Cell scope, long cells
    wrapped (about 200 columns for a GPT block); ``wide``: one line per op with the scope in a column (about 300)."""
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
    width = ({} if wide else WIDTHS).get  # wide: nothing folded
    rows = [[str(o["node"]), o["instance_name"], o["kind"], fmt_strategy(o["strategy"]),
             _fmt_provenance(o["provenance"]), _fmt_shapes(o["device_shapes"], width("per-device shapes")),
             ("; " if wide else "\n").join(_fmt_collective(c, width("collectives")) for c in o["collectives"]),
             "-" if o["collective_bytes"] is None else str(o["collective_bytes"]),
             _fmt_bytes(o.get("measured_bytes")), _fmt_bytes(o.get("predicted_bytes")), o["scope"]]
            for o in data["ops"]]
    for c in data["unattributed_collectives"]:
        label = "(gradient reduction)" if c.get("parameters") else "(not attributed)"
        params = list(c.get("parameters", ()))
        shown = params if wide else params[:3]  # every one in the wide form
        more = ", ... (--wide or --json lists all)" if len(params) > len(shown) else ""
        carried = f"{len(params)} parameters: " + ", ".join(shown) + more if params else ""
        rows.append(["-", label, "", "", carried, "", _fmt_collective(c, width("collectives")), str(c["bytes"]),
                     _fmt_bytes(c.get("wire_bytes")), "", ""])
    # measured: wire bytes counted as predicted is (an output's redistribution on its reader, fused gradient
    # reductions on the readers of their Parameters: graphpar.dump.attribution); the gradient reduction rows show
    # their own wire bytes, already shared out above
    columns = ["node", "op", "kind", "strategy", "provenance", "per-device shapes", "collectives", "bytes",
               "measured", "predicted", "scope"]
    if wide:
        emit_table(columns, rows, wide=True)
    else:
        groups = [_scope_heading(o["scope"]) for o in data["ops"]]
        emit_table(columns[:-1], [r[:-1] for r in rows], groups=groups + [_NO_OP] * (len(rows) - len(groups)))
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
