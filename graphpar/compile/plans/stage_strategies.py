"""The searched pipeline's intra-op plan of one stage: the micro-batch graph planned on one stage's devices with
the repeated layer's ops given the strategies the stage search priced.

The stage search prices the repeated layer planned alone on a tensor group of ``tp`` devices for ``micro``
sequences (``stage_profile.planned_layer``); a stage runs ``tp x dp`` devices on a micro-batch of ``micro x dp``
sequences. So each op of every layer copy gets the layer plan's strategy with the data-parallel ``dp`` added on the
dimension that grew with the batch (the first dimension of each operand whose size differs between the layer's
trace and the micro-batch graph: an operand without one, a weight, stays as the tensor group splits it). The ops
outside the layers (embedding, head, loss) and any op the layer's own trace lacks are left to the intra-op search
with those fixed (the stage search prices them split over the tensor group, not searched). The result is what a
pipelined run plans on its ``device_num / pipeline_stages`` devices, so the strategy file records it and a run
that loads the file (``strategy_ckpt_config={"load_file": ...}``) gets exactly the searched plan.
"""

from __future__ import annotations

from typing import Any

import jax

from graphpar._context import ParallelMode
from graphpar.compile.lowering.graph_trace import trace_network
from graphpar.compile.lowering.network_state import NetworkState
from graphpar.compile.plans.stage_profile import ModelLayers, find_layers, planned_layer
from graphpar.ir.graph import Graph
from graphpar.nn.cell import Cell
from graphpar.planner.dims import shapes_of
from graphpar.planner.passes.context import PlanRequest
from graphpar.planner.planning import plan_graph
from graphpar.planner.search.settings import SearchSettings, objective_hardware
from graphpar.planner.strategy_file import RecordedStrategy, StrategyFile, node_keys

LAYER_PLAN = "the stage search's layer plan"  # the forced record's name in messages


def micro_batch_avals(graph: Graph, micro_batches: int) -> list[jax.ShapeDtypeStruct]:
    """The batch inputs of the global-batch ``graph`` for one of ``micro_batches`` micro-batches (each input split
    by its own rows, as ``PipelineCell`` splits it)."""
    out = []
    for vid in graph.inputs:
        v = graph.values[vid]
        if v.kind == "input":
            shape = tuple(v.shape)
            out.append(jax.ShapeDtypeStruct((shape[0] // micro_batches,) + shape[1:], v.dtype))
    return out


def _relative(keys: dict[int, str], ids: Any, prefix: str) -> dict[str, int]:
    """Node id by its key below ``prefix`` (a layer copy's Cell scope)."""
    return {keys[n][len(prefix):]: n for n in ids if keys[n].startswith(prefix + "/")}


def _lifted(rows: Any, small: list[tuple[int, ...]], big: list[tuple[int, ...]], dp: int) -> tuple | None:
    """A layer-plan strategy (one row per operand) with ``dp`` on each operand's first dimension that grew with
    the batch; None when an operand's rank or its split no longer divides (the op is left to the search)."""
    if rows is None or len(rows) != len(small) or len(small) != len(big):
        return None
    out = []
    for row, a, b in zip(rows, small, big):
        row = list(row)
        if len(row) != len(a) or len(a) != len(b):
            return None
        grown = next((d for d, (x, y) in enumerate(zip(a, b)) if x != y), None)
        if grown is not None and dp > 1:
            row[grown] *= dp
            if b[grown] % row[grown]:
                return None
        out.append(tuple(row))
    return tuple(out)


def layer_record(layer_graph: Graph, layer_scope: str, graph: Graph, layers: ModelLayers, dp: int,
                 devices: int) -> StrategyFile:
    """The layer plan's strategies for every op of every layer copy in the micro-batch ``graph``, lifted by
    ``dp`` (module docstring), as a strategy file to force on ``devices`` devices."""
    lkeys, gkeys = node_keys(layer_graph), node_keys(graph)
    inside = next(layer_graph.nodes[n].scope for n in layer_graph.order if "/layer-" in layer_graph.nodes[n].scope)
    prefix = f"{inside.split('/layer-')[0]}/layer-{layer_scope.rsplit('-', 1)[-1]}"  # the probe's layer Cell
    planned = _relative(lkeys, [n for n in layer_graph.order if layer_graph.nodes[n].is_op], prefix)
    strategies = {}
    for scope, copy in zip(layers.cell_scopes(graph), layers.copies):
        for rel, nid in _relative(gkeys, copy, scope).items():
            src = planned.get(rel)
            node = graph.nodes[nid]
            if src is None or not node.is_op:
                continue
            lnode = layer_graph.nodes[src]
            if lnode.strategy is None:
                continue
            (lin, lout), (gin, gout) = shapes_of(lnode, layer_graph), shapes_of(node, graph)
            ins = _lifted(lnode.strategy.in_strategy(), lin, gin, dp)
            if ins is None:
                continue
            out = lnode.strategy.out_override
            outs = None
            if out is not None:
                sizes = [[layer_graph.plan.mesh.size(axes) for axes in spec] for spec in out]
                outs = _lifted(sizes, lout, gout, dp)
                if outs is None:
                    continue
            strategies[gkeys[nid]] = RecordedStrategy(gkeys[nid], node.kind, node.instance_name, node.scope, ins,
                                                      outs)
    return StrategyFile(LAYER_PLAN, devices, strategies, {})


def stage_plan(network: Cell, graph: Graph, report: Any, dataset_strategy: Any = "data_parallel",
               slots: Any = None) -> tuple[Graph, ModelLayers]:
    """The micro-batch graph of ``network`` (``graph``: its global-batch trace) planned on one stage's ``tp x dp``
    devices with the searched layer plan forced (module docstring), and where its layer copies are."""
    best = report.search.best
    shape = best.shape
    devices = shape.tp * shape.dp
    micro_graph, _ = trace_network(NetworkState(network, network.trainable_params()),
                                   micro_batch_avals(graph, shape.micro_batches), "train")
    layers = find_layers(network, micro_graph)
    layer_graph = planned_layer(report.layers, report.global_batch, shape.tp, shape.micro, report.cluster,
                                seq_parallel=shape.seq_parallel, weight_bound=shape.weight_bound)
    record = layer_record(layer_graph, report.layer_scope, micro_graph, layers, shape.dp, devices)
    settings = SearchSettings(None, objective_hardware("dynamic_programming", report.cluster.hw))
    planned = plan_graph(micro_graph, PlanRequest(devices, ParallelMode.AUTO_PARALLEL, "dynamic_programming", "train",
                                                  dataset_strategy, record, settings, slots))
    return planned, layers
