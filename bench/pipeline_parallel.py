"""Pipeline parallel (issue 12): step time and memory per device with pipelining on and off.

* graphpar pipelined: ``PipelineCell`` on 2 stages x 4 devices, 1F1B and GPipe;
* graphpar unpipelined: the same ``PipelineCell`` with ``pipeline_stages=1`` (SEMI_AUTO, data parallel over 8);
* hand-written JAX pipeline: what a JAX user writes for an MPMD pipeline without graphpar — the layers of each stage
  as a plain function, one ``jax.jit`` of ``jax.value_and_grad`` per stage on its own 4-device mesh, forward
  activations kept as ``jax.vjp`` closures, GPipe order, ``jax.device_put`` between the stages' meshes, optax
  momentum per stage. The ratio is graphpar's 1F1B step over it.

Memory per device: the bytes of parameters and optimizer state one device holds (from the arrays' addressable
shards), and the peak bytes of live residuals one device held (graphpar's runtime measure).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import graphpar as ms
from graphpar import nn
from graphpar.models.mlp import DenseStack

from bench.timing import compare

LR, MOMENTUM = 0.01, 0.9


def _per_device_bytes(arrays: list) -> int:
    """The most bytes any one device holds of ``arrays``."""
    held: dict[int, int] = {}
    for a in arrays:
        if isinstance(a, jax.Array):
            for shard in a.addressable_shards:
                held[shard.device.id] = held.get(shard.device.id, 0) + shard.data.nbytes
    return max(held.values()) if held else 0


def _graphpar(weights, x, y, stages: int, micro: int, scheduler: str):
    ms.reset_auto_parallel_context()
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", pipeline_stages=stages,
                                 pipeline_config={"pipeline_scheduler": scheduler})
    net = DenseStack(weights, stages=stages)
    train = nn.TrainOneStepCell(nn.PipelineCell(nn.WithLossCell(net, nn.MSELoss()), micro),
                                nn.Momentum(net.trainable_params(), LR, MOMENTUM))
    xs, ys = np.asarray(x), np.asarray(y)
    train(xs, ys)
    return train, (lambda: train(xs, ys))


def _handwritten(weights, x, y, micro: int):
    """A 2-stage GPipe pipeline written directly in JAX (see the module docstring)."""
    devices = jax.devices()
    half = len(devices) // 2
    meshes = [Mesh(np.asarray(devices[:half]).reshape(half), ("d",)),
              Mesh(np.asarray(devices[half:]).reshape(half), ("d",))]
    cut = len(weights) // 2
    tx = optax.sgd(LR, momentum=MOMENTUM)
    rep = [NamedSharding(m, P()) for m in meshes]
    batch = [NamedSharding(m, P("d")) for m in meshes]
    params = [jax.device_put([(jnp.asarray(w), jnp.zeros(w.shape[0])) for w in weights[:cut]], rep[0]),
              jax.device_put([(jnp.asarray(w), jnp.zeros(w.shape[0])) for w in weights[cut:]], rep[1])]
    opt = [jax.device_put(tx.init(p), r) for p, r in zip(params, rep)]

    def layers(p, h, last):
        for i, (w, b) in enumerate(p):
            h = h @ w.T + b
            if not (last and i == len(p) - 1):
                h = jax.nn.relu(h)
        return h

    @jax.jit
    def fwd0(p, xb):
        return jax.vjp(lambda p: layers(p, xb, False), p)

    @jax.jit
    def last(p, h, yb):  # forward and backward of the last stage in one program
        loss, (gp, gh) = jax.value_and_grad(lambda p, h: jnp.mean(jnp.square(layers(p, h, True) - yb)),
                                            argnums=(0, 1))(p, h)
        return loss, gp, gh

    @jax.jit
    def bwd0(vjp, ct):
        return vjp(ct)[0]

    @jax.jit
    def update(p, g, s):
        u, s = tx.update(g, s, p)
        return optax.apply_updates(p, u), s

    mb = x.shape[0] // micro
    xs = [jax.device_put(x[k * mb:(k + 1) * mb], batch[0]) for k in range(micro)]
    ys = [jax.device_put(y[k * mb:(k + 1) * mb], batch[1]) for k in range(micro)]
    state = {"p": params, "s": opt}

    def step():
        p = state["p"]
        outs = [fwd0(p[0], xb) for xb in xs]
        grads1, cts, losses = None, [], []
        for (h, _), yb in zip(outs, ys):
            loss, g, gh = last(p[1], jax.device_put(h, batch[1]), yb)
            grads1 = g if grads1 is None else jax.tree.map(jnp.add, grads1, g)
            cts.append(jax.device_put(gh, batch[0]))
            losses.append(loss)
        grads0 = None
        for (_, vjp), ct in zip(outs, cts):
            g = bwd0(vjp, ct)
            grads0 = g if grads0 is None else jax.tree.map(jnp.add, grads0, g)
        p0, s0 = update(p[0], grads0, state["s"][0])
        p1, s1 = update(p[1], grads1, state["s"][1])
        state["p"], state["s"] = [p0, p1], [s0, s1]
        return losses[-1]

    step()
    return state, step


def bench_pipeline_parallel(width: int = 512, layers: int = 8, batch: int = 64, micro: int = 4,
                            calls: int = 5, rounds: int = 5) -> list[dict]:
    rng = np.random.default_rng(0)
    weights = [(rng.normal(0, 1 / np.sqrt(width), (width, width))).astype(np.float32) for _ in range(layers)]
    x = rng.normal(size=(batch, width)).astype(np.float32)
    y = rng.normal(size=(batch, width)).astype(np.float32)
    rows = []
    hand_state, hand = _handwritten(weights, x, y, micro)
    hand_bytes = max(_per_device_bytes(jax.tree.leaves(hand_state["p"][i]) + jax.tree.leaves(hand_state["s"][i]))
                     for i in range(2))
    for name, stages, scheduler in (("pipelined 2x4, 1f1b", 2, "1f1b"), ("pipelined 2x4, gpipe", 2, "gpipe"),
                                    ("unpipelined (8-way data parallel)", 1, "1f1b")):
        train, run = _graphpar(weights, x, y, stages, micro, scheduler)
        ours, theirs, ratio = compare(run, hand, calls=calls, rounds=rounds, warmup=1)
        program = train.program
        state = [p.get_raw_value() for p in train.network.network.trainable_params()]
        state += jax.tree.leaves(train.optimizer.opt_state)
        stats = getattr(program, "stats", None)
        rows.append({"setup": name, "layers": layers, "width": width, "batch": batch, "micro": micro,
                     "graphpar_ms": ours * 1e3, "handwritten_gpipe_ms": theirs * 1e3, "ratio": ratio,
                     "state_mb_per_device": _per_device_bytes(state) / 2**20,
                     "handwritten_state_mb": hand_bytes / 2**20,
                     "peak_residual_mb_per_device": (max(stats.peak_residual_bytes) / 2**20) if stats else "-",
                     "transfers_per_step": stats.transfers_last_step if stats else 0})
    ms.reset_auto_parallel_context()
    return rows
