"""Pipeline stages: which stage every node of a traced micro-batch graph runs in, and the per-stage sub-graphs.

MindSpore assigns a stage to a Cell with ``cell.pipeline_stage = k``; every op in that Cell (and in Cells below it
that set no stage of their own) runs in stage ``k`` on the ``k``-th group of ``device_num / pipeline_stages``
devices. This module reads those settings off the Cell tree, maps every node of the traced graph to a stage, and
cuts the graph into one :class:`StageGraph` per stage plus the :class:`Transfer` s of activations between them.

With ``pipeline_interleave`` a stage's Cells are further divided by ``cell.pipeline_segment = g`` into virtual
stages (chunks); the cut is then by chunk, in model order (``schedule.VirtualLayout``: chunk ``c`` of ``C``), and
every "stage" below (``StageGraph.stage``, ``Transfer.src``/``dst``, ``node_stage``) is a chunk index; without
interleaving a chunk is a stage.

Reads: the planned (or unplanned) micro-batch ``Graph`` of the train step (inputs ``params + rest + data``, outputs
``[loss] + new rest``) and the root Cell it was traced from. Adds nothing to the graph; returns a
:class:`StageSplit`. Raises :class:`PipelineError` naming the Cell, op, Parameter or stage at fault.

Nodes outside any staged Cell (the loss function, reshapes written in ``construct``) take the latest stage of the
nodes producing their inputs, or, when nothing upstream is staged (ops on the label), the earliest stage consuming
their outputs; so a ``WithLossCell``'s loss runs in the last stage, as in MindSpore. A Parameter used in several
stages (MindSpore's shared parameters, e.g. an output projection tied to the embedding) is an input of each of them
(:attr:`StageSplit.shared`): every stage keeps a copy, and the runtime sums the copies' gradients before each update
so that they stay equal. Refused: a state variable read in two stages, and stages that send activations backwards.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from graphpar.compile.pipeline.schedule import VirtualLayout
from graphpar.ir.graph import Graph
from graphpar.nn.cell import Cell
from graphpar.nn.pipeline_cell import PipelineError as PipelineError  # defined with the Cell it checks


@dataclass(frozen=True)
class Transfer:
    """One activation produced in stage ``src`` and consumed in stage ``dst`` (sent once per micro-batch, and its
    gradient sent back once)."""

    value: int  # value id in the full graph
    src: int
    dst: int


@dataclass
class StageGraph:
    """The part of the micro-batch graph one stage runs.

    ``graph`` takes ``params + rest + data + received`` and returns ``sent + ([loss] if last) + new rest``.
    """

    stage: int
    graph: Graph
    params: list[int]  # indices into the train step's parameter list
    rest: list[int]  # indices into the rest-state list (inputs of this stage)
    data: list[int]  # indices of the data inputs this stage reads
    received: list[int]  # value ids received from earlier stages
    sent: list[int]  # value ids sent to later stages
    has_loss: bool
    rest_out: list[int]  # indices into the new-rest list this stage produces


@dataclass
class StageSplit:
    stages: list[StageGraph]
    transfers: list[Transfer]
    node_stage: dict[int, int]
    param_stage: dict[str, int] = field(default_factory=dict)  # every parameter's (and state's) first stage by name
    shared: dict[int, list[int]] = field(default_factory=dict)  # parameter index -> the stages (chunks) using it, 2+


def check_cell_stages(root: Any, n_stages: int, layout: VirtualLayout | None = None) -> dict[str, int]:
    """``{cell path: stage}`` of every Cell under ``root`` that sets ``pipeline_stage``, refusing out-of-range
    stages and segments by the Cell's path."""
    layout = layout or VirtualLayout(n_stages)
    out = {}
    for path, cell in root.cells_and_names():
        name = f"Cell '{path or type(root).__name__}' ({type(cell).__name__})"
        segment = cell.pipeline_segment
        if segment is not None and segment >= layout.segments:
            if layout.segments == 1:
                raise PipelineError(name, f"pipeline_segment={segment} needs virtual stages, but "
                                    "pipeline_config has pipeline_interleave=False",
                                    "set pipeline_config={'pipeline_interleave': True, ...} or leave "
                                    "pipeline_segment unset")
            raise PipelineError(name, f"pipeline_segment={segment} but the pipeline has {layout.segments} "
                                "segments per stage", f"valid segments are 0..{layout.segments - 1}")
        stage = cell.pipeline_stage
        if stage is None:
            continue
        if stage >= n_stages:
            raise PipelineError(
                name, f"pipeline_stage={stage} but set_auto_parallel_context(pipeline_stages={n_stages})",
                f"valid stages are 0..{n_stages - 1}")
        out[path] = stage
    return out


