"""Train-step time of graphpar against a hand-written ``jax.jit`` + ``NamedSharding`` step doing the same work.

Same model (an MLP of Dense layers), same optimizer (momentum SGD through optax), same shardings (DATA_PARALLEL:
batch split over the 8 devices, parameters replicated; or the Megatron plan for the SEMI_AUTO case), same
device-resident global batch. The hand-written side is what an expert writes in JAX directly. Ratios are
graphpar / hand-written: 1.00 means no overhead.

What the tiny DATA_PARALLEL MLP's ratio measures (issues 11, 28): not the program. graphpar runs each device's
loss on its own slice (MindSpore's DATA_PARALLEL semantics) as a ``shard_map`` over the devices
(``compile/plans/per_device.py``), and XLA compiles the same instructions as for the hand-written step
(``tests/train/test_data_parallel.py``); the earlier ``vmap`` over the device axis had XLA fuse the weight gradients
differently (21 fusions against 18, about 2-4 % of this step).
What remains is graphpar's Python around it on every step (it runs on the cores the devices'
threads use): 20 µs per step, more than half of it flax's trace-level check on each Variable write; 7.0 µs with
the direct write, 4.0 µs with change-triggered checks (``compile/runtime/bound_step.py``), 3.3 µs with the loop's
step in three Python frames (issue 28). On a loaded machine the ratio
moves by a few percent from run to run: the control row times the hand-written step against an identical one, the
same way, to show that noise floor. Both sides do the same work per step: run the step with donated state on the placed
batch and keep the new state (graphpar in the Parameters, as MindSpore does; the hand-written side in a dict).
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import NamedSharding, PartitionSpec as P

import graphpar as ms
from graphpar.models.megatron import Megatron, MegatronMLP
from graphpar.models.mlp import DenseStack, mlp_train_cell

from bench.timing import compare


def _handwritten_dp(params: list[tuple[np.ndarray, np.ndarray]], x, y, lr, momentum, mesh):
    replicated = NamedSharding(mesh, P())
    batch = NamedSharding(mesh, P(tuple(mesh.axis_names)))
    tx = optax.sgd(lr, momentum=momentum)

    def forward(p, x):
        for i, (w, b) in enumerate(p):
            x = x @ w.T + b
            if i < len(p) - 1:
                x = jax.nn.relu(x)
        return x

    def loss_fn(p, x, y):
        return jnp.mean(jnp.square(forward(p, x) - y))

    def step(p, s, x, y):
        loss, g = jax.value_and_grad(loss_fn)(p, x, y)
        updates, s = tx.update(g, s, p)
        return optax.apply_updates(p, updates), s, loss

    p = jax.device_put([(jnp.asarray(w), jnp.asarray(b)) for w, b in params], replicated)
    s = jax.device_put(tx.init(p), replicated)
    xs, ys = jax.device_put(x, batch), jax.device_put(y, batch)
    jitted = jax.jit(step, in_shardings=(replicated, replicated, batch, batch),
                     out_shardings=(replicated, replicated, replicated), donate_argnums=(0, 1))
    state = {"p": p, "s": s}

    def run():
        state["p"], state["s"], loss = jitted(state["p"], state["s"], xs, ys)
        return loss

    return run


def _data_parallel_pair(sizes: list[int], batch: int):
    """The tiny DATA_PARALLEL MLP both benchmarks below time: graphpar's train cell (compiled by one step on its
    placed batch) and a builder of the hand-written step from the same initial weights (each call a fresh one)."""
    ms.reset_auto_parallel_context()
    ms.set_context(mode=ms.GRAPH_MODE, save_graphs=False)
    ms.set_auto_parallel_context(parallel_mode="data_parallel", gradients_mean=True)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(batch, sizes[0])).astype(np.float32)
    y = rng.normal(size=(batch, sizes[-1])).astype(np.float32)
    net = DenseStack([rng.normal(0, a ** -0.5, (b, a)).astype(np.float32) for a, b in zip(sizes, sizes[1:])])
    train = mlp_train_cell(net)
    placed = train.program.place_inputs([x, y])
    train(*placed)
    params = [(np.asarray(d.weight.asnumpy()), np.asarray(d.bias.asnumpy())) for d in net.layers]
    return train, placed, lambda: _handwritten_dp(params, x, y, 0.01, 0.9, train.program.plan.mesh)


def bench_data_parallel(sizes: list[int], batch: int, calls: int = 30, rounds: int = 15,
                        control: bool = False) -> dict:
    """graphpar's step against the hand-written one, ``rounds`` interleaved rounds of ``calls`` steps each (a tiny
    step wants many short rounds: the other processes' load changes within a second). ``control``: the
    hand-written step against a second, identical hand-written step instead, timed the same way: the ratio the
    machine's noise alone gives."""
    train, placed, handwritten = _data_parallel_pair(sizes, batch)
    hand = handwritten()
    if control:
        twin = handwritten()
        ours, theirs, ratio = compare(twin, hand, calls=calls, rounds=rounds)
        return {"model": f"control: hand-written vs itself, MLP {'-'.join(map(str, sizes))}", "batch": batch,
                "graphpar_ms": ours * 1e3, "handwritten_ms": theirs * 1e3, "ratio": ratio}
    ours, theirs, ratio = compare(lambda: train(*placed), hand, calls=calls, rounds=rounds)
    return {"model": f"MLP {'-'.join(map(str, sizes))}", "batch": batch, "graphpar_ms": ours * 1e3,
            "handwritten_ms": theirs * 1e3, "ratio": ratio, "compile_s": train.program.compile_seconds}


