"""Writers of MindSpore-style IR dumps, one file per rank this process drives.

``rank_{r}/step_parallel_begin_{NNNN}.ir``: the planned graph with *global* shapes, each node's strategy (user hint
or chosen), its provenance and device matrix, and the storage layout of every parameter and input.
``rank_{r}/{NN}_execute_{NNNN}.ir``: the same nodes with *per-device* shapes of rank ``r``, and after each node the
collectives XLA compiled for it (kind, reduction, the group containing rank ``r``, bytes, forward/backward), found
through the HLO op metadata (``graphpar.dump.hlo``). ``NNNN`` counts graphs in this process; ``NN`` is the stage
number of the compiled program in graphpar's pipeline. The format is documented in docs/ir_format.md and read back
by ``graphpar.dump.reader``.
"""

from __future__ import annotations

import itertools
import os
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from graphpar import _context
from graphpar._context import AutoParallelContext
from graphpar.communication.devices import local_ranks
from graphpar.dump import auto_parallel_begin
from graphpar.dump.format import (
    FORMAT_VERSION, attrs_text, local_shape, mesh_text, outputs_lhs, primitive_attrs, spec_text, split_text,
    tensor_type, value_ref)
from graphpar.dump.hlo import Collective, parse_collectives
from graphpar.ir.graph import Graph, Node
from graphpar.planner.predict import predicted_costs
from graphpar.planner.search.report import search_lines
from graphpar.planner.wire import wire_bytes

class DumpedPlan(Protocol):
    """What the writers read of the plan a graph runs under: the job's parallel settings (the header's
    ``parallel_mode`` and ``search_mode``), its rank count ``n``, its ``devices`` (rank ``r`` runs on
    ``devices[r]``; this process writes the ranks whose devices it drives) and whether it runs eagerly (PYNATIVE:
    nothing to dump). ``graphpar.compile``'s execution plans are such plans; :class:`PlanDescription` describes
    any other (a pipeline stage, a graph shown in a notebook)."""

    @property
    def pctx(self) -> AutoParallelContext: ...

    @property
    def n(self) -> int: ...

    @property
    def devices(self) -> Sequence[Any]: ...

    @property
    def pynative(self) -> bool: ...


@dataclass(frozen=True)
class PlanDescription:
    """A :class:`DumpedPlan` spelled out: for a graph the writers describe without an execution plan of its own."""

    pctx: AutoParallelContext
    n: int
    devices: Sequence[Any] = ()
    pynative: bool = False


_counter = itertools.count()
EXECUTE_STAGE = 18  # graphpar's pipeline: trace, passes, lower, compile ... the executable is stage 18 as in MindSpore


_indexes: dict[int, int] = {}  # id(graph) -> its NNNN, while the graph lives


def dump_index(graph: Graph) -> int:
    """The graph's NNNN: assigned once per graph object when first dumped, shared by its begin and execute dumps.
    The number belongs to the dumps (graphs never dumped take none), so the writer keeps it, not the graph."""
    key = id(graph)
    index = _indexes.get(key)
    if index is None:
        index = _indexes[key] = next(_counter)
        weakref.finalize(graph, _indexes.pop, key, None)
    return index


def _enabled() -> bool:
    return _context.current().save_graphs > 0


def _ranks(plan: DumpedPlan) -> list[int]:
    if plan.pynative:
        return []
    return local_ranks(list(plan.devices))


def _header(kind: str, graph: Graph, plan: DumpedPlan, rank: int, note: str) -> list[str]:
    pctx = plan.pctx
    mesh = graph.plan.mesh
    passes = " ".join(f"{k}={v * 1000:.1f}ms" for k, v in graph.plan.pass_seconds.items())
    return [f"# graphpar IR dump: {kind}",
            f"# format: graphpar-ir {FORMAT_VERSION}",
            f"# graph: {graph.name}  purpose: {graph.plan.purpose}",
            f"# rank: {rank} of {plan.n}  ({note})",
            f"# parallel_mode: {pctx.parallel_mode}  search_mode: {pctx.search_mode}",
            f"# mesh: {mesh_text(mesh)}",
            f"# passes: {passes}"] + ([f"# note: {graph.plan.note}"] if graph.plan.note else []) + [""]


