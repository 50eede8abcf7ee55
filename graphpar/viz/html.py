"""HTML views of dumps and plans: the per-op table, device grids, byte charts and the graph picture.

Every function takes :mod:`graphpar.dump.model` objects (a begin and/or an execute :class:`Dump` of one graph on one
rank) and returns an HTML fragment with its own scoped CSS, for ``_repr_html_`` in notebooks and for the page
``graphpar ir html`` writes. No JavaScript is needed to read a fragment.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from graphpar.dump.model import Collective, Dump, TensorType
from graphpar.dump.attribution import gradient_shares, measured_wire
from graphpar.viz.grids import value_grids
from graphpar.viz.svg import bar_chart, collapse_depth, graph_picture, human_bytes

CSS = """
.gp-root{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;font-size:12px;color:#212529}
.gp-root h3{font-size:14px;margin:14px 0 6px}.gp-root h4{font-size:13px;margin:10px 0 4px}
.gp-root table.gp-table{border-collapse:collapse;margin:4px 0}
.gp-root table.gp-table th{background:#f1f3f5;text-align:left;padding:3px 6px;border:1px solid #dee2e6}
.gp-root table.gp-table td{padding:3px 6px;border:1px solid #dee2e6;vertical-align:top}
.gp-root td.gp-num{text-align:right;font-variant-numeric:tabular-nums}
.gp-root code{font-family:SFMono-Regular,Menlo,Consolas,monospace;font-size:11px}
.gp-root .gp-user{background:#fff4e6}.gp-root .gp-fallback{background:#fff5f5}
.gp-root .gp-meta{color:#495057;margin:2px 0}
.gp-root .gp-scroll{overflow:auto;max-height:640px;border:1px solid #e9ecef;margin:4px 0}
.gp-root .gp-grids{display:flex;flex-wrap:wrap;gap:14px;align-items:flex-start}
.gp-root .gp-grid{border:1px solid #dee2e6;padding:4px}
.gp-root table.gp-blocks{border-collapse:collapse}
.gp-root table.gp-blocks{table-layout:fixed}
.gp-root table.gp-blocks td{border:1px solid #fff;padding:0 2px;text-align:center;font-size:10px;overflow:hidden;
  min-width:14px;min-height:14px}
.gp-root .gp-small{font-size:10px;color:#343a40}
.gp-root details>summary{cursor:pointer;font-weight:bold;margin:6px 0}
.gp-root .gp-zoom-bar button{border:1px solid #adb5bd;background:#f8f9fa;min-width:28px;margin:0 2px 2px 0;
  cursor:pointer;border-radius:3px;font-size:12px}
.gp-root .gp-zoom-level{display:inline-block;min-width:40px;text-align:right;font-variant-numeric:tabular-nums}
.gp-root .gp-zoom .gp-scroll{resize:both}
"""


def wrap(body: str) -> str:
    """A fragment with the stylesheet, ready for ``_repr_html_``."""
    return f'<div class="gp-root"><style>{CSS}</style>{body}</div>'


def table(columns: Sequence[str], rows: Sequence[Sequence[str]], css_class: str = "gp-table",
          row_classes: Sequence[str] | None = None, attrs: str = "") -> str:
    """A table of already-escaped HTML cells (``row_classes``: a CSS class per row)."""
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    classes = list(row_classes) if row_classes is not None else [""] * len(rows)
    body = "".join((f'<tr class="{rc}">' if rc else "<tr>") + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>"
                   for rc, row in zip(classes, rows))
    return f'<table class="{css_class}"{attrs}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def code_cell(text: str) -> str:
    return f"<code>{escape(text)}</code>"


def _shapes(types: Sequence[TensorType]) -> str:
    return ", ".join(str(tuple(t.shape)) for t in types)


def collective_text(c: Collective) -> str:
    op = f"({c.op})" if c.op else ""
    cause = "" if c.cause in ("", "operator") else " [" + c.cause.replace("redistribution of", "redistributes") + "]"
    when = {"forward": "fwd ", "backward": "bwd "}.get(c.pass_, "")
    # "ranks 0,4": MindSpore's group_ranks spelling "0-4" reads as the range 0..4
    return f"{c.kind}{op} {when}{human_bytes(c.bytes)} ranks {','.join(map(str, c.group))}{cause}"


def unattributed_label(c: Collective) -> str:
    """The row or bar name of a collective no op owns: the gradient reduction (it names its parameters) or not."""
    return "(gradient reduction)" if c.parameters else "(not attributed)"


# --- the per-op table ------------------------------------------------------------------------------------------
def op_table(begin: Dump | None, execute: Dump | None, kind: str = "summary") -> str:
    """One row per op: node, op, kind, scope, strategy, provenance, global → per-device shapes, collectives,
    bytes. Rows carry ``class="op-row"``; the table names its rank and kind in ``data-`` attributes."""
    main = execute or begin
    if main is None:
        return "<p>no dump</p>"
    rows = []
    shares = gradient_shares(execute) if execute is not None else {}
    totals = measured_wire(execute) if execute is not None else {}
    for node in main.nodes:
        twin = begin.node(node.id) if begin is not None else None
        glob = f"{_shapes(twin.input_types)} \u2192 {_shapes(twin.output_types)}" if twin is not None else ""
        local = f"{_shapes(node.input_types)} \u2192 {_shapes(node.output_types)}" if execute is not None else ""
        shapes = escape(glob) + ("<br>per device: " + escape(local) if local else "") if glob else escape(local)
        prov = node.provenance.text if node.provenance else ""
        colls = "<br>".join(escape(collective_text(c)) for c in node.collectives)
        nbytes = str(node.collective_bytes) if execute is not None else "-"
        predicted = "-" if node.predicted_bytes is None else f"{node.predicted_bytes:g}"
        share = shares.get(node.id, 0.0)
        measured = "-" if execute is None else f"{totals.get(node.id, 0.0):g}" + (
            f'<br><span class="gp-small">{share:g} of it: fused gradient reductions</span>' if share else "")
        rows.append([str(node.id), f"<b>{escape(node.instance_name)}</b>", escape(node.kind),
                     f'<span class="gp-small">{escape(node.scope)}</span>', code_cell(node.strategy_text or "-"),
                     escape(prov), shapes, colls, nbytes, predicted, measured])
    for c in (execute.unattributed if execute is not None else []):
        rows.append(["-", unattributed_label(c), "", "", "", "", "", escape(collective_text(c)), str(c.bytes), "",
                     "split by parameter into the ops above"])
    attrs = (f' data-rank="{main.rank}" data-graph="{escape(main.graph)}" data-ops="{len(main.nodes)}"'
             f' data-kind="{kind}"')
    classes = ["op-row"] * len(main.nodes) + ["gp-loose"] * (len(rows) - len(main.nodes))
    return table(["node", "op", "kind", "scope", "strategy", "provenance", "global \u2192 per-device shapes",
                  "collectives", "bytes", "predicted wire bytes", "measured wire bytes"], rows,
                 css_class="gp-table op-table", row_classes=classes, attrs=attrs)


def header(dump: Dump) -> str:
    mesh = " ".join(f"{k}={v}" for k, v in dump.mesh.items())
    total = dump.total_bytes if dump.total_bytes is not None else sum(c.bytes for c in dump.collectives)
    lines = [f"graph <b>{escape(dump.graph)}</b> ({escape(dump.purpose)}), rank {dump.rank} of {dump.n_ranks}",
             f"{escape(dump.parallel_mode)} / {escape(dump.search_mode)}, mesh <code>{escape(mesh)}</code>"]
    if dump.header.get("note"):
        lines.append(escape(dump.header["note"]))
    if dump.kind == "execute":
        lines.append(f"total collective bytes per step (rank {dump.rank}): <b>{total}</b> ({human_bytes(total)})")
    return "".join(f'<p class="gp-meta">{line}</p>' for line in lines)


# --- charts ----------------------------------------------------------------------------------------------------
def bytes_by_op(execute: Dump) -> list[tuple[str, dict[str, float]]]:
    """Wire bytes per op by collective kind, with each op's share of the fused gradient reductions (by the
    Parameters it reads, :mod:`graphpar.dump.attribution`) as its own series; what no op reads stays on a
    ``(gradient reduction)`` / ``(not attributed)`` bar."""
    shares = gradient_shares(execute)
    rows = []
    for n in execute.nodes:
        by_kind: dict[str, float] = {}
        for c in n.collectives:
            by_kind[c.kind] = by_kind.get(c.kind, 0) + (c.wire_bytes if c.wire_bytes is not None else c.bytes)
        if shares.get(n.id):
            by_kind["fused gradient reduction"] = shares[n.id]
        if by_kind:
            rows.append((f"{n.instance_name} (node {n.id})", by_kind))
    if shares.get(None):
        label = unattributed_label(next(iter(execute.unattributed)))
        rows.append((label, {"fused gradient reduction": shares[None]}))
    for c in execute.unattributed:
        if not c.parameters:  # a collective no Parameter explains (not a gradient reduction)
            rows.append((unattributed_label(c), {c.kind: c.wire_bytes if c.wire_bytes is not None else c.bytes}))
    return rows


def bytes_by_layer(execute: Dump) -> list[tuple[str, dict[str, float]]]:
    """Collective wire bytes per Cell scope (a layer), split into forward and backward; the fused gradient
    reductions (backward) counted in the layers of the ops that read their Parameters."""
    shares = gradient_shares(execute)
    layers: dict[str, dict[str, float]] = {}
    for n in execute.nodes:
        for c in n.collectives:
            entry = layers.setdefault(n.scope or "(top)", {})
            entry[c.pass_ or "forward"] = entry.get(c.pass_ or "forward", 0) + (
                c.wire_bytes if c.wire_bytes is not None else c.bytes)
        if shares.get(n.id):
            entry = layers.setdefault(n.scope or "(top)", {})
            entry["backward"] = entry.get("backward", 0) + shares[n.id]
    if shares.get(None):
        entry = layers.setdefault(unattributed_label(next(iter(execute.unattributed))), {})
        entry["backward"] = entry.get("backward", 0) + shares[None]
    for c in execute.unattributed:
        if not c.parameters:
            entry = layers.setdefault(unattributed_label(c), {})
            entry[c.pass_ or "forward"] = entry.get(c.pass_ or "forward", 0) + (
                c.wire_bytes if c.wire_bytes is not None else c.bytes)
    return list(layers.items())


def charts(execute: Dump | None) -> str:
    if execute is None:
        return "<p>no execute dump (not compiled): no collectives to chart</p>"
    return (bar_chart(bytes_by_op(execute), f"collective wire bytes per op (rank {execute.rank})") + "<br>"
            + bar_chart(bytes_by_layer(execute), f"collective wire bytes per layer (Cell scope, rank {execute.rank})"))


def legend() -> str:
    return ('<p class="gp-small">boxes: <span style="background:#ffd8a8">user hint</span> '
            '<span style="background:#d0ebff">propagated</span> <span style="background:#e9ecef">default</span> '
            '<span style="background:#ffc9c9">fallback (replicated)</span>; red dashed edge: the value changes layout '
            'on the way into the op (a redistribution); red border: the op\'s output is redistributed</p>')


def zoom_box(svg: str) -> str:
    """A picture in a scroll box with zoom buttons (−, +, fit, 100%) and Ctrl/⌘ + wheel zoom: the page's script
    (:data:`graphpar.viz.page.ZOOM_JS`) scales the SVG; without it (a notebook that runs no script) the buttons do
    nothing and the picture scrolls at 100%."""
    buttons = "".join(f'<button type="button" data-zoom-step="{step}" title="{tip}">{label}</button>'
                      for step, label, tip in (("out", "\u2212", "zoom out"), ("in", "+", "zoom in"),
                                               ("fit", "fit", "fit the box"), ("reset", "100%", "actual size")))
    return (f'<div class="gp-zoom" data-zoom="1"><div class="gp-zoom-bar">{buttons}'
            '<span class="gp-zoom-level">100%</span> <span class="gp-small">Ctrl/\u2318 + wheel zooms at the '
            f'pointer; drag the corner to resize</span></div><div class="gp-scroll">{svg}</div></div>')


def graph_pictures(main: Dump) -> str:
    """The graph picture: op by op when small; else by Cell first (each Cell at :func:`collapse_depth` one box:
    the model on one screen) with every op folded below. Each picture zooms (:func:`zoom_box`)."""
    depth = collapse_depth(main)
    if depth is None:
        return f"<details open><summary>graph</summary>{legend()}{zoom_box(graph_picture(main))}</details>"
    return (f"<details open><summary>graph, by Cell</summary>{legend()}"
            f"{zoom_box(graph_picture(main, depth=depth))}</details>"
            "<details><summary>graph, every op (graphpar ir explore: collapse and expand any Cell in Model "
            f"Explorer)</summary>{zoom_box(graph_picture(main))}</details>")


def dump_views(begin: Dump | None, execute: Dump | None, grids: bool = True, picture: bool = True) -> str:
    """Everything about one graph on one rank: header, per-op table, charts, device grids, graph picture."""
    main = execute or begin
    if main is None:
        return "<p>no dump</p>"
    # the op table flows with the page (a scroll box showed about 8 rows of it); the graph picture keeps its box
    parts = [header(main), "<h4>ops</h4>", op_table(begin, execute),
             '<p class="gp-small">predicted and measured wire bytes (what one device sends) per op, counted alike: the '
             "redistribution of an op's output on the op that reads it, a fused gradient reduction on the ops that "
             "read its Parameters</p>",
             "<h4>where the bytes go</h4>", charts(execute)]
    if grids and begin is not None:
        parts += ["<details><summary>device grids: which device holds which block of every value</summary>",
                  value_grids(begin), "</details>"]
    if picture:
        parts.append(graph_pictures(main))
    return "".join(parts)


def dump_html(dump: Dump) -> str:
    """``Dump._repr_html_``: one dump file's views."""
    begin = dump if dump.kind == "step_parallel_begin" else None
    execute = dump if dump.kind == "execute" else None
    return wrap(f'<p class="gp-meta"><code>{escape(dump.path)}</code> ({escape(dump.kind)} dump)</p>'
                + dump_views(begin, execute))


def rows_html(columns: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> str:
    """A list of dicts as a table (``PlanView.collectives()``, ``PlanView.memory()``)."""
    cells = [[escape(cell_text(r.get(c))) for c in columns] for r in rows]
    return wrap(table(columns, cells))


def cell_text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return str(tuple(tuple(v) if isinstance(v, list) else v for v in value))
    return str(value)