def bench_call_path(sizes: list[int], batch: int, calls: int = 50, rounds: int = 30) -> dict:
    """Where the tiny DATA_PARALLEL step's ratio comes from (issue 28): the executable graphpar compiled, called
    directly on a copy of the state kept in a dict (as the hand-written side keeps its own), against the
    hand-written step (``program_vs_hand``: the program XLA compiled), and graphpar's training-loop call against
    that direct call (``call_vs_program``: what the call path around the executable adds), split in three, each
    part against the one below it:

    - ``run_vs_program``: ``BoundStep.run`` on the Variables' values (the executable call, the write of its results
      into the Parameters and the optimizer, the in-flight limit, and reading the values for the call);
    - ``repeat_vs_run``: ``BoundStep.repeat`` (the training loop's checks: revisions, the batch's and the
      Variables' identity, no deleted array; then ``run``'s work written out in the same frame, without reading
      the Variables' values) over ``run``;
    - ``call_vs_repeat``: ``train(*placed)`` (the Cell call, the program lookup, the pending op-check test) over
      ``repeat``;
    - ``call_vs_program_cpu``: ``call_vs_program`` in CPU seconds of the process (steadier on a loaded machine).

    Measured on 2 cores shared with other jobs (load 15-40), process CPU per step against the direct call: the
    whole call 1.04-1.07, ``run`` alone 1.02-1.05, the checks about as much again; the same executable called from
    four separately built train cells 1.05-1.07 each, two direct copies 1.00-1.01. Plain Python busy work of
    1.2-4.8 µs (hot loop) put before or after the direct call moved it by at most 1 %, so the gap is not the
    Python time alone (about 4 µs per call in a hot loop, graphpar's frames included).

    Measured again (issue 28, load 6-26; the step is ~1.0 ms of process CPU, ~1.4-2.8 ms wall; every side
    interleaved in shuffled rounds of 50 calls, 80-150 rounds, medians of per-round ratios against the direct call,
    process CPU; a second direct copy 0.99-1.02): ``run`` 1.016-1.038, the whole call 1.027-1.046; with the other
    core busy the call 1.018-1.020. Python time with a stand-in executable (returns its inputs; best of 200 x 1000
    calls): the direct call 0.2 µs, ``run`` 2.7 µs (its parts: the write into 4 Variables 0.42, blocking on the
    ready 8-device loss 0.67, reading the values 0.5), ``repeat`` 3.5-3.6, the Cell call 4.4-4.7. A busy loop of
    2.1 µs after the direct call cost it 1.1-1.9 %, 0.8 µs 0.3-0.9 %: on 8 devices sharing 2 cores a microsecond of
    Python costs several of the devices' threads, which is what the call's 4.5 µs add up to. Neither the arrays
    passed (the same objects as the direct call's: the executable's last outputs), Python's garbage collector (no
    collection in 3000 steps) nor the in-flight limit's wait on the oldest step (the direct call with the same limit
    1.00-1.004) accounts for more. Draining the in-flight queue to the newest step once full (one wait per two
    steps, the same bound) gave 1.016-1.023 instead of 1.027-1.033 on the shared machine but 1.031-1.039 instead of
    1.018-1.020 with the other core busy, and was not taken (``compile/runtime/bound_step.py``).

    Cut (issue 28): ``repeat`` does ``run``'s work in its own frame, ``TrainProgram.run_step`` is the fast path
    and ``TrainOneStepCell.__call__`` reads the current program itself; with the stand-in executable (best of
    150 x 1000 calls, same load, main's tree and this one alternated): the Cell call 4.5 -> 3.4-3.6 µs,
    ``repeat`` 3.5 -> 2.8-2.9, ``run`` 2.6 unchanged."""
    train, placed, handwritten = _data_parallel_pair(sizes, batch)
    hand = handwritten()
    run = train.program.stages(placed).compiled.run
    ns, step = train.program.state, train.program.bound

    def copy(tree):  # the step donates its state: the direct side keeps its own
        return jax.tree.map(lambda a: jax.device_put(a.copy(), a.sharding), tree)

    state = {"p": copy(list(ns.params.values())), "r": copy(list(ns.rest.values())),
             "o": copy(train.optimizer.opt_state)}

    def direct():
        state["p"], state["r"], state["o"], loss = run(state["p"], state["r"], state["o"], placed)
        return loss

    def bound_run():
        return step.run(ns.params.values(), ns.rest.values(), placed)

    def repeat():
        return step.repeat(placed, False)

    _, _, program = compare(direct, hand, calls=calls, rounds=rounds)
    _, _, call = compare(lambda: train(*placed), direct, calls=calls, rounds=rounds)
    _, _, ran = compare(bound_run, direct, calls=calls, rounds=rounds)
    _, _, checks = compare(repeat, bound_run, calls=calls, rounds=rounds)
    _, _, cell = compare(lambda: train(*placed), repeat, calls=calls, rounds=rounds)
    _, _, call_cpu = compare(lambda: train(*placed), direct, calls=calls, rounds=rounds, clock=time.process_time)
    return {"model": f"MLP {'-'.join(map(str, sizes))}", "batch": batch, "program_vs_hand": program,
            "call_vs_program": call, "run_vs_program": ran, "repeat_vs_run": checks, "call_vs_repeat": cell,
            "call_vs_program_cpu": call_cpu}


