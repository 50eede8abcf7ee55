"""XLA's compile time of the train step at mixed-precision levels O0, O2 and O3 on CPU (issue 28: O2's overflow check
and loss-scale update must not double it).

Two networks: ResNet-18 at width 0.25 (stand-alone, one device, 32x32 images) and the GPT-style model of
``bench.first_step`` (SEMI_AUTO on the 8 devices), each built through ``amp.build_train_network`` at every level
(O2 adds MindSpore's default ``DynamicLossScaleManager``: the unscaling, the overflow check that skips the update and
the scale's update, in the same program). Each compile is timed in CPU seconds of the process (XLA's CPU compiler
runs on the calling thread; steadier than the wall clock on a shared machine), the levels interleaved over
``rounds``; the medians are printed with O2 / O0 and O3 / O0.
"""

from __future__ import annotations

import statistics
import time

import numpy as np


def _train_cell(model: str, level: str):
    import graphpar as ms
    from graphpar import amp, nn
    from graphpar.models import resnet18
    from graphpar.models.gpt import GPT, gpt_data

    ms.reset_auto_parallel_context()
    ms.set_context(mode=ms.GRAPH_MODE, save_graphs=False)
    ms.set_seed(0)
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    if model == "resnet18":
        ms.set_auto_parallel_context(parallel_mode="stand_alone")
        net = resnet18(class_num=10, width=0.25)
        rng = np.random.default_rng(0)
        batch = [rng.normal(size=(16, 3, 32, 32)).astype(np.float32), rng.integers(0, 10, 16).astype(np.int32)]
    else:
        ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", full_batch=True)
        net = GPT(vocab=512, hidden=128, heads=8, seq=32, layers=8)
        batch = list(gpt_data(batch=16, seq=32, vocab=512))
    optimizer = nn.Momentum(net.trainable_params(), 0.01, 0.9)
    return amp.build_train_network(net, optimizer, loss, level=level), batch


def _compile_cpu_seconds(model: str, level: str) -> tuple[float, int]:
    """CPU seconds of XLA's compile of a freshly lowered train step, and the compiled HLO's line count."""
    train, batch = _train_cell(model, level)
    lowered = train.program.lowered(batch)
    started = time.process_time()
    text = lowered.lowered.compile().as_text()
    return time.process_time() - started, text.count("\n")


def bench_compile_time(models: tuple[str, ...] = ("resnet18", "gpt"), rounds: int = 2) -> list[dict]:
    rows = []
    for model in models:
        seconds: dict[str, list[float]] = {"O0": [], "O2": [], "O3": []}
        lines = {}
        for _ in range(rounds):
            for level in seconds:
                cpu, lines[level] = _compile_cpu_seconds(model, level)
                seconds[level].append(cpu)
        med = {level: statistics.median(s) for level, s in seconds.items()}
        rows.append({"model": model, "O0_cpu_s": med["O0"], "O2_cpu_s": med["O2"], "O3_cpu_s": med["O3"],
                     "O2/O0": med["O2"] / med["O0"], "O3/O0": med["O3"] / med["O0"], "O0_hlo_lines": lines["O0"],
                     "O2_hlo_lines": lines["O2"]})
    return rows
