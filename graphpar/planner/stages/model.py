"""The priced pieces of a pipeline plan: one repeated layer on a tensor group, the parts around the layers, the
cluster, and the price of one stage assignment (time per micro-batch, memory, step time).

Everything is per device. A *layer cost* is one copy of the model's repeated layer (the transformer block) planned
by the intra-op search on a group of ``tp`` devices for a micro-batch of ``micro`` sequences per data-parallel
replica (:mod:`graphpar.compile.plans.stage_profile` makes them); the stage search (:mod:`.search`) combines them
with the pipeline's stage count, micro-batch count, schedule, recompute and optimizer sharding:

* time of stage i per micro-batch = its layers' compute (gamma x FLOPs) and tensor-group collectives (alpha x
  messages + beta x wire bytes, inside a node) + full recompute's second forward (a third of the FLOPs, half of the
  collectives) + the embedding / head on the first / last stage + the activation sent to and the gradient received
  from the next stage (inter-node beta);
* + the stage's data-parallel gradient reduction, **per micro-batch**: the pipeline runtime's backward program is
  SPMD over the stage's dp-sharded micro-batch, so XLA sums each micro-batch's partial gradients over dp inside it
  (``compile.pipeline.stage_programs``; an AllReduce of the stage's weight blocks over dp, inter-node when the
  stage spans nodes, with optimizer sharding too: :func:`reduce_wire`);
* step time = (m + p - 1) x the slowest stage's time per micro-batch (1F1B and GPipe alike: the bubble is
  (p - 1) / (m + p - 1) of the step; interleaved 1F1B with v chunks per stage: m + (p - 1) / v, and v times the
  sends, :mod:`.schedules`) + with optimizer sharding the slowest stage's AllGather of its updated
  weights (once per step);
* memory of stage i = weights + gradients + optimizer state (sharded over dp with optimizer sharding, the gathered
  weights then live through the step) + the activations of the micro-batches in flight: min(p - i, m) under 1F1B,
  m under GPipe; per micro-batch each layer keeps what the memory model says it keeps, or under full recompute
  only its input; + the largest phase of one micro-batch's backward program (:func:`backward_pieces`: one layer's
  cotangents and recomputed activations at their peak, walked on its plan; the weight gradients made; their
  dp reduction), each gradient counted once in the form it has in that phase.
"""

from __future__ import annotations

from dataclasses import dataclass

from graphpar.planner.calibration import platform_hardware
from graphpar.planner.cost import HARDWARE, Hardware
from graphpar.planner.stages.schedules import (bubble, boundary_crossings, edge_in_flight, layer_in_flight,
                                               pipeline_length)
from graphpar.planner.wire import wire_bytes

SCHEDULES = ("1f1b", "gpipe")


@dataclass(frozen=True)
class LayerCost:
    """One copy of the repeated layer on ``tp`` devices, per micro-batch of ``micro`` sequences per replica."""

    tp: int
    micro: int
    flops: float  # per device, forward + backward
    comm_bytes: float  # wire bytes inside the tensor group, forward + backward
    messages: int
    weight_bytes: float  # the layer's parameter blocks on one device
    activation_bytes: float  # kept for the backward pass
    boundary_bytes: float  # the layer's input on one device (kept by full recompute, sent between stages)
    transient_bytes: float = 0.0
    plan: str = ""  # what the intra-op search chose (for the report)
    experts: int = 0  # routed experts in the layer (0: no MoE); expert parallel splits them
    expert_weight_bytes: float = 0.0  # the routed experts' part of weight_bytes
    dispatch_bytes: float = 0.0  # the experts' input on one device: what each dispatch / combine AlltoAll moves
    # what a pipeline stage's forward keeps (it saves op outputs only, in their layouts: :func:`kept`); None: as
    # ``activation_bytes`` / ``boundary_bytes``
    stage_activation_bytes: float | None = None
    stage_input_bytes: float | None = None
    largest_weight_bytes: float | None = None  # the largest parameter block on one device (None: weight_bytes)
    # the part of stage_activation_bytes on the gradient path (None: all of it): the backward makes a cotangent for
    # each; an MoE's routing masks are kept but get none
    stage_cotangent_bytes: float | None = None
    # the layer plan splits its token regions (LayerNorm, residual) over the tensor group: Megatron's sequence
    # parallel (``compile.plans.stage_sequence``; measured on the plan, never set for tp 1)
    seq_parallel: bool = False
    # 0: the intra-op search's own plan (or its sequence flip); k > 0: the k-th plan re-solved under a weight-memory
    # bound (``compile.plans.stage_weights``: the weights the objective does not price, kept to a full split)
    weight_bound: int = 0
    # the most one layer's backward in a stage program holds at once besides its arguments and gradients (its
    # cotangents and, recomputed, its replayed activations, as they live along the backward: walked on the plan,
    # ``compile.plans.stage_residuals.backward_peak``) and what it still holds when it ends, without and with
    # recompute; None: every cotangent at once
    stage_backward: tuple[float, float] | None = None
    stage_recompute_backward: tuple[float, float] | None = None


