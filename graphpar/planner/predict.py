"""The cost model's prediction for a compiled program: collective wire bytes per node and in total.

A planned graph (SEMI_AUTO / AUTO) is priced as it stands (:func:`graphpar.planner.cost.plan_cost`). A
DATA_PARALLEL program is not planned on a mesh (it runs one replica per device and reduces the gradients), so its
(per-replica) graph is priced as data parallel on ``n`` devices: each parameter's gradient AllReduce, and the
AllReduce of every statistic computed over the batch (SyncBatchNorm's global statistics).
"""

from __future__ import annotations

from graphpar._context import ParallelMode
from graphpar.ir.graph import Graph
from graphpar.planner.cost import Cost, grad_values, op_cost, plan_cost
from graphpar.planner.rules import rule_for
from graphpar.planner.passes.defaults import batch_label
from graphpar.planner.strategy import MeshInfo, NodeStrategy
from graphpar.planner.wire import wire_bytes


def data_parallel_costs(graph: Graph, n_devices: int, training: bool = True,
                        only: frozenset[int] | None = None) -> dict[int, Cost]:
    """Per node, the cost of ``graph`` run as DATA_PARALLEL on ``n_devices``. The graph is one replica's (per-device
    shapes): every op is given its batch split over one mesh axis of ``n_devices`` as it stands, so each
    Parameter's gradient is AllReduced over all devices and SyncBatchNorm's statistics too; a plain BatchNorm keeps
    per-device statistics (MindSpore's DATA_PARALLEL), whose reduction is left out."""
    mesh = MeshInfo(("m0",), (n_devices,))
    grads = grad_values(graph) if training else frozenset()
    out: dict[int, Cost] = {}
    for node in graph.node_list():
        if only is not None and node.id not in only:
            continue
        rule = rule_for(node.kind)
        dims = rule(node, graph) if rule is not None else None
        label = batch_label(dims) if dims is not None else None
        if dims is None or label is None or label in dims.fixed:
            out[node.id] = Cost()
            continue
        strategy = NodeStrategy(dims, ((label, ("m0",)),), (), mesh)
        cost = op_cost(graph, node, strategy, mesh, training, grads)
        if node.kind == "BatchNorm":  # local statistics: no reduction of the outputs beyond the first
            for vid in node.outputs[1:]:
                value = graph.values[vid]
                cost = cost + Cost(-wire_bytes("AllReduce", value.nbytes, n_devices), -1)
        out[node.id] = cost
    return out


def predicted_costs(graph: Graph, mode: str, n_devices: int, training: bool = True) -> dict[int, Cost]:
    """Per node id, the cost model's prediction (collectives, compute, memory) for the program ``graph`` runs in."""
    if mode == ParallelMode.DATA_PARALLEL:
        return data_parallel_costs(graph, n_devices, training)
    return plan_cost(graph, graph.plan.mesh, training)


def predicted_bytes(graph: Graph, mode: str, n_devices: int, training: bool = True) -> float:
    return sum(c.comm_bytes for c in predicted_costs(graph, mode, n_devices, training).values())
