"""Bigger models (issue 12): step time and memory per device with each feature on and off.

Each row trains the same model twice in DATA_PARALLEL on the 8 devices, with the feature off and on, timed
interleaved (``bench.timing.compare``), and reports per device: the bytes of parameters + optimizer state held (from
the arrays' addressable shards) and the compiled step's temporary memory (``memory_analysis()``).

* parallel optimizer (level1, Adam): state 1/8 per device, the same wire bytes (reduce-scatter + all-gather in
  place of the all-reduce);
* gradient accumulation (4 micro-batches): the same global batch of 4 x the micro-batch; activations of one
  micro-batch alive at a time;
* parallel optimizer level3: the backward pass gathers the weights again instead of keeping them;
* recompute (every block of an 8-block FFN): activations recomputed in the backward pass. On CPU XLA's default
  scheduler hoists recomputation (see ``graphpar.compile.lowering.recompute``); ``make bench`` passes no scheduler flag, so
  these rows show the default behaviour, and the temp memory with the memory scheduler (recompute, level1 and
  level3) is measured in a subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import numpy as np

import graphpar as ms
from graphpar import nn
from graphpar.models.mlp import DeepFFN
from bench.timing import compare


def _state_bytes(train) -> int:
    device = jax.devices()[0]
    values = [p.get_raw_value() for p in train.optimizer.parameters] + jax.tree.leaves(train.optimizer.opt_state)
    return sum(s.data.nbytes for v in values for s in v.addressable_shards if s.device == device)


def _build(d: int, layers: int, batch: int, micro: int = 1, recompute: bool = False, **ctx):
    ms.reset_auto_parallel_context()
    ms.set_context(mode=ms.GRAPH_MODE, save_graphs=False)
    ms.set_auto_parallel_context(parallel_mode="data_parallel", gradients_mean=True, **ctx)
    net = DeepFFN(d, layers, recompute)
    loss = nn.WithLossCell(net, nn.MSELoss())
    if micro > 1:
        loss = nn.GradAccumulation(loss, micro)
    train = nn.TrainOneStepCell(loss, nn.Adam(net.trainable_params(), 1e-3))
    rng = np.random.default_rng(0)
    x, y = (rng.normal(size=(batch, d)).astype(np.float32) for _ in range(2))
    temp = train.program.lower_step([x, y]).compile().memory_analysis().temp_size_in_bytes
    placed = train.program.place_inputs([x, y])
    train(*placed)
    return train, placed, temp


def _row(feature: str, off: dict, on: dict, calls: int) -> dict:
    t_off, p_off, temp_off = _build(**off)
    t_on, p_on, temp_on = _build(**on)
    ms_on, ms_off, ratio = compare(lambda: t_on(*p_on), lambda: t_off(*p_off), calls=calls, rounds=5, warmup=2)
    return {"feature": feature, "off_ms": ms_off * 1e3, "on_ms": ms_on * 1e3, "on/off": ratio,
            "state_mb_off": _state_bytes(t_off) / 2 ** 20, "state_mb_on": _state_bytes(t_on) / 2 ** 20,
            "temp_mb_off": temp_off / 2 ** 20, "temp_mb_on": temp_on / 2 ** 20}


_SCHEDULER_PROBE = """
import json, numpy as np
from bench.bigmodels import _build
out = {"plain": _build(128, 8, 2048)[2], "recompute": _build(128, 8, 2048, recompute=True)[2]}
for level in ("level1", "level3"):
    out[level] = _build(128, 8, 2048, enable_parallel_optimizer=True, parallel_optimizer_config={
        "parallel_optimizer_threshold": 0, "optimizer_level": level})[2]
