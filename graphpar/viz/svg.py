"""Inline SVG pictures: a bar chart (collective bytes) and a picture of the op graph with layout changes marked.

Plain SVG text, no JavaScript and no fonts to fetch, so the pictures work in a notebook, in a saved HTML page and
offline. Inputs are :mod:`graphpar.dump.model` objects and plain numbers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape

from graphpar.dump.model import Dump, Node, layout_text

SERIES_COLORS = {"AllReduce": "#4e79a7", "AllGather": "#f28e2b", "ReduceScatter": "#59a14f", "AlltoAll": "#e15759",
                 "CollectivePermute": "#b07aa1", "Broadcast": "#9c755f", "forward": "#4e79a7",
                 "backward": "#f28e2b", "A": "#4e79a7", "B": "#e15759"}
PROVENANCE_COLORS = {"user": "#ffd8a8", "propagated": "#d0ebff", "default": "#e9ecef", "fallback": "#ffc9c9"}
_FALLBACK = ["#76b7b2", "#edc948", "#ff9da7", "#bab0ac"]


def human_bytes(value: float) -> str:
    for unit, size in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if abs(value) >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value:g} B"


def _color(name: str, k: int) -> str:
    return SERIES_COLORS.get(name, _FALLBACK[k % len(_FALLBACK)])


def bar_chart(rows: Sequence[tuple[str, Mapping[str, float]]], title: str, label_width: int = 240,
              bar_width: int = 380, css_class: str = "gp-chart") -> str:
    """A horizontal stacked bar chart: one bar per ``(label, {series: value})`` row, a legend of the series."""
    series = list(dict.fromkeys(s for _, values in rows for s in values))
    top = max((sum(v.values()) for _, v in rows), default=0) or 1
    row_h, head = 18, 34
    height = head + row_h * max(len(rows), 1) + 8
    width = label_width + bar_width + 90
    parts = [f'<svg class="{css_class}" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
             f'<text x="4" y="14" font-weight="bold">{escape(title)}</text>']
    x = 4
    for k, name in enumerate(series):
        parts.append(f'<rect x="{x}" y="20" width="10" height="10" fill="{_color(name, k)}"/>'
                     f'<text x="{x + 14}" y="29">{escape(name)}</text>')
        x += 24 + 7 * len(name)
    if not rows:
        parts.append(f'<text x="4" y="{head + 12}">no collectives</text>')
    for i, (label, values) in enumerate(rows):
        y = head + i * row_h
        short = label if len(label) <= 36 else "\u2026" + label[-35:]
        parts.append(f'<text x="{label_width - 6}" y="{y + 12}" text-anchor="end"><title>{escape(label)}</title>'
                     f'{escape(short)}</text>')
        x = float(label_width)
        total = sum(values.values())
        for k, name in enumerate(series):
            v = values.get(name, 0)
            if v <= 0:
                continue
            w = bar_width * v / top
            parts.append(f'<rect x="{x:.1f}" y="{y + 2}" width="{max(w, 1):.1f}" height="{row_h - 4}" '
                         f'fill="{_color(name, k)}"><title>{escape(label)}: {escape(name)} {human_bytes(v)}'
                         f'</title></rect>')
            x += w
        parts.append(f'<text x="{x + 4:.1f}" y="{y + 12}">{human_bytes(total)}</text>')
    parts.append("</svg>")
    return "".join(parts)


# --- the graph picture -----------------------------------------------------------------------------------------
@dataclass
class _Box:
    key: str  # "n<id>" for ops, the value name for inputs
    label: str
    sub: str
    fill: str
    title: str
    layer: int = 0
    x: float = 0.0
    stroke: str = "#495057"


def _redistributed_inputs(node: Node) -> set[int]:
    out = set()
    for c in node.collectives:
        if c.cause.startswith("redistribution of input "):
            out.add(int(c.cause.rsplit(" ", 1)[1]))
    return out


def layout_changes(dump: Dump) -> set[tuple[str, int, int]]:
    """Edges ``(source key, node id, input index)`` where the value changes layout on its way into the op: a
    redistribution collective compiled for that input (execute dumps), or a graph input stored in another layout
    than the op uses it in."""
    inputs = {i.name: i for i in dump.inputs}
    producers = {out: n.id for n in dump.nodes for out in n.outputs}
    marked = set()
    for node in dump.nodes:
        moved = _redistributed_inputs(node)
        for k, arg in enumerate(node.args):
            key = f"n{producers[arg]}" if arg in producers else arg
            if k in moved:
                marked.add((key, node.id, k))
            elif arg in inputs and k < len(node.in_layouts) and tuple(inputs[arg].layout) != \
                    tuple(node.in_layouts[k]) and any(inputs[arg].layout) | any(node.in_layouts[k]):
                marked.add((key, node.id, k))
    return marked


def redistribution_labels(main: Dump) -> dict[tuple[str, int, int], str]:
    """``(source node id, target node id, input index) -> label`` of every edge where a value changes layout:
    the collectives compiled for that input (execute dumps), else the stored and the used layout of a graph input
    (begin dumps)."""
    producers = {out: n.id for n in main.nodes for out in n.outputs}
    inputs = {i.name: i for i in main.inputs}
    labels: dict[tuple[str, int, int], str] = {}
    for source, nid, k in sorted(layout_changes(main)):
        node = main.node(nid)
        moved = [c for c in node.collectives
                 if c.cause == f"redistribution of input {k}"] if node is not None else []
        arg = node.args[k] if node is not None else ""
        if moved:
            text = ", ".join(f"{c.kind} {human_bytes(c.wire_bytes if c.wire_bytes is not None else c.bytes)}"
                             for c in moved)
        elif arg in inputs and node is not None and k < len(node.in_layouts):
            text = f"{layout_text(inputs[arg].layout)} -> {layout_text(node.in_layouts[k])}"
        else:
            text = "layout change"
        key = f"n{producers[arg]}" if arg in producers else arg
        labels[(key, nid, k)] = text
    for node in main.nodes:  # an output redistributed for every consumer: on each edge out of the op
        outs = [c for c in node.collectives if c.cause.startswith("redistribution of output")]
        if not outs:
            continue
        text = ", ".join(f"{c.kind} {human_bytes(c.wire_bytes if c.wire_bytes is not None else c.bytes)}"
                         for c in outs)
        for consumer in main.nodes:
            for k, arg in enumerate(consumer.args):
                if producers.get(arg) == node.id:
                    labels.setdefault((f"n{node.id}", consumer.id, k), text + " (output)")
    return labels


def _cells(scope: str) -> list[str]:
    parts = [p for p in scope.strip("()").split("/") if p]
    return parts[1:] if parts[:1] == ["Default"] else parts


def collapse_depth(dump: Dump, most: int = 20) -> int | None:
    """The deepest Cell level at which the graph, each Cell below it drawn as one box, has at most ``most``
    boxes (None: the graph is small enough to draw op by op)."""
    if len(dump.nodes) <= most:
        return None
    best = None
    for depth in range(1, max((len(_cells(n.scope)) for n in dump.nodes), default=0) + 1):
        units = {"/".join(_cells(n.scope)[:depth + 1]) if len(_cells(n.scope)) > depth else f"n{n.id}"
                 for n in dump.nodes}
        if len(units) <= most:
            best = depth
    return best


def _unit(n: Node, depth: int | None) -> str:
    cells = _cells(n.scope)
    return f"n{n.id}" if depth is None or len(cells) <= depth else "c:" + "/".join(cells[:depth + 1])


def graph_picture(dump: Dump, max_nodes: int = 1500, depth: int | None = None) -> str:
    """The op graph as inline SVG: one box per op (colour: where its strategy came from) and per graph input,
    edges along the data flow; a red dashed edge is a layout change (see :func:`layout_changes`) labelled with its
    collective and bytes, a red box border an op whose output is redistributed for its consumers. With ``depth``,
    every Cell ``depth`` levels below the root is one box (its ops, their collective bytes), without the graph
    inputs: the whole model on one screen (:func:`collapse_depth` picks a depth)."""
    nodes = dump.nodes[:max_nodes]
    producers = {out: n.id for n in nodes for out in n.outputs}
    unit_of = {n.id: _unit(n, depth) for n in nodes}
    inputs = {i.name: i for i in dump.inputs} if depth is None else {}
    boxes: dict[str, _Box] = {}
    edges: list[tuple[str, str, int, int]] = []  # (source key, target key, node id, input index)
    members: dict[str, list[Node]] = {}
    for n in nodes:
        unit = unit_of[n.id]
        if unit.startswith("c:"):
            members.setdefault(unit, []).append(n)
            before = [boxes[unit].layer] if unit in boxes else [1]
            layer = max(before + [1 + boxes[unit_of[producers[a]]].layer for a in n.args if a in producers
                                  and unit_of[producers[a]] != unit and unit_of[producers[a]] in boxes])
            group = members[unit]
            title = (f"Cell {unit[2:]}: {len(group)} ops, collective bytes "
                     f"{sum(m.collective_bytes for m in group)}")
            boxes[unit] = _Box(unit, "/".join(unit[2:].split("/")[-2:]), f"{len(group)} ops, "
                               f"{human_bytes(sum(m.collective_bytes for m in group))} collectives",
                               "#f1f3f5", title, layer)
            for k, a in enumerate(n.args):
                if a in producers and unit_of[producers[a]] != unit:
                    edges.append((unit_of[producers[a]], unit, n.id, k))
            continue
        layer = 1 + max((boxes[unit_of[producers[a]]].layer for a in n.args if a in producers
                         and unit_of[producers[a]] in boxes), default=0)
        kind = n.provenance.kind if n.provenance else "default"
        out_moved = any(c.cause.startswith("redistribution of output") for c in n.collectives)
        title = (f"node {n.id} {n.instance_name} ({n.kind})\nscope {n.scope}\nstrategy {n.strategy_text or '-'}\n"
                 f"{n.provenance.text if n.provenance else ''}\ncollective bytes {n.collective_bytes}")
        segment = n.scope.strip("()").rsplit("/", 1)[-1] if "/" in n.scope else ""
        cell = segment if segment.split("-", 1)[0].isdigit() else segment.split("-", 1)[0]  # 0-Block, dense_q
        label = f"{cell}/{n.instance_name}" if cell and not cell.startswith("_") else n.instance_name
        boxes[f"n{n.id}"] = _Box(f"n{n.id}", label, n.strategy_text, PROVENANCE_COLORS.get(kind, "#fff"),
                                 title, layer, stroke="#c92a2a" if out_moved else "#495057")
        for k, a in enumerate(n.args):
            if a in producers:
                edges.append((unit_of[producers[a]], f"n{n.id}", n.id, k))
            elif a in inputs:
                edges.append((a, f"n{n.id}", n.id, k))
    for name, inp in inputs.items():
        consumers = [boxes[t].layer for s, t, _, _ in edges if s == name]
        if not consumers:
            continue
        layout = "(" + ", ".join(".".join(a) if a else "-" for a in inp.layout) + ")"
        boxes[name] = _Box(name, name.lstrip("%"), layout, "#f8f9fa", f"{inp.role} {name} {inp.type}\nlayout {layout}",
                           min(consumers) - 1)
    # order each layer by the mean position of its predecessors (one sweep down)
    layers: dict[int, list[_Box]] = {}
    for b in boxes.values():
        layers.setdefault(b.layer, []).append(b)
    preds: dict[str, list[str]] = {}
    for s, t, _, _ in edges:
        preds.setdefault(t, []).append(s)
    box_w, box_h, gap_x, gap_y = 150, 32, 14, 30
    for depth in sorted(layers):
        row = layers[depth]
        row.sort(key=lambda b: (sum(boxes[p].x for p in preds.get(b.key, [])) / len(preds[b.key])
                                if preds.get(b.key) else 0.0))
        for i, b in enumerate(row):
            b.x = i * (box_w + gap_x)
    width = max((len(r) for r in layers.values()), default=1) * (box_w + gap_x) + 20
    lo = min(layers, default=0)
    height = (max(layers, default=0) - lo + 1) * (box_h + gap_y) + 20
    y_of = lambda b: 10 + (b.layer - lo) * (box_h + gap_y)  # noqa: E731
    marked = {(unit_of[int(src[1:])] if src.startswith("n") and src[1:].isdigit() and int(src[1:]) in unit_of
               else src, nid, k): text for (src, nid, k), text in redistribution_labels(dump).items()}
    if depth is not None:  # one edge between two boxes, the one with a layout change if there is one
        first: dict[tuple[str, str], tuple[str, str, int, int]] = {}
        for e in edges:
            if (e[0], e[1]) not in first or (e[0], e[2], e[3]) in marked:
                first[(e[0], e[1])] = e
        edges = list(first.values())
    parts = [f'<svg class="gp-graph" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="10">',
             '<defs><marker id="gp-arrow" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="6" markerHeight="6" '
             'orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#868e96"/></marker></defs>']
    for s, t, nid, k in edges:
        a, b = boxes[s], boxes[t]
        x1, y1 = 10 + a.x + box_w / 2, y_of(a) + box_h
        x2, y2 = 10 + b.x + box_w / 2, y_of(b)
        changed = (s, nid, k) in marked
        style = 'stroke="#c92a2a" stroke-width="2" stroke-dasharray="5,3"' if changed else 'stroke="#adb5bd"'
        cls = "gp-edge gp-layout-change" if changed else "gp-edge"
        parts.append(f'<path class="{cls}" d="M{x1:.0f},{y1:.0f} C{x1:.0f},{y1 + gap_y:.0f} {x2:.0f},'
                     f'{y2 - gap_y:.0f} {x2:.0f},{y2:.0f}" fill="none" {style} marker-end="url(#gp-arrow)">'
                     f'<title>{escape(s)} \u2192 input {k} of node {nid}'
                     f'{" (layout change: " + escape(marked[(s, nid, k)]) + ")" if changed else ""}</title></path>')
        if changed:
            parts.append(f'<text class="gp-edge-label" x="{(x1 + x2) / 2 + 4:.0f}" y="{(y1 + y2) / 2 + 3:.0f}" '
                         f'fill="#c92a2a" font-size="9">{escape(marked[(s, nid, k)])}</text>')
    for b in boxes.values():
        x, y = 10 + b.x, y_of(b)
        label = b.label if len(b.label) <= 24 else b.label[:23] + "\u2026"
        sub = b.sub if len(b.sub) <= 26 else b.sub[:25] + "\u2026"
        parts.append(f'<g class="gp-node"><title>{escape(b.title)}</title><rect x="{x}" y="{y}" width="{box_w}" '
                     f'height="{box_h}" rx="4" fill="{b.fill}" stroke="{b.stroke}"/>'
                     f'<text x="{x + 5}" y="{y + 13}" font-weight="bold">{escape(label)}</text>'
                     f'<text x="{x + 5}" y="{y + 26}" fill="#495057">{escape(sub)}</text></g>')
    parts.append("</svg>")
    return "".join(parts)