def _megatron_weights(d: int, h: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return ((rng.normal(size=(d, h)) * 0.02).astype(np.float32), (rng.normal(size=(h, d)) * 0.02).astype(np.float32))


def bench_megatron(d: int = 512, h: int = 2048, blocks: int = 2, batch: int = 64, calls: int = 20,
                   inspect: bool = False) -> dict:
    """SEMI_AUTO/AUTO: graphpar's planned step against a JAX step given only the Megatron parameter shardings
    (columns of w1, rows of w2) and the replicated batch; XLA's sharding propagation chooses every other layout.
    The ratio measures graphpar's plan (its per-op layouts) against XLA's own choices, not only dispatch
    overhead."""
    ms.reset_auto_parallel_context()
    ms.set_context(mode=ms.GRAPH_MODE, save_graphs=False)
    ms.set_auto_parallel_context(parallel_mode="auto_parallel", search_mode="sharding_propagation", full_batch=True)
    rng = np.random.default_rng(1)
    x = rng.normal(size=(batch, d)).astype(np.float32)
    y = rng.normal(size=(batch, d)).astype(np.float32)
    net = Megatron([MegatronMLP(*_megatron_weights(d, h, seed)) for seed in range(blocks)])
    train = mlp_train_cell(net)
    placed = train.program.place_inputs([x, y])
    train(*placed)
    mesh = train.program.plan.mesh  # the same devices; the layouts below are the textbook Megatron ones
    axes = tuple(mesh.axis_names)
    col, row, rep = NamedSharding(mesh, P(None, axes)), NamedSharding(mesh, P(axes, None)), NamedSharding(mesh, P())
    tx = optax.sgd(0.01, momentum=0.9)
    params = [(jax.device_put(jnp.asarray(b.w1.asnumpy()), col), jax.device_put(jnp.asarray(b.w2.asnumpy()), row))
              for b in net.blocks]
    def loss_fn(p, x, y):
        for w1, w2 in p:
            x = jax.nn.gelu(x @ w1, approximate=True) @ w2
        return jnp.mean(jnp.square(x - y))

    def step(p, s, x, y):
        loss, g = jax.value_and_grad(loss_fn)(p, x, y)
        updates, s = tx.update(g, s, p)
        return optax.apply_updates(p, updates), s, loss

    p_sh = [(col, row)] * blocks
    s = jax.device_put(tx.init(params), jax.tree.map(lambda a: a.sharding, tx.init(params)))
    jitted = jax.jit(step, in_shardings=(p_sh, None, rep, rep), out_shardings=(p_sh, None, rep),
                     donate_argnums=(0, 1))
    state = {"p": params, "s": s}
    xs, ys = jax.device_put(x, rep), jax.device_put(y, rep)

    def hand():
        state["p"], state["s"], loss = jitted(state["p"], state["s"], xs, ys)
        return loss

    if inspect:
        return {"graphpar_hlo": train.program.lower_step(placed).compile().as_text(),
                "handwritten_hlo": jitted.lower(state["p"], state["s"], xs, ys).compile().as_text()}
    ours, theirs, ratio = compare(lambda: train(*placed), hand, calls=calls)
    return {"model": f"Megatron MLP d{d} h{h} x{blocks} (AUTO)", "batch": batch, "graphpar_ms": ours * 1e3,
            "handwritten_ms": theirs * 1e3, "ratio": ratio, "compile_s": train.program.compile_seconds}


def bench_dispatch(calls: int = 300) -> dict:
    """The executable graphpar runs (``jax.stages.Compiled`` from ``jit(...).trace().lower().compile()``) against
    the same jitted function called through ``jax.jit`` (its C++ fast path): the tiny DATA_PARALLEL MLP step, where
    dispatch is most of the time."""
    mesh = jax.sharding.Mesh(np.asarray(jax.devices()), ("d",))
    rep, batch = NamedSharding(mesh, P()), NamedSharding(mesh, P("d"))

    def step(p, x):
        g = jax.grad(lambda p: jnp.mean(jnp.square(jnp.tanh(x @ p[0]) @ p[1])))(p)
        return [a - 0.01 * b for a, b in zip(p, g)], jnp.sum(x)

    p = [jax.device_put(jnp.full((32, 16), 0.1), rep), jax.device_put(jnp.full((16, 16), 0.1), rep)]
    x = jax.device_put(jnp.ones((16, 32)), batch)
    jitted = jax.jit(step, in_shardings=([rep, rep], batch), out_shardings=([rep, rep], rep))
    compiled = jitted.trace(p, x).lower().compile()
    jitted(p, x)
    _, _, ratio = compare(lambda: compiled(p, x)[1], lambda: jitted(p, x)[1], calls=calls)
    ours, theirs, _ = compare(lambda: compiled(p, x)[1], lambda: jitted(p, x)[1], calls=calls, rounds=3)
    return {"model": "dispatch: Compiled.__call__ vs jax.jit", "batch": 16, "graphpar_ms": ours * 1e3,
            "handwritten_ms": theirs * 1e3, "ratio": ratio}
