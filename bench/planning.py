"""Cost of planning: trace + propagation + lowering per op node, and as a fraction of XLA's compile time.

A 64-layer and a 256-layer MLP-like graph (Dense + ReLU per layer, the first matmul hinted, AUTO_PARALLEL with
sharding propagation). If planning is linear in the graph size, the per-node times of the two are close
(ratio ~1).
"""

from __future__ import annotations

import time

import numpy as np

import graphpar as ms
from graphpar import nn


class Deep(nn.Cell):
    def __init__(self, layers: int, width: int):
        super().__init__()
        cells = [nn.Dense(width, width, activation="relu") for _ in range(layers)]
        cells[0].matmul.shard(((2, 1), (4, 1)))
        self.body = nn.SequentialCell(cells)

    def construct(self, x):
        return self.body(x)


def bench_planning(layers: int, width: int = 64, batch: int = 32) -> dict:
    ms.reset_auto_parallel_context()
    ms.set_context(mode=ms.GRAPH_MODE, save_graphs=False)
    ms.set_auto_parallel_context(parallel_mode="auto_parallel", search_mode="sharding_propagation")
    net = Deep(layers, width)
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.Momentum(net.trainable_params(), 0.01, 0.9))
    x = np.ones((batch, width), np.float32)
    program = train.program
    started = time.perf_counter()
    graph = program.plan_graph([x, x])
    planned = time.perf_counter()
    lowered = program.lower_step([x, x])
    done = time.perf_counter()
    lowered.compile()
    compiled = time.perf_counter()
    nodes = len(graph.order)
    ours = done - started
    hand_lower = _handwritten_lower_seconds(net, x)
    return {"layers": layers, "nodes": nodes, "trace_plan_s": planned - started, "lower_s": done - planned,
            "per_node_ms": ours / nodes * 1e3, "xla_compile_s": compiled - done,
            "handwritten_lower_s": hand_lower, "lower_ratio": (done - planned) / hand_lower,
            "fraction_of_compile": ours / (compiled - done), "passes_ms": {
                k: v * 1e3 for k, v in graph.meta["pass_seconds"].items()}}


def _handwritten_lower_seconds(net: Deep, x: np.ndarray) -> float:
    """Time to trace and lower the same train step written directly in JAX (same layers, loss and optimizer)."""
    import jax
    import jax.numpy as jnp
    import optax

    params = [(jnp.asarray(d.weight.asnumpy()), jnp.asarray(d.bias.asnumpy())) for d in net.body.cells()]
    tx = optax.sgd(0.01, momentum=0.9)

    def loss_fn(p, x):
        h = x
        for w, b in p:
            h = jax.nn.relu(h @ w.T + b)
        return jnp.mean(jnp.square(h - x))

    def step(p, s, x):
        loss, g = jax.value_and_grad(loss_fn)(p, x)
        updates, s = tx.update(g, s, p)
        return optax.apply_updates(p, updates), s, loss

    started = time.perf_counter()
    jax.jit(step).lower(params, tx.init(params), jnp.asarray(x))
    return time.perf_counter() - started
