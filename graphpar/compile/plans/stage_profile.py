"""The stage search's inputs, measured on the model itself: the repeated layer planned by the intra-op search on
each tensor-group size, and the ops around the layers.

The traced graph names the repeated layer (``planner.search.layers``: Cell copies whose nodes match). Its first
copy's Cell is traced again on its own, for each micro-batch size, with abstract inputs only (the network's
Parameters may be deferred: nothing is drawn): the layer's input is the model's activation scaled from the global
batch to the micro-batch. A scalar probe Parameter added to that input makes the gradient flow into it, as it does
inside the model (its Add is left out of the figures). Each trace is planned once per tensor-group size by the
AUTO_PARALLEL search (``dynamic_programming``'s time objective) and priced by the cost model: one solve per
(group size, micro-batch), whatever the depth of the model or the device count.

The ops before the first layer and after the last (embedding, final norm, logits, loss) are priced from the traced
graph as data parallel with one sequence per device, scaled by the micro-batch, and counted split over the tensor
group (vocabulary-parallel embedding and head, as Megatron splits them; their split is not searched).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable
from typing import Any

import jax

from graphpar._context import ParallelMode
from graphpar.common.initializer import initializer
from graphpar.common.parameter import Parameter
from graphpar.compile.lowering.graph_trace import trace_network
from graphpar.compile.lowering.network_state import NetworkState
from graphpar.compile.plans.stage_experts import Experts, expert_bytes, expert_split, experts_split, layer_experts
from graphpar.compile.plans.stage_cells import StagePlanError, StageReport, cell_at
from graphpar.compile.plans.stage_residuals import backward_peak, largest_parameter, stage_residuals
from graphpar.compile.plans.stage_sequence import is_split, variants as sequence_variants
from graphpar.compile.plans.stage_weights import bounded_plans, whole_weight_bytes
from graphpar.ir.graph import Graph
from graphpar.nn.cell import Cell
from graphpar import ops
from graphpar.planner.cost import block_bytes, plan_cost, replicated_spec, sum_costs
from graphpar.planner.memory_model import DEFAULT_OPTIMIZER_SLOTS
from graphpar.planner.passes.context import PlanRequest
from graphpar.planner.planning import plan_graph
from graphpar.planner.predict import data_parallel_costs
from graphpar.planner.search.layers import repeated_layers
from graphpar.planner.search.settings import MemoryBudgetError, SearchSettings, objective_hardware
from graphpar.planner.stages.model import Cluster, EdgeCost, LayerCost, layer_time
from graphpar.planner.stages.schedules import chunk_layers
from graphpar.planner.stages.search import search_stages

PROBE = "stage_probe"
FOLD = "probe_fold"


TENSOR_GROUPS = (1, 2, 4, 8)  # tensor-group sizes searched (within a node)
MICROS = (1, 2, 4, 8)  # sequences per replica in one micro-batch


class _Probe(Cell):
    """``layer(x + probe, *rest)``: the layer traced alone, with its input differentiated as inside the model."""

    def __init__(self, layer: Cell):
        super().__init__()
        self._auto_prefix = False  # the layer's Parameters keep the model's names
        self.layer = layer
        self.stage_probe = Parameter(initializer("zeros", [], "float32"), name=PROBE)
        self.probe_add = ops.Add()
        self.probe_fold = ops.Add()

    def construct(self, x, *rest):
        out = self.layer(self.probe_add(x, self.stage_probe), *rest)
        if not isinstance(out, tuple):
            return out
        # a layer with several outputs (an MoE block's activation and load-balancing loss): each further one is
        # added to the first, so its gradient flows as the model's loss makes it flow (the fold is left out of
        # the figures, as the probe is)
        folded = out[0]
        for extra in out[1:]:
            folded = self.probe_fold(folded, extra)
        return folded


@dataclasses.dataclass(frozen=True)
class ModelLayers:
    """Where the repeated layer is in the traced model: its Cell, how many copies, the node ids before the first
    and after the last copy, and the layer's inputs (the model's abstract values at the global batch)."""

    cell: Cell
    scope: str
    count: int
    head: tuple[int, ...]
    tail: tuple[int, ...]
    inputs: tuple[jax.ShapeDtypeStruct, ...]
    copies: tuple[tuple[int, ...], ...] = ()  # node ids of each copy, in model order

    def stage_of(self, graph: Graph, layers_per_stage: tuple[int, ...], chunks: int = 1) -> dict[int, int]:
        """Per op node, its pipeline stage: the head's on the first, each copy's by its chunk's stage (the layer
        counts per stage split into ``chunks`` chunks: ``schedules.chunk_layers``), the tail's on the last."""
        out = {nid: 0 for nid in graph.order}
        k = 0
        for stage, _, n in chunk_layers(layers_per_stage, chunks):
            for copy in self.copies[k:k + n]:
                out.update({nid: stage for nid in copy})
            k += n
        out.update({nid: len(layers_per_stage) - 1 for nid in self.tail})
        return out

    def cell_scopes(self, graph: Graph) -> list[str]:
        """Each copy's Cell scope, in model order (a copy widened to its parent's nodes between copies keeps the
        scope of its own Cell)."""
        depth = len(self.scope.split("/"))
        out = []
        for copy in self.copies:
            parts = next(p for p in (graph.nodes[n].scope.split("/") for n in copy) if len(p) >= depth)
            out.append("/".join(parts[:depth]))
        return out


