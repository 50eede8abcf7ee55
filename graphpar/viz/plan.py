"""``PlanView``: one planned (and compiled) graph as its dumps describe it, for every rank, with views.

A PlanView holds :class:`graphpar.dump.loading.DumpSet` s (begin + execute dump of one graph, per rank): built in
memory by ``graphpar.parallel.plan`` (from the same text the dump writer writes) or read from a dump directory by
:meth:`PlanView.from_dumps`. Its text views are exactly what ``graphpar ir summary|explain|diff`` print (the same
renderers, :mod:`graphpar.viz.text`), its ``_repr_html_`` draws the tables, grids, charts and graph of
:mod:`graphpar.viz.html`.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from graphpar.dump.loading import DumpSet, load
from graphpar.dump.model import DumpError, layout_text
from graphpar.dump.views import diff_data, explain_data, find_op, show_data, summary_data
from graphpar.viz import html as views
from graphpar.viz.explorer_server import Explorer, serve
from graphpar.viz.grids import op_input_grids
from graphpar.viz.svg import bar_chart
from graphpar.viz.text import emit_table, fmt_strategy, mesh_words, print_diff, print_explain, print_summary


def _captured(render: Callable[..., None], *args: Any) -> str:
    """What a ``graphpar ir`` renderer prints (plain text, as when its output is not a terminal)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        render(*args)
    return out.getvalue()


class Report(str):
    """Text exactly as ``graphpar ir`` prints it (``print(report)``), its JSON-able ``data`` (``--json``), and an
    HTML table in notebooks."""

    data: Any

    def __new__(cls, text: str, data: Any, html: Callable[[], str]):
        self = super().__new__(cls, text)
        self.data = data
        self._html = html
        return self

    def _repr_html_(self) -> str:
        return self._html()

    def __repr__(self) -> str:
        # a terminal REPL shows a value's repr: the report as printed, not an escaped one-line string
        return str.__str__(self)


class Rows(list):
    """A list of dicts (one per row) that shows as a table in notebooks and as aligned text when printed."""

    def __init__(self, columns: list[str], rows: list[dict[str, Any]], title: str = ""):
        super().__init__(rows)
        self.columns, self.title = columns, title

    def __str__(self) -> str:
        return _captured(emit_table, self.columns, [[views.cell_text(r.get(c)) for c in self.columns]
                                                         for r in self], self.title or None)

    def _repr_html_(self) -> str:
        return views.rows_html(self.columns, self)


