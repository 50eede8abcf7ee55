"""ResNet-50 on CIFAR-sized images, images/s on an accelerator: graphpar against hand-written flax (issue 15).

Both sides train the same network on the same pre-staged batch of 32×32 images, one step per call, with momentum SGD
(lr 0.01, momentum 0.9) and softmax cross-entropy:

* graphpar: the tutorials' ``graphpar.models.resnet50`` (MindSpore's docs sample: bottleneck blocks with the stride
  on the first 1×1 convolution, NCHW) under ``Model``/``build_train_network``, STAND_ALONE on one device and
  DATA_PARALLEL on several; float32 (``O0``) and bfloat16 at ``O2`` (BatchNorm in float32, MindSpore's dynamic loss
  scale) and ``O3`` (everything in bfloat16, no loss scale), the type named with ``cast_model_type`` as a user on a
  GPU must (MindSpore's GPU default is float16).
* hand-written flax: the same layers written as a flax user writes them (``nnx.Conv``/``nnx.BatchNorm``/
  ``nnx.Linear`` in NHWC, the flax ImageNet example's style), ``optax.sgd`` with momentum, ``jax.jit`` with donated
  state, the batch split over the devices with a ``NamedSharding`` and everything else replicated. bfloat16 is flax's
  usual mixed precision: ``dtype=jnp.bfloat16`` on every layer, float32 parameters (BatchNorm statistics reduced in
  float32 by flax itself). No decision of graphpar's is copied.

On one device the two compute the same function. On several, graphpar runs DATA_PARALLEL as MindSpore does: each
device normalises with its own batch statistics, and its loss is a replica ``vmap``. The flax step is a plain
sharded ``jit`` whose BatchNorm uses the statistics of the global batch. That is another program, so read the
multi-device rows as an indication only; on the 8 simulated CPU devices graphpar measured 1.15–1.22× flax at a
global batch of 8.

The batch is already on the devices for both (the accelerator's consumption rate, not the pipeline's). Timed
interleaved with ``bench.timing.compare``; images/s = global batch / median step time. The lowered programs'
convolutions are counted by element type, so a bfloat16 row that convolves in float32 shows it.

    python -m bench resnet50            # on the default JAX backend (a GPU where there is one)
    python -m bench.resnet50_accel --batch 256 --calls 20 --rounds 5
    python -m bench.resnet50_accel --preset issue28 --json out.json   # issue 28's rows (bench/resnet50_layout.py)
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from bench.timing import compare

_LR, _MOMENTUM = 0.01, 0.9
_BLOCKS, _STAGES = (3, 4, 6, 3), (64, 128, 256, 512)


# --- the hand-written side -------------------------------------------------------------------------------------------
class ConvNCHW(nnx.Module):
    """``nnx.Conv`` for channels-first data (OIHW weights): the layout MindSpore's Conv2d uses, for the NCHW row."""

    def __init__(self, cin: int, cout: int, kernel: tuple[int, int], strides: int = 1, *, use_bias: bool,
                 padding: str, dtype: Any, rngs: nnx.Rngs):
        if use_bias or padding != "SAME":
            raise ValueError("ConvNCHW computes bias-free 'SAME' convolutions only (what ResNet-50 uses)")
        init = nnx.initializers.lecun_normal(in_axis=1, out_axis=0)
        self.kernel = nnx.Param(init(rngs.params(), (cout, cin, *kernel), jnp.float32))
        self.strides, self.dtype = strides, dtype

    def __call__(self, x):
        return jax.lax.conv_general_dilated(x.astype(self.dtype), self.kernel[...].astype(self.dtype),
                                            (self.strides, self.strides), "SAME",
                                            dimension_numbers=("NCHW", "OIHW", "NCHW"))


def _layers(layout: str, dtype: Any, rngs: nnx.Rngs) -> tuple[Any, Any]:
    """(conv, norm) constructors for ``layout``: flax's own NHWC layers, or channels-first ones."""
    norm = dict(momentum=0.99, epsilon=1e-5, dtype=dtype, rngs=rngs, axis=-1 if layout == "NHWC" else 1)
    conv_cls = nnx.Conv if layout == "NHWC" else ConvNCHW

    def conv(cin, cout, kernel, strides=1):
        return conv_cls(cin, cout, kernel, strides=strides, use_bias=False, padding="SAME", dtype=dtype, rngs=rngs)

    return conv, lambda n: nnx.BatchNorm(n, **norm)