@dataclass(frozen=True)
class EdgeCost:
    """The ops before the first layer (embedding) or after the last (final norm, logits, loss), per sequence of the
    micro-batch on one device (they scale with the micro-batch), and their weights; on a stage they are split over
    its tensor group (a vocabulary-parallel embedding and head, as Megatron splits them: not searched)."""

    flops_per_sequence: float = 0.0
    weight_bytes: float = 0.0
    activation_per_sequence: float = 0.0


@dataclass(frozen=True)
class Cluster:
    """The devices planned for: ``node_size`` devices per node share the fast links (``hw.beta``); between nodes
    ``inter_beta`` (s per byte). ``memory``: the per-device budget (bytes, None: unbounded)."""

    devices: int
    hw: Hardware = HARDWARE["gpu"]
    node_size: int = 8
    inter_beta: float = 4e-11  # ~25 GB/s per GPU across nodes (one 200 Gb/s InfiniBand port per GPU)
    memory: float | None = None

    @staticmethod
    def for_platform(devices: int, platform: str, memory: float | None) -> "Cluster":
        """GPU nodes of 8 with NVLink inside and InfiniBand between; TPU and CPU one flat network. The platform's
        constants are the calibration file's when it has them (``planner.calibration``), else the built-in ones."""
        hw = platform_hardware(platform)
        if platform == "gpu":
            return Cluster(devices, hw, 8, 4e-11, memory)
        return Cluster(devices, hw, devices, hw.beta, memory)


@dataclass(frozen=True)
class Shape:
    """The parallel shape shared by every stage: stage count, tensor group, data-parallel replicas, micro-batches
    (and sequences per replica in one), schedule, optimizer sharding over the replicas."""

    stages: int
    tp: int
    dp: int
    micro_batches: int
    micro: int
    schedule: str = "1f1b"
    optimizer_shard: bool = False
    ep: int = 1  # expert parallel: the routed experts split over ep of the dp replicas (ep divides dp)
    chunks: int = 1  # virtual stages per device group (interleaved 1F1B: ``planner.stages.schedules``)
    seq_parallel: bool = False  # sequence parallel over the tensor group (tp > 1): the layer's priced variant
    weight_bound: int = 0  # the layer plan priced: 0 the searched one, k > 0 the k-th weight-bounded (LayerCost)

    @property
    def length(self) -> float:
        """The pipelined part of a step in stage-times (``schedules.pipeline_length``)."""
        return pipeline_length(self.stages, self.chunks, self.micro_batches)

    @property
    def bubble(self) -> float:
        return bubble(self.stages, self.chunks, self.micro_batches)


def in_flight(shape: Shape, stage: int) -> float:
    """Micro-batches of its layers' activations stage ``stage`` holds at once under the schedule (interleaved:
    chunk-activations over the chunk count; ``schedules``)."""
    return layer_in_flight(shape.schedule, shape.stages, shape.chunks, shape.micro_batches, stage)


