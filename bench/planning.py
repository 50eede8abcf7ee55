"""Cost of graphpar's compile stages (trace, plan, lower) against XLA's compile time and JAX's own lowering.

Two programs: a 64- and a 256-layer MLP-like graph (Dense + ReLU per layer, the first matmul hinted, AUTO_PARALLEL
with sharding propagation; if planning is linear in the graph size the per-node times are close) and a GPT-style
network with Megatron strategies on every op (``graphpar.models.gpt``, SEMI_AUTO_PARALLEL).

The JAX baseline lowers *the same sharded program*: the same traced computation (the graph's jaxpr, evaluated
as JAX evaluates a jaxpr), differentiated with ``jax.value_and_grad``, the same optax update, and jitted with the
same parameter, state and batch shardings — what a JAX user who placed the arrays the same way would lower, without
graphpar's per-op layout pins. ``fraction_of_compile`` = (trace + plan + lower) / XLA compile (goal <= 0.25);
``lower_ratio`` = graphpar's lowering / the baseline's (goal <= 1.3).
"""

from __future__ import annotations

import time

import jax
import numpy as np
import optax
from jax.extend import core as jcore

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


def _measure(train, inputs, name: str) -> dict:
    program = train.program
    started = time.perf_counter()
    graph = program.plan_graph(inputs)
    planned = time.perf_counter()
    lowered = program.lower_step(inputs)
    done = time.perf_counter()
    lowered.compile()
    compiled = time.perf_counter()
    hand_lower = _jax_lower_seconds(train, inputs)
    nodes = len(graph.order)
    ours = done - started
    return {"model": name, "nodes": nodes, "trace_plan_s": planned - started, "lower_s": done - planned,
            "per_node_ms": ours / nodes * 1e3, "xla_compile_s": compiled - done,
            "fraction_of_compile": ours / (compiled - done), "jax_lower_s": hand_lower,
            "lower_ratio": (done - planned) / hand_lower,
            "passes_ms": {k: v * 1e3 for k, v in graph.meta["pass_seconds"].items()}}


def _jax_lower_seconds(train, inputs) -> float:
    """Lower the same computation with the same shardings as plain JAX would (see the module docstring)."""
    program = train.program
    planned, ns = program.planned(inputs), program.state
    graph, layout = planned.graph, planned.layout
    p_sh = [layout.param_sharding(n, np.shape(v)) for n, v in zip(ns.param_names(), ns.params.values())]
    r_sh = [layout.param_sharding(n, np.shape(v)) for n, v in zip(ns.rest.names(), ns.rest.values())]
    i_sh = [layout.input_sharding(i, np.shape(x)) for i, x in enumerate(inputs)]
    fun = jcore.jaxpr_as_fun(graph.closed_jaxpr)
    tx = optax.sgd(0.01, momentum=0.9)

    def step(p, r, s, xs):
        def loss_fn(p):
            out = fun(*p, *r, *xs)
            return jax.numpy.sum(out[0]), out[1:]

        (loss, new_r), g = jax.value_and_grad(loss_fn, has_aux=True)(p)
        updates, s = tx.update(g, s, p)
        return optax.apply_updates(p, updates), new_r, s, loss

    def aval(v, s):
        return jax.ShapeDtypeStruct(np.shape(v), jax.numpy.result_type(v), sharding=s)

    p_avals = [aval(v, s) for v, s in zip(ns.params.values(), p_sh)]
    state = jax.eval_shape(tx.init, p_avals)
    started = time.perf_counter()
    jax.jit(step, in_shardings=(p_sh, r_sh, None, i_sh), out_shardings=(p_sh, r_sh, None, None),
            donate_argnums=(0, 1, 2)).trace(
        p_avals, [aval(v, s) for v, s in zip(ns.rest.values(), r_sh)], state,
        [jax.ShapeDtypeStruct(np.shape(x), np.asarray(x).dtype, sharding=s) for x, s in zip(inputs, i_sh)]).lower()
    return time.perf_counter() - started


def bench_planning(layers: int, width: int = 64, batch: int = 32) -> dict:
    ms.reset_auto_parallel_context()
    ms.set_context(mode=ms.GRAPH_MODE, save_graphs=False)
    ms.set_auto_parallel_context(parallel_mode="auto_parallel", search_mode="sharding_propagation")
    net = Deep(layers, width)
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.Momentum(net.trainable_params(), 0.01, 0.9))
    x = np.ones((batch, width), np.float32)
    return _measure(train, [x, x], f"MLP {layers} layers")


def bench_planning_gpt(layers: int = 8) -> dict:
    from graphpar.models.gpt import GPT, gpt_data, gpt_train_cell

    ms.reset_auto_parallel_context()
    ms.set_context(mode=ms.GRAPH_MODE, save_graphs=False)
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", full_batch=True)
    train = gpt_train_cell(GPT(vocab=512, hidden=128, heads=8, seq=32, layers=layers), lr=0.01)
    return _measure(train, list(gpt_data(batch=16, seq=32, vocab=512)), f"GPT {layers} blocks")