def _scope_stages(root: Any, layout: VirtualLayout) -> Any:
    """A function ``scope -> chunk or None``: the stage of the innermost staged Cell on the scope's path below
    ``root``, in the segment of the innermost Cell that sets one (segment 0 when none does)."""
    cache: dict[str, int | None] = {}

    def stage_of(scope: str) -> int | None:
        if scope in cache:
            return cache[scope]
        parts = scope.split("/")
        cell, stage, segment = root, root.pipeline_stage, root.pipeline_segment
        # parts[0] is "Default" (the train step), parts[1] the root network, then one "{attribute}-{Class}" per Cell
        for part in parts[2:]:
            child = _find_child(cell, *part.split("-", 1)) if "-" in part else None
            if child is None:
                break  # a Cell called from outside its owner: it keeps the stage reached so far
            cell = child
            if cell.pipeline_stage is not None:
                stage = cell.pipeline_stage
            if cell.pipeline_segment is not None:
                segment = cell.pipeline_segment
        cache[scope] = None if stage is None else layout.chunk(stage, segment or 0)
        return cache[scope]

    return stage_of


def _find_child(cell: Cell, attr: str, cls: str, depth: int = 3) -> Cell | None:
    """The Cell below ``cell`` held as attribute ``attr`` and of class ``cls``, shallowest first: containers such as
    ``CellList`` hold Cells that their owner calls directly, so they do not appear in the scope."""
    level = [cell]
    for _ in range(depth):
        nxt = []
        for parent in level:
            for name, child in parent.name_cells().items():
                if name == attr and type(child).__name__ == cls:
                    return child
                nxt.append(child)
        level = nxt
    return None


def assign_stages(graph: Graph, root: Any, n_stages: int, layout: VirtualLayout | None = None) -> dict[int, int]:
    """Every node's stage (chunk: see the module docstring), checked to never flow from a later chunk to an earlier
    one."""
    layout = layout or VirtualLayout(n_stages)
    check_cell_stages(root, n_stages, layout)
    stage_of = _scope_stages(root, layout)
    stage: dict[int, int | None] = {n.id: stage_of(n.scope) for n in graph.node_list()}
    producers = {n.id: [graph.values[v].producer for v in n.inputs if graph.values[v].producer is not None]
                 for n in graph.node_list()}
    for node in graph.node_list():  # forward: unstaged nodes follow their latest staged producer
        if stage[node.id] is None:
            known = [stage[p] for p in producers[node.id] if stage[p] is not None]
            if known:
                stage[node.id] = max(known)
    for node in reversed(graph.node_list()):  # backward: what is left runs where its outputs are first needed
        if stage[node.id] is None:
            known = [stage[c] for v in node.outputs for c, _ in graph.values[v].consumers if stage[c] is not None]
            stage[node.id] = min(known) if known else 0
    out: dict[int, int] = {k: int(v) for k, v in stage.items()}  # type: ignore[arg-type]
    for node in graph.node_list():
        for p in producers[node.id]:
            if out[p] > out[node.id]:
                src = graph.nodes[p]
                order = ("" if not layout.virtual else " in model order (segment 0 of stages 0, 1, ..., then "
                         + ("segment 1 of the stages in reverse (zero_bubble_v's V), ...)" if layout.v_shape
                            else "segment 1 of stages 0, 1, ..., ...)"))
                raise PipelineError(
                    f"op '{node.instance_name}' in {node.scope} ({layout.describe(out[node.id])})",
                    f"its input comes from op '{src.instance_name}' in {src.scope}, which runs in the later "
                    f"{layout.describe(out[p])}; activations only flow from a stage to a later one{order}",
                    "give Cells along the network's data flow non-decreasing pipeline_stage values"
                    + (" (and pipeline_segment values in that order)" if layout.virtual else ""))
    used = set(out.values())
    for k in range(layout.chunks):
        if k not in used:
            cells = {}
            for path, cell in root.cells_and_names():
                if cell.pipeline_stage is not None:
                    cells.setdefault(cell.pipeline_stage, []).append(path or type(root).__name__)
            listing = "; ".join(f"stage {s}: {', '.join(c[:4])}" for s, c in sorted(cells.items())) or "none set"
            if layout.virtual:
                stage, segment = layout.place(k)
                raise PipelineError(layout.describe(k), f"no Cell runs in segment {segment} of stage {stage} "
                                    f"({layout.segments} segments per stage; staged Cells: {listing})",
                                    f"set pipeline_stage={stage} and pipeline_segment={segment} on a sub-Cell")
            raise PipelineError(f"stage {k}", f"no Cell runs in stage {k} of {n_stages} (staged Cells: {listing})",
                                f"set pipeline_stage={k} on a sub-Cell, or use pipeline_stages="
                                f"{max(used) + 1 if used else 1}")
    return out


def _value_stages(graph: Graph, vid: int, node_stage: dict[int, int]) -> list[int]:
    """The stages consuming a parameter (``[0]`` when unused)."""
    return sorted({node_stage[c] for c, _ in graph.values[vid].consumers}) or [0]


