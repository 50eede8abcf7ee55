"""MindSpore 2.6's ``mindspore.runtime`` memory API over XLA's allocator.

``set_memory(max_size=...)`` is the setting ``set_context(max_device_memory=...)`` (one setting under two names in
MindSpore as well): here it is the per-device budget of the AUTO_PARALLEL searches. The other arguments shape
MindSpore's memory pool (its first size, its growth step, its reuse level, huge pages); XLA's allocator has no such
knobs (on a GPU it reserves a fraction of the device when the backend starts, decided by
``XLA_PYTHON_CLIENT_PREALLOCATE`` / ``XLA_PYTHON_CLIENT_MEM_FRACTION``), so they are validated as MindSpore does and
a value other than the default is reported once as having no effect.

The statistics come from each local device's ``memory_stats()`` (PJRT's allocator counters). A platform that keeps
none (the CPU) gives what MindSpore's CPU backend gives: an empty dict, and 0 for each figure.
"""

from __future__ import annotations

import gc
import logging
import re
from collections.abc import Iterable, Mapping

import jax

from graphpar._context import parse_memory, set_context
from graphpar._logging import notice_once
from graphpar.errors import ConfigError, RuntimeApiError, SettingTypeError

_API = "set_memory"
_DEFAULTS = {"init_size": "2GB", "increase_size": "2GB", "max_size": "1024GB", "optimize_level": "O0",
             "huge_page_reserve_size": "0GB"}
_RESERVE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*GB\s*$")  # huge_page_reserve_size may be 0GB
OPTIMIZE_LEVELS = ("O0", "O1")
_POOL_SHAPE = {"init_size": "the pool's first size", "increase_size": "the pool's growth step",
               "huge_page_reserve_size": "the huge pages reserved"}


def set_memory(init_size: str = "2GB", increase_size: str = "2GB", max_size: str = "1024GB",
               optimize_level: str = "O0", huge_page_reserve_size: str = "0GB") -> None:
    """MindSpore's ``runtime.set_memory``. ``max_size`` becomes ``set_context(max_device_memory=max_size)``: the
    per-device budget of the AUTO_PARALLEL searches; MindSpore's default ``"1024GB"`` means "the whole device", so it
    sets no budget (``get_context("max_device_memory")`` is then None). The pool-shape arguments are validated
    (sizes ``"xxGB"``, ``optimize_level`` in O0/O1) and a non-default value is reported once: XLA's allocator sizes
    its pool itself and always reuses buffers by liveness (what MindSpore's ``O1`` adds)."""
    args = {"init_size": init_size, "increase_size": increase_size, "max_size": max_size,
            "optimize_level": optimize_level, "huge_page_reserve_size": huge_page_reserve_size}
    for key, value in args.items():  # MindSpore's args_type_check: every argument is a str
        if not isinstance(value, str):
            raise SettingTypeError(_API, key, value,
                                   reason=f"{key} must be a str such as {_DEFAULTS[key]!r}, got {value!r}")
    parse_memory(init_size, _API, "init_size")
    parse_memory(increase_size, _API, "increase_size")
    parse_memory(max_size, _API, "max_size")
    if optimize_level not in OPTIMIZE_LEVELS:
        raise ConfigError(_API, "optimize_level", optimize_level, valid=OPTIMIZE_LEVELS)
    if _RESERVE.match(huge_page_reserve_size) is None:
        raise ConfigError(_API, "huge_page_reserve_size", huge_page_reserve_size,
                          reason=f"huge_page_reserve_size must be a size >= 0 in the format 'xxGB' (e.g. '0GB', "
                                 f"'2GB'), got {huge_page_reserve_size!r}")
    for key, what in _POOL_SHAPE.items():
        if args[key].replace(" ", "") != _DEFAULTS[key]:
            notice_once(f"set-memory:{key}", f"set_memory({key}={args[key]!r}) has no effect in graphpar: XLA's "
                        f"allocator decides {what} itself (on a GPU it reserves a fraction of the device at start: "
                        "XLA_PYTHON_CLIENT_PREALLOCATE / XLA_PYTHON_CLIENT_MEM_FRACTION)", logging.WARNING)
    if optimize_level != "O0":
        notice_once("set-memory:optimize_level", f"set_memory(optimize_level={optimize_level!r}): XLA always reuses "
                    "buffers by their liveness in the compiled program (what MindSpore's O1 adds); nothing changes",
                    logging.INFO)
    set_context(max_device_memory=None if max_size.replace(" ", "") == _DEFAULTS["max_size"] else max_size)


