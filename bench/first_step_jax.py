"""The plain-JAX floor of the compile cache's figure (issue 28): a skilled JAX user's hand-written train step for the
GPT-style model of ``bench.first_step`` (the same sizes: vocabulary 512, hidden 128, 8 heads, sequence 32, 8
blocks, batch 16; sparse softmax cross-entropy; momentum 0.9 at lr 0.01), written without graphpar, with JAX's
persistent compilation cache on as JAX's documentation sets it up (a cache directory, every program written
whatever its compile time or size).

The user shards it the way the model's strategies ask (Megatron over a 2 x 4 mesh of the 8 CPU devices: the batch
split over ``data``, the column-parallel weights' output rows and the row-parallel weights' input columns over
``model``, the rest replicated) with ``NamedSharding``s on the parameters and the batch, and lets XLA propagate the
rest; the optimizer state is made by one jitted ``init`` that keeps the parameters' shardings, and the step is one
``jax.jit`` with donated state.

``python -m bench.first_step_jax`` runs one first step in this process (the cache directory from
``JAX_COMPILATION_CACHE_DIR``) and prints one JSON line with the same fields as ``bench.first_step``'s:
``first_step_s`` (the parameters from the host to the devices, the optimizer state, the step's trace, lowering and
XLA's compile or cache read, and its run), ``dispatched_s`` (up to the call's return), ``first_run_s``, ``run_s``
and their CPU seconds. ``bench_jax_cached_first_step`` runs it twice in fresh processes sharing one fresh cache
directory: ``cached_vs_first`` is JAX's own floor for graphpar's ``cached_vs_first``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

VOCAB, HIDDEN, HEADS, SEQ, LAYERS, BATCH = 512, 128, 8, 32, 8, 16


def _host_params() -> dict:
    """The model's initial values on the host (normal * 0.05 weights, zero biases, unit LayerNorm scales)."""
    import numpy as np

    rng = np.random.default_rng(0)

    def normal(*shape):
        return (rng.normal(size=shape) * 0.05).astype(np.float32)

    def norm():
        return {"gamma": np.ones(HIDDEN, np.float32), "beta": np.zeros(HIDDEN, np.float32)}

    def linear(d_in, d_out):
        return {"w": normal(d_in, d_out), "b": np.zeros(d_out, np.float32)}

    blocks = [{"ln1": norm(), "q": linear(HIDDEN, HIDDEN), "k": linear(HIDDEN, HIDDEN), "v": linear(HIDDEN, HIDDEN),
               "proj": linear(HIDDEN, HIDDEN), "ln2": norm(), "ffn1": linear(HIDDEN, 4 * HIDDEN),
               "ffn2": linear(4 * HIDDEN, HIDDEN)} for _ in range(LAYERS)]
    return {"embed": normal(VOCAB, HIDDEN), "pos": normal(1, SEQ, HIDDEN), "blocks": blocks, "ln": norm()}


def _param_specs(params: dict) -> dict:
    """Megatron's layout as a JAX user writes it: column-parallel (q, k, v, ffn1) split their outputs, row-parallel
    (proj, ffn2) their inputs, over ``model``; everything else replicated."""
    from jax.sharding import PartitionSpec as P

    column = {"w": P(None, "model"), "b": P("model")}
    row = {"w": P("model", None), "b": P()}
    replicated = {"gamma": P(), "beta": P()}
    block = {"ln1": replicated, "q": column, "k": column, "v": column, "proj": row, "ln2": replicated,
             "ffn1": column, "ffn2": row}
    return {"embed": P(), "pos": P(), "blocks": [block] * len(params["blocks"]), "ln": replicated}


def _loss(params: dict, ids, labels):
    import jax
    import jax.numpy as jnp

    def layer_norm(x, p):
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) * jax.lax.rsqrt(var + 1e-5) * p["gamma"] + p["beta"]

    def linear(x, p):
        return x @ p["w"] + p["b"]

    batch = ids.shape[0]
    head_dim = HIDDEN // HEADS
    mask = jnp.triu(jnp.full((SEQ, SEQ), -1e4, jnp.float32), k=1)
    x = (params["embed"][ids] + params["pos"]).reshape(batch * SEQ, HIDDEN)
    for p in params["blocks"]:
        h = layer_norm(x, p["ln1"])
        q, k, v = (linear(h, p[n]).reshape(batch, SEQ, HEADS, head_dim).transpose(0, 2, 1, 3) for n in "qkv")
        score = q @ k.transpose(0, 1, 3, 2) / jnp.sqrt(float(head_dim)) + mask
        context = (jax.nn.softmax(score, -1) @ v).transpose(0, 2, 1, 3).reshape(batch * SEQ, HIDDEN)
        x = x + linear(context, p["proj"])
        x = x + linear(jax.nn.gelu(linear(layer_norm(x, p["ln2"]), p["ffn1"]), approximate=False), p["ffn2"])
    logits = layer_norm(x, params["ln"]) @ params["embed"].T
    return -jnp.take_along_axis(jax.nn.log_softmax(logits), labels[:, None], -1).mean()