class Bottleneck(nnx.Module):
    def __init__(self, cin: int, cout: int, stride: int, layout: str, dtype: Any, rngs: nnx.Rngs):
        inner = cout // 4
        conv, norm = _layers(layout, dtype, rngs)
        self.conv1 = conv(cin, inner, (1, 1), stride)
        self.bn1 = norm(inner)
        self.conv2 = conv(inner, inner, (3, 3))
        self.bn2 = norm(inner)
        self.conv3 = conv(inner, cout, (1, 1))
        self.bn3 = norm(cout)
        self.down = nnx.data(None)
        if stride != 1 or cin != cout:
            self.down = nnx.Sequential(conv(cin, cout, (1, 1), stride), norm(cout))

    def __call__(self, x):
        out = nnx.relu(self.bn1(self.conv1(x)))
        out = nnx.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return nnx.relu(out + (x if self.down is None else self.down(x)))


def _channels(base: int, width: float) -> int:
    """A stage's channels at ``width`` (graphpar.models.resnet's rule, so both sides build the same network)."""
    return max(1, int(round(base * width)))


class FlaxResNet50(nnx.Module):
    """ResNet-50 (MindSpore sample's layer layout) in flax NNX, NHWC (flax's) or NCHW (MindSpore's); ``blocks`` and
    ``width`` make the smaller bottleneck ResNets a CPU smoke run uses as a stand-in."""

    def __init__(self, num_classes: int, layout: str, dtype: Any, rngs: nnx.Rngs,
                 blocks: tuple[int, ...] = _BLOCKS, width: float = 1.0):
        self.dtype, self.layout = dtype, layout
        conv, norm = _layers(layout, dtype, rngs)
        stem = _channels(64, width)
        self.conv1 = conv(3, stem, (7, 7), 2)
        self.bn1 = norm(stem)
        layers, cin = [], stem
        for i, (n, base) in enumerate(zip(blocks, _STAGES)):
            for j in range(n):
                layers.append(Bottleneck(cin, _channels(base, width) * 4, 2 if i and not j else 1, layout, dtype,
                                         rngs))
                cin = _channels(base, width) * 4
        self.blocks = nnx.List(layers)
        self.fc = nnx.Linear(cin, num_classes, dtype=dtype, rngs=rngs)

    def __call__(self, x):
        x = nnx.relu(self.bn1(self.conv1(x.astype(self.dtype))))
        spatial = (1, 2) if self.layout == "NHWC" else (2, 3)
        window = tuple(3 if d in spatial else 1 for d in range(4))
        strides = tuple(2 if d in spatial else 1 for d in range(4))
        x = jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, window, strides, "SAME")
        for block in self.blocks:
            x = block(x)
        return self.fc(jnp.mean(x, axis=spatial)).astype(jnp.float32)


def flax_step(x: np.ndarray, y: np.ndarray, layout: str, dtype: Any, devices: list,
              flat: bool = False, blocks: tuple[int, ...] = _BLOCKS, width: float = 1.0,
              lower: bool = True) -> tuple[Any, Any]:
    """(run closure doing one train step per call, the lowered step) for the hand-written flax ResNet-50;
    ``x`` is in ``layout``. The state (parameters, BatchNorm statistics, optimizer state) crosses the jit boundary
    as flax ``State`` pytrees, as flax's functional-API examples pass it, or with ``flat`` as one flat list of arrays
    (what a user who has profiled the host side writes: no pytree flattening per step). ``lower=False``: no
    lowered program is returned (None; lowering again costs a second or two of a timed budget)."""
    model = FlaxResNet50(10, layout, dtype, nnx.Rngs(0), blocks, width)
    graphdef, params, stats = nnx.split(model, nnx.Param, nnx.BatchStat)
    tx = optax.sgd(_LR, momentum=_MOMENTUM)
    mesh = Mesh(np.asarray(devices), ("data",))
    replicated, batch = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))

    def step(p, s, o, xb, yb):
        def objective(p):
            m = nnx.merge(graphdef, p, s, copy=True)
            logits = m(xb)
            return optax.softmax_cross_entropy_with_integer_labels(logits, yb).mean(), nnx.state(m, nnx.BatchStat)

        (loss, new_stats), grads = jax.value_and_grad(objective, has_aux=True)(p)
        updates, o = tx.update(grads, o, p)
        return optax.apply_updates(p, updates), new_stats, o, loss

    state = (jax.device_put(params, replicated), jax.device_put(stats, replicated))
    state += (jax.device_put(tx.init(state[0]), replicated),)
    xs, ys = jax.device_put(x, batch), jax.device_put(y, batch)
    if flat:
        leaves, treedef = jax.tree.flatten(state)

        def flat_step(leaves, xb, yb):
            *new_state, loss = step(*jax.tree.unflatten(treedef, leaves), xb, yb)
            return jax.tree.leaves(new_state), loss

        jitted = jax.jit(flat_step, in_shardings=(replicated, batch, batch), out_shardings=(replicated, replicated),
                         donate_argnums=(0,))
        lowered = jitted.lower(leaves, xs, ys) if lower else None
        held = [leaves]

        def run():
            held[0], loss = jitted(held[0], xs, ys)
            return loss

        return run, lowered
    jitted = jax.jit(step, in_shardings=(replicated, replicated, replicated, batch, batch),
                     out_shardings=(replicated, replicated, replicated, replicated), donate_argnums=(0, 1, 2))
    lowered = jitted.lower(*state, xs, ys)
    held = [state]

    def run():
        *new_state, loss = jitted(*held[0], xs, ys)
        held[0] = tuple(new_state)
        return loss

    return run, lowered