def layer_time(layer: LayerCost, hw: Hardware, recompute: bool) -> float:
    t = hw.alpha * layer.messages + hw.beta * layer.comm_bytes + hw.gamma * layer.flops
    if recompute:  # a second forward: a third of the FLOPs, the forward half of the collectives
        t += hw.alpha * layer.messages / 2 + hw.beta * layer.comm_bytes / 2 + hw.gamma * layer.flops / 3
    return t


def expert_time(layer: LayerCost, shape: Shape, cluster: Cluster, recompute: bool) -> float:
    """Expert parallel's AlltoAlls per layer and micro-batch: dispatch and combine forward, their transposes
    backward (full recompute: the forward pair again), each moving the experts' input block over the ep replicas
    (neighbours ``tp`` devices apart: inside a node when ``tp x ep`` fits one)."""
    if shape.ep <= 1 or not layer.dispatch_bytes:
        return 0.0
    beta = cluster.hw.beta if shape.tp * shape.ep <= cluster.node_size else cluster.inter_beta
    one = cluster.hw.alpha + beta * wire_bytes("AlltoAll", layer.dispatch_bytes, shape.ep)
    return one * (6 if recompute else 4)


def edge_time(edge: EdgeCost, shape: Shape, cluster: Cluster) -> float:
    return cluster.hw.gamma * edge.flops_per_sequence * shape.micro / shape.tp


def fixed_time(shape: Shape, stage: int, layer: LayerCost, head: EdgeCost, tail: EdgeCost, cluster: Cluster) -> float:
    """Stage ``stage``'s time per micro-batch besides its layers: head / tail ops and the point-to-point sends."""
    t = 0.0
    if stage == 0:
        t += edge_time(head, shape, cluster)
    if stage == shape.stages - 1:
        t += edge_time(tail, shape, cluster)
    if shape.stages > 1:  # activation in / out, gradient back, at every chunk boundary
        sends = boundary_crossings(shape.stages, shape.chunks, stage)
        t += sends * (cluster.hw.alpha + cluster.inter_beta * layer.boundary_bytes)
    return t


def weight_factor(shape: Shape, slots: float, replicas: int | None = None) -> float:
    """Resident bytes per weight byte: weights + gradients + optimizer state (``slots`` copies), the state and the
    stored weights sharded over the ``replicas`` holding the weight (default dp; an expert's: dp / ep) with
    optimizer sharding (the gathered weights live through the step)."""
    replicas = shape.dp if replicas is None else replicas
    if shape.optimizer_shard and replicas > 1:
        return 2.0 + (1.0 + slots) / replicas
    return 2.0 + slots


def layer_weights(layer: LayerCost, shape: Shape) -> tuple[float, float]:
    """One layer's weight bytes on a device: (the replicated part, the routed experts' part split ep ways)."""
    return layer.weight_bytes - layer.expert_weight_bytes, layer.expert_weight_bytes / shape.ep


def kept(layer: LayerCost, shape: Shape, recompute: bool) -> float:
    """What one layer keeps per micro-batch for its backward pass (full recompute: its input only). A pipeline's
    stage programs save op outputs only (``compile.pipeline.stage_programs``: what an op computes inside itself is
    recomputed from its input) and a recomputed layer its input in the layout it arrives in; without stages the
    training program keeps what the memory model says."""
    if shape.stages > 1 and layer.stage_activation_bytes is not None and layer.stage_input_bytes is not None:
        return layer.stage_input_bytes if recompute else layer.stage_activation_bytes
    return layer.boundary_bytes if recompute else layer.activation_bytes


def cotangents(layer: LayerCost, shape: Shape) -> float:
    """What one layer's backward makes a cotangent for per micro-batch: its kept activations on the gradient path
    (a recomputing stage holds those again while it recomputes; the routing masks it recomputes are fused into
    the backward's own loops, measured on a compiled MoE stage)."""
    if shape.stages > 1 and layer.stage_cotangent_bytes is not None:
        return layer.stage_cotangent_bytes
    return kept(layer, shape, False)


