"""ResNet-18 on this machine (issue 4): can the data pipeline feed training, and what does graphpar cost per step?

1. Images/s of the tutorials' CIFAR transform pipeline (``bench.pipeline``: RandomCrop, RandomHorizontalFlip,
   Resize, Rescale, Normalize, HWC2CHW, batch) at 32×32, against the images/s ResNet-18 training consumes (the
   graphpar DATA_PARALLEL step below) and against a plain numpy loop doing the same transforms. Goal: the pipeline
   at least 3× faster than training consumes.
2. ResNet-18 train-step time, graphpar against a hand-written flax NNX + optax + ``jax.jit`` step doing the same
   work: same layers and initial values (NCHW, "same" padding, BatchNorm with the unbiased moving variance),
   momentum SGD, the same global batch split over the same 8-device mesh, parameters replicated. Two variants:

   * per-device BatchNorm statistics (``nn.BatchNorm2d`` under DATA_PARALLEL): the hand-written side computes each
     device's loss under ``jax.vmap`` over the device axis, as an expert writes per-replica BatchNorm in JAX;
   * global statistics (``sync_bn=True``, ``nn.SyncBatchNorm``): the hand-written side is the plain global-batch
     ``jax.jit`` step, whose BatchNorm statistics XLA all-reduces over the devices.

Measured interleaved with ``bench.timing.compare``; nothing asserts on speed.

    python -m bench resnet
"""

from __future__ import annotations

import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec as P

from bench.timing import compare

_STAGES = (64, 128, 256, 512)
_BN_MOMENTUM, _BN_EPS = 0.99, 1e-5


# --- the hand-written side -------------------------------------------------------------------------------------------
class Conv(nnx.Module):
    def __init__(self, weight: np.ndarray, stride: int):
        self.weight = nnx.Param(jnp.asarray(weight))
        self.stride = stride

    def __call__(self, x):
        return jax.lax.conv_general_dilated(x, self.weight[...], (self.stride, self.stride), "SAME",
                                            dimension_numbers=("NCHW", "OIHW", "NCHW"))


class BatchNorm(nnx.Module):
    """Training-mode BatchNorm over NCHW; ``axis_name`` averages the statistics over that named axis."""

    def __init__(self, values: dict[str, np.ndarray], prefix: str):
        self.gamma = nnx.Param(jnp.asarray(values[prefix + ".gamma"]))
        self.beta = nnx.Param(jnp.asarray(values[prefix + ".beta"]))
        self.mean = nnx.BatchStat(jnp.asarray(values[prefix + ".moving_mean"]))
        self.var = nnx.BatchStat(jnp.asarray(values[prefix + ".moving_variance"]))

    def __call__(self, x):
        shape = (1, -1, 1, 1)
        mean = jnp.mean(x, axis=(0, 2, 3))
        var = jnp.mean(jnp.square(x - mean.reshape(shape)), axis=(0, 2, 3))
        n = x.size // x.shape[1]
        self.mean[...] = _BN_MOMENTUM * self.mean[...] + (1 - _BN_MOMENTUM) * mean
        self.var[...] = _BN_MOMENTUM * self.var[...] + (1 - _BN_MOMENTUM) * var * (n / (n - 1))
        inv = jax.lax.rsqrt(var + _BN_EPS) * self.gamma[...]
        return (x - mean.reshape(shape)) * inv.reshape(shape) + self.beta[...].reshape(shape)


class Block(nnx.Module):
    def __init__(self, values: dict[str, np.ndarray], prefix: str, stride: int):
        self.conv1 = Conv(values[prefix + ".conv1.weight"], stride)
        self.bn1 = BatchNorm(values, prefix + ".bn1")
        self.conv2 = Conv(values[prefix + ".conv2.weight"], 1)
        self.bn2 = BatchNorm(values, prefix + ".bn2")
        self.down = nnx.data(None)
        if prefix + ".conv_down_sample.weight" in values:
            self.down = nnx.List([Conv(values[prefix + ".conv_down_sample.weight"], stride),
                                  BatchNorm(values, prefix + ".bn_down_sample")])

    def __call__(self, x):
        out = self.bn2(self.conv2(jax.nn.relu(self.bn1(self.conv1(x)))))
        shortcut = x if self.down is None else self.down[1](self.down[0](x))
        return jax.nn.relu(out + shortcut)


class HandResNet18(nnx.Module):
    """ResNet-18 with graphpar's layout, initialised from graphpar's parameter values (by name)."""

    def __init__(self, values: dict[str, np.ndarray]):
        self.conv1 = Conv(values["conv1.weight"], 2)
        self.bn1 = BatchNorm(values, "bn1")
        self.blocks = nnx.List([Block(values, f"layer{i + 1}.{letter}", 2 if i and letter == "a" else 1)
                                for i in range(4) for letter in "ab"])
        self.fc_w = nnx.Param(jnp.asarray(values["fc.weight"]))
        self.fc_b = nnx.Param(jnp.asarray(values["fc.bias"]))

    def __call__(self, x):
        x = jax.nn.relu(self.bn1(self.conv1(x)))
        x = jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 1, 3, 3), (1, 1, 2, 2), "SAME")
        for block in self.blocks:
            x = block(x)
        return jnp.mean(x, axis=(2, 3)) @ self.fc_w[...].T + self.fc_b[...]


def _cross_entropy(logits, labels):
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), labels[:, None], axis=1))