# --- the graphpar side -----------------------------------------------------------------------------------------------
def graphpar_train_network(level: str, low: Any, devices: int, transform: str = "auto",
                           blocks: tuple[int, ...] = _BLOCKS, width: float = 1.0) -> Any:
    """The tutorials' ResNet-50 train network at ``level`` with low type ``low``: STAND_ALONE on one device,
    DATA_PARALLEL on several, on JAX's default backend. ``transform``: ``set_context(format_transform=...)``
    ("auto": channels-last on a GPU); ``blocks``/``width``: a smaller bottleneck ResNet of the same layout."""
    import graphpar as ms
    from graphpar import nn
    from graphpar.models import resnet50
    from graphpar.models.resnet import Init, ResNet, ResidualBlock

    ms.reset_auto_parallel_context()
    ms.set_context(mode=ms.GRAPH_MODE, save_graphs=False, device_target=jax.default_backend().upper(),
                   format_transform=transform)
    ms.set_auto_parallel_context(parallel_mode="data_parallel" if devices > 1 else "stand_alone",
                                 gradients_mean=True)
    ms.set_seed(0)
    if tuple(blocks) == _BLOCKS and width == 1.0:
        net = resnet50(class_num=10)
    else:
        net = ResNet(ResidualBlock, tuple(blocks), 10, width=width, init=Init.SAMPLE)
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    optimizer = nn.Momentum(net.trainable_params(), _LR, _MOMENTUM)
    kwargs = {} if level == "O0" else {"cast_model_type": low}
    return ms.amp.build_train_network(net, optimizer, loss, level=level, **kwargs)


def graphpar_step(x: np.ndarray, y: np.ndarray, level: str, low: Any, devices: int, transform: str = "auto",
                  blocks: tuple[int, ...] = _BLOCKS, width: float = 1.0) -> tuple[Any, Any]:
    """(run closure, lowered step) for the tutorials' ResNet-50 at ``level`` with low type ``low``."""
    train = graphpar_train_network(level, low, devices, transform, blocks, width)
    placed = train.program.place_inputs([x, y])
    return (lambda: train.program.run_step(placed)), train.program.lower_step([x, y])


def _conv_types(lowered: Any) -> dict[str, int]:
    """Convolutions in the lowered program, counted by result element type (forward and backward)."""
    hlo = lowered.as_text(dialect="hlo")
    found: dict[str, int] = {}
    for dtype in re.findall(r"= (\w+)\[[^\]]*\]\S* convolution\(", hlo):
        found[dtype] = found.get(dtype, 0) + 1
    return found


def model_name(size: int, blocks: tuple[int, ...] = _BLOCKS, width: float = 1.0) -> str:
    """How a row names its network: ResNet-50, or the stand-in's blocks and width."""
    if tuple(blocks) == _BLOCKS and width == 1.0:
        return f"ResNet-50 {size}x{size}"
    return f"bottleneck ResNet blocks {','.join(map(str, blocks))} width {width} {size}x{size}"


def _timed_first_call(run) -> tuple[float, float]:
    started = time.perf_counter()
    loss = float(np.asarray(run()))
    return time.perf_counter() - started, loss


