"""The planner's own cost (issue 9): planning time per op node as graphs grow, and the cost model on big meshes.

* Planning: the GPT of graphpar/models/gpt.py (MindSpore's parallel transformer) with ``L`` layers, AUTO_PARALLEL
  + sharding_propagation from the Q/K/V and first FFN matmul hints, 8 devices. The passes' time (hints, propagation
  with the cost model, defaults, parameter placement, verification, redistribution report) divided by the op
  nodes, for ~1k and ~10k nodes: a linear planner keeps the two per-node times close (goal: within 1.5x).
* Cost model: the same redistributions and MatMul op costs priced on an 8-device mesh (3 axes) and a 4,096-device
  mesh (12 axes); closed form per tensor dimension, so the two times are close (goal: ratio <= 2).
"""

from __future__ import annotations

import time

import numpy as np

import graphpar as ms


def _gpt_graph(layers: int):
    from graphpar.models.gpt import GPT, QKV_FFN1, gpt_data, gpt_train_cell

    ms.reset_auto_parallel_context()
    ms.set_context(mode=ms.GRAPH_MODE, save_graphs=False)
    ms.set_auto_parallel_context(parallel_mode="auto_parallel", search_mode="sharding_propagation")
    ids, labels = gpt_data()
    train = gpt_train_cell(GPT(hints=QKV_FFN1, layers=layers))
    started = time.perf_counter()
    graph = train.program.plan_graph([ids, labels])
    return graph, time.perf_counter() - started


def bench_planning_per_node(layers: int) -> dict:
    graph, total = _gpt_graph(layers)
    passes = graph.plan.pass_seconds
    nodes = len(graph.order)
    plan_s = sum(passes.values())
    return {"layers": layers, "nodes": nodes, "trace_and_plan_s": total, "plan_s": plan_s,
            "plan_us_per_node": plan_s / nodes * 1e6,
            "passes_ms": {k: round(v * 1e3, 1) for k, v in passes.items()}}


class _Value:
    def __init__(self, shape):
        self.shape, self.itemsize, self.dtype = shape, 4, np.dtype(np.float32)


def bench_cost_model(n_axes: int, repeats: int = 2000) -> dict:
    """Seconds per (redistribution + MatMul op) pricing on a mesh of ``2 ** n_axes`` devices."""
    from graphpar.ir.graph import Node, Value
    from graphpar.planner.cost import op_cost, redistribution_cost
    from graphpar.planner.dims import DimSpec
    from graphpar.planner.strategy import MeshInfo, NodeStrategy

    names = tuple(f"m{i}" for i in range(n_axes))
    mesh = MeshInfo(names, (2,) * n_axes)
    half = n_axes // 2
    value = _Value((1 << 14, 1 << 14))
    pairs = [((names, ()), ((), names)), ((names[:half], names[half:]), (names, ())),
             ((names[:1], ()), ((), ())), (((), ()), (names[half:], names[:half]))]

    class Graph:  # the one MatMul node x (M, K) @ w (K, N), as op_cost reads it
        values = {0: Value(0, (1 << 14, 1 << 14), np.dtype(np.float32), "input"),
                  1: Value(1, (1 << 14, 1 << 14), np.dtype(np.float32), "param", "w"),
                  2: Value(2, (1 << 14, 1 << 14), np.dtype(np.float32), "op", producer=0)}

    node = Node(0, "MatMul", "matmul", "", {}, None, None, [0, 1], [2], None, True)
    dims = DimSpec((("i", "k"), ("k", "j")), (("i", "j"),), ("i", "k", "j"))
    strategy = NodeStrategy(dims, (("i", names[:half]), ("k", names[half:])), (), mesh)
    grads = frozenset({1, 2})
    started = time.perf_counter()
    for _ in range(repeats):
        for src, dst in pairs:
            redistribution_cost(value, src, dst, mesh)
        op_cost(Graph, node, strategy, mesh, needs_grad=grads)
    seconds = (time.perf_counter() - started) / repeats
    return {"devices": mesh.n_devices, "axes": n_axes, "us_per_pricing": seconds * 1e6}
