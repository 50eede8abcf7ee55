"""Throughput for accelerators (issue 15): feeding that overlaps the step, mixed precision, two processes.

1. ``bench_feeding_overlap``: ResNet-18 DATA_PARALLEL on the 8 devices trained by ``Model.train`` from the
   tutorials' CIFAR pipeline (``bench.pipeline``), against the same compiled step run on batches already on the
   devices (pre-staged). Goal: real feeding <= 1.03x pre-staged. Also shown: feeding with device prefetch off.
2. ``bench_amp``: ResNet-18 step time in float32 and at ``amp_level`` O2 / O3 (bfloat16 on CPU), and the loss of
   20 steps at each level (the largest relative difference from float32).
3. ``bench_two_processes``: a 3-layer 512-wide MLP in DATA_PARALLEL as 2 processes x 4 devices on 127.0.0.1,
   graphpar against the same model written in plain JAX over ``jax.distributed`` (goal <= 1.05).

Every comparison is interleaved (rounds alternate the two sides), so a busy machine slows both alike; nothing
asserts on speed.

    python -m bench throughput
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np


def _resnet_model(width: float, amp_level: str = "O0", mode: str = "data_parallel") -> Any:
    import graphpar as ms
    from graphpar import nn
    from graphpar.models import resnet18
    from graphpar.train import Model

    ms.reset_auto_parallel_context()
    ms.set_context(mode=ms.GRAPH_MODE, save_graphs=False)
    ms.set_auto_parallel_context(parallel_mode=mode, gradients_mean=True)
    ms.set_seed(0)
    net = resnet18(class_num=10, width=width)
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    return Model(net, loss, nn.Momentum(net.trainable_params(), 0.01, 0.9), amp_level=amp_level)


# --- 1. feeding ------------------------------------------------------------------------------------------------------
def prestaged_clock(program: Any, data: Any, devices: int) -> Any:
    """A function timing one epoch of ``data`` run by ``program`` from batches placed beforehand (the feeding
    benches' baseline): the seconds per step from the first step's result to the last's. Each device gets the
    pipeline's batch, as ``Model.train`` gives every device the batch of an unsharded dataset."""
    import jax

    batches = [tuple(b) for b in data.iter_epoch(0)]
    staged = [program.place_inputs([np.concatenate([b[c]] * devices) for c in range(len(b))]) for b in batches]

    def prestaged() -> float:
        jax.block_until_ready(program.run_step(staged[0]))
        started = time.perf_counter()
        for placed in staged[1:]:
            loss = program.run_step(placed)
        jax.block_until_ready(loss)
        return (time.perf_counter() - started) / (len(staged) - 1)

    return prestaged


def step_clock(steps: int) -> Any:
    """A callback timing the steady-state seconds per step of each ``Model.train`` epoch of ``steps`` steps, as a
    pre-staged loop is timed: from the result of the epoch's first step to its last step's result, over the
    ``steps - 1`` steps between (the per-call set-up of ``train`` itself is not a per-step cost). The clock starts
    once step 1 is done, not when its call returns: the call returns while the devices still run it (asynchronous
    dispatch), and starting there counted up to one step more than it divides by (+1/23 at 24 steps). Read
    ``.per_epoch`` (one figure per epoch) or ``.seconds`` (the last epoch's) after."""
    import jax

    from graphpar.train import Callback

    class StepClock(Callback):
        def __init__(self):
            self.per_epoch: list[float] = []

        def on_train_step_end(self, run_context):
            args = run_context.original_args()
            if args.cur_step_num % steps == 1:
                jax.block_until_ready(args.net_outputs)
                self.first = time.perf_counter()

        def on_train_epoch_end(self, run_context):
            jax.block_until_ready(run_context.original_args().net_outputs)
            self.per_epoch.append((time.perf_counter() - self.first) / (steps - 1))

        @property
        def seconds(self) -> float:
            return self.per_epoch[-1]

    return StepClock()


def bench_feeding_overlap(per_device_batch: int = 4, steps: int = 8, width: float = 0.25, rounds: int = 61,
                          workers: int = 1) -> dict[str, Any]:
    """Seconds per step of ``Model.train`` on the pipeline (prefetch on, prefetch off) against the same compiled step
    on pre-staged batches, and the host work of feeding one step alone (``feed_host_ms``: read the pipeline's batch,
    concatenate the devices' batches, one ``device_put``; what the prefetch thread does per step, timed with the
    devices idle).

    Each round runs pre-staged, fed (prefetch 2), fed (prefetch off), pre-staged again, each over one epoch of
    ``steps`` steps, and divides each fed time by the mean of the two pre-staged times around it, so a machine that
    slows down or speeds up within the round moves numerator and denominator alike. ``control`` is the second
    pre-staged time over the first: the ratio noise alone gives. Short rounds, many of them: on 2 cores the per-round
    ratios spread by +-10 % (rounds of 23 steps gave medians from 1.01 to 1.06 for the same code), so the figures are
    the median and the mean with its 95 % interval over ``rounds`` rounds."""
    import jax

    import graphpar.dataset as ds
    from bench.pipeline import SyntheticCifar, _pipeline

    model = _resnet_model(width)
    program = model.train_network.program
    devices = len(jax.devices())
    data = _pipeline(SyntheticCifar(per_device_batch * steps), 32, workers, per_device_batch)
    prestaged = prestaged_clock(program, data, devices)
    model.train(1, data)  # compile, and start the pipeline once

    def fed(depth: int) -> float:
        ds.config.set_device_prefetch_size(depth)
        clock = step_clock(steps)
        model.train(1, data, callbacks=[clock])
        return clock.seconds

    from graphpar.train.feeding import BatchFeeder, _placer

    def feed_host() -> float:
        batches = BatchFeeder(data, devices).epoch(0, read_ahead=False)
        first = next(batches)
        put = _placer(program.place_inputs, first, program.place_inputs(list(first)))
        started = time.perf_counter()
        for batch in batches:
            jax.block_until_ready(put(batch))
        return (time.perf_counter() - started) / (steps - 1)

    times: dict[str, list[float]] = {"pre": [], "fed": [], "off": []}
    ratios: dict[str, list[float]] = {"fed": [], "off": [], "control": []}
    for r in range(rounds):
        before = prestaged()
        middle = {"fed": lambda: fed(2), "off": lambda: fed(0)}
        got = {name: middle[name]() for name in (("fed", "off") if r % 2 == 0 else ("off", "fed"))}
        after = prestaged()
        times["pre"] += [before, after]
        for name, seconds in got.items():
            times[name].append(seconds)
            ratios[name].append(seconds / ((before + after) / 2))
        ratios["control"].append(after / before)
    ds.config.set_device_prefetch_size(2)

    def interval(values: list[float]) -> str:
        half = 1.96 * statistics.stdev(values) / len(values) ** 0.5
        return f"{statistics.mean(values):.3f} +- {half:.3f}"

    return {"model": f"ResNet-18 (width {width}) DP", "devices": devices,
            "global_batch": per_device_batch * devices, "steps": steps, "rounds": rounds,
            "prestaged_ms": round(statistics.median(times["pre"]) * 1e3, 1),
            "fed_prefetch2_ms": round(statistics.median(times["fed"]) * 1e3, 1),
            "fed_no_prefetch_ms": round(statistics.median(times["off"]) * 1e3, 1),
            "fed_vs_prestaged": round(statistics.median(ratios["fed"]), 3),
            "fed_vs_prestaged_mean_95": interval(ratios["fed"]),
            "no_prefetch_vs_prestaged": round(statistics.median(ratios["off"]), 3),
            "control_prestaged_vs_itself": round(statistics.median(ratios["control"]), 3),
            "control_mean_95": interval(ratios["control"]),
            "feed_host_ms": round(statistics.median(feed_host() for _ in range(3)) * 1e3, 2)}


# --- 2. mixed precision ----------------------------------------------------------------------------------------------
def bench_amp(width: float = 0.25, batch: int = 32, size: int = 32, steps: int = 20, calls: int = 3,
              rounds: int = 5) -> list[dict[str, Any]]:
    """Step time and 20-step loss curve of ResNet-18 (stand-alone, one device) at O0, O2 and O3.

    The loss column repeats one synthetic batch at lr 0.01, momentum 0.9, where float32 itself is chaotic (an
    input perturbed by 2**-20 moves its curve by percents): it shows how far the curves wander, not whether amp is
    right: as the curve falls towards 0 the per-step relative difference grows without meaning, so the largest
    difference over the first loss is shown too. The acceptance comparison, with a float32 control proving it well
    conditioned, is the slow test
    ``tests/train/test_amp.py::test_resnet18_low_precision_tracks_float32_and_convolves_in_bf16``."""
    from bench.timing import compare

    rng = np.random.default_rng(0)
    y = rng.integers(0, 10, batch).astype(np.int32)
    centres = rng.normal(0, 1, (10, 3, 1, 1)).astype(np.float32)
    x = (centres[y] + 0.5 * rng.normal(size=(batch, 3, size, size))).astype(np.float32)
    runs = {}
    for level in ("O0", "O2", "O3"):
        train = _resnet_model(width, level, mode="stand_alone").train_network
        placed = train.program.place_inputs([x, y])
        losses = []
        for _ in range(steps):
            out = train.program.run_step(placed)
            losses.append(float(np.asarray(out)))
        runs[level] = (lambda t=train, p=placed: t.program.run_step(p)), losses
    f32_step, f32_losses = runs["O0"]
    rows, f32_times = [], []
    for level in ("O2", "O3"):
        step, losses = runs[level]
        t_amp, t_f32, ratio = compare(step, f32_step, calls=calls, rounds=rounds, warmup=1)
        f32_times.append(t_f32)
        rows.append({"amp_level": level, "width": width, "batch": batch, "step_ms": round(t_amp * 1e3, 1),
                     "vs_float32": round(ratio, 3),
                     "max_rel_loss_diff": round(max(abs(a - b) / abs(b) for a, b in zip(losses, f32_losses)), 4),
                     "max_diff_over_first_loss": round(max(abs(a - b) for a, b in zip(losses, f32_losses))
                                                       / abs(f32_losses[0]), 4),
                     "loss_first_last": (round(losses[0], 4), round(losses[-1], 4))})
    rows.insert(0, {"amp_level": "O0", "width": width, "batch": batch,
                    "step_ms": round(statistics.median(f32_times) * 1e3, 1), "vs_float32": 1.0,
                    "max_rel_loss_diff": 0.0, "max_diff_over_first_loss": 0.0,
                    "loss_first_last": (round(f32_losses[0], 4), round(f32_losses[-1], 4))})
    return rows


# --- 3. two processes ------------------------------------------------------------------------------------------------
_WORKER = Path(__file__).with_name("_two_process_worker.py")


def bench_two_processes(calls: int = 30, rounds: int = 5, timeout: float = 600) -> dict[str, Any]:
    """Median step time of the MLP as 2 processes x 4 devices, graphpar and plain JAX, from process 0."""
    from graphpar.communication.process_plan import free_port

    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRAPHPAR_", "MS_", "OMPI_", "SLURM_"))}
    env.update(JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=4", PYTHONUNBUFFERED="1")
    port = free_port()
    procs = [subprocess.Popen([sys.executable, str(_WORKER), str(calls), str(rounds)],
                              env=dict(env, GRAPHPAR_COORDINATOR=f"127.0.0.1:{port}", GRAPHPAR_NUM_PROCESSES="2",
                                       GRAPHPAR_PROCESS_ID=str(i)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              cwd=str(Path(__file__).resolve().parents[1]))
             for i in range(2)]
    outs = [p.communicate(timeout=timeout) for p in procs]
    for p, (out, err) in zip(procs, outs):
        if p.returncode:
            raise RuntimeError(f"two-process bench worker failed ({p.returncode}): {err[-2000:]}")
    result = json.loads(next(line for line in outs[0][0].splitlines() if line.startswith("{")))
    return result


def bench_throughput() -> dict[str, Any]:
    return {"feeding": bench_feeding_overlap(), "amp": bench_amp(), "two_processes": bench_two_processes()}


if __name__ == "__main__":
    print(json.dumps(bench_throughput(), indent=2))