def bench_resnet50(batch: int = 256, size: int = 32, calls: int = 20, rounds: int = 5,
                   levels: tuple[str, ...] = ("O0", "O2", "O3"),
                   layouts: tuple[str, ...] = ("NHWC", "NCHW"),
                   flax_states: tuple[str, ...] = ("pytree",), transform: str = "auto",
                   blocks: tuple[int, ...] = _BLOCKS, width: float = 1.0,
                   n_devices: int | None = None) -> Iterator[dict[str, Any]]:
    """One row per graphpar level and flax layout, yielded as soon as it is measured: step time and images/s against
    hand-written flax of the same precision (NHWC: what a flax user writes; NCHW: the same in MindSpore's layout,
    which tells the cost of the layout from the cost of graphpar). ``transform``: graphpar's
    ``format_transform``; ``blocks``/``width``: a smaller bottleneck ResNet; ``n_devices``: how many devices."""
    devices = jax.devices()[:n_devices] if n_devices else jax.devices()
    if batch % len(devices):
        raise ValueError(f"batch {batch} does not split over {len(devices)} devices")
    rng = np.random.default_rng(0)
    y = rng.integers(0, 10, batch).astype(np.int32)
    x = rng.normal(size=(batch, 3, size, size)).astype(np.float32)
    x_nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    hand: dict[tuple[str, str, str], dict[str, Any]] = {}

    def flax_side(layout: str, precision: str, state: str) -> dict[str, Any]:
        key = layout, precision, state
        if key not in hand:
            dtype = jnp.float32 if precision == "float32" else jnp.bfloat16
            run, lowered = flax_step(x_nhwc if layout == "NHWC" else x, y, layout, dtype, devices, state == "flat",
                                     blocks, width)
            compile_s, first = _timed_first_call(run)
            hand[key] = {"run": run, "convs": _conv_types(lowered), "compile_s": compile_s, "first_loss": first}
        return hand[key]

    for level in levels:
        precision = "float32" if level == "O0" else "bfloat16"
        ours, lowered = graphpar_step(x, y, level, jnp.bfloat16, len(devices), transform, blocks, width)
        compile_s, first = _timed_first_call(ours)
        for layout, state in ((la, st) for la in layouts for st in flax_states):
            theirs = flax_side(layout, precision, state)
            t_ours, t_hand, ratio = compare(ours, theirs["run"], calls=calls, rounds=rounds, warmup=3)
            yield {"model": model_name(size, blocks, width), "graphpar": level, "precision": precision,
                   "flax_layout": layout, "flax_state": state, "batch": batch, "devices": f"{len(devices)} {devices[0].platform}",
                   "graphpar_ms": round(t_ours * 1e3, 2), "flax_ms": round(t_hand * 1e3, 2),
                   "format_transform": transform, "ratio": round(ratio, 3), "graphpar_img_s": round(batch / t_ours),
                   "flax_img_s": round(batch / t_hand), "graphpar_convs": _conv_types(lowered),
                   "flax_convs": theirs["convs"], "graphpar_compile_s": round(compile_s, 1),
                   "flax_compile_s": round(theirs["compile_s"], 1),
                   "first_loss": (round(first, 4), round(theirs["first_loss"], 4))}


