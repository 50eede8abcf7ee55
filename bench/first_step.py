"""The first step of the GPT-style model in SEMI_AUTO on the 8 CPU devices, each in a fresh process (what a user
waits for when a script starts), split into XLA's compile of the step and graphpar's own share (issue 28).

``python -m bench.first_step [gpt|gpt_onehot|megatron]`` runs one first step and prints one JSON line; ``bench_first_step``
runs it in subprocesses with XLA's persistent cache off (twice; the lower share of the two is kept, a loaded machine
only ever adds time); ``bench_cached_first_step`` twice with one fresh cache directory (the second run reads the
step back: ``cached_vs_first``; ``second_xla_read_s`` is JAX's backend-compile event of the step in the second run,
which on a cache hit times reading the executable back and loading it (0 when graphpar's executable cache served the
step: ``second_loaded``, ``compile.staging.executables``; ``second_xla_step_cpu_s`` is then the wait for its read,
which ``compile.staging.prefetch`` starts before tracing on a background thread (``second_prefetched``: the guessed
read was the step's), so the read's CPU time lands in the stages it overlaps, mostly tracing); the second run's first
step in CPU seconds, part by part (``second_trace_cpu_s`` ...: :data:`CPU_SPLIT`): tracing the network, planning,
the executable cache's key (``staging.fingerprint``), the step's autodiff trace and lowering, XLA's cache read (or
the wait for graphpar's), the rest up to dispatch (the optimizer state, placing parameters and the batch, binding
the step), the devices' first run of the step, and the whole first step. ``second_dispatched_s`` and
``second_device_run_s`` split the second run's first step in wall time, ``later_step_s`` is a later step of it.
``bench.first_step_jax`` is the plain-JAX floor of the same figure (a hand-written step, JAX's cache on).

What the split counts: ``first_step_s`` is the wall time of ``float(train(*batch))``; ``dispatched_s`` its part up
to the call's return, when the step is on its way to the devices (``first_run_s`` is the rest: the devices running
the step, which a hand-written JAX script's first step pays as well; ``run_s`` is a later step's time, for
comparison). ``xla_step_s`` is XLA's compile of the train step (``jax.monitoring``'s backend-compile event for it);
``xla_other_s`` XLA's compiles of any other program in the first step (graphpar's choice to compile them, so part of
its share). graphpar's share = ``dispatched_s`` - ``xla_step_s``: tracing, planning, lowering, placing the state and
the batch, any other program. Goal: share <= 0.25 x XLA's compile of the step. The same in CPU seconds of the
process (``share_cpu``: steadier on a loaded machine, where XLA's compile and graphpar's Python are slowed unequally):
``xla_step_cpu_s`` is the process's CPU time in the step's XLA compile stage (every thread's; graphpar's
``Compiled.cpu_seconds``), ``graphpar_cpu_s`` = ``dispatched_cpu_s`` - that; ``cached_vs_first_cpu`` compares the two
runs' first steps by CPU time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"
# a first step's CPU seconds, part by part (_first_step), then whole (with the devices running it)
CPU_SPLIT = ("trace_cpu_s", "plan_cpu_s", "key_cpu_s", "lower_cpu_s", "xla_step_cpu_s", "rest_cpu_s",
             "first_run_cpu_s", "first_step_cpu_s")


def _model(name: str):
    """(train cell, batch): the GPT-style model (SEMI_AUTO, Megatron strategies on every op; its sparse labels come
    from the batch, so they are checked beside the step, not by a host callback in it, and XLA's persistent cache
    stores its step: ``ops.runtime_checks``), the same with one-hot labels (``gpt_onehot``: no check) or the 2-block
    Megatron MLP of ``bench step`` (MSE loss)."""
    import numpy as np

    import graphpar as ms
    from graphpar import nn
    from graphpar.models.gpt import GPT, gpt_data, gpt_train_cell
    from graphpar.models.megatron import Megatron, MegatronMLP
    from graphpar.models.mlp import mlp_train_cell

    ms.set_context(mode=ms.GRAPH_MODE, save_graphs=False)
    if name in ("gpt", "gpt_onehot"):
        ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", full_batch=True)
        net = GPT(vocab=512, hidden=128, heads=8, seq=32, layers=8)
        ids, labels = gpt_data(batch=16, seq=32, vocab=512)
        if name == "gpt":
            return gpt_train_cell(net, lr=0.01), [ids, labels]
        loss = nn.SoftmaxCrossEntropyWithLogits(sparse=False, reduction="mean")
        train = nn.TrainOneStepCell(nn.WithLossCell(net, loss), nn.Momentum(net.trainable_params(), 0.01, 0.9))
        return train, [ids, np.eye(512, dtype=np.float32)[labels]]
    ms.set_auto_parallel_context(parallel_mode="auto_parallel", search_mode="sharding_propagation", full_batch=True)
    rng = np.random.default_rng(1)
    blocks = [MegatronMLP((rng.normal(size=(512, 2048)) * 0.02).astype(np.float32),
                          (rng.normal(size=(2048, 512)) * 0.02).astype(np.float32)) for _ in range(2)]
    x = rng.normal(size=(64, 512)).astype(np.float32)
    return mlp_train_cell(Megatron(blocks)), [x, x]


def _first_step(model: str) -> dict:
    import jax

    compiles: list[tuple[str, float]] = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, seconds, **kw: compiles.append((kw.get("fun_name", ""), seconds))
        if event == BACKEND_COMPILE else None)
    train, batch = _model(model)
    started, cpu = time.perf_counter(), time.process_time()
    loss = train(*batch)  # returns once the step is dispatched: graphpar's work and XLA's compile
    dispatched, dispatched_cpu = time.perf_counter() - started, time.process_time() - cpu
    float(loss)
    first, first_cpu = time.perf_counter() - started, time.process_time() - cpu
    runs = []
    for _ in range(3):
        started = time.perf_counter()
        float(train(*batch))
        runs.append(time.perf_counter() - started)
    step = sum(s for name, s in compiles if name == "jit(step)")
    other = {name: round(s, 4) for name, s in compiles if name != "jit(step)"}
    share = dispatched - step
    stages = train.program.stages(batch)
    # XLA's compile (or its cache read), or on a hit of graphpar's executable cache the load that replaces the step's
    # lowering and compile (compile.staging.executables)
    cpu_stages = stages.compiled.cpu_seconds
    step_cpu = cpu_stages.get("XLA compile", cpu_stages.get("executable cache read", float("nan")))
    # where the first step's CPU time went: tracing the network, planning it, tracing the step for autodiff and
    # lowering it, XLA's compile (or cache read), and the rest (the optimizer state, placing parameters and the
    # batch, binding and dispatching the step)
    split = {f"{key}_cpu_s": seconds for key, seconds in (
        ("trace", stages.planned.cpu_seconds.get("tracing", float("nan"))),
        ("plan", stages.planned.cpu_seconds.get("planning", float("nan"))),
        ("key", stages.compiled.cpu_seconds.get("executable cache key", 0.0)),
        ("lower", stages.compiled.cpu_seconds.get("lowering", 0.0)))}
    split["rest_cpu_s"] = dispatched_cpu - step_cpu - sum(split.values())
    split["first_run_cpu_s"] = first_cpu - dispatched_cpu
    return {"first_step_s": first, "first_step_cpu_s": first_cpu, "dispatched_s": dispatched,
            "dispatched_cpu_s": dispatched_cpu, "xla_step_s": step, "xla_other_s": sum(other.values()),
            "other_programs": other, "first_run_s": first - dispatched, "run_s": sorted(runs)[1],
            "graphpar_s": share, "share_of_compile": share / step if step else float("nan"),
            "xla_step_cpu_s": step_cpu, "graphpar_cpu_s": dispatched_cpu - step_cpu,
            "share_cpu": (dispatched_cpu - step_cpu) / step_cpu,
            "trace_plan_s": stages.planned.seconds, "lower_s": stages.compiled.seconds.get("lowering", 0.0),
            "loaded": train.program.counts.loads, "prefetched": train.program.counts.prefetched, **split}


def _in_subprocess(model: str, cache: str | None) -> dict:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    env["MS_COMPILER_CACHE_ENABLE"] = "1" if cache else "0"
    if cache:
        env["MS_COMPILER_CACHE_PATH"] = cache
    args = [sys.executable, "-m", "bench.first_step", model]
    out = subprocess.run(args, capture_output=True, text=True, env=env, timeout=600)
    if out.returncode:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_first_step(model: str = "gpt", runs: int = 2) -> dict:
    """The first step with the cache off: the best of ``runs`` fresh processes."""
    best = min((_in_subprocess(model, None) for _ in range(runs)), key=lambda r: r["share_of_compile"])
    return {"model": model, **best}


def bench_cached_first_step(model: str) -> dict:
    """The compile cache's figure: the first step of the first and the second run of the same script, sharing a
    fresh cache directory."""
    with tempfile.TemporaryDirectory() as cache:
        first, second = _in_subprocess(model, cache), _in_subprocess(model, cache)
    return {"model": model, "first_run_s": first["first_step_s"], "second_run_s": second["first_step_s"],
            "cached_vs_first": second["first_step_s"] / first["first_step_s"],
            "cached_vs_first_cpu": second["first_step_cpu_s"] / first["first_step_cpu_s"],
            "second_dispatched_s": second["dispatched_s"], "second_device_run_s": second["first_run_s"],
            "later_step_s": second["run_s"],
            "second_xla_read_s": second["xla_step_s"], "second_trace_plan_s": second["trace_plan_s"],
            "second_lower_s": second["lower_s"], "second_loaded": second["loaded"],
            "second_prefetched": second["prefetched"],
            # the second run's first step in CPU seconds, part by part (see _first_step)
            **{f"second_{key}": second[key] for key in CPU_SPLIT}}


if __name__ == "__main__":
    os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
    print(json.dumps(_first_step(sys.argv[1] if len(sys.argv) > 1 else "gpt")))
