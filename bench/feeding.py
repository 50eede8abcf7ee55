"""Does ``Model.train`` with default dataset settings keep the devices busy? (issue 28, deliverable 1)

The tutorials' CIFAR-10 pipeline (``Cifar10Dataset`` reading real binary-format files written to a temporary folder;
RandomCrop, RandomHorizontalFlip, Rescale, Normalize, HWC2CHW, TypeCast, shuffle, batch) feeds a ResNet through
``Model.train`` with graphpar's default settings — no ``num_parallel_workers``, no ``set_prefetch_size``: the worker
count and read-ahead are chosen by ``dataset/autotune.py``. The baseline is the same compiled step run on the same
batches placed on the device beforehand (pre-staged: what the step alone can consume). A third row fixes one
worker (graphpar's default before issue 28) for comparison.

One ``Model.train(epochs, ...)`` call per row and round: its first epoch includes the tuning (and any worker start)
and is shown apart; the figure compared is the median of the later epochs, each timed from its first step's result
to its last (``bench.throughput.step_clock``). Each round runs the pre-staged loop before and after its train calls
(alternating their order) and divides; the medians over the rounds are printed. Nothing asserts on speed; goal on a
GPU: fed / pre-staged >= 0.95. On the H100 one round takes about a minute with ResNet-50's compile.

    python -m bench.feeding --model resnet50 --batch 256 --dtype bf16     # the accelerator row
    python -m bench.feeding                                              # CPU default: ResNet-18 (width 0.25)
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

_MEAN = (0.4914, 0.4822, 0.4465)
_STD = (0.2023, 0.1994, 0.2010)


class _Notices(logging.Handler):
    """The data-stall notices of one train call (what the tuner changed, or what to change)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.stalls: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("data stall"):
            self.stalls.append(message.split("; ", 1)[-1].split(" (docs/")[0])