def _input_lines(graph: Graph, per_device: bool) -> list[str]:
    mesh = graph.plan.mesh
    specs = graph.plan.value_specs
    lines = ["# inputs"]
    for vid in graph.inputs:
        v = graph.values[vid]
        spec = specs.get(vid, tuple(() for _ in v.shape))
        shape = local_shape(v.shape, spec, mesh) if per_device and v.is_array else v.shape
        role = {"param": "Parameter", "state": "State", "input": "Data"}.get(v.kind, v.kind)
        lines.append(f"{value_ref(v)} = {role}() : {tensor_type(v.dtype, shape)}  # layout: {spec_text(spec)}  "
                     f"# split: {split_text(spec, mesh)}")
    return lines + [""]


def _node_line(graph: Graph, node: Node, per_device: bool, predicted: float | None = None) -> str:
    mesh = graph.plan.mesh
    s = node.strategy
    ins, outs = [], []
    for i, vid in enumerate(node.inputs):
        v = graph.values[vid]
        shape = local_shape(v.shape, s.input_spec(i), mesh) if per_device and v.is_array else v.shape
        ins.append(tensor_type(v.dtype, shape))
    for j, vid in enumerate(node.outputs):
        v = graph.values[vid]
        shape = local_shape(v.shape, s.output_spec(j), mesh) if per_device and v.is_array else v.shape
        outs.append(tensor_type(v.dtype, shape))
    prim_attrs = primitive_attrs(node)
    args = ", ".join(value_ref(graph.values[v]) for v in node.inputs)
    layouts = "; ".join(spec_text(s.input_spec(i)) for i in range(len(node.inputs)))
    out_layouts = "; ".join(spec_text(s.output_spec(j)) for j in range(len(node.outputs)))
    return (f"{outputs_lhs(graph, node.outputs)} = {node.kind}({args}) {{instance name: {node.instance_name}}} "
            f"primitive_attrs: {attrs_text(prim_attrs)} {{in_strategy: {s.in_strategy_text()}}} : "
            f"({', '.join(ins)}) -> ({', '.join(outs)})  # scope: ({node.scope})  # node: {node.id}  "
            f"# provenance: {node.provenance.text(graph)}  # device_matrix: {tuple(s.device_matrix())}  "
            f"# in_layouts: {layouts}  # out_layouts: {out_layouts}"
            + ("" if predicted is None else f"  # predicted_bytes: {predicted:g}"))


def dump_path(directory: str | os.PathLike, rank: int, kind: str, index: int) -> Path:
    """Where the ``kind`` (``step_parallel_begin`` / ``execute``) dump of graph ``index`` for ``rank`` goes."""
    name = (f"step_parallel_begin_{index:04d}.ir" if kind == "step_parallel_begin"
            else f"{EXECUTE_STAGE:02d}_execute_{index:04d}.ir")
    return Path(directory) / f"rank_{rank}" / name


def begin_texts(graph: Graph, plan: DumpedPlan, ranks: list[int],
                predicted: Mapping[int, float] | None = None) -> dict[int, str]:
    """The text of the begin dump of ``graph`` for each rank (what :func:`write_begin` writes, what the reader
    parses; ``graphpar.parallel.plan`` parses it in memory). ``predicted``: the cost model's collective wire bytes
    per node id, written on each op (``plan_for_devices``, whose plan is never compiled into an execute dump)."""
    body = _input_lines(graph, per_device=False)
    body += [_node_line(graph, n, per_device=False, predicted=None if predicted is None else predicted.get(n.id, 0.0))
             for n in graph.node_list()]
    body.append("return " + ", ".join(value_ref(graph.values[v]) for v in graph.outputs))
    for conflict in graph.plan.param_conflicts:
        body.append(f"# parameter conflict: {conflict['parameter']} stored as {spec_text(conflict['chosen'])}; "
                    f"wanted by " + ", ".join(f"{name} (node {nid}) as {spec_text(spec)}"
                                              for name, nid, spec in conflict["wanted"])
                    + f"; redistribution {conflict['cost_bytes']:g} B per device")
    body += search_lines(graph)
    return {rank: "\n".join(_header("step_parallel_begin", graph, plan, rank, "global shapes") + body) + "\n"
            for rank in ranks}