class PlanView:
    """The dumps of one graph on every rank. ``rank`` picks the rank the views show by default (lowest)."""

    def __init__(self, sets: Mapping[int, DumpSet], source: str, xla_memory: Mapping[str, int] | None = None):
        if not sets:
            raise DumpError(source, "a plan needs the dumps of at least one rank")
        self.sets = dict(sorted(sets.items()))
        self.source = source
        self.xla_memory = dict(xla_memory) if xla_memory is not None else None

    @classmethod
    def from_dumps(cls, path: str | Path, index: int | None = None) -> "PlanView":
        """The plan of graph ``index`` (default: the newest train graph) from an ``ir_dumps`` directory (every
        ``rank_R`` in it), a ``rank_R`` directory or one dump file."""
        first = load(path, index)
        ranks = first.ranks or [first.rank if first.rank is not None else 0]
        sets = {first.rank if first.rank is not None else ranks[0]: first}
        for r in ranks:
            if r not in sets:
                sets[r] = load(path, first.index, r)
        return cls(sets, str(path))

    # --- selection ---------------------------------------------------------------------------------------------
    @property
    def ranks(self) -> list[int]:
        return list(self.sets)

    def dumps(self, rank: int | None = None) -> DumpSet:
        """The begin and execute dumps of ``rank`` (default: the lowest rank)."""
        chosen = self.ranks[0] if rank is None else rank
        if chosen not in self.sets:
            raise DumpError(self.source, f"no rank {rank} in this plan; ranks: {', '.join(map(str, self.ranks))}")
        return self.sets[chosen]

    @property
    def graph(self) -> str:
        return self.dumps().main.graph

    # --- the views ---------------------------------------------------------------------------------------------
    def summary(self, rank: int | None = None, wide: bool = False) -> Report:
        """One row per op (strategy, provenance, per-device shapes, collectives, bytes): ``graphpar ir summary``
        (``wide``: ``--wide``, one line per op)."""
        dset = self.dumps(rank)
        data = summary_data(dset)
        return Report(_captured(print_summary, data, wide), data,
                      lambda: views.wrap(views.header(dset.main) + views.op_table(dset.begin, dset.execute)))

    def explain(self, op: str, rank: int | None = None) -> Report:
        """Why ``op`` (an instance name, ``SCOPE/instance`` or ``node:N``) has its strategy: the provenance chain
        back to a user hint or a default, with edge costs (``graphpar ir explain``), and where its inputs live."""
        dset = self.dumps(rank)
        data = explain_data(dset, op)

        def html() -> str:
            node = find_op(dset, op)
            rows = [[str(c["node"]), views.escape(c["instance_name"]), views.escape(c["kind"]),
                     views.code_cell(fmt_strategy(c["strategy"])),
                     views.escape(c["provenance"]["text"] if c["provenance"] else "-"),
                     "" if c["edge_cost"] is None else f"{c['edge_cost']:g} B"] for c in data["chain"]]
            grids = op_input_grids(node, dset.begin) if dset.begin is not None else ""
            colls = "<br>".join(views.escape(views.collective_text(c)) for c in node.collectives)
            return views.wrap(f"<p><b>{views.escape(data['summary'])}</b></p>"
                              + views.table(["node", "op", "kind", "strategy", "provenance", "edge cost"], rows)
                              + f"<p>redistribution cost along the chain: {data['total_cost']:g} B per device</p>"
                              + (f"<h4>collectives of {views.escape(node.instance_name)}</h4><p>{colls}</p>"
                                 if colls else "")
                              + f"<h4>where its inputs live</h4>{grids}")

        return Report(_captured(print_explain, data), data, html)

    def diff(self, other: "PlanView", show_all: bool = False, rank: int | None = None) -> Report:
        """Ops whose strategy or collective bytes differ between this plan (A) and ``other`` (B):
        ``graphpar ir diff``."""
        a, b = self.dumps(rank), other.dumps(rank)
        data = diff_data(a, b)
        return Report(_captured(print_diff, data, show_all), data, lambda: views.wrap(diff_views(a, b, data)))

    def collectives(self, rank: int | None = None) -> Rows:
        """Every collective of the compiled step on ``rank``: the op it belongs to, kind, pass, cause, group,
        bytes (empty when the plan was not compiled)."""
        dset = self.dumps(rank)
        rows = []
        if dset.execute is not None:
            for node in dset.execute.nodes:
                rows += [_collective_row(c, node.instance_name) for c in node.collectives]
            rows += [_collective_row(c, "(not attributed)") for c in dset.execute.unattributed]
        return Rows(["op", "node", "kind", "op_reduce", "pass", "cause", "group", "bytes", "types"], rows,
                    f"collectives (rank {dset.main.rank})")

    def memory(self, rank: int | None = None) -> Rows:
        """Bytes of every parameter, state and batch input: global and on this rank's device (from the layouts),
        then totals per role; with XLA's own figures for the compiled step when the plan was built in memory."""
        dset = self.dumps(rank)
        begin, execute = dset.begin, dset.execute
        per_device = {i.name: i for i in execute.inputs} if execute is not None else {}
        rows, totals = [], {}
        for inp in (begin or execute).inputs:
            glob = _nbytes(inp.type.dtype, inp.type.shape)
            if inp.name in per_device:
                local_shape = per_device[inp.name].type.shape
            else:
                local_shape = tuple(s // w if w else s for s, w in zip(inp.type.shape, inp.split))
            local = _nbytes(inp.type.dtype, local_shape)
            rows.append({"name": inp.name, "role": inp.role, "dtype": inp.type.dtype, "shape": inp.type.shape,
                         "layout": layout_text(inp.layout), "device_shape": local_shape,
                         "bytes": glob, "device_bytes": local})
            t = totals.setdefault(inp.role, [0, 0])
            t[0] += glob
            t[1] += local
        for role, (glob, local) in totals.items():
            rows.append({"name": f"total {role}", "role": role, "bytes": glob, "device_bytes": local})
        for key, value in (self.xla_memory or {}).items():
            rows.append({"name": f"XLA {key}", "role": "compiled step", "device_bytes": value})
        return Rows(["name", "role", "dtype", "shape", "layout", "device_shape", "bytes", "device_bytes"], rows,
                    f"memory (rank {dset.main.rank}, bytes)")

    def explore(self, rank: int | None = None, port: int | None = None) -> Explorer:
        """This plan in Model Explorer (``pip install ai-edge-model-explorer``), served on 127.0.0.1: every rank's
        graph (or ``rank``'s) nested by Cell scope, strategies, layouts and bytes on the ops, redistributions on the
        edges. Shows itself in a notebook (an iframe); ``.url`` opens it in a browser."""
        return serve([self.dumps(rank)] if rank is not None else [self.dumps(r) for r in self.ranks], port)

    def to_json(self, indent: int | None = 2) -> str:
        """Everything as JSON: the summary of the default rank and every dump of every rank (``graphpar ir
        show --json`` per file)."""
        data = {"source": self.source, "graph": self.graph, "summary": self.summary().data,
                "ranks": {str(r): {"begin": show_data(d.begin) if d.begin else None,
                                   "execute": show_data(d.execute) if d.execute else None}
                          for r, d in self.sets.items()},
                "xla_memory": self.xla_memory}
        return json.dumps(data, indent=indent)

    def _repr_html_(self) -> str:
        dset = self.dumps()
        return views.wrap(views.dump_views(dset.begin, dset.execute))

    def __repr__(self) -> str:
        main = self.dumps().main
        mesh = mesh_words({"mesh": main.mesh, "parallel_mode": main.parallel_mode, "n_ranks": main.n_ranks})
        return (f"<PlanView {main.graph} ({main.purpose}) on {main.n_ranks} devices, {main.parallel_mode}, "
                f"{len(main.nodes)} ops, {mesh}>")


def _nbytes(dtype: str, shape: tuple[int, ...]) -> int:
    size = {"Float64": 8, "Int64": 8, "UInt64": 8, "Float16": 2, "BFloat16": 2, "Int16": 2, "UInt16": 2,
            "Bool": 1, "Int8": 1, "UInt8": 1}.get(dtype, 4)
    n = 1
    for s in shape:
        n *= s
    return n * size


def _collective_row(c, op: str) -> dict[str, Any]:
    return {"op": op, "node": c.node, "kind": c.kind, "op_reduce": c.op, "pass": c.pass_, "cause": c.cause,
            "group": "-".join(map(str, c.group)), "bytes": c.bytes,
            "types": ", ".join(str(tuple(t.shape)) for t in c.output_types)}


def diff_views(a: DumpSet, b: DumpSet, data: Mapping[str, Any]) -> str:
    """The diff table (ops whose strategy or bytes changed, then the others), a bytes chart A vs B per op."""
    rows, classes, chart = [], [], []
    for o in data["ops"]:
        ba, bb = o["collective_bytes_a"], o["collective_bytes_b"]
        delta = o["collective_bytes_delta"]
        rows.append([views.escape(o["instance_name"]), views.escape(o["kind"]), views.escape(o["status"]),
                     views.code_cell(fmt_strategy(o["strategy_a"])),
                     views.code_cell(fmt_strategy(o["strategy_b"])),
                     "-" if ba is None else str(ba), "-" if bb is None else str(bb),
                     "-" if delta is None else f"{delta:+d}", views.escape(o["scope"])])
        classes.append("diff-row " + ("gp-user" if o["status"] != "same" or delta else ""))
        if ba or bb:
            chart.append((f"{o['instance_name']} ({o['status']})", {"A": ba or 0, "B": bb or 0}))
    ta, tb = data["total_collective_bytes_a"], data["total_collective_bytes_b"]

    def side(d: DumpSet, name: str) -> str:
        m = d.main
        return (f"<p class=\"gp-meta\"><b>{name}</b>: <code>{views.escape(d.source)}</code> graph "
                f"{views.escape(m.graph)}, rank {m.rank}, {views.escape(m.parallel_mode)} / "
                f"{views.escape(m.search_mode)}, mesh {views.escape(str(m.mesh))}</p>")

    return (side(a, "A") + side(b, "B")
            + views.table(["op", "kind", "status", "strategy A", "strategy B", "bytes A", "bytes B", "delta", "scope"],
                          rows, css_class="gp-table diff-table", row_classes=classes)
            + f"<p>total collective bytes per step: A {ta if ta is not None else '-'}, "
              f"B {tb if tb is not None else '-'}</p>"
            + _grouped_chart(chart))


def _grouped_chart(rows: list) -> str:
    if not rows:
        return "<p>no collectives in either plan</p>"
    split = [(f"{label} A", {"A": v["A"]}) for label, v in rows]
    both = []
    for (label, v), a in zip(rows, split):
        both += [a, (f"{label} B", {"B": v["B"]})]
    return bar_chart(both, "collective bytes per op, A vs B")