def layer_memory(layer: LayerCost, shape: Shape, stage: int, recompute: bool, slots: float) -> float:
    """Per layer on stage ``stage``: its resident weight bytes and the activations of the micro-batches in flight
    (full recompute: the layer's input only)."""
    dense, experts = layer_weights(layer, shape)
    weights = dense * weight_factor(shape, slots) + experts * weight_factor(shape, slots, shape.dp // shape.ep)
    return weights + in_flight(shape, stage) * kept(layer, shape, recompute)


def reduced_gradients(dense: float, experts: float, shape: Shape) -> float:
    """A micro-batch's gradients that the data-parallel replicas reduce (each stage's backward program reduces
    its micro-batch's gradients before they are accumulated): made whole, and the collective writes a second
    buffer."""
    return (dense if shape.dp > 1 else 0.0) + (experts if shape.dp // shape.ep > 1 else 0.0)


def fixed_memory(shape: Shape, stage: int, layer: LayerCost, head: EdgeCost, tail: EdgeCost, slots: float,
                 recompute: bool) -> float:
    """Stage ``stage``'s resident memory besides its layers: head / tail weights and the activations they keep
    for the micro-batches in flight."""
    m = 0.0
    for edge, here, first in ((head, stage == 0, True), (tail, stage == shape.stages - 1, False)):
        if here:
            m += edge.weight_bytes / shape.tp * weight_factor(shape, slots)
            m += edge_in_flight(shape.schedule, shape.stages, shape.chunks, shape.micro_batches,
                                first) * edge_activation(edge, shape)
    return m


def edge_activation(edge: EdgeCost, shape: Shape) -> float:
    return edge.activation_per_sequence * shape.micro / shape.tp


def backward_activations(layer: LayerCost, shape: Shape, recompute: bool) -> tuple[float, float]:
    """What the backward holds of its layers' cotangents and recomputed activations at once, as ``(once, per
    layer)`` bytes. A stage program's backward differentiates its layers one after another: it holds one layer's
    at their peak (``LayerCost.stage_backward``: walked on the layer's plan) and what each layer differentiated
    before it still holds (what its weight gradients read: XLA makes them last); without
    stages (or without that figure) a cotangent for every kept activation of every layer, and a recomputing
    layer's activations again."""
    walked = layer.stage_recompute_backward if recompute else layer.stage_backward
    if shape.stages > 1 and walked is not None:
        peak, held = walked
        return peak - held, held
    return 0.0, cotangents(layer, shape) * (2.0 if recompute else 1.0)


def backward_pieces(shape: Shape, stage: int, layer: LayerCost, head: EdgeCost, tail: EdgeCost,
                    recompute: bool) -> tuple[tuple[float, float], ...]:
    """What the backward program of one micro-batch holds besides its arguments (the residuals and the
    accumulated gradients), as ``(fixed, per layer)`` bytes per phase; the stage's peak takes the largest
    (``planner.memory_model.peak_bytes``' form). Each dp-reduced gradient is counted once, in the form it has in
    that phase. In a stage program (a layer's backward walked on its plan: :func:`backward_activations`) XLA
    makes the weight gradients last, so the phases are: the layers differentiated (their cotangents and
    recomputed activations, the edges' activations; no gradient yet); the weight gradients made (what they read,
    held to the end, and the gradients, one buffer each); the reduction (one collective over them all: two
    buffers each). Otherwise (no walk) the first two are one: every cotangent, the largest transient buffer and
    the gradients. With more than one micro-batch and no data parallel, a parameter's gradient is made and then
    added to the accumulator (measured: the temporaries hold the largest parameter's gradient); with data
    parallel the reduced gradients' buffers hold it."""
    dense, experts = layer_weights(layer, shape)
    walked = (layer.stage_recompute_backward if recompute else layer.stage_backward) is not None and shape.stages > 1
    act_fixed = 0.0 if walked else layer.transient_bytes  # walked: the transient is one of the cotangents
    grad_fixed = 0.0
    block = layer.weight_bytes if layer.largest_weight_bytes is None else layer.largest_weight_bytes
    for edge, here in ((head, stage == 0), (tail, stage == shape.stages - 1)):
        if here:
            act_fixed += edge_activation(edge, shape)
            grad_fixed += reduced_gradients(edge.weight_bytes / shape.tp, 0.0, shape)
            block = max(block, edge.weight_bytes / shape.tp)
    made = block if shape.micro_batches > 1 and shape.dp == 1 else 0.0
    # a backward program runs one chunk: a 1 / chunks share of the stage's layers
    grad_per = reduced_gradients(dense, experts, shape) / shape.chunks
    act_once, act_per = backward_activations(layer, shape, recompute)
    reduction = (2.0 * grad_fixed, 2.0 * grad_per)
    if not walked:
        return (act_fixed + made + act_once + grad_fixed, act_per / shape.chunks + grad_per), reduction
    return ((act_fixed + made + act_once, act_per / shape.chunks),
            (made + grad_fixed, act_per / shape.chunks + grad_per), reduction)


def stage_memory(shape: Shape, stage: int, layers: int, layer: LayerCost, head: EdgeCost, tail: EdgeCost,
                 slots: float, recompute: bool) -> float:
    """Stage ``stage``'s peak per device holding ``layers`` layers: resident bytes (weights, optimizer state, the
    residuals of the micro-batches in flight) and the largest backward phase (:func:`backward_pieces`)."""
    resident = fixed_memory(shape, stage, layer, head, tail, slots, recompute)
    resident += layers * layer_memory(layer, shape, stage, recompute, slots)
    return resident + max(f + layers * per for f, per in backward_pieces(shape, stage, layer, head, tail, recompute))


def dp_beta(shape: Shape, cluster: Cluster) -> float:
    """Seconds per wire byte of the data-parallel collectives: inter-node when a stage's devices span nodes."""
    return cluster.inter_beta if shape.tp * shape.dp > cluster.node_size else cluster.hw.beta


def reductions_per_step(shape: Shape) -> int:
    """How often each stage reduces its gradients over the data-parallel replicas in one step: once per
    micro-batch (the runtime's backward program reduces each micro-batch's gradients before they are
    accumulated); none without data parallel."""
    return shape.micro_batches if shape.dp > 1 else 0


def reduce_wire(weight_bytes: float, shape: Shape, replicas: int | None = None) -> float:
    """Wire bytes per device of one micro-batch's gradient reduction of ``weight_bytes`` over the ``replicas``
    holding them (default dp; the experts' gradients: dp / ep): an AllReduce, with optimizer sharding too (the
    SPMD backward reduces whole gradients and the sharded update slices them, as XLA:CPU compiles an all-reduce
    and a local slice; a GPU's reduce-scatter creator may fuse them, which is not assumed)."""
    return wire_bytes("AllReduce", weight_bytes, shape.dp if replicas is None else replicas)


def reduce_time(dense: float, experts: float, shape: Shape, cluster: Cluster) -> tuple[float, float]:
    """One micro-batch's data-parallel gradient reduction of ``dense`` bytes (over dp) and ``experts`` bytes
    (over dp / ep) on one device, as ``(latency, transfer)`` seconds: apart, so the stage assignment prices the
    transfer per layer and the latency once per stage."""
    latency = cluster.hw.alpha * ((shape.dp > 1) + (experts > 0 and shape.dp // shape.ep > 1))
    beta = dp_beta(shape, cluster)
    return latency, beta * (reduce_wire(dense, shape) + reduce_wire(experts, shape, shape.dp // shape.ep))


def sync_time(weight_bytes: float, shape: Shape, cluster: Cluster, replicas: int | None = None) -> float:
    """What the data-parallel replicas exchange once per step besides the per-micro-batch reductions: with
    optimizer sharding the AllGather of the updated ``weight_bytes`` over the ``replicas`` sharing them (default
    dp; the experts': dp / ep); nothing without it."""
    replicas = shape.dp if replicas is None else replicas
    if replicas <= 1 or not shape.optimizer_shard:
        return 0.0
    return cluster.hw.alpha + dp_beta(shape, cluster) * wire_bytes("AllGather", weight_bytes, replicas)