# MindSpore's keys, from PJRT's allocator counters (first key found; BFC pools on GPU report pool_bytes)
_STATS_FROM = {"total_reserved_memory": ("pool_bytes", "bytes_reserved", "bytes_limit"),
               "total_allocated_memory": ("bytes_in_use",),
               "max_reserved_memory": ("peak_pool_bytes", "peak_bytes_reserved", "pool_bytes", "bytes_limit"),
               "max_allocated_memory": ("peak_bytes_in_use",)}


def pool_stats(device_stats: Iterable[Mapping[str, int] | None]) -> dict[str, int]:
    """MindSpore's ``memory_stats()`` figures from the devices' PJRT counters: each figure is the largest over the
    devices (the one that meets the budget first; the devices run one SPMD program, so they differ by shard sizes
    only). Empty when no device keeps counters (CPU), as MindSpore's CPU backend returns. MindSpore's per-pool block
    lists (``common_mem_pool_stats``, ``persistent_mem_pool_stats``) have no XLA counterpart and are left out."""
    per_device = []
    for stats in device_stats:
        if not stats:
            continue
        row = {key: next((int(stats[name]) for name in names if name in stats), 0)
               for key, names in _STATS_FROM.items()}
        row["total_idle_memory"] = max(row["total_reserved_memory"] - row["total_allocated_memory"], 0)
        row["total_eager_free_memory"] = 0  # MindSpore's eager-free blocks: XLA frees at once
        per_device.append(row)
    if not per_device:
        return {}
    keys = ("total_reserved_memory", "total_allocated_memory", "total_idle_memory", "total_eager_free_memory",
            "max_reserved_memory", "max_allocated_memory")
    return {key: max(row[key] for row in per_device) for key in keys}


def memory_stats() -> dict[str, int]:
    """MindSpore's ``runtime.memory_stats()`` for this process's devices (see :func:`pool_stats`)."""
    return pool_stats(device.memory_stats() for device in jax.local_devices())


def memory_reserved() -> int:
    """Bytes the allocator holds now (0 where the platform keeps no counters)."""
    return memory_stats().get("total_reserved_memory", 0)


def max_memory_reserved() -> int:
    return memory_stats().get("max_reserved_memory", 0)


def memory_allocated() -> int:
    """Bytes live arrays occupy now (0 where the platform keeps no counters)."""
    return memory_stats().get("total_allocated_memory", 0)


def max_memory_allocated() -> int:
    """The peak since the process started (XLA's counter cannot be reset: see :func:`reset_peak_memory_stats`)."""
    return memory_stats().get("max_allocated_memory", 0)


def memory_summary() -> str:
    """MindSpore's ``runtime.memory_summary()``: the figures of :func:`memory_stats` as a table."""
    stats = memory_stats()
    if not stats:
        return "memory summary: this platform's allocator keeps no statistics (as MindSpore's CPU backend)"
    width = max(len(key) for key in stats)
    return "\n".join(["memory summary (bytes, largest over this process's devices):"] +
                     [f"  {key:<{width}}  {value:>16,d}" for key, value in stats.items()])


def _reset_peak(api: str) -> None:
    """Where no device keeps counters there is no peak to reset (MindSpore's CPU backend alike); elsewhere XLA keeps
    the peak since the process started and offers no reset, so the call is refused rather than pretending."""
    if memory_stats():
        raise RuntimeApiError(api, "XLA's allocator keeps the peak since the process started and cannot reset it; "
                              "read max_memory_allocated() / max_memory_reserved() before and after the part you "
                              "measure, or measure it in its own process")


def reset_peak_memory_stats() -> None:
    _reset_peak("reset_peak_memory_stats")


def reset_max_memory_reserved() -> None:
    _reset_peak("reset_max_memory_reserved")


def reset_max_memory_allocated() -> None:
    _reset_peak("reset_max_memory_allocated")


def empty_cache() -> None:
    """MindSpore's ``runtime.empty_cache()``: frees what Python no longer references (a garbage collection, so
    arrays held only by reference cycles are released now); XLA's allocator keeps its pool, said once."""
    gc.collect()
    notice_once("empty-cache", "empty_cache(): unreferenced arrays are freed; XLA's allocator keeps the memory it "
                "reserved for reuse (it returns none to the device)", logging.INFO)