def find_layers(network: Cell, graph: Graph) -> ModelLayers | None:
    """The model's most repeated layer (the group with the most nodes in all), or None without one."""
    groups = repeated_layers(graph)
    if not groups:
        return None
    copies = max(groups, key=lambda g: (len(g) * len(g[0]), len(g)))
    first, second = copies[0], copies[1]
    scope = None
    for a, b in zip(first, second):
        sa, sb = graph.nodes[a].scope.split("/"), graph.nodes[b].scope.split("/")
        for j, (x, y) in enumerate(zip(sa, sb)):
            if x != y:
                scope = "/".join(sa[:j + 1])
                break
        if scope:
            break
    cell = cell_at(network, scope) if scope else None
    if cell is None:
        return None
    inside = {n for c in copies for n in c}
    members = [n for n in first if graph.nodes[n].scope.startswith(scope + "/") or graph.nodes[n].scope == scope]
    local = set(members)
    inputs, seen = [], set()
    for nid in members:
        for vid in graph.nodes[nid].inputs:
            v = graph.values[vid]
            if vid in seen or not v.is_array or (v.producer is not None and v.producer in local):
                continue
            if v.producer is not None or v.kind == "input":
                seen.add(vid)
                inputs.append(jax.ShapeDtypeStruct(tuple(v.shape), v.dtype))
    order = graph.order
    start = order.index(copies[0][0])
    end = order.index(copies[-1][-1])
    head = tuple(n for n in order[:start] if n not in inside)
    tail = tuple(n for n in order[end + 1:] if n not in inside)
    return ModelLayers(cell, scope, len(copies), head, tail, tuple(inputs[:1]), tuple(tuple(c) for c in copies))


