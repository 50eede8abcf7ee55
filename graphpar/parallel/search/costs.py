"""The search's view of the cost model (``graphpar.parallel.cost``): the per-step time it minimises and the caches
that make pricing a deep graph cheap.

TEMPORARY: until planner-9's cost model (``Cost``, ``op_cost``, ``redistribution_cost``) lands in
``graphpar.parallel.cost``, this module carries a minimal stand-in with the same API; it is deleted on merge.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from graphpar.parallel.cost import redistribution_bytes
from graphpar.parallel.strategy import MeshInfo, NodeStrategy, Spec


@dataclass(frozen=True)
class Hardware:
    name: str
    alpha: float
    beta: float
    gamma: float


HARDWARE = {"cpu": Hardware("cpu", 2e-5, 2e-10, 5e-11), "gpu": Hardware("gpu", 1e-5, 5e-12, 2.5e-15),
            "tpu": Hardware("tpu", 5e-6, 1.1e-11, 5e-15)}
DEFAULT_HW = HARDWARE["gpu"]


@dataclass(frozen=True)
class Cost:
    comm_bytes: float = 0.0
    messages: int = 0
    flops: float = 0.0
    memory_bytes: float = 0.0

    def __add__(self, other: "Cost") -> "Cost":
        return Cost(self.comm_bytes + other.comm_bytes, self.messages + other.messages, self.flops + other.flops,
                    self.memory_bytes + other.memory_bytes)

    def time(self, hw: Hardware = DEFAULT_HW) -> float:
        return hw.alpha * self.messages + hw.beta * self.comm_bytes + hw.gamma * self.flops

    def as_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


ZERO = Cost()


def _is_float(value: Any) -> bool:
    try:
        return np.issubdtype(np.dtype(value.dtype), np.inexact)
    except (AttributeError, TypeError):
        return True


def grad_values(graph: Any) -> frozenset[int]:
    out = {vid for vid in graph.inputs if graph.values[vid].kind == "param" and _is_float(graph.values[vid])}
    for node in graph.node_list():
        if any(v in out for v in node.inputs):
            out.update(v for v in node.outputs if _is_float(graph.values[v]))
    return frozenset(out)


def block_bytes(value: Any, spec: Spec, mesh: MeshInfo) -> float:
    total = float(np.prod(value.shape, dtype=np.float64)) * value.itemsize
    return total / mesh.size(tuple(a for axes in spec for a in axes))


def _allreduce(nbytes: float, g: int) -> Cost:
    return ZERO if g <= 1 else Cost(comm_bytes=2 * (g - 1) / g * nbytes, messages=1)


def redistribution_cost(value: Any, src: Spec, dst: Spec, mesh: MeshInfo, training: bool = True,
                        needs_grad: bool | None = None) -> Cost:
    if src == dst or not value.shape:
        return ZERO
    fwd = redistribution_bytes(src, dst, value.shape, value.itemsize, mesh)
    cost = Cost(comm_bytes=fwd, messages=int(fwd > 0))
    if training and (needs_grad if needs_grad is not None else _is_float(value)):
        bwd = redistribution_bytes(dst, src, value.shape, value.itemsize, mesh)
        cost = cost + Cost(comm_bytes=bwd, messages=int(bwd > 0))
    return cost


def op_cost(graph: Any, node: Any, strategy: NodeStrategy, mesh: MeshInfo, training: bool = True,
            needs_grad: frozenset[int] | None = None) -> Cost:
    values = graph.values
    partial = strategy.partial_axes
    cost = ZERO
    memory = 0.0
    for j, vid in enumerate(node.outputs):
        value = values[vid]
        block = block_bytes(value, strategy.output_spec(j), mesh)
        memory += block
        if partial:
            cost = cost + _allreduce(block, mesh.size(partial))
    if training:
        grads = grad_values(graph) if needs_grad is None else needs_grad
        axes = strategy.axes
        split = [l for l in strategy.dims.order if axes.get(l)]
        for i, vid in enumerate(node.inputs):
            if vid not in grads:
                continue
            carried = set(strategy.dims.inputs[i])
            over = tuple(a for l in split if l not in carried for a in axes[l])
            cost = cost + _allreduce(block_bytes(values[vid], strategy.input_spec(i), mesh), mesh.size(over))
    for i, vid in enumerate(node.inputs):
        if values[vid].kind == "param":
            memory += block_bytes(values[vid], strategy.input_spec(i), mesh) * (4 if training else 1)
    work = max([float(np.prod(values[v].shape, dtype=np.float64)) for v in node.inputs + node.outputs] or [0.0])
    return cost + Cost(flops=work / max(strategy.devices_used, 1), memory_bytes=memory)