def bench_feeding(batch: int = 256, steps: int = 24, workers: tuple[int, ...] = (1, 4, 8), rounds: int = 3,
                  level: str = "O3") -> Iterator[dict[str, Any]]:
    """Can the tutorials' CIFAR pipeline keep the accelerator busy? ``Model.train`` on the pipeline (``workers``
    workers, device prefetch 2) against the same compiled step on pre-staged batches, images/s, for graphpar's
    ResNet-50 at ``level`` (bfloat16 named).

    One ``Model.train(1 + rounds, ...)`` call per worker count: its first epoch starts the worker processes and is
    left out; the ``rounds`` epochs after it run on the same workers (the pipeline's stream continues across
    epochs), each timed from its first step's result (``bench.throughput.step_clock``). A call per epoch would
    restart the workers every time and time their start. The pre-staged loop is timed before and after."""
    import graphpar.dataset as ds
    from bench.pipeline import SyntheticCifar, _pipeline
    from bench.throughput import prestaged_clock, step_clock
    from graphpar.train import Model

    devices = jax.devices()
    train = graphpar_train_network(level, jnp.bfloat16, len(devices))
    model = Model(train)  # a train network as MindSpore's Model takes one: no loss, no optimizer
    program = train.program
    source = SyntheticCifar(batch * steps)
    ds.config.set_device_prefetch_size(2)
    for w in workers:
        data = _pipeline(source, 32, w, batch // len(devices))
        prestaged = prestaged_clock(program, data, len(devices))
        pre = [prestaged() for _ in range(rounds)]
        clock = step_clock(steps)
        started = time.perf_counter()
        model.train(1 + rounds, data, callbacks=[clock])
        wall = time.perf_counter() - started
        pre += [prestaged() for _ in range(rounds)]
        t_pre, t_fed = float(np.median(pre)), float(np.median(clock.per_epoch[1:]))
        yield {"model": "ResNet-50 32x32", "graphpar": level, "batch": batch,
               "devices": f"{len(devices)} {devices[0].platform}", "workers": w,
               "prestaged_img_s": round(batch / t_pre), "fed_img_s": round(batch / t_fed),
               "fed_vs_prestaged": round(t_fed / t_pre, 3),
               "first_epoch_img_s": round(batch / clock.per_epoch[0]), "train_call_s": round(wall, 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=("issue28",), help="issue28: ResNet-50 float32 (O0) and bfloat16 (O3, and "
                        "O2 at the first batch) at batches 256 and 1024, graphpar's channels-last pass on and off, "
                        "against flax NHWC with flat leaves (bench/resnet50_layout.py)")
    parser.add_argument("--batch", default=None, help="global batch sizes, comma-separated (default 256; the preset: "
                        "256,1024)")
    parser.add_argument("--image", "--size", dest="size", type=int, default=32, help="image height and width")
    parser.add_argument("--calls", type=int, default=None, help="steps per round (default 20; the preset: 10)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--levels", default=None, help="graphpar amp levels (default O0,O2,O3; the preset: O0,O3)")
    parser.add_argument("--layouts", default="NHWC,NCHW")
    parser.add_argument("--flax-state", default="pytree", help="pytree and/or flat (see flax_step)")
    parser.add_argument("--transform", default="auto", help="set_context(format_transform=...) for graphpar: auto, "
                        "channels_last or off (the preset runs channels_last and off)")
    parser.add_argument("--blocks", default=",".join(map(str, _BLOCKS)), help="bottleneck blocks per stage (a "
                        "stand-in on a CPU: 1,1,1,1)")
    parser.add_argument("--width", type=float, default=1.0, help="channel multiplier (a stand-in on a CPU: 0.0625)")
    parser.add_argument("--devices", type=int, default=None, help="how many of JAX's devices (default all)")
    parser.add_argument("--feeding", default="", help="worker counts for the pipeline-feeding rows (e.g. 1,4,8); "
                        "empty: the step rows only")
    parser.add_argument("--json", help="also write the rows to this file (rewritten after each row)")
    args = parser.parse_args(argv)
    print(f"jax {jax.__version__} on {jax.device_count()} {jax.devices()[0].device_kind}", flush=True)
    rows: list[dict[str, Any]] = []
    extra: dict[str, Any] = {}

    def emit(row: dict[str, Any]) -> None:
        rows.append(row)
        print(json.dumps(row), flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"rows": rows, **extra} if extra else rows, f, indent=1)

    blocks = tuple(int(b) for b in args.blocks.split(","))
    if args.preset == "issue28":
        from bench.resnet50_layout import bench_issue28, summary

        batches = [int(b) for b in (args.batch or "256,1024").split(",")]
        levels = tuple((args.levels or "O0,O3").split(","))
        started = time.perf_counter()
        for row in bench_issue28(batches, args.size, args.calls or 10, args.rounds, levels, blocks=blocks,
                                 width=args.width, devices=args.devices, say=lambda s: print(s, flush=True)):
            extra["summary"] = summary(rows + [row])
            emit(row)
        print(json.dumps({"summary": summary(rows), "wall_s": round(time.perf_counter() - started, 1)}), flush=True)
        return 0
    batches = [int(b) for b in (args.batch or "256").split(",")]
    if args.feeding:
        for row in bench_feeding(batches[0], workers=tuple(int(w) for w in args.feeding.split(",")),
                                 level=(args.levels or "O0,O2,O3").split(",")[-1]):
            emit(row)
        return 0
    for batch in batches:
        for row in bench_resnet50(batch, args.size, args.calls or 20, args.rounds,
                                  tuple((args.levels or "O0,O2,O3").split(",")), tuple(args.layouts.split(",")),
                                  tuple(args.flax_state.split(",")), args.transform, blocks, args.width,
                                  args.devices):
            emit(row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
