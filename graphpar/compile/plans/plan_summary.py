"""``PlanSummary``: a plan for a device count this machine need not have, and the ways to read it.

What ``plan_for_devices`` returns and ``graphpar plan`` prints: the planned graph on an abstract mesh with the cost
model's predictions per device and step. It reads as a table (:meth:`PlanSummary.text`, every op with
``max_rows=None``), as JSON (:meth:`PlanSummary.to_json`, ``graphpar plan --json``), and as the begin dump MindSpore
would write for rank 0 (:meth:`PlanSummary.dumps`, :meth:`PlanSummary.write_dump`, ``graphpar plan --dump DIR``), so
``graphpar ir summary|explain|html`` and notebooks (``_repr_html_``) show it with the same views as a real run's
dumps. There is no execute dump: nothing is lowered or compiled for devices that do not exist.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jax.sharding import AbstractMesh

from graphpar._context.state import AutoParallelContext
from graphpar.dump.loading import DumpSet
from graphpar.dump.reader import parse_text
from graphpar.dump.views import explain_data
from graphpar.dump.writer import PlanDescription, begin_texts, dump_index, dump_path, write_begin
from graphpar.ir.graph import Graph
from graphpar.ir.notebook import explore, html_of
from graphpar.planner.stages.report import FILE, PIPELINE, explain_text

_HEADER = ("node", "op", "kind", "strategy", "provenance", "collective B")


@dataclass
class PlanSummary:
    """A plan for ``devices`` devices and its predictions (per device, per step)."""

    devices: int
    parallel_mode: str
    search_mode: str
    mesh: AbstractMesh
    graph: Graph
    memory_bytes: float
    comm_bytes: float
    messages: int
    seconds: float  # tracing + planning
    per_node: dict[int, Any] = field(default_factory=dict)  # node id -> Cost
    memory_terms: str = "parameters + activations"  # what memory_bytes counts (the optimizer whose state it is)
    pctx: AutoParallelContext | None = None  # the settings planned under (the dump header's modes)
    stages: Any = None  # compile.plans.stage_profile.StageReport: the pipeline search (auto_pipeline=True)

    def _rows(self) -> list[tuple[str, ...]]:
        rows = []
        for node in self.graph.node_list():
            cost = self.per_node.get(node.id)
            rows.append((str(node.id), node.instance_name, node.kind, node.strategy.in_strategy_text(),
                         node.provenance.kind if node.provenance else "", f"{cost.comm_bytes:.0f}" if cost else ""))
        return rows

    def repeated_ops(self) -> list[tuple[str, int]]:
        """(instance name, devices its strategy splits the work over) of every op that uses fewer than all
        devices: the rest of the mesh repeats that op's work (MindSpore's repeated calculation)."""
        return [(n.instance_name, n.strategy.devices_used) for n in self.graph.node_list()
                if n.strategy is not None and n.strategy.devices_used < self.devices]

    def replica_note(self) -> str | None:
        """Said when ops leave devices over: a plan hinted for 8 devices and planned for 1,024 has its hinted ops
        computed 128 times over (replicas of the same values, not data parallelism)."""
        repeated = self.repeated_ops()
        if not repeated:
            return None
        shown = ", ".join(f"{name} on {used} (x{self.devices // used})" for name, used in repeated[:5])
        more = f" and {len(repeated) - 5} more" if len(repeated) > 5 else ""
        return (f"note: {len(repeated)} of {len(self.graph.node_list())} ops split their work over fewer than the "
                f"{self.devices} devices, the others repeating it (devices used, times repeated): {shown}{more}; "
                f"give their strategies for {self.devices} devices, or let AUTO_PARALLEL search")

    def text(self, max_rows: int | None = 60) -> str:
        """The plan as a table, every op when ``max_rows`` is None (``graphpar plan --all``)."""
        lines = [f"plan for {self.devices} devices ({self.parallel_mode}, search_mode={self.search_mode}); mesh "
                 + " ".join(f"{n}={s}" for n, s in self.mesh.shape.items())]
        rows = self._rows()
        if max_rows is not None and len(rows) > max_rows:
            rows = rows[:max_rows] + [("...", f"{len(rows) - max_rows} more ops (graphpar plan --all, or "
                                                f"text(max_rows=None))", "", "", "", "")]
        shown = [_HEADER] + rows
        widths = [max(len(r[i]) for r in shown) for i in range(len(_HEADER))]
        lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in shown]
        lines.append(f"predicted per device: peak memory {self.memory_bytes / 1024 ** 2:.2f} MiB ({self.memory_terms}"
                     f"), collective bytes per step {self.comm_bytes:.0f} in {self.messages} collectives")
        search = self.graph.plan.search
        if search is not None:
            p = search.problem
            lines.append(f"search: {p['variables']} variables ({p['repeated_groups']} repeated-layer groups), "
                         f"{p['choices']} choices, {p['edges']} edges; build {search.build_s:.2f} s, solve "
                         f"{search.solve_s:.2f} s, {'optimal' if search.optimal else 'gap %.3g' % search.gap}")
        note = self.replica_note()
        if note is not None:
            lines.append(note)
        if self.stages is not None:
            lines.append(self.stages.text())
        lines.append(f"traced and planned in {self.seconds:.2f} s")
        return "\n".join(lines)

    def summary(self) -> str:
        """Every op's strategy and the predictions (:meth:`text` without a row limit)."""
        return self.text(max_rows=None)

    def __str__(self) -> str:
        return self.text()

    def data(self) -> dict[str, Any]:
        """The plan as JSON-able data (``graphpar plan --json``): the settings, the mesh, one record per op and the
        predictions, with the search's figures when a search ran."""
        search = self.graph.plan.search
        return {
            "devices": self.devices, "parallel_mode": self.parallel_mode, "search_mode": self.search_mode,
            "mesh": dict(self.mesh.shape), "replica_note": self.replica_note(),
            "ops": [{"node": n.id, "instance_name": n.instance_name, "kind": n.kind, "scope": n.scope,
                     "strategy": [list(row) for row in n.strategy.in_strategy()],
                     "devices_used": n.strategy.devices_used,
                     "provenance": n.provenance.kind if n.provenance else None,
                     "predicted_collective_bytes": self.per_node[n.id].comm_bytes if n.id in self.per_node else None}
                    for n in self.graph.node_list()],
            "predicted": {"peak_memory_bytes": self.memory_bytes, "memory_terms": self.memory_terms,
                          "collective_bytes_per_step": self.comm_bytes, "collectives": self.messages},
            "search": None if search is None else {**search.problem, "build_s": search.build_s,
                                                   "solve_s": search.solve_s, "optimal": search.optimal,
                                                   "gap": search.gap},
            "pipeline": None if self.stages is None else self.stages.data(),
            "seconds": self.seconds,
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.data(), indent=indent)

    def _described(self) -> PlanDescription:
        if self.pctx is None:
            raise ValueError("this PlanSummary carries no parallel settings to describe its dump with; make it "
                             "with plan_for_devices or graphpar plan")
        return PlanDescription(self.pctx, self.devices)

    def dumps(self) -> DumpSet:
        """Rank 0's ``step_parallel_begin`` dump of the plan, parsed in memory (what ``graphpar ir`` reads), each
        op carrying the cost model's predicted collective bytes (``predicted_bytes``)."""
        text = begin_texts(self.graph, self._described(), [0], self._predicted())[0]
        index = dump_index(self.graph)
        begin = parse_text(text, str(dump_path("<plan_for_devices>", 0, "step_parallel_begin", index)))
        return DumpSet("<plan_for_devices>", index, begin, None, indexes=[index], ranks=[0])

    def _predicted(self) -> dict[int, float]:
        return {nid: cost.comm_bytes for nid, cost in self.per_node.items()}

    def write_dump(self, directory: str | Path) -> list[Path]:
        """Write rank 0's begin dump under ``directory/rank_0/`` (``graphpar plan --dump DIR``): the plan's global
        view is the same on every rank, and nothing is compiled, so there is no execute dump."""
        paths = write_begin(self.graph, self._described(), directory, [0], self._predicted())
        if self.stages is not None:  # the stage search beside it, for `graphpar ir explain DIR pipeline`
            path = paths[0].parent / FILE
            path.write_text(json.dumps(self.stages.data(), indent=1))
            paths.append(path)
        return paths

    def explain(self, op: str) -> str:
        """Why ``op`` (an instance name or node id) has its strategy: the chain back to the hint or default it
        came from, one line per op, as ``graphpar ir explain`` finds it. ``op="pipeline"``: why the stage search
        (``auto_pipeline=True``) chose its plan, against its runners-up."""
        if op == PIPELINE and self.stages is not None:
            return explain_text(self.stages.data())
        data = explain_data(self.dumps(), op)
        lines = [data["summary"]]
        for c in data["chain"]:
            p = c["provenance"]
            origin = "-" if p is None else p["text"] or p["kind"]
            cost = "" if c["edge_cost"] is None else f", redistribution {c['edge_cost']:g} B"
            lines.append(f"  node {c['node']} {c['instance_name']} ({c['kind']}, scope {c['scope']}): strategy "
                         f"{c['strategy']}, {origin}{cost}")
        return "\n".join(lines)

    def _repr_html_(self) -> str | None:
        """Notebooks: the views of the plan's begin dump (tables, charts, graph)."""
        return html_of(self.dumps())

    def explore(self, port: int | None = None) -> Any:
        """This plan in Model Explorer (``pip install ai-edge-model-explorer``), served on 127.0.0.1:``port`` (a
        free port when None), as ``PlanView.explore()`` shows a compiled plan: the graph nested by Cell scope,
        strategies and layouts on the ops, the cost model's predicted bytes as an overlay, redistributions on the
        edges. The result shows the view in a notebook (an iframe); ``.url`` opens it in a browser."""
        return explore(self.dumps(), port)