def handwritten_step(values: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray, mesh: Any, per_device_bn: bool):
    """A ``run()`` closure doing one hand-written train step per call (state kept on the devices)."""
    model = HandResNet18(values)
    graphdef, params, stats = nnx.split(model, nnx.Param, nnx.BatchStat)
    tx = optax.sgd(0.01, momentum=0.9)
    axes = tuple(mesh.axis_names)
    n = int(np.prod(mesh.devices.shape))
    replicated, batch = NamedSharding(mesh, P()), NamedSharding(mesh, P(axes))

    def loss_and_stats(p, s, xb, yb):
        m = nnx.merge(graphdef, p, s, copy=True)  # fresh Variables at this trace level
        loss = _cross_entropy(m(xb), yb)
        return loss, nnx.state(m, nnx.BatchStat)

    def objective(p, s, xs, ys):
        if not per_device_bn:  # one global batch: XLA all-reduces the BatchNorm statistics
            return loss_and_stats(p, s, xs, ys)
        xr = xs.reshape((n, xs.shape[0] // n) + xs.shape[1:])
        yr = ys.reshape((n, ys.shape[0] // n))
        losses, new = jax.vmap(loss_and_stats, in_axes=(None, None, 0, 0), spmd_axis_name=axes)(p, s, xr, yr)
        return jnp.mean(losses), jax.tree.map(lambda v: jnp.mean(v, axis=0), new)

    def step(p, s, o, xs, ys):
        (loss, new_stats), grads = jax.value_and_grad(objective, has_aux=True)(p, s, xs, ys)
        updates, o = tx.update(grads, o, p)
        return optax.apply_updates(p, updates), new_stats, o, loss

    state = {"p": jax.device_put(params, replicated), "s": jax.device_put(stats, replicated)}
    state["o"] = jax.device_put(tx.init(state["p"]), replicated)
    xs, ys = jax.device_put(x, batch), jax.device_put(y, batch)
    jitted = jax.jit(step, in_shardings=(replicated, replicated, replicated, batch, batch),
                     out_shardings=(replicated, replicated, replicated, replicated), donate_argnums=(0, 1, 2))

    def run():
        state["p"], state["s"], state["o"], loss = jitted(state["p"], state["s"], state["o"], xs, ys)
        return loss

    return run


# --- the graphpar side -----------------------------------------------------------------------------------------------
def graphpar_step(x: np.ndarray, y: np.ndarray, sync_bn: bool):
    """(run closure, initial parameter values by name, the program) for graphpar's DATA_PARALLEL ResNet-18."""
    import graphpar as ms
    from graphpar import nn
    from graphpar.models import resnet18

    ms.reset_auto_parallel_context()
    ms.set_context(mode=ms.GRAPH_MODE, save_graphs=False)
    ms.set_auto_parallel_context(parallel_mode="data_parallel", gradients_mean=True)
    ms.set_seed(0)
    net = resnet18(class_num=10, sync_bn=sync_bn)
    values = {p.name: np.asarray(p.asnumpy()) for p in net.get_parameters()}
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    train = nn.TrainOneStepCell(nn.WithLossCell(net, loss), nn.Momentum(net.trainable_params(), 0.01, 0.9))
    placed = train.program.place_inputs([x, y])
    return (lambda: train(*placed)), values, train.program


def _data(batch: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.normal(size=(batch, 3, size, size)).astype(np.float32), rng.integers(0, 10, batch).astype(np.int32)


def bench_step(sync_bn: bool, batch: int = 32, size: int = 32, calls: int = 3, rounds: int = 5) -> dict:
    x, y = _data(batch, size)
    ours, values, program = graphpar_step(x, y, sync_bn)
    ours()  # compile
    hand = handwritten_step(values, x, y, program.plan.mesh, per_device_bn=not sync_bn)
    started = time.perf_counter()
    jax.block_until_ready(hand())
    hand_compile = time.perf_counter() - started
    t_ours, t_hand, ratio = compare(ours, hand, calls=calls, rounds=rounds, warmup=2)
    return {"model": "ResNet-18 DP " + ("global BN (SyncBatchNorm)" if sync_bn else "per-device BN"),
            "batch": batch, "image": size, "graphpar_ms": t_ours * 1e3, "handwritten_ms": t_hand * 1e3,
            "ratio": ratio, "compile_s": program.compile_seconds, "hand_compile_s": hand_compile,
            "img_s": batch / t_ours}


def bench_feeding(consumed_img_s: float, n_images: int = 2048, workers: tuple[int, ...] = (1, 2)) -> dict:
    """The tutorials' pipeline at 32×32 against the images/s training consumes and a numpy loop."""
    from bench.pipeline import SyntheticCifar, _numpy_loop, _pipeline, _timed_epoch

    source = SyntheticCifar(n_images)
    started = time.perf_counter()
    numpy_rate = _numpy_loop(source, 32, 32) / (time.perf_counter() - started)
    row: dict[str, Any] = {"training_consumes_img_s": round(consumed_img_s, 1),
                           "numpy_loop_img_s": round(numpy_rate, 1)}
    for w in workers:
        _, rate = _timed_epoch(_pipeline(source, 32, w, 32), w)
        row[f"pipeline_w{w}_img_s"] = round(rate, 1)
        row[f"pipeline_w{w}_vs_training"] = round(rate / consumed_img_s, 1)
        row[f"pipeline_w{w}_vs_numpy"] = round(rate / numpy_rate, 2)
    return row


def bench_resnet(batch: int = 32, calls: int = 3, rounds: int = 5) -> tuple[list[dict], dict]:
    """(step-time rows, feeding row)."""
    rows = [bench_step(False, batch, calls=calls, rounds=rounds), bench_step(True, batch, calls=calls, rounds=rounds)]
    return rows, bench_feeding(rows[0]["img_s"])