def write_cifar10(root: Path, images: int, seed: int = 0) -> Path:
    """``images`` random training images in CIFAR-10's binary format (five ``data_batch_N.bin`` files of
    <label byte><3072 pixel bytes, channel planes> records, and a small ``test_batch.bin``)."""
    folder = root / "cifar-10-batches-bin"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    per_file = -(-images // 5)
    for k in range(5):
        n = min(per_file, images - k * per_file)
        records = np.empty((max(n, 0), 3073), np.uint8)
        records[:, 0] = rng.integers(0, 10, len(records))
        records[:, 1:] = rng.integers(0, 256, (len(records), 3072))
        (folder / f"data_batch_{k + 1}.bin").write_bytes(records.tobytes())
    test = np.zeros((10, 3073), np.uint8)
    (folder / "test_batch.bin").write_bytes(test.tobytes())
    return folder


def cifar_pipeline(path: Path, batch: int, workers: int | None = None) -> Any:
    """The tutorials' create_dataset at 32x32; ``workers`` None: graphpar's default (chosen by Model.train)."""
    import graphpar.dataset as ds
    from graphpar import dtype as mstype
    from graphpar.dataset import transforms, vision

    data = ds.Cifar10Dataset(str(path), usage="train", num_parallel_workers=workers)
    data = data.map(transforms.TypeCast(mstype.int32), input_columns="label")
    data = data.map([vision.RandomCrop((32, 32), (4, 4, 4, 4)), vision.RandomHorizontalFlip(),
                     vision.Rescale(1.0 / 255.0, 0.0), vision.Normalize(_MEAN, _STD), vision.HWC2CHW()],
                    input_columns="image")
    return data.shuffle(buffer_size=10).batch(batch, drop_remainder=True)


def train_model(model: str, dtype: str, width: float) -> Any:
    """``Model`` over the tutorials' ResNet on one device (STAND_ALONE), at O3 in ``dtype`` or float32."""
    import graphpar as ms
    from graphpar import nn
    from graphpar.models import resnet18, resnet50
    from graphpar.train import Model

    ms.reset_auto_parallel_context()
    ms.set_context(mode=ms.GRAPH_MODE, save_graphs=False)
    ms.set_auto_parallel_context(parallel_mode="stand_alone")
    ms.set_seed(0)
    net = resnet50(class_num=10) if model == "resnet50" else resnet18(class_num=10, width=width)
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    optimizer = nn.Momentum(net.trainable_params(), 0.01, 0.9)
    if dtype == "f32":
        return Model(net, loss, optimizer)
    low = {"bf16": ms.bfloat16, "f16": ms.float16}[dtype]
    return Model(ms.amp.build_train_network(net, optimizer, loss, level="O3", cast_model_type=low))


def bench_feeding(model: str = "resnet18", batch: int = 32, dtype: str = "f32", steps: int = 24, epochs: int = 4,
                  width: float = 0.25, one_worker: bool = True, rounds: int = 3) -> list[dict[str, Any]]:
    """Rows: pre-staged, ``Model.train`` with default settings, and (``one_worker``) with one fixed worker.

    ``rounds`` rounds, each: pre-staged, the train calls (their order alternating between rounds), pre-staged
    again; a call's ratio is its steady images/s over the mean of the two pre-staged figures around it, so a
    machine that slows down within a round moves both alike. The medians over the rounds are printed, and the CPU
    seconds of this process per step of each call (its threads included, worker processes not): steadier than
    wall time on a loaded machine."""
    import jax

    from bench.throughput import prestaged_clock, step_clock

    trainer = train_model(model, dtype, width)
    program = trainer.train_network.program
    device = jax.devices()[0]
    name = f"{model}{'' if model == 'resnet50' else f' (width {width})'} {dtype}"
    sides = [("default", None)] + ([("1 worker", 1)] if one_worker else [])
    seen: dict[str, dict[str, list]] = {label: {"ratio": [], "step": [], "first": [], "wall": [], "cpu": [],
                                                 "notes": []}
                                        for label, _ in sides}
    pre: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        path = write_cifar10(Path(tmp), batch * steps)
        prestaged = prestaged_clock(program, cifar_pipeline(path, batch), 1)
        compile_started = time.perf_counter()
        prestaged()  # compiles the step
        compile_s = time.perf_counter() - compile_started
        for r in range(rounds):
            before = prestaged()
            for label, workers in (sides if r % 2 == 0 else sides[::-1]):
                clock = step_clock(steps)
                notices = _Notices()
                logging.getLogger("graphpar").addHandler(notices)
                started, cpu = time.perf_counter(), time.process_time()
                try:
                    trainer.train(epochs, cifar_pipeline(path, batch, workers), callbacks=[clock])
                finally:
                    logging.getLogger("graphpar").removeHandler(notices)
                side = seen[label]
                side["wall"].append(time.perf_counter() - started)
                side["cpu"].append((time.process_time() - cpu) / (epochs * steps))
                side["step"].append(statistics.median(clock.per_epoch[1:]) if epochs > 1 else clock.per_epoch[0])
                side["first"].append(clock.per_epoch[0])
                side["notes"] += notices.stalls
            after = prestaged()
            pre += [before, after]
            for label, _ in sides:
                seen[label]["ratio"].append((before + after) / 2 / seen[label]["step"][-1])
    t_pre = statistics.median(pre)
    rows = [{"model": name, "feeding": "pre-staged", "batch": batch, "device": device.platform,
             "img_s": round(batch / t_pre), "vs_prestaged": 1.0, "compile_s": round(compile_s, 1)}]
    for label, side in seen.items():
        rows.append({"model": name, "feeding": f"Model.train, {label}", "batch": batch, "device": device.platform,
                     "img_s": round(batch / statistics.median(side["step"])),
                     "vs_prestaged": round(statistics.median(side["ratio"]), 3),
                     "per_round": [round(v, 3) for v in side["ratio"]],
                     "first_epoch_img_s": round(batch / statistics.median(side["first"])),
                     "train_call_s": round(statistics.median(side["wall"]), 1),
                     "cpu_ms_per_step": round(statistics.median(side["cpu"]) * 1e3, 1),
                     "tuning": " | ".join(dict.fromkeys(side["notes"]))})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, choices=("resnet18", "resnet50"),
                        help="default: resnet50 on an accelerator, resnet18 (width 0.25) on a CPU")
    parser.add_argument("--batch", type=int, default=None, help="default: 256 on an accelerator, 32 on a CPU")
    parser.add_argument("--dtype", default=None, choices=("f32", "bf16", "f16"),
                        help="f32, or O3 in bf16/f16; default bf16 on an accelerator, f32 on a CPU")
    parser.add_argument("--steps", type=int, default=None, help="steps per epoch (default 48 accelerator, 24 CPU)")
    parser.add_argument("--epochs", type=int, default=4, help="epochs per train call; the first is shown apart")
    parser.add_argument("--width", type=float, default=0.25, help="ResNet-18's width")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 1 accelerator, 3 CPU)")
    parser.add_argument("--no-one-worker", action="store_true", help="leave out the fixed one-worker row")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args(argv)
    import jax

    accelerator = jax.default_backend() != "cpu"
    model = args.model or ("resnet50" if accelerator else "resnet18")
    batch = args.batch or (256 if accelerator else 32)
    dtype = args.dtype or ("bf16" if accelerator else "f32")
    steps = args.steps or (48 if accelerator else 24)
    print(f"jax {jax.__version__} on {jax.devices()[0].device_kind}; {len(os.sched_getaffinity(0))} cores",
          flush=True)
    rounds = args.rounds or (1 if accelerator else 3)
    rows = bench_feeding(model, batch, dtype, steps, args.epochs, args.width, not args.no_one_worker, rounds)
    for row in rows:
        print(json.dumps(row), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
