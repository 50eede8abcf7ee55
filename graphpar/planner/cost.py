"""The one cost model of the planner: what a strategy costs each device per training step.

Everything here is per device, per step (forward + backward when ``training``), and in closed form: a layout is a
canonical spec (per tensor dimension, the mesh axes splitting it, major first), and every figure is computed from
the sets of axes added, removed or moved per dimension — never by visiting device coordinates — so pricing on a
4,096-device mesh costs what it costs on 8.

Communication is counted in *wire bytes* (``graphpar.planner.wire.wire_bytes``: the bytes one device sends under ring
algorithms), the unit the execute dumps measure, so a prediction and a measurement compare directly.

* :func:`op_cost` — an op's own collectives and work: a split contracted label leaves the output partial, resolved
  by an AllReduce of the output block over those axes (a ReduceScatter where ``out_strategy`` moves them onto an
  output dimension); in training, each input's gradient is partial over the mesh axes of the op's split labels the
  input does not carry (repeat axes excluded) and is AllReduced there (MatMul's weight gradient over the batch axes:
  data parallelism's gradient reduction; its activation gradient over the output-column axes: Megatron's backward
  AllReduce). Compute = the op's FLOPs / the devices that split its work; memory = resident bytes per device.
* :func:`redistribution_cost` — an edge: the collectives that turn layout ``src`` into ``dst`` (axes removed from a
  dimension: AllGather; axes moved between dimensions: AlltoAll; axes added: a free slice) and, in training, their
  backward counterparts (the cotangent goes back ``dst -> src``: a slice's backward is an AllGather, an AllGather's a
  slice, an AlltoAll's an AlltoAll).

Time = alpha * messages + beta * comm_bytes + gamma * flops with :class:`Hardware` per platform. Limits: overlap of
communication with compute is ignored; XLA may merge collectives (fewer messages, same bytes) or pick a cheaper
equivalent (AllReduce + slice becomes ReduceScatter), which the model does not predict unless stated above.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
import math
from dataclasses import dataclass, fields
from functools import lru_cache
from typing import Any

import numpy as np

from graphpar.planner.memory_model import (
    internal_residuals, keeps_input, param_slots, peak_bytes, sole_keeper, transient_buffers, value_kept)
from graphpar.planner.strategy import MeshInfo, NodeStrategy, Spec
from graphpar.planner.wire import wire_bytes

__all__ = ["Cost", "Hardware", "HARDWARE", "DEFAULT_HW", "op_cost", "redistribution_cost", "grad_values",
           "redistribution_bytes", "replicated_spec", "block_bytes", "copy_memory", "input_bytes", "predicted_peak"]


@dataclass(frozen=True)
class Hardware:
    """The alpha-beta-gamma parameters of one platform (seconds per message, per wire byte, per FLOP).

    Orders of magnitude, not calibrations: what matters to the planner is the ratio between them.
    """

    name: str
    alpha: float  # s per collective (launch + synchronisation latency)
    beta: float  # s per wire byte (1 / per-device link bandwidth)
    gamma: float  # s per FLOP (1 / sustained per-device throughput)


HARDWARE: dict[str, Hardware] = {
    # XLA:CPU simulated devices in one process: collectives are memcpys through the host (~5 GB/s), ~20 GFLOP/s.
    "cpu": Hardware("cpu", alpha=2e-5, beta=2e-10, gamma=5e-11),
    # One H100/H200 node: NVLink ~200 GB/s per direction per GPU, ~400 TFLOP/s dense bf16 sustained, ~10 us NCCL.
    "gpu": Hardware("gpu", alpha=1e-5, beta=5e-12, gamma=2.5e-15),
    # TPU v4/v5 ICI: ~90 GB/s per link, ~200 TFLOP/s per chip, ~5 us per collective.
    "tpu": Hardware("tpu", alpha=5e-6, beta=1.1e-11, gamma=5e-15),
}
DEFAULT_HW = HARDWARE["gpu"]


@dataclass(frozen=True)
class Cost:
    """Everything per device, per training step (forward + backward)."""

    comm_bytes: float = 0.0  # wire bytes, graphpar.planner.wire.wire_bytes's unit
    messages: int = 0  # number of collectives
    flops: float = 0.0  # compute
    memory_bytes: float = 0.0  # bytes this choice keeps resident (params + optimizer state + activations)
    # the parts of memory_bytes the step's peak weighs differently (parallel.memory_model.peak_bytes): the
    # activations kept for the backward pass, and the gradients a collective reduces
    activation_bytes: float = 0.0
    gradient_bytes: float = 0.0
    # the largest buffer the backward pass holds briefly (an output's cotangent): combined by max, not summed
    transient_bytes: float = 0.0

    def __add__(self, other: "Cost") -> "Cost":
        return Cost(self.comm_bytes + other.comm_bytes, self.messages + other.messages, self.flops + other.flops,
                    self.memory_bytes + other.memory_bytes, self.activation_bytes + other.activation_bytes,
                    self.gradient_bytes + other.gradient_bytes, max(self.transient_bytes, other.transient_bytes))

    def scaled(self, k: int) -> "Cost":
        """``k`` copies of this cost (the largest transient buffer stays the largest)."""
        return Cost(self.comm_bytes * k, self.messages * k, self.flops * k, self.memory_bytes * k,
                    self.activation_bytes * k, self.gradient_bytes * k, self.transient_bytes)

    def time(self, hw: Hardware = DEFAULT_HW) -> float:
        return hw.alpha * self.messages + hw.beta * self.comm_bytes + hw.gamma * self.flops

    def as_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


ZERO = Cost()


def replicated_spec(rank: int) -> Spec:
    return tuple(() for _ in range(rank))


def block_bytes(value: Any, spec: Spec, mesh: MeshInfo) -> float:
    """Bytes of the block of ``value`` one device holds in layout ``spec``."""
    total = float(math.prod(value.shape)) * value.itemsize
    return total / mesh.size([a for axes in spec for a in axes])


def _collective(kind: str, result_bytes: float, group: int) -> Cost:
    if group <= 1:
        return ZERO
    return Cost(comm_bytes=wire_bytes(kind, result_bytes, group), messages=1)


def _moves(src: Spec, dst: Spec) -> tuple[set[str], set[str], set[str]]:
    """(gathered, moved, sliced) mesh axes of ``src -> dst``, per dimension after the common prefix of axes."""
    removed: set[str] = set()
    added: set[str] = set()
    for a, b in zip(src, dst):
        k = 0
        while k < len(a) and k < len(b) and a[k] == b[k]:
            k += 1
        removed.update(a[k:])
        added.update(b[k:])
    moved = removed & added
    return removed - moved, moved, added - moved


def _one_way(src: Spec, dst: Spec, value: Any, mesh: MeshInfo) -> Cost:
    """Slice the added axes (free), AlltoAll the moved ones, then AllGather the removed ones. When axes are both
    moved and gathered, XLA's SPMD partitioner does not compose the two: it gathers every removed axis (its
    "involuntary full rematerialization") and slices, which is what is priced then."""
    gathered, moved, _ = _moves(src, dst)
    if gathered and moved:
        removed = tuple(sorted(gathered | moved))
        g = mesh.size(removed)
        return _collective("AllGather", block_bytes(value, src, mesh) * g, g)
    dst_block = block_bytes(value, dst, mesh)
    g_gather, g_move = mesh.size(tuple(sorted(gathered))), mesh.size(tuple(sorted(moved)))
    return (_collective("AlltoAll", dst_block / g_gather, g_move)
            + _collective("AllGather", dst_block, g_gather))


def redistribution_cost(value: Any, src: Spec, dst: Spec, mesh: MeshInfo, training: bool = True,
                        needs_grad: bool | None = None) -> Cost:
    """The collectives XLA inserts to turn ``value`` (anything with ``shape`` and ``itemsize``) from layout ``src``
    into ``dst``, plus in training their backward counterparts (``needs_grad``: whether a gradient flows back along
    this edge; by default, for floating-point values)."""
    if src == dst or not value.shape:
        return ZERO
    backward = training and (needs_grad if needs_grad is not None else _is_float(value))
    return _redistribution(tuple(value.shape), value.itemsize, src, dst, mesh, backward)


@lru_cache(maxsize=1 << 16)
def _redistribution(shape: tuple[int, ...], itemsize: int, src: Spec, dst: Spec, mesh: MeshInfo,
                    backward: bool) -> Cost:
    """Cached: a plan prices the same (shape, layouts) pairs many times."""
    value = _Shape(shape, itemsize)
    cost = _one_way(src, dst, value, mesh)
    return cost + _one_way(dst, src, value, mesh) if backward else cost


def redistribution_bytes(src: Spec, dst: Spec, shape: tuple[int, ...], itemsize: int, mesh: MeshInfo) -> float:
    """Forward wire bytes per device of ``src -> dst`` (a shortcut for callers without a graph value)."""
    return redistribution_cost(_Shape(tuple(shape), itemsize), src, dst, mesh, training=False).comm_bytes


@dataclass(frozen=True)
class _Shape:
    shape: tuple[int, ...]
    itemsize: int


def _is_float(value: Any) -> bool:
    try:
        return _inexact(np.dtype(value.dtype))
    except (AttributeError, TypeError):
        return True


@lru_cache(maxsize=None)
def _inexact(dtype: np.dtype) -> bool:
    """``np.issubdtype(dtype, np.inexact)``, once per dtype (asked of every value of a graph, a few dtypes)."""
    return bool(np.issubdtype(dtype, np.inexact))


def grad_values(graph: Any) -> frozenset[int]:
    """Ids of the floating-point values a training step differentiates: parameters and everything computed from
    them (one pass in topological order). In a graph that takes a gradient inside its construct
    (``Graph.inner_gradient``: ``GradOperation(get_all=True)``, ``ops.grad``), the network inputs too: a gradient
    with respect to them is what such a construct returns, so a split of an input is paid again on its cotangent."""
    kinds = ("param", "input") if graph.inner_gradient else ("param",)
    out = {vid for vid in graph.inputs if graph.values[vid].kind in kinds and _is_float(graph.values[vid])}
    for node in graph.node_list():
        if any(v in out for v in node.inputs):
            out.update(v for v in node.outputs if _is_float(graph.values[v]))
    return frozenset(out)


def _label_sizes(strategy: NodeStrategy, in_shapes: Iterable, out_shapes: Iterable) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for rows, shapes in ((strategy.dims.inputs, in_shapes), (strategy.dims.outputs, out_shapes)):
        for row, shape in zip(rows, shapes):
            for label, size in zip(row, shape):
                if label is not None:
                    sizes[label] = max(sizes.get(label, 1), size)
    return sizes


def _flops(strategy: NodeStrategy, in_shapes, out_shapes, training: bool) -> float:
    """Per-device FLOPs. A contraction (a label shared by two inputs and on no output: MatMul's k) does
    2 * (product of all label sizes) / (devices splitting the work); any other op does one operation per element of
    its largest per-device block (a Gather whose table is split still writes its whole output block)."""
    dims = strategy.dims
    shared = [l for l in dims.contracted if sum(l in row for row in dims.inputs) >= 2]
    if shared:
        sizes = _label_sizes(strategy, in_shapes, out_shapes)
        work = 2.0 * float(math.prod(sizes.values())) / max(strategy.devices_used, 1)
        return work * (3.0 if training else 1.0)  # forward, input gradient, weight gradient
    blocks = [float(math.prod(shape)) / strategy.mesh.size([a for ax in spec for a in ax])
              for shape, spec in [(s, strategy.input_spec(i)) for i, s in enumerate(in_shapes)]
              + [(s, strategy.output_spec(j)) for j, s in enumerate(out_shapes)]]
    return max(blocks or [0.0]) * (2.0 if training else 1.0)


def op_cost(graph: Any, node: Any, strategy: NodeStrategy, mesh: MeshInfo, training: bool = True,
            needs_grad: frozenset[int] | None = None,
            grad_reduced: Mapping[int, frozenset[str]] | None = None) -> Cost:
    """An op's own collectives (forward partial sums, backward gradient reductions), compute and memory under
    ``strategy``. ``needs_grad``: the ids of differentiated values (:func:`grad_values`; computed when omitted,
    which walks the whole graph: pass it when pricing many nodes). ``grad_reduced``: per value id, mesh axes over
    which another consumer already reduces that value's gradient (XLA sums the partial gradients of a shared
    Parameter first and reduces once), left out here."""
    values = graph.values
    in_shapes = [values[v].shape for v in node.inputs]
    out_shapes = [values[v].shape for v in node.outputs]
    axes = strategy.axes
    in_labels = {l for row in strategy.dims.inputs for l in row if l is not None}
    cost = Cost(flops=_flops(strategy, in_shapes, out_shapes, training))
    grads = (grad_values(graph) if needs_grad is None else needs_grad) if training else frozenset()
    activations = transient = 0.0
    for j, vid in enumerate(node.outputs):
        value = values[vid]
        row = set(strategy.dims.outputs[j]) if j < len(strategy.dims.outputs) else set()
        # partial over the split labels the inputs have and this output lacks (a contracted k; a BatchNorm's
        # batch for its statistics)
        partial = tuple(a for l in strategy.dims.order if l in in_labels and l not in row for a in axes.get(l, ()))
        if not value.shape and not partial:
            continue
        spec = strategy.output_spec(j)
        out_block = block_bytes(value, spec, mesh)
        # resident: in training what the backward pass reads (memory_model); in inference every output (bound)
        if not training or value_kept(graph, vid, grads):
            activations += out_block
        if vid in grads:
            transient = max(transient, out_block * transient_buffers(node))
        if partial and _is_float(value):
            on_output = {a for dim in spec for a in dim}
            scattered = tuple(a for a in partial if a in on_output)
            reduced = tuple(a for a in partial if a not in on_output)
            cost = (cost + _collective("ReduceScatter", out_block * mesh.size(reduced), mesh.size(scattered))
                    + _collective("AllReduce", out_block, mesh.size(reduced)))
    if training and any(v in grads for v in node.inputs):  # the largest input's cotangent (MaxPool's window)
        blocks = [block_bytes(values[v], strategy.input_spec(i), mesh) for i, v in enumerate(node.inputs)
                  if values[v].kind != "param" and values[v].is_array and _is_float(values[v])]
        transient = max([transient] + [b * transient_buffers(node) for b in blocks])
    if training and node.inputs and values[node.inputs[0]].shape:
        internal = internal_residuals(node, grads)
        if internal:
            activations += internal * block_bytes(values[node.inputs[0]], strategy.input_spec(0), mesh)
    gradients = 0.0
    reduced_params: set[int] = set()
    if training:
        split_labels = [l for l in strategy.dims.order if axes.get(l)]
        for i, vid in enumerate(node.inputs):
            value = values[vid]
            if vid not in grads:
                continue
            carried = set(strategy.dims.inputs[i])
            done = grad_reduced.get(vid, frozenset()) if grad_reduced else frozenset()
            over = tuple(a for l in split_labels if l not in carried for a in axes[l] if a not in done)
            block = block_bytes(value, strategy.input_spec(i), mesh)
            cost = cost + _collective("AllReduce", block, mesh.size(over))
            if value.kind == "param" and mesh.size(over) > 1:
                reduced_params.add(vid)
    persistent = 0.0
    for i, vid in enumerate(node.inputs):
        value = values[vid]
        if value.kind != "param":
            continue
        # a Parameter read by several ops: each reader holds its share (its storage is one block)
        readers = len({n for n, _ in value.consumers if n in graph.nodes}) or 1
        block = block_bytes(value, strategy.input_spec(i), mesh) / readers
        slots = param_slots(graph, value) if training and vid in grads else None
        persistent += block * (1.0 + (slots or 0.0))
        if slots is not None and vid in reduced_params:
            gradients += block
    return cost + Cost(memory_bytes=persistent + activations + gradients, activation_bytes=activations,
                       gradient_bytes=gradients, transient_bytes=transient)


def sum_costs(costs: Iterable[Cost]) -> Cost:
    total = ZERO
    for c in costs:
        total = total + c
    return total


def plan_cost(graph: Any, mesh: MeshInfo, training: bool = True,
              value_specs: Mapping[int, Spec] | None = None) -> dict[int, Cost]:
    """Per node of a planned graph, its :func:`op_cost` plus the redistribution of every input it reads (from the
    producer's output layout, or the storage layout in ``value_specs`` / ``graph.plan.value_specs``)."""
    specs = graph.plan.value_specs if value_specs is None else value_specs
    grads = grad_values(graph) if training else frozenset()
    out: dict[int, Cost] = {}
    for node in graph.node_list():
        s = node.strategy
        cost = op_cost(graph, node, s, mesh, training, grads)
        for i, vid in enumerate(node.inputs):
            value = graph.values[vid]
            if not value.is_array:
                continue
            producer = graph.nodes.get(value.producer) if value.producer is not None else None
            if producer is not None:
                src = producer.strategy.output_spec(producer.outputs.index(vid))
            elif value.producer is not None:
                # made by a node outside this graph (a pipeline stage's received activation): it arrives in the
                # layout its consumer wants
                src = specs.get(vid, s.input_spec(i))
            else:
                src = specs.get(vid, replicated_spec(len(value.shape)))
            dst = s.input_spec(i)
            cost = cost + redistribution_cost(value, src, dst, mesh, training, vid in grads)
            if src != dst and training and keeps_input(node, i, graph, grads):
                cost = cost + copy_memory(graph, vid, src, dst, mesh, grads)
        out[node.id] = cost
    return out


def copy_memory(graph: Any, vid: int, src: Spec, dst: Spec, mesh: MeshInfo, grads: frozenset[int]) -> Cost:
    """The memory of a consumer's copy of value ``vid`` redistributed ``src -> dst`` that its backward pass keeps.
    A step argument (a dataset input, a Parameter) stays resident whole: the copy counts in full. An op output is
    counted kept in its producer's layout already (``op_cost``); once redistributed, XLA keeps the copy the
    backward reads, not the original: the copy replaces it (counted as the difference, which may be negative) when
    this consumer is its only keeper, else it adds what it is larger by."""
    gathered, moved, _ = _moves(src, dst)
    if not gathered and not moved:
        return ZERO  # a slice: XLA fuses it into the consumer, which keeps reading the original
    value = graph.values[vid]
    block = block_bytes(value, dst, mesh)
    if value.producer is not None:
        block -= block_bytes(value, src, mesh)
        if not sole_keeper(graph, vid, grads):
            block = max(0.0, block)
    return Cost(memory_bytes=block, activation_bytes=block)


def input_bytes(graph: Any, mesh: MeshInfo, value_specs: Mapping[int, Spec] | None = None) -> float:
    """Per-device bytes of the step's dataset inputs in the layouts they arrive in (arguments of the step that no
    op's cost holds)."""
    specs = graph.plan.value_specs if value_specs is None else value_specs
    return sum(block_bytes(graph.values[v], specs.get(v, replicated_spec(len(graph.values[v].shape))), mesh)
               for v in graph.inputs if graph.values[v].kind == "input" and graph.values[v].is_array)


def predicted_peak(graph: Any, mesh: MeshInfo, per_node: Mapping[int, Cost] | None = None,
                   training: bool = True) -> float:
    """The plan's predicted per-device peak memory (``memory_model.peak_bytes``): ``plan_cost`` summed, plus the
    dataset inputs."""
    per_node = plan_cost(graph, mesh, training) if per_node is None else per_node
    return peak_bytes(sum_costs(per_node.values()), input_bytes(graph, mesh))


def reduce_scatter_saving(producer: NodeStrategy, value: Any, out_spec: Spec, dst: Spec, mesh: MeshInfo) -> float:
    """Wire bytes saved when a consumer slices a partial-sum output along axes the producer reduces over: the
    producer's AllReduce then becomes a ReduceScatter over those axes (XLA's reduce-scatter creator on GPU/TPU;
    MindSpore's AllReduce + StridedSlice fusion), and the slice costs nothing. 0 when nothing is saved."""
    partial = producer.partial_axes
    if not partial:
        return 0.0
    gathered, moved, sliced = _moves(out_spec, dst)
    scattered = tuple(a for a in partial if a in sliced)
    if not scattered or gathered or moved:
        return 0.0
    rest = tuple(a for a in partial if a not in scattered)
    block = block_bytes(value, out_spec, mesh)
    g_s = mesh.size(scattered)
    before = wire_bytes("AllReduce", block, mesh.size(partial))
    after = wire_bytes("ReduceScatter", block / g_s, g_s) + wire_bytes("AllReduce", block / g_s, mesh.size(rest))
    return max(before - after, 0.0)