def _first_step() -> dict:
    import jax
    import numpy as np
    import optax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    # JAX's documented set-up of its persistent cache: a directory, and every program written
    jax.config.update("jax_compilation_cache_dir", os.environ["JAX_COMPILATION_CACHE_DIR"])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    host = _host_params()
    tokens = np.random.default_rng(0).integers(0, VOCAB, size=(BATCH, SEQ + 1)).astype(np.int32)
    ids, labels = tokens[:, :-1], tokens[:, 1:].reshape(-1)
    mesh = Mesh(np.array(jax.devices()).reshape(2, 4), ("data", "model"))
    tx = optax.sgd(0.01, momentum=0.9)

    def step(params, opt_state, ids, labels):
        loss, grads = jax.value_and_grad(_loss)(params, ids, labels)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    started, cpu = time.perf_counter(), time.process_time()
    p_sh = jax.tree.map(lambda spec: NamedSharding(mesh, spec), _param_specs(host))
    params = jax.device_put(host, p_sh)
    # the momentum lives where its parameter does (optax's map over the parameters inside an optimizer state)
    o_sh = optax.tree_map_params(tx, lambda _, sharding: sharding, jax.eval_shape(tx.init, params), p_sh,
                                 transform_non_params=lambda _: NamedSharding(mesh, P()))
    opt_state = jax.jit(tx.init, out_shardings=o_sh)(params)
    batch = jax.device_put((ids, labels), NamedSharding(mesh, P("data")))
    train = jax.jit(step, out_shardings=(p_sh, o_sh, NamedSharding(mesh, P())), donate_argnums=(0, 1))
    params, opt_state, loss = train(params, opt_state, *batch)
    dispatched, dispatched_cpu = time.perf_counter() - started, time.process_time() - cpu
    float(loss)
    first, first_cpu = time.perf_counter() - started, time.process_time() - cpu
    runs = []
    for _ in range(3):
        started = time.perf_counter()
        params, opt_state, loss = train(params, opt_state, *batch)
        float(loss)
        runs.append(time.perf_counter() - started)
    return {"first_step_s": first, "first_step_cpu_s": first_cpu, "dispatched_s": dispatched,
            "dispatched_cpu_s": dispatched_cpu, "first_run_s": first - dispatched,
            "first_run_cpu_s": first_cpu - dispatched_cpu, "run_s": sorted(runs)[1], "loss": float(loss)}


def _in_subprocess(cache: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]), "JAX_COMPILATION_CACHE_DIR": cache}
    out = subprocess.run([sys.executable, "-m", "bench.first_step_jax"], capture_output=True, text=True, env=env,
                         timeout=600)
    if out.returncode:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_jax_cached_first_step() -> dict:
    """The hand-written step's first step in a script's first and second run (fresh processes, one fresh cache
    directory): the row ``bench.first_step.bench_cached_first_step``'s rows are compared with."""
    with tempfile.TemporaryDirectory() as cache:
        first, second = _in_subprocess(cache), _in_subprocess(cache)
    return {"model": "gpt (plain JAX)", "first_run_s": first["first_step_s"], "second_run_s": second["first_step_s"],
            "cached_vs_first": second["first_step_s"] / first["first_step_s"],
            "cached_vs_first_cpu": second["first_step_cpu_s"] / first["first_step_cpu_s"],
            "second_dispatched_s": second["dispatched_s"], "second_device_run_s": second["first_run_s"],
            "later_step_s": second["run_s"], "second_first_run_cpu_s": second["first_run_cpu_s"],
            "second_first_step_cpu_s": second["first_step_cpu_s"]}

if __name__ == "__main__":
    os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
    print(json.dumps(_first_step()))