def write_begin(graph: Graph, plan: DumpedPlan, directory: str | os.PathLike, ranks: list[int],
                predicted: Mapping[int, float] | None = None) -> list[Path]:
    index = dump_index(graph)
    written = []
    for rank, text in begin_texts(graph, plan, ranks, predicted).items():
        path = dump_path(directory, rank, "step_parallel_begin", index)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    auto_parallel_begin.write(graph, plan.pctx.parallel_mode, directory, ranks, index)  # MindSpore's form beside it
    return written


def _collective_line(c: Collective, k: int, rank: int, node: Node | None, graph: Graph,
                     parameters: tuple[str, ...] = ()) -> str:
    group = c.group_of(rank)
    attrs = {"op": c.reduce_op or None, "group_ranks": "-".join(str(r) for r in group), "rank_list": group,
             "bytes": c.nbytes, "wire_bytes": wire_bytes(c.kind, c.nbytes, len(group)),
             "pass": "backward" if c.backward else "forward",
             "cause": "gradient reduction" if parameters else _cause(c), "hlo": c.name}
    if parameters:
        attrs["parameters"] = " ".join(parameters)
    if not c.reduce_op:
        del attrs["op"]
    types = ", ".join(tensor_type_from_hlo(dt, shape) for dt, shape in c.shapes)
    owner = f"{node.instance_name}" if node is not None else "unattributed"
    src = ""
    if node is not None:
        if c.pin.startswith("in") and int(c.pin[2:]) < len(node.inputs):
            src = value_ref(graph.values[node.inputs[int(c.pin[2:])]])
        elif node.outputs:
            src = value_ref(graph.values[node.outputs[0]])
    scope = node.scope if node is not None else ""
    nid = node.id if node is not None else "-"
    return (f"%c{k} = {c.kind}({src}) {{instance name: {'backward' if c.backward else 'forward'}_op_{owner}_{k}}} "
            f"primitive_attrs: {attrs_text(attrs)} : ({types}) -> ({types})  # scope: ({scope})  # node: {nid}")


def _cause(c: Collective) -> str:
    if c.pin.startswith("in"):
        return f"redistribution of input {c.pin[2:]}"
    if c.pin.startswith("out"):
        return f"redistribution of output {c.pin[3:]}"
    return "operator"


_HLO_TO_MS = {"f32": "Float32", "f16": "Float16", "bf16": "BFloat16", "f64": "Float64", "s32": "Int32",
              "s64": "Int64", "u8": "UInt8", "u32": "UInt32", "pred": "Bool", "s8": "Int8"}


def tensor_type_from_hlo(dtype: str, shape: tuple[int, ...]) -> str:
    return f"<Tensor[{_HLO_TO_MS.get(dtype, dtype)}], {tuple(shape)}>"


def _fused_gradients(c: Collective, graph: Graph) -> tuple[str, ...]:
    """The Parameters a fused (tuple) backward AllReduce carries the gradients of: XLA's combiner merges the
    data-parallel gradient reductions of many parameters into one collective; it belongs to all of them."""
    if c.kind != "AllReduce" or not c.backward or len(c.shapes) < 2:
        return ()
    names = []
    for nid in c.nodes:
        node = graph.nodes.get(nid)
        for vid in node.inputs if node is not None else ():
            value = graph.values[vid]
            if value.kind == "param" and value.name not in names:
                names.append(value.name)
    return tuple(names)


