"""Pass ``default_strategies``: every node still without a strategy gets the default of the mode.

* SEMI_AUTO_PARALLEL / AUTO_PARALLEL: data parallel — dimension 0 of the first input (the batch) split over as
  many devices as divide it; everything else whole (provenance: default).
* An op whose layout follows its input (``Reshape``; ``graphpar.planner.follow``) carries the layout of the value
  reaching it (provenance: follows input), as MindSpore's ReshapeInfo.
* ``Depend``'s ordering-only inputs (``graphpar.planner.follow``) are taken in the layout they arrive in, settled
  here once every node is decided (whichever pass decided the Depend): nothing is redistributed for a value the op
  does not read, as MindSpore plans no Depend.
* A kind without a sharding rule runs replicated on every device; the fallback is reported once per (kind, scope)
  in a warning and in the begin dump (provenance: fallback).

Reads: node strategies, rules, shapes. Adds: ``strategy``/``provenance`` on undecided nodes. Never overrides a
decided node's choice (a Depend's ordering-only input layouts are no choice).
"""

from __future__ import annotations

from collections.abc import Sequence

from graphpar._logging import notice_once
from graphpar.ir.graph import Graph, Node, Provenance
from graphpar.planner.dims import SILENT_REPLICATED, DimSpec, replicated, shapes_of
from graphpar.planner.follow import data_inputs, follow_strategy, follows_input, is_pass_through, value_layout
from graphpar.planner.passes.context import PlanContext
from graphpar.planner.strategy import MeshInfo, NodeStrategy, enumerate_strategies, replicated_strategy


def batch_label(dims: DimSpec) -> str | None:
    """The label MindSpore's ``GenerateBatchStrategies`` splits: the op's declared batch label, else the first
    labelled dimension 0 of its inputs, then outputs (an input broadcast along dimension 0, ``max(-inf, x)`` or
    ``1 - x`` with a shape-(1,) constant, leaves it unlabelled: the next input's batch is split)."""
    if dims.batch is not None:
        return dims.batch
    for row in dims.inputs + dims.outputs:
        if row and row[0] is not None:
            return row[0]
    return None


def data_parallel_strategy(node: Node, dims: DimSpec, graph: Graph, mesh: MeshInfo,
                           candidates: Sequence[NodeStrategy] | None = None) -> NodeStrategy:
    """The candidate splitting the batch label over the most devices (a prefix of the mesh axes). ``candidates``:
    the node's strategies when the caller has them (``PlanContext.candidates``), else enumerated here."""
    label = batch_label(dims)
    if label is None or label in dims.fixed:
        return replicated_strategy(dims, mesh)
    if candidates is None:
        ins, outs = shapes_of(node, graph)
        candidates = enumerate_strategies(dims, ins, outs, mesh)
    best = replicated_strategy(dims, mesh)
    for cand in candidates:
        axes = cand.axes
        if set(axes) - {label}:
            continue
        if cand.split(label) > best.split(label) and axes.get(label, ())[:1] == mesh.names[:1]:
            best = cand
    return best


def fallback_strategy(node: Node, graph: Graph, ctx: PlanContext) -> tuple[NodeStrategy, Provenance]:
    ins, outs = shapes_of(node, graph)
    if node.kind not in SILENT_REPLICATED:
        notice_once(f"fallback:{node.kind}:{node.scope}", f"no sharding rule for primitive '{node.kind}' in scope "
                    f"{node.scope or '(top level)'}: it runs replicated on every device")
    return replicated_strategy(replicated(ins, outs), ctx.mesh), Provenance(
        "fallback", detail=f"no sharding rule for '{node.kind}': replicated")


def default_strategies(graph: Graph, ctx: PlanContext) -> Graph:
    updates = {}
    decided = {n.id: n.strategy for n in graph.node_list() if n.strategy is not None}
    for node in graph.node_list():
        if node.strategy is not None:
            continue
        dims = ctx.dims(node, graph)
        if dims is None:
            strategy, prov = fallback_strategy(node, graph, ctx)
        elif follows_input(node):
            src = value_layout(graph, node.inputs[0], decided, ctx.input_specs)
            strategy = follow_strategy(node, dims, graph, ctx.mesh, src)
            prov = Provenance("default", detail="follows input layout")
        else:
            strategy = data_parallel_strategy(node, dims, graph, ctx.mesh, ctx.candidates(node, graph))
            prov = Provenance("default", detail="data parallel")
        decided[node.id] = strategy
        updates[node.id] = {"strategy": strategy, "provenance": prov}
    for nid, fields in _settle_control_inputs(graph, ctx, decided).items():
        updates.setdefault(nid, {}).update(fields)
    return graph.with_annotations(updates) if updates else graph


def _settle_control_inputs(graph: Graph, ctx: PlanContext, decided: dict) -> dict[int, dict]:
    """Each pass-through node (Depend) whose ordering-only inputs are wanted in another layout than they arrive
    in: its strategy with those inputs as they arrive (its data input and output unchanged)."""
    updates: dict[int, dict] = {}
    for node in graph.node_list():
        strategy = decided.get(node.id)
        if strategy is None or not is_pass_through(node) or strategy.in_override is None:
            continue
        reads = data_inputs(node)
        arrive = {k: value_layout(graph, vid, decided, ctx.input_specs) for k, vid in enumerate(node.inputs)
                  if k not in reads}
        arrive = {k: spec for k, spec in arrive.items() if spec is not None}
        if all(strategy.input_spec(k) == spec for k, spec in arrive.items()):
            continue
        settled = follow_strategy(node, strategy.dims, graph, ctx.mesh, strategy.input_spec(0), arrive)
        updates[node.id] = {"strategy": settled}
    return updates


DATA_PARALLEL_GEN_MODE = "data_parallel"  # the strategy_gen_mode Cell.set_data_parallel() sets on its primitives


def set_data_parallel_strategies(graph: Graph, ctx: PlanContext) -> Graph:
    """Pass ``set_data_parallel_strategies`` (AUTO_PARALLEL): an op without a ``shard()`` hint whose Cell called
    ``set_data_parallel()`` (attribute ``strategy_gen_mode="data_parallel"``, as MindSpore sets it) gets the batch
    split instead of a searched or propagated strategy, as MindSpore's ``GenerateBatchStrategies``; it is then a
    configured op (provenance ``user``: the user asked for it) that propagation starts from and the search keeps."""
    updates = {}
    for node in graph.node_list():
        if node.strategy is not None or node.attrs.get("strategy_gen_mode") != DATA_PARALLEL_GEN_MODE:
            continue
        dims = ctx.dims(node, graph)
        if dims is None or follows_input(node):
            continue  # replicated by the fallback / carried by the follow rule, as without set_data_parallel
        strategy = data_parallel_strategy(node, dims, graph, ctx.mesh, ctx.candidates(node, graph))
        updates[node.id] = {"strategy": strategy,
                            "provenance": Provenance("user", detail="data parallel (Cell.set_data_parallel)")}
    return graph.with_annotations(updates) if updates else graph
