"""Checkpoint costs (issue 6): save throughput against orbax called directly, and the step-time overhead of
``ModelCheckpoint(save_checkpoint_steps=10, async_save=True)``.

Save throughput: a 100 MB model (25 float32 matrices of 1024 x 1024, each split 2 x 4 over the 8 devices) saved by
``graphpar.save_checkpoint`` (orbax + the manifest with its checksums) and by orbax's ``AsyncCheckpointer`` with
``PyTreeSave`` + ``wait_until_finished`` (what a JAX user would write), interleaved, the median of several rounds.
Ratio = graphpar MB/s / orbax MB/s (goal >= 0.9). Step-time overhead: ``Model.train`` of an MLP with about 25 MB
of parameters and optimizer state, with and without the checkpoint callback. Nothing here asserts on speed.

    python -c "from bench.checkpoint import bench_checkpoint; print(bench_checkpoint())"
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time

import numpy as np

MB = 1 << 20


def _sharded_model(n_arrays: int = 25, size: int = 1024):
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    from graphpar import Parameter

    mesh = jax.make_mesh((2, 4), ("a", "b"))
    sharding = NamedSharding(mesh, PartitionSpec("a", "b"))
    rng = np.random.default_rng(0)
    params = [Parameter(jax.device_put(rng.normal(size=(size, size)).astype(np.float32), sharding), name=f"l{i}.w")
              for i in range(n_arrays)]
    return params, {p.name: p.get_raw_value() for p in params}


def bench_save(rounds: int = 7) -> dict:
    import orbax.checkpoint as ocp

    from graphpar.checkpoint import save_checkpoint

    params, tree = _sharded_model()
    nbytes = sum(v.nbytes for v in tree.values())
    root = tempfile.mkdtemp(prefix="graphpar_bench_ckpt_")
    orbax = ocp.AsyncCheckpointer(ocp.PyTreeCheckpointHandler())

    def ours(i: int) -> float:
        started = time.perf_counter()
        save_checkpoint(params, os.path.join(root, f"g{i}.ckpt"))
        return time.perf_counter() - started

    def theirs(i: int) -> float:
        started = time.perf_counter()
        orbax.save(os.path.join(root, f"o{i}"), args=ocp.args.PyTreeSave(tree))
        orbax.wait_until_finished()
        return time.perf_counter() - started

    try:
        ours(-1), theirs(-1)  # warm up both paths
        t_ours, t_theirs, ratios = [], [], []
        for r in range(rounds):
            pair = (ours(r), theirs(r)) if r % 2 == 0 else tuple(reversed((theirs(r), ours(r))))
            t_ours.append(pair[0])
            t_theirs.append(pair[1])
            ratios.append(pair[1] / pair[0])  # throughput ratio: graphpar MB/s / orbax MB/s
            for name in os.listdir(root):
                shutil.rmtree(os.path.join(root, name), ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {"model_mb": round(nbytes / MB, 1), "graphpar_mb_s": round(nbytes / MB / statistics.median(t_ours), 1),
            "orbax_mb_s": round(nbytes / MB / statistics.median(t_theirs), 1), "ratio": statistics.median(ratios)}


class _Rows:
    def __init__(self, x: np.ndarray, y: np.ndarray):
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        return self.x[i], self.y[i]


def _train_seconds(with_checkpoint: bool, steps: int, directory: str) -> float:
    import graphpar as ms
    import graphpar.dataset as ds
    from graphpar import nn
    from graphpar.train import Callback, CheckpointConfig, ModelCheckpoint

    class Clock(Callback):
        def __init__(self):
            self.times = []

        def step_end(self, run_context):
            np.asarray(run_context.original_args().net_outputs)  # wait for the step
            self.times.append(time.perf_counter())

    ms.reset_auto_parallel_context()
    ms.set_auto_parallel_context(parallel_mode="data_parallel", gradients_mean=True)
    rng = np.random.default_rng(0)
    rows = _Rows(rng.normal(size=(steps * 64, 512)).astype(np.float32),
                 rng.normal(size=(steps * 64, 512)).astype(np.float32))
    data = ds.GeneratorDataset(rows, ["x", "y"], shuffle=False).batch(64, drop_remainder=True)
    net = nn.SequentialCell([nn.Dense(512, 2048), nn.ReLU(), nn.Dense(2048, 2048), nn.ReLU(), nn.Dense(2048, 512)])
    model = ms.Model(net, nn.MSELoss(), nn.Momentum(net.trainable_params(), 0.01, 0.9))
    clock = Clock()
    callbacks = [clock]
    if with_checkpoint:
        config = CheckpointConfig(save_checkpoint_steps=10, keep_checkpoint_max=2, async_save=True)
        callbacks.insert(0, ModelCheckpoint("bench", directory, config))
    model.train(1, data, callbacks=callbacks)
    times = np.diff(clock.times[4:])  # steady state: the first steps compile
    return float(np.mean(times))


def bench_step_overhead(steps: int = 40, rounds: int = 2) -> dict:
    root = tempfile.mkdtemp(prefix="graphpar_bench_ckpt_")
    try:
        plain, saving = [], []
        for r in range(rounds):
            plain.append(_train_seconds(False, steps, root))
            saving.append(_train_seconds(True, steps, os.path.join(root, str(r))))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {"steps": steps, "plain_ms": round(1e3 * statistics.median(plain), 2),
            "ckpt_every_10_async_ms": round(1e3 * statistics.median(saving), 2),
            "overhead": statistics.median(saving) / statistics.median(plain)}


def bench_checkpoint() -> dict:
    return {"save": bench_save(), "step_overhead": bench_step_overhead()}