def _predicted(graph: Graph, plan: DumpedPlan) -> dict[int, float]:
    """Per node, the cost model's predicted collective wire bytes (``graphpar.planner.predict``)."""
    costs = predicted_costs(graph, plan.pctx.parallel_mode, plan.n, graph.plan.purpose == "train")
    return {nid: c.comm_bytes for nid, c in costs.items()}


def execute_texts(graph: Graph, plan: DumpedPlan, hlo_text: str, ranks: list[int], rank_offset: int = 0,
                  program_devices: int | None = None) -> dict[int, str]:
    """The text of the execute dump of ``graph`` compiled to ``hlo_text``, for each rank.

    ``rank_offset``/``program_devices``: a program compiled for a group of ``program_devices`` consecutive ranks
    from ``rank_offset`` (a pipeline stage); its HLO numbers devices from 0."""
    collectives = parse_collectives(hlo_text, program_devices or plan.n)
    for c in collectives:
        c.groups = [[r + rank_offset for r in g] for g in c.groups]
    predicted = _predicted(graph, plan)
    by_node: dict[int, list[Collective]] = {}
    loose, fused = [], []
    for c in collectives:
        owners = [n for n in c.nodes if n in graph.nodes]
        carried = _fused_gradients(c, graph)
        if carried:
            fused.append((c, carried))
        elif owners:
            by_node.setdefault(owners[-1], []).append(c)
        else:
            loose.append(c)
    texts = {}
    for rank in ranks:
        lines = _header("execute", graph, plan, rank, "per-device shapes of this rank") + _input_lines(graph, True)
        k = itertools.count()
        total, wire = 0, 0.0
        for node in graph.node_list():
            lines.append(_node_line(graph, node, per_device=True, predicted=predicted.get(node.id, 0.0)))
            for c in by_node.get(node.id, []):
                lines.append(_collective_line(c, next(k), rank, node, graph))
                total += c.nbytes
                wire += wire_bytes(c.kind, c.nbytes, len(c.group_of(rank)))
        if fused:
            lines.append("# gradient reductions (one fused AllReduce carries the gradients of several parameters)")
            for c, carried in fused:
                lines.append(_collective_line(c, next(k), rank, None, graph, carried))
                total += c.nbytes
                wire += wire_bytes(c.kind, c.nbytes, len(c.group_of(rank)))
        if loose:
            lines.append("# collectives not attributed to an op (optimizer update, input placement)")
            for c in loose:
                lines.append(_collective_line(c, next(k), rank, None, graph))
                total += c.nbytes
                wire += wire_bytes(c.kind, c.nbytes, len(c.group_of(rank)))
        lines.append(f"# total collective bytes per step (rank {rank}): {total}  # wire: {wire:g}  "
                     f"# predicted: {sum(predicted.values()):g}")
        texts[rank] = "\n".join(lines) + "\n"
    return texts


def write_execute(graph: Graph, plan: DumpedPlan, hlo_text: str, directory: str | os.PathLike,
                  ranks: list[int], rank_offset: int = 0, program_devices: int | None = None) -> list[Path]:
    index = dump_index(graph)
    written = []
    for rank, text in execute_texts(graph, plan, hlo_text, ranks, rank_offset, program_devices).items():
        path = dump_path(directory, rank, "execute", index)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    return written


def maybe_dump_begin(graph: Graph, plan: DumpedPlan) -> list[Path]:
    if not _enabled():
        return []
    return write_begin(graph, plan, _context.current().save_graphs_path, _ranks(plan))


def maybe_dump_execute(graph: Graph | None, plan: DumpedPlan, hlo_text: str) -> list[Path]:
    if graph is None or not _enabled():
        return []
    return write_execute(graph, plan, hlo_text, _context.current().save_graphs_path, _ranks(plan))