print(json.dumps(out))
"""


def _temp_with_memory_scheduler() -> dict[str, float]:
    """Temp MB of the step with XLA's memory-minimizing CPU scheduler (a fresh process): plain, every block
    recomputed, and the parallel optimizer at level1 and level3 (weights gathered again for the backward pass)."""
    from graphpar.compile.lowering.recompute import MEMORY_SCHEDULER_FLAG

    env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count=8 {MEMORY_SCHEDULER_FLAG}",
               PYTHONPATH=os.getcwd())
    out = subprocess.run([sys.executable, "-c", _SCHEDULER_PROBE], env=env, capture_output=True, text=True,
                         timeout=600)
    return {k: v / 2 ** 20 for k, v in json.loads(out.stdout.strip().splitlines()[-1]).items()}


def _handwritten_zero(train, placed):
    """ZeRO-1/2 as a JAX user writes it: parameters and Adam state stored split on dimension 0 over the devices
    (``NamedSharding``), gathered for the forward pass, gradients reduced straight into the shards with
    ``shard_map`` + ``psum_scatter`` (the per-device loss's gradient, as in DATA_PARALLEL)."""
    import jax.numpy as jnp
    import optax
    from jax.sharding import NamedSharding, PartitionSpec as P

    mesh = train.program.plan.mesh
    axes = tuple(mesh.axis_names)
    split, whole = NamedSharding(mesh, P(axes)), NamedSharding(mesh, P())
    values = [np.asarray(p.asnumpy()) for p in train.optimizer.parameters]
    tx = optax.adam(1e-3)
    params = jax.device_put([jnp.asarray(v) for v in values], split)
    state = jax.device_put(tx.init(params), jax.tree.map(lambda x: split if np.ndim(x) else whole, tx.init(params)))
    n = len(values) // 4

    def local_loss(p, x, y):
        for i in range(n):
            w1, b1, w2, b2 = p[4 * i:4 * i + 4]
            x = jax.nn.gelu(x @ w1.T + b1, approximate=True) @ w2.T + b2 + x
        return jnp.mean(jnp.square(x - y))

    def per_device(p, x, y):
        loss, g = jax.value_and_grad(local_loss)(p, x, y)
        g = [jax.lax.psum_scatter(gi, axes, scatter_dimension=0, tiled=True) / mesh.size for gi in g]
        return jax.lax.pmean(loss, axes), g

    def step(p, s, x, y):
        full = [jax.lax.with_sharding_constraint(w, whole) for w in p]
        loss, g = jax.shard_map(per_device, mesh=mesh, in_specs=(P(), P(axes), P(axes)),
                                out_specs=(P(), [P(axes)] * len(full)), check_vma=False)(full, x, y)
        updates, s = tx.update(g, s, p)
        return optax.apply_updates(p, updates), s, loss

    jitted = jax.jit(step, donate_argnums=(0, 1))
    box = {"p": params, "s": state}

    def run():
        box["p"], box["s"], loss = jitted(box["p"], box["s"], *placed)
        return loss

    return run


def bench_bigmodels(calls: int = 10) -> tuple[list[dict], dict[str, float], dict]:
    base = {"d": 128, "layers": 8, "batch": 2048}
    t_on, p_on, _ = _build(**base, enable_parallel_optimizer=True,
                           parallel_optimizer_config={"parallel_optimizer_threshold": 0})
    ours, theirs, ratio = compare(lambda: t_on(*p_on), _handwritten_zero(t_on, p_on), calls=calls, rounds=5,
                                  warmup=2)
    baseline = {"model": "8 FFN blocks d=128, batch 2048, Adam", "graphpar_ms": ours * 1e3,
                "handwritten_ms": theirs * 1e3, "ratio": ratio}
    rows = [
        _row("parallel optimizer (level1)", base, {**base, "enable_parallel_optimizer": True,
                                                     "parallel_optimizer_config": {"parallel_optimizer_threshold": 0}},
             calls),
        _row("parallel optimizer (level3)", base, {**base, "enable_parallel_optimizer": True,
                                                     "parallel_optimizer_config": {"parallel_optimizer_threshold": 0,
                                                                                   "optimizer_level": "level3"}},
             calls),
        _row("grad accumulation x4 (same global batch)", base, {**base, "micro": 4}, calls),
        _row("recompute every block", base, {**base, "recompute": True}, calls),
    ]
    return rows, _temp_with_memory_scheduler(), baseline