def _scaled(aval: jax.ShapeDtypeStruct, micro: int, global_batch: int) -> jax.ShapeDtypeStruct:
    shape = tuple(aval.shape)
    if shape and shape[0] % global_batch == 0:
        shape = (shape[0] // global_batch * micro,) + shape[1:]
    return jax.ShapeDtypeStruct(shape, aval.dtype)


def layer_costs(layers: ModelLayers, global_batch: int, tps: Iterable[int], micros: Iterable[int],
                cluster: Cluster, slots: float, mode: str = ParallelMode.AUTO_PARALLEL) -> dict[tuple[int, int], LayerCost]:
    """Per (tensor-group size, sequences per micro-batch), the repeated layer's cost planned on that group (its
    routed experts split over the group where they can be: ``stage_experts``)."""
    return layer_variants(layers, global_batch, tps, micros, cluster, slots, mode, sequence=False)[0]


def layer_variants(layers: ModelLayers, global_batch: int, tps: Iterable[int], micros: Iterable[int],
                   cluster: Cluster, slots: float, mode: str = ParallelMode.AUTO_PARALLEL, sequence: bool = True
                   ) -> tuple[dict[tuple[int, int], LayerCost], dict[tuple[int, int], LayerCost]]:
    """With ``sequence``, per (tensor group > 1, micro-batch) the layer's plain tensor-parallel variant and its
    sequence-parallel one (``stage_sequence``: the searched plan and its flips, the fastest of each kind), each
    as the first mapping's when the other kind has none; without, :func:`layer_costs`."""
    out, other, _ = layer_plans(layers, global_batch, tps, micros, cluster, slots, mode, sequence, bounded=False)
    return out, other


def layer_plans(layers: ModelLayers, global_batch: int, tps: Iterable[int], micros: Iterable[int],
                cluster: Cluster, slots: float, mode: str = ParallelMode.AUTO_PARALLEL, sequence: bool = True,
                bounded: bool = True) -> tuple[dict[tuple[int, int], LayerCost], dict[tuple[int, int], LayerCost],
                                               dict[tuple[int, int], tuple[LayerCost, ...]]]:
    """:func:`layer_variants`' two mappings and, with ``bounded``, per (tensor group > 1, micro-batch) the
    weight-bounded plans (``stage_weights``), each priced as the others."""
    out: dict[tuple[int, int], LayerCost] = {}
    other: dict[tuple[int, int], LayerCost] = {}
    weight: dict[tuple[int, int], tuple[LayerCost, ...]] = {}
    held = layers.cell._scope_attr
    experts = layer_experts(layers.cell)
    probe = _Probe(layers.cell)
    try:
        ns = NetworkState(probe, probe.trainable_params())
        for micro in micros:
            avals = [_scaled(a, micro, global_batch) for a in layers.inputs]
            traces: dict[int, Graph] = {}
            for tp in tps:
                mp = expert_split(experts, tp)
                if mp not in traces:
                    with experts_split(experts, mp):
                        traces[mp], _ = trace_network(ns, avals, "train")
                if bounded and tp > 1:
                    weight[(tp, micro)] = tuple(c for _, c in _bounded(traces[mp], tp, micro, cluster, mode, experts))
                if not sequence or tp == 1:
                    out[(tp, micro)] = _price_layer(traces[mp], tp, micro, cluster, slots, mode, experts)
                    continue
                kinds = {k: cost for k, (_, cost) in _variants(traces[mp], tp, micro, cluster, mode, experts).items()}
                out[(tp, micro)] = kinds.pop(False, None) or kinds.pop(True)
                other.update({(tp, micro): cost for cost in kinds.values()})
    finally:
        layers.cell._scope_attr = held
    return out, other, weight


def _search_layer(graph: Graph, tp: int, cluster: Cluster, mode: str, record: Any = None,
                  budget: float | None = None) -> Graph:
    settings = SearchSettings(budget, objective_hardware("dynamic_programming", cluster.hw))
    return plan_graph(graph, PlanRequest(tp, mode, "dynamic_programming", "train", "data_parallel", record, settings))


def _bounded(graph: Graph, tp: int, micro: int, cluster: Cluster, mode: str,
             experts: Experts) -> list[tuple[Graph, LayerCost]]:
    """The layer's weight-bounded plans on ``tp`` devices (``stage_weights.bounded_plans``), each priced, with its
    rung of the ladder (``LayerCost.weight_bound``, from 1); per rung, the fastest plan of each sequence-parallel
    kind among the rung's plan and its flips (``stage_sequence.variants``) re-solved under the rung's bound (a flip
    that no plan of its kind fits under it is solved without, and its flip back under it again)."""
    priced: dict[int, LayerCost] = {}

    def price(g: Graph) -> LayerCost:
        if id(g) not in priced:
            priced[id(g)] = _price_layer(graph, tp, micro, cluster, 0.0, mode, experts, g)
        return priced[id(g)]

    def replan(budget: float | None, record: Any = None) -> Graph | None:
        try:
            return _search_layer(graph, tp, cluster, mode, record, budget)
        except MemoryBudgetError:  # a flip no plan of that kind fits: solved without the bound (its flip back with)
            return None if record is None else replan(None, record)

    plans = bounded_plans(_search_layer(graph, tp, cluster, mode), tp,
                          whole_weight_bytes(graph, lambda name: name == PROBE) / tp,
                          lambda g: price(g).weight_bytes, replan)
    out, seen = [], set()
    for k, plan in enumerate(plans):
        budget = plan.plan.search.budget
        kinds = sequence_variants(plan, tp, lambda record, b=budget: replan(b, record),
                                  lambda g: layer_time(price(g), cluster.hw, False))
        for kind in sorted(kinds):
            if price(kinds[kind]) not in seen:  # an earlier rung's plan again (a flip solved without the bound)
                seen.add(price(kinds[kind]))
                out.append((kinds[kind], dataclasses.replace(price(kinds[kind]), weight_bound=k + 1)))
    return out


def _plan_layer(graph: Graph, tp: int, cluster: Cluster, mode: str, seq_parallel: bool | None = None,
                weight_bound: int = 0) -> Graph:
    """The layer's trace planned on a tensor group of ``tp`` devices (the plan its cost and the strategy file's
    per-stage strategies are read from); ``seq_parallel`` given: that sequence-parallel variant, as
    :func:`layer_variants` chose and priced it; ``weight_bound`` > 0: that weight-bounded plan (:func:`_bounded`)."""
    if weight_bound:
        ladder = _bounded(graph, tp, 1, cluster, mode, Experts())
        found = [g for g, c in ladder if c.weight_bound == weight_bound and c.seq_parallel == bool(seq_parallel)]
        if not found:
            raise StagePlanError(f"the stage plan asks for weight-bounded layer plan {weight_bound} (sequence parallel "
                                 f"{bool(seq_parallel)}) on tp {tp}; the layer has {len(ladder)} (the plan was made "
                                 "for another layer or device count)")
        return found[0]
    if seq_parallel is None or tp == 1:
        return _search_layer(graph, tp, cluster, mode)
    kinds = _variants(graph, tp, 1, cluster, mode, Experts())
    if seq_parallel not in kinds:
        raise StagePlanError(f"the stage plan asks for sequence parallel {seq_parallel} on tp {tp}, which the "
                             "layer's plan cannot take (no token region the group divides)")
    return kinds[seq_parallel][0]


def _variants(graph: Graph, tp: int, micro: int, cluster: Cluster, mode: str,
              experts: Experts) -> dict[bool, tuple[Graph, LayerCost]]:
    """The layer's sequence-parallel variants on ``tp`` devices, planned and priced (``stage_sequence.variants``:
    the fastest per kind by the stage model's layer time)."""
    priced: dict[int, LayerCost] = {}

    def price(g: Graph) -> LayerCost:
        if id(g) not in priced:
            priced[id(g)] = _price_layer(graph, tp, micro, cluster, 0.0, mode, experts, g)
        return priced[id(g)]

    kinds = sequence_variants(_search_layer(graph, tp, cluster, mode), tp,
                              lambda record: _search_layer(graph, tp, cluster, mode, record),
                              lambda g: layer_time(price(g), cluster.hw, False))
    return {kind: (g, price(g)) for kind, g in kinds.items()}


def planned_layer(layers: ModelLayers, global_batch: int, tp: int, micro: int, cluster: Cluster,
                  mode: str = ParallelMode.AUTO_PARALLEL, seq_parallel: bool | None = None,
                  weight_bound: int = 0) -> Graph:
    """The repeated layer traced alone for ``micro`` sequences and planned on ``tp`` devices, as
    :func:`layer_costs` priced it (the same trace and solve: the plan is deterministic); ``seq_parallel``: the
    sequence-parallel variant priced (None: the search's own); ``weight_bound``: the weight-bounded plan priced."""
    held = layers.cell._scope_attr
    experts = layer_experts(layers.cell)
    probe = _Probe(layers.cell)
    try:
        ns = NetworkState(probe, probe.trainable_params())
        with experts_split(experts, expert_split(experts, tp)):
            graph, _ = trace_network(ns, [_scaled(a, micro, global_batch) for a in layers.inputs], "train")
        return _plan_layer(graph, tp, cluster, mode, seq_parallel, weight_bound)
    finally:
        layers.cell._scope_attr = held


def _price_layer(graph: Graph, tp: int, micro: int, cluster: Cluster, slots: float, mode: str,
                 experts: Experts = Experts(), planned: Graph | None = None) -> LayerCost:
    planned = _plan_layer(graph, tp, cluster, mode) if planned is None else planned
    per_node = plan_cost(planned, planned.plan.mesh, training=True)
    nodes = [n for n in planned.node_list() if not any(planned.values[v].name == PROBE for v in n.inputs)
             and FOLD not in n.scope.rsplit("/", 1)[-1]]
    total = sum_costs(per_node[n.id] for n in nodes)
    arguments = total.memory_bytes - total.activation_bytes - total.gradient_bytes
    boundary = _input_bytes(planned)
    text = ", ".join(f"{n.instance_name} {n.strategy.in_strategy_text()}" for n in nodes
                     if n.kind in ("MatMul", "BatchMatMul"))
    expert_weights, dispatched = expert_bytes(planned, experts)
    stage_kept, stage_input, stage_cotangents = stage_residuals(planned, PROBE, FOLD)
    largest = largest_parameter(planned, PROBE)
    return LayerCost(tp, micro, total.flops, total.comm_bytes, total.messages, arguments / (1.0 + DEFAULT_OPTIMIZER_SLOTS),
                     total.activation_bytes, boundary, total.transient_bytes, text, experts.count, expert_weights,
                     dispatched, stage_kept, stage_input, largest, stage_cotangents, is_split(planned, tp),
                     stage_backward=backward_peak(planned, PROBE, FOLD, False),
                     stage_recompute_backward=backward_peak(planned, PROBE, FOLD, True))


def _input_bytes(graph: Graph) -> float:
    """The layer's first input (the activation), whole on every device of the group."""
    for vid in graph.inputs:
        v = graph.values[vid]
        if v.kind == "input":
            return float(v.nbytes)
    return 0.0


def edge_costs(graph: Graph, layers: ModelLayers, global_batch: int) -> tuple[EdgeCost, EdgeCost]:
    """The ops before and after the layers, per sequence on one device (before the tensor group's split)."""
    per_node = data_parallel_costs(graph, global_batch, only=frozenset(layers.head + layers.tail))

    def edge(ids: tuple[int, ...]) -> EdgeCost:
        total = sum_costs(per_node[n] for n in ids if n in per_node)
        arguments = total.memory_bytes - total.activation_bytes - total.gradient_bytes
        return EdgeCost(total.flops, arguments / (1.0 + DEFAULT_OPTIMIZER_SLOTS), total.activation_bytes)

    return edge(layers.head), edge(layers.tail)


def search_pipeline(network: Cell, graph: Graph, devices: int, platform: str, budget: float | None,
                    slots: float = DEFAULT_OPTIMIZER_SLOTS, micros: Iterable[int] = MICROS,
                    stages: int | None = None) -> StageReport | None:
    """The stage search on a traced training ``graph`` (global batch) of ``network`` for ``devices`` devices; None
    when the model has no repeated layer to split into stages. ``stages``: a stage count the user set
    (``pipeline_stages`` > 1), kept; the search chooses the rest."""
    started = time.process_time()
    layers = find_layers(network, graph)
    if layers is None:
        return None
    batch_value = next(graph.values[v] for v in graph.inputs if graph.values[v].kind == "input")
    global_batch = int(batch_value.shape[0])
    cluster = Cluster.for_platform(devices, platform, budget)
    tps = [t for t in TENSOR_GROUPS if t <= cluster.node_size and devices % t == 0]
    micros = [m for m in micros if m <= global_batch]
    costs, sequence, bounded = layer_plans(layers, global_batch, tps, micros, cluster, slots)
    head, tail = edge_costs(graph, layers, global_batch)
    profiled = time.process_time()
    found = search_stages(costs, layers.count, head, tail, cluster, global_batch, slots,
                          stage_counts=None if stages is None else (stages,), sequence=sequence,
                          bounded=bounded)
    return StageReport(found, layers, tuple(layers.cell_scopes(graph)), layers.scope, layers.count, global_batch, cluster, profiled - started,
                       time.process_time() - profiled)