def _value_stage(graph: Graph, vid: int, node_stage: dict[int, int], what: str) -> int:
    """The one stage consuming a state value (0 when unused); two stages are refused."""
    stages = sorted({node_stage[c] for c, _ in graph.values[vid].consumers})
    if len(stages) > 1:
        users = sorted({graph.nodes[c].scope + "/" + graph.nodes[c].instance_name
                        for c, _ in graph.values[vid].consumers})
        raise PipelineError(f"{what} '{graph.values[vid].name}'",
                            f"is used in stages {stages} (by {', '.join(users[:4])}); a state variable lives in "
                            "one stage",
                            "read and update it inside one stage's Cells")
    return stages[0] if stages else 0


def split_stages(graph: Graph, root: Any, n_stages: int, n_params: int, n_rest: int,
                 layout: VirtualLayout | None = None) -> StageSplit:
    """Cut the micro-batch train graph into per-stage graphs (per-chunk with virtual stages; inputs
    ``params + rest + data``, outputs ``[loss] + new rest``, as ``compile.graph_trace.trace_network`` builds it)."""
    layout = layout or VirtualLayout(n_stages)
    n_stages = layout.chunks  # below, a stage is a chunk
    node_stage = assign_stages(graph, root, layout.stages, layout)
    param_vids = graph.inputs[:n_params]
    rest_vids = graph.inputs[n_params:n_params + n_rest]
    data_vids = graph.inputs[n_params + n_rest:]
    loss_vid, rest_out_vids = graph.outputs[0], graph.outputs[1:]
    last = n_stages - 1

    def producer_stage(vid: int) -> int | None:
        p = graph.values[vid].producer
        return None if p is None else node_stage[p]

    loss_stage = producer_stage(loss_vid)
    if loss_stage is not None and loss_stage != last:
        raise PipelineError("the network's loss", f"is computed in {layout.describe(loss_stage)}, not the last "
                            f"{layout.describe(last)}", f"run the loss (and the Cells after "
                            f"{layout.describe(loss_stage)}) in {layout.describe(last)}")
    param_stages = [_value_stages(graph, v, node_stage) for v in param_vids]
    rest_stage = [_value_stage(graph, v, node_stage, "state") for v in rest_vids]
    rest_out_stage = []
    for j, vid in enumerate(rest_out_vids):
        s = producer_stage(vid)
        if s is None:  # passed through unchanged: it lives where its input lives
            s = rest_stage[rest_vids.index(vid)] if vid in rest_vids else 0
        if graph.values[rest_vids[j]].consumers and s != rest_stage[j]:
            raise PipelineError(f"state '{graph.values[rest_vids[j]].name}'",
                                f"is read in stage {rest_stage[j]} but updated in stage {s}",
                                "read and update a state variable in one stage")
        rest_out_stage.append(s)
    transfers: list[Transfer] = []
    for node in graph.node_list():
        for vid in node.outputs:
            dsts = sorted({node_stage[c] for c, _ in graph.values[vid].consumers} - {node_stage[node.id]})
            transfers += [Transfer(vid, node_stage[node.id], d) for d in dsts]
    specs = graph.plan.value_specs
    stages = []
    for s in range(n_stages):
        params = [i for i, st in enumerate(param_stages) if s in st]
        rest = [i for i, st in enumerate(rest_stage) if st == s]
        data = [i for i, v in enumerate(data_vids) if any(node_stage[c] == s for c, _ in graph.values[v].consumers)]
        received = [t.value for t in transfers if t.dst == s]
        sent = list(dict.fromkeys(t.value for t in transfers if t.src == s))
        rest_out = [j for j, st in enumerate(rest_out_stage) if st == s]
        order = [nid for nid in graph.order if node_stage[nid] == s]
        stage_specs = dict(specs)
        for vid in received:  # a received activation arrives in the layout its producer pinned
            producer = graph.nodes[graph.values[vid].producer]
            if producer.strategy is not None:
                stage_specs[vid] = producer.strategy.output_spec(producer.outputs.index(vid))
        inputs = ([param_vids[i] for i in params] + [rest_vids[i] for i in rest] + [data_vids[i] for i in data]
                  + received)
        outputs = sent + ([loss_vid] if s == last else []) + [rest_out_vids[j] for j in rest_out]
        sub = dataclasses.replace(
            graph, nodes={nid: graph.nodes[nid] for nid in order}, order=order, inputs=inputs, outputs=outputs,
            name=f"{graph.name}_stage{s}").with_plan(value_specs=stage_specs)
        stages.append(StageGraph(s, sub, params, rest, data, received, sent, s == last, rest_out))
    # what checkpoints and strategy files record: each parameter's (first) stage (its device group, not its chunk)
    names = {graph.values[v].name: layout.place(st[0])[0] for v, st in zip(param_vids, param_stages)}
    names.update({graph.values[v].name: layout.place(st)[0] for v, st in zip(rest_vids, rest_stage)})
    shared = {i: st for i, st in enumerate(param_stages) if len(st) > 1}
    return StageSplit(stages, transfers, node_stage, names, shared)
