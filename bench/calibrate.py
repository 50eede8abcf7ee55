"""``python -m bench calibrate``: measure the cost model's constants on the machine at hand and write them to the
calibration file the planner reads (``graphpar.planner.calibration``: ``$GRAPHPAR_CALIBRATION``, else
``$XDG_CACHE_HOME/graphpar/calibration.json``).

On the local devices of the default platform (GPU where there is one; here the CPU's simulated devices): matmul
FLOP/s at a few sizes (jitted ``a @ b``), element-wise bandwidth (``x * 2 + 1``: read and write), and per collective
kind (AllReduce, AllGather, ReduceScatter, AlltoAll under ``jax.shard_map`` over all local devices) the time at a
small and a large message: latency = the small one's time, seconds per wire byte = the slope between them. gamma is
1 / the largest matmul's FLOP/s; alpha and beta are the AllReduce's (the gradient reduction the plans pay most).
With one device the collectives are not measured and alpha / beta stay built in. Prints the figures.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec as P

from graphpar.planner.calibration import Calibration, calibration_path, save
from graphpar.planner.cost import DEFAULT_HW, HARDWARE
from graphpar.planner.wire import wire_bytes

KINDS = ("AllReduce", "AllGather", "ReduceScatter", "AlltoAll")


def _seconds(fn: Callable[[], object], repeats: int) -> float:
    """Median wall time of one call (after a compiling call)."""
    jax.block_until_ready(fn())
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def matmul_flops(sizes: Sequence[int], repeats: int) -> dict[str, float]:
    out = {}
    for n in sizes:
        a = jnp.ones((n, n), jnp.float32)
        f = jax.jit(lambda x: x @ x)
        out[str(n)] = 2.0 * n ** 3 / _seconds(lambda: f(a), repeats)
    return out


def elementwise_bandwidth(elements: int, repeats: int) -> float:
    x = jnp.ones((elements,), jnp.float32)
    f = jax.jit(lambda v: v * 2.0 + 1.0)
    return 2.0 * x.nbytes / _seconds(lambda: f(x), repeats)


def _collective(kind: str, mesh: Mesh, elements: int) -> tuple[Callable[[], object], float]:
    """A jitted collective over every device of ``mesh`` on a per-device block of ``elements`` floats, and the wire
    bytes one device sends for it."""
    g = mesh.devices.size
    body = {"AllReduce": lambda x: jax.lax.psum(x, "d"),
            "AllGather": lambda x: jax.lax.all_gather(x, "d", tiled=True),
            "ReduceScatter": lambda x: jax.lax.psum_scatter(x, "d", tiled=True),
            "AlltoAll": lambda x: jax.lax.all_to_all(x, "d", 0, 0, tiled=True)}[kind]
    out_spec = P(None) if kind == "AllGather" else P("d")
    f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("d"), out_specs=out_spec, check_vma=False))
    x = jax.device_put(jnp.ones((g * elements,), jnp.float32), jax.NamedSharding(mesh, P("d")))
    block = elements * 4.0
    result = {"AllReduce": block, "AllGather": block * g, "ReduceScatter": block / g, "AlltoAll": block}[kind]
    return (lambda: f(x)), wire_bytes(kind, result, g)


def collectives(devices: Sequence, small: int, large: int, repeats: int) -> dict[str, dict[str, float]]:
    mesh = Mesh(np.array(devices), ("d",))
    out = {}
    for kind in KINDS:
        fs, bs = _collective(kind, mesh, small)
        fl, bl = _collective(kind, mesh, large)
        ts, tl = _seconds(fs, repeats), _seconds(fl, repeats)
        out[kind] = {"alpha": ts, "beta": max(tl - ts, 0.0) / max(bl - bs, 1.0)}
    return out


def measure(matmul_sizes: Sequence[int] = (256, 512, 1024), elements: int = 1 << 22, small: int = 1024,
            large: int = 1 << 20, repeats: int = 5) -> Calibration:
    """The calibration of the default platform's local devices."""
    devices = jax.local_devices()
    platform = devices[0].platform
    built_in = HARDWARE.get(platform, DEFAULT_HW)
    flops = matmul_flops(matmul_sizes, repeats)
    bandwidth = elementwise_bandwidth(elements, repeats)
    comms = collectives(devices, small, large, repeats) if len(devices) > 1 else {}
    reduce = comms.get("AllReduce")
    alpha = reduce["alpha"] if reduce else built_in.alpha
    beta = reduce["beta"] if reduce and reduce["beta"] > 0 else built_in.beta
    return Calibration(platform, len(devices), alpha, beta, 1.0 / flops[str(max(matmul_sizes))], flops, bandwidth,
                       comms)


def main() -> int:
    cal = measure()
    path = save(cal)
    built_in = HARDWARE.get(cal.platform, DEFAULT_HW)
    print(f"calibration of {cal.devices} {cal.platform} devices -> {path} (read by the planner; override the path "
          f"with $GRAPHPAR_CALIBRATION)")
    for n, f in cal.matmul_flops.items():
        print(f"  matmul {n}^3: {f / 1e9:.2f} GFLOP/s")
    print(f"  element-wise: {cal.elementwise_bytes_per_s / 1e9:.2f} GB/s")
    for kind, c in cal.collectives.items():
        print(f"  {kind}: latency {c['alpha'] * 1e6:.1f} us, {1 / c['beta'] / 1e9 if c['beta'] else float('inf'):.2f} "
              "GB/s per wire byte")
    print(f"  constants: alpha {cal.alpha:.3g} s (built-in {built_in.alpha:.3g}), beta {cal.beta:.3g} s/B "
          f"({built_in.beta:.3g}), gamma {cal.gamma:.3g} s/FLOP ({built_in.gamma:.3g})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["measure", "main", "calibration_path"]
