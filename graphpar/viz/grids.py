"""Device grids: which device holds which block of a tensor, for graph inputs, op inputs and every value of a plan.

A grid is an HTML table drawn to the tensor's proportions, one cell per block listing the ranks that hold it, with
a legend of the mesh axes that split each dimension (:mod:`graphpar.viz.blocks` computes the blocks from the layout
and the mesh alone). :func:`value_grids` draws one for every value of a begin dump: each graph input in the layout
it is stored in, each op output in the layout the op leaves it in (the dump's ``out_layouts``), and, where an op
reads a value in another layout (a redistribution), that layout too, grouped by the Cell that makes the value.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from html import escape

from graphpar.dump.model import Dump, Node, layout_text
from graphpar.viz.blocks import block_holders, splits

MAX_BLOCKS = 256  # a grid of more blocks is described, not drawn (a 1,024-device plan's fully split value)
MAX_CELL_RANKS = 8  # a cell lists at most this many ranks; its title and data-devices list them all


def _hue(index: Sequence[int], ways: Sequence[int]) -> str:
    flat, total = 0, 1
    for i, w in zip(index, ways):
        flat, total = flat * w + i, total * w
    return f"hsl({int(360 * flat / max(total, 1)) % 360},60%,{82 if total > 1 else 92}%)"


def _range(b: int, size: int, w: int) -> str:
    step = size // w
    return f"{b * step}:{(b + 1) * step}"


def _axes_words(layout: Sequence[Sequence[str]], shape: Sequence[int], mesh: Mapping[str, int]) -> str:
    """The mesh-axis legend of a grid: which axes split each dimension, and over which the blocks are replicas."""
    used = {a for axes in layout for a in axes}
    dims = []
    for d, (axes, size) in enumerate(zip(layout, shape)):
        if axes:
            ways = math.prod(mesh.get(a, 1) for a in axes)
            dims.append(f"dim {d} ({size}): {ways} ways over " + " \u00d7 ".join(f"{a}={mesh.get(a, 1)}" for a in axes))
        else:
            dims.append(f"dim {d} ({size}): whole")
    spare = [f"{a}={n}" for a, n in mesh.items() if a not in used and n > 1]
    return "; ".join(dims) + ("; each block replicated over " + " \u00d7 ".join(spare) if spare else "")


def _cell_ranks(ranks: Sequence[int]) -> str:
    if len(ranks) <= MAX_CELL_RANKS:
        return ", ".join(map(str, ranks))
    return ", ".join(map(str, ranks[:MAX_CELL_RANKS - 1])) + f", \u2026 ({len(ranks)} devices)"


def device_grid(name: str, shape: Sequence[int], layout: Sequence[Sequence[str]], mesh: Mapping[str, int],
                attrs: str = "") -> str:
    """Which device holds which block of a tensor: one cell per block (rows: dimension -2, columns: the last
    dimension), listing the ranks that hold it, drawn to the tensor's proportions (a (64, 16) tensor's grid is four
    times as tall as wide, within 24..160 px), with the mesh axes that split each dimension; a tensor of more than
    two dimensions is drawn as one grid per block of its leading dimensions. Cells carry ``data-block`` and
    ``data-devices``; more than :data:`MAX_BLOCKS` blocks are described in words instead."""
    holders = block_holders(shape, layout, mesh)
    ways = splits(layout, mesh)
    nd = len(shape)
    per_block = [s // w for s, w in zip(shape, ways)]
    head = (f'<div class="gp-grid" data-tensor="{escape(name)}"{attrs}><div><b>{escape(name)}</b> '
            f'<code>{escape(str(tuple(shape)))}</code> layout <code>{escape(layout_text(tuple(map(tuple, layout))))}'
            f'</code> \u2192 blocks <code>{escape(str(tuple(per_block)))}</code>, '
            f'{math.prod(ways)} block(s), each on {len(next(iter(holders.values())))} device(s)</div>'
            f'<div class="gp-small">{escape(_axes_words(layout, shape, mesh))}</div>')
    if math.prod(ways) > MAX_BLOCKS:
        return head + (f'<div class="gp-small">{math.prod(ways)} blocks: too many to draw (more than {MAX_BLOCKS});'
                       " rank r holds the block its mesh coordinates index, major axis first</div></div>")
    lead = ways[:-2] if nd > 2 else ()
    grids = []
    lead_indices = [()] if not lead else sorted({k[:len(lead)] for k in holders})
    rows_n = shape[-2] if nd >= 2 else 1
    cols_n = shape[-1] if nd >= 1 else 1
    scale = 160 / max(rows_n, cols_n, 1)
    grid_w, grid_h = max(24, round(cols_n * scale)), max(24, round(rows_n * scale))
    for li in lead_indices:
        rows_w = ways[-2] if nd >= 2 else 1
        cols_w = ways[-1] if nd >= 1 else 1
        trs = []
        for r in range(rows_w):
            tds = []
            for c in range(cols_w):
                index = li + ((r, c) if nd >= 2 else (c,) if nd == 1 else ())
                ranks = holders[index]
                rng = ", ".join(_range(b, s, w) for b, s, w in zip(index, shape, ways))
                tds.append(f'<td class="gp-block" style="background:{_hue(index, ways)};width:{grid_w / cols_w:.0f}px;'
                           f'height:{grid_h / rows_w:.0f}px" '
                           f'data-block="{",".join(map(str, index))}" data-devices="{",".join(map(str, ranks))}" '
                           f'title="block {index} = [{rng}] on devices {", ".join(map(str, ranks))}">'
                           f'{_cell_ranks(ranks)}</td>')
            trs.append("<tr>" + "".join(tds) + "</tr>")
        caption = ""
        if lead:
            caption = ("<div class=\"gp-small\">[" + ", ".join(_range(b, s, w) for b, s, w in
                                                          zip(li, shape, ways)) + ", \u2026]</div>")
        grids.append(f'<div>{caption}<table class="gp-blocks">{"".join(trs)}</table></div>')
    return head + f'<div style="display:flex;gap:8px;flex-wrap:wrap">{"".join(grids)}</div></div>'


def input_grids(begin: Dump) -> str:
    """A device grid for every graph input (parameters, state, batch) of a begin dump."""
    cells = []
    for inp in begin.inputs:
        if len(inp.layout) != len(inp.type.shape):
            continue
        cells.append(device_grid(f"{inp.role} {inp.name}", inp.type.shape, inp.layout, begin.mesh))
    return f'<div class="gp-grids">{"".join(cells)}</div>' if cells else "<p>no inputs</p>"


def op_input_grids(node: Node, begin: Dump) -> str:
    """Device grids for the inputs of one op, in the layouts the op uses them in."""
    twin = begin.node(node.id) or node
    cells = [device_grid(f"input {k} {arg}", t.shape, lay, begin.mesh)
             for k, (arg, t, lay) in enumerate(zip(twin.args, twin.input_types, twin.in_layouts))
             if len(lay) == len(t.shape)]
    return f'<div class="gp-grids">{"".join(cells)}</div>'


def _cell_of(scope: str) -> str:
    parts = [p for p in scope.strip("()").split("/") if p]
    return "/".join(parts[1:] if parts[:1] == ["Default"] else parts) or "(top)"


def value_grids(begin: Dump) -> str:
    """A device grid for every value of a begin dump (global shapes), grouped by the Cell that makes it: graph
    inputs in their stored layout, op outputs in the layout the op leaves them in, and every other layout an op
    reads a value in (where the plan redistributes it), named by that op. Each grid carries ``data-value`` (the
    value's name) and ``data-layout``; a dump without ``out_layouts`` (written before they were) draws its op
    outputs in the layout their first reader uses them in, and says so."""
    readers: dict[str, list[tuple[Node, int]]] = {}
    for node in begin.nodes:
        for k, arg in enumerate(node.args):
            readers.setdefault(arg, []).append((node, k))
    groups: dict[str, list[str]] = {}

    def add(cell: str, value: str, title: str, shape: Sequence[int], layout: Sequence[Sequence[str]],
            seen: set[tuple]) -> None:
        key = tuple(map(tuple, layout))
        if len(layout) != len(shape) or key in seen:
            return
        seen.add(key)
        attrs = f' data-value="{escape(value)}" data-layout="{escape(layout_text(key))}"'
        groups.setdefault(cell, []).append(device_grid(title, shape, layout, begin.mesh, attrs))

    def add_reads(cell: str, value: str, shape: Sequence[int], seen: set[tuple]) -> None:
        for reader, k in readers.get(value, []):
            if k < len(reader.in_layouts):
                add(cell, value, f"{value} as input {k} of {reader.instance_name} (node {reader.id})", shape,
                    reader.in_layouts[k], seen)

    for inp in begin.inputs:
        seen: set[tuple] = set()
        cell = _cell_of(readers[inp.name][0][0].scope) if inp.name in readers else "(top)"
        add(cell, inp.name, f"{inp.role} {inp.name}", inp.type.shape, inp.layout, seen)
        add_reads(cell, inp.name, inp.type.shape, seen)
    for node in begin.nodes:
        cell = _cell_of(node.scope)
        for j, (out, t) in enumerate(zip(node.outputs, node.output_types)):
            seen = set()
            if j < len(node.out_layouts):
                add(cell, out, f"{out} = output {j} of {node.instance_name} (node {node.id})", t.shape,
                    node.out_layouts[j], seen)
            add_reads(cell, out, t.shape, seen)
    if not groups:
        return "<p>no values</p>"
    note = "" if any(n.out_layouts for n in begin.nodes) or not begin.nodes else (
        '<p class="gp-small">this dump has no out_layouts (written by an older graphpar): op outputs are drawn in '
        "the layouts their readers use</p>")
    order = {cell: k for k, cell in reversed(list(enumerate(_cell_of(n.scope) for n in begin.nodes)))}
    sections = "".join(f'<details class="gp-values" data-cell="{escape(cell)}"><summary>{escape(cell)}: '
                       f'{len(grids)} grid(s)</summary><div class="gp-grids">{"".join(grids)}</div></details>'
                       for cell, grids in sorted(groups.items(), key=lambda g: order.get(g[0], -1)))
    return note + sections
