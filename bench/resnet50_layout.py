"""Issue 28's accelerator rows (``python -m bench.resnet50_accel --preset issue28``): ResNet-50 on 32×32 images,
graphpar with its channels-last pass on and off, against hand-written flax in NHWC with flat leaves.

Per global batch (256 and 1024 by default), for float32 (graphpar ``O0``) and bfloat16 (graphpar ``O3``): the flax
step, graphpar's step with ``format_transform="channels_last"`` and with ``"off"``, each timed against the flax step
in interleaved rounds (``bench.timing.compare``); at the first batch also graphpar ``O2`` (bfloat16 with float32
BatchNorm and the dynamic loss scale), whose compile time the issue bounds. Each row gives step times, the ratio
(graphpar / flax, in time: ≤ 1.0 is the goal), images/s, both compile times (from building the network to the first
step's loss, on each side: trace, plan, lower, XLA compile and initialisation) and, for graphpar, the transposes and
the channels-last convolutions of its lowered program. flax's "O2" compile time is its bfloat16 step's (flax has
no loss scale). Everything is printed as it is measured, with the seconds elapsed, and rewritten to ``--json``
after each row, so a run cut short keeps what it measured.

On a CPU it runs the same rows on a stand-in (``--blocks 1,1,1,1 --width 0.0625``) so that it cannot break unseen;
the figures mean nothing there.
"""

from __future__ import annotations

import gc
import re
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from bench.resnet50_accel import _BLOCKS, flax_step, graphpar_train_network, model_name
from bench.timing import compare


def _lowered_counts(text: str) -> dict[str, int]:
    """Transposes and channels-last convolutions (forward and backward) in a lowered StableHLO program."""
    convs = re.findall(r"dim_numbers = (\[[^\]]*\]x\[[^\]]*\]->\[[^\]]*\])", text)
    return {"transposes": len(re.findall(r"stablehlo\.transpose", text)), "convolutions": len(convs),
            "convolutions_nhwc": sum(1 for c in convs if c.startswith("[b, 0, 1, f]"))}


def _first_loss(build: Callable[[], Callable[[], Any]]) -> tuple[Callable[[], Any], float, float]:
    """(step, seconds from the start of ``build`` to the first step's loss, that loss)."""
    started = time.perf_counter()
    run = build()
    loss = float(np.asarray(run()))
    return run, time.perf_counter() - started, loss


def bench_issue28(batches: Sequence[int] = (256, 1024), size: int = 32, calls: int = 10, rounds: int = 5,
                  levels: Sequence[str] = ("O0", "O3"), compile_level: str = "O2",
                  transforms: Sequence[str] = ("channels_last", "off"), blocks: tuple[int, ...] = _BLOCKS,
                  width: float = 1.0, devices: int | None = None,
                  say: Callable[[str], None] = print) -> Iterator[dict[str, Any]]:
    """The rows described in the module docstring, yielded as measured. ``compile_level`` runs at the first batch
    only, with the first of ``transforms`` (empty: not run); ``devices``: how many of JAX's devices (default all;
    several run graphpar's DATA_PARALLEL, whose BatchNorm is per device, against a flax step normalising over
    the global batch)."""
    devs = jax.devices()[:devices] if devices else jax.devices()
    began = time.perf_counter()

    def note(what: str) -> None:
        say(f"[{time.perf_counter() - began:7.1f} s] {what}")

    for batch in batches:
        if batch % len(devs):
            raise ValueError(f"batch {batch} does not split over {len(devs)} devices")
        rng = np.random.default_rng(0)
        y = rng.integers(0, 10, batch).astype(np.int32)
        x = rng.normal(size=(batch, 3, size, size)).astype(np.float32)
        x_nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
        runs = [(level, t) for level in levels for t in transforms]
        if batch == batches[0] and compile_level and transforms:
            runs.append((compile_level, transforms[0]))
        flax: dict[str, tuple[Callable[[], Any], float, float]] = {}
        for level, transform in runs:
            precision = "float32" if level == "O0" else "bfloat16"
            if precision not in flax:
                note(f"compiling flax NHWC {precision}, batch {batch}")
                dtype = jnp.float32 if precision == "float32" else jnp.bfloat16
                flax[precision] = _first_loss(lambda: flax_step(x_nhwc, y, "NHWC", dtype, devs, flat=True,
                                                                blocks=blocks, width=width, lower=False)[0])
            theirs, flax_compile, flax_loss = flax[precision]
            note(f"compiling graphpar {level} format_transform={transform!r}, batch {batch}")

            held: dict[str, Any] = {}

            def build() -> Callable[[], Any]:
                train = held["train"] = graphpar_train_network(level, jnp.bfloat16, len(devs), transform, blocks,
                                                               width)
                placed = train.program.place_inputs([x, y])
                return lambda: train.program.run_step(placed)

            ours, compile_s, loss = _first_loss(build)
            counts = _lowered_counts(held["train"].program.stages([x, y]).lowered.as_text())
            note(f"timing graphpar {level} {transform} against flax ({rounds} rounds of {calls} steps)")
            t_ours, t_flax, ratio = compare(ours, theirs, calls=calls, rounds=rounds, warmup=3)
            row = {"model": model_name(size, blocks, width), "graphpar": level, "precision": precision,
                   "format_transform": transform, "batch": batch,
                   "devices": f"{len(devs)} {devs[0].platform}", "graphpar_ms": round(t_ours * 1e3, 3),
                   "flax_ms": round(t_flax * 1e3, 3), "ratio": round(ratio, 3),
                   "graphpar_img_s": round(batch / t_ours), "flax_img_s": round(batch / t_flax),
                   "graphpar_compile_s": round(compile_s, 1), "flax_compile_s": round(flax_compile, 1),
                   "compile_ratio": round(compile_s / flax_compile, 2),
                   "first_loss": (round(loss, 4), round(flax_loss, 4)), **counts,
                   "elapsed_s": round(time.perf_counter() - began, 1)}
            del ours
            held.clear()  # the train network and its program: freed before the next one is built
            gc.collect()
            yield row
        del flax
        gc.collect()


def summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The acceptance figures of the rows: per (level, batch) the ratio with the pass on and off and their quotient;
    graphpar's compile time over flax's at O0 and O2."""
    out: dict[str, Any] = {"ratio": {}, "compile_ratio": {}}
    for r in rows:
        key = f"{r['graphpar']} batch {r['batch']}"
        out["ratio"].setdefault(key, {})[r["format_transform"]] = r["ratio"]
        if r["graphpar"] in ("O0", "O2"):
            out["compile_ratio"].setdefault(r["graphpar"], []).append(r["compile_ratio"])
    for key, by in out["ratio"].items():
        if "channels_last" in by and "off" in by:
            by["on_over_off"] = round(by["channels_last"] / by["off"], 3)
    return out
