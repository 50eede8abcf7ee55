"""The devices of a job, in MindSpore rank order.

A rank is a device, as in MindSpore: rank ``r`` is ``jax.devices()[r]`` (JAX orders devices by process, then by
local id, so one process's devices hold consecutive ranks). ``device_num`` in the auto-parallel context selects the
first ``device_num`` ranks.
"""

from __future__ import annotations

import jax

from graphpar import _context
from graphpar._logging import notice_once
from graphpar.errors import DeviceError


def all_devices() -> list[jax.Device]:
    platform = _context.current().device_target.lower()
    try:
        devices = jax.devices(platform)
    except RuntimeError:
        devices = jax.devices()
    return list(devices)


def job_devices(device_num: int | None) -> list[jax.Device]:
    """The first ``device_num`` devices (all of them when ``None``), refusing counts the machine lacks."""
    devices = all_devices()
    if device_num is None:
        return devices
    if device_num > len(devices):
        raise DeviceError(
            f"set_auto_parallel_context(device_num={device_num}): this job has only {len(devices)} "
            f"{devices[0].platform.upper()} device(s); valid: 1..{len(devices)} (on CPU, simulate more with "
            f"XLA_FLAGS=--xla_force_host_platform_device_count=N before JAX starts)")
    if device_num < len(devices):
        notice_once(f"device_num:{device_num}:{len(devices)}",
                    f"set_auto_parallel_context(device_num={device_num}): training on ranks 0..{device_num - 1} "
                    f"({_names(devices[:device_num])}) of the {len(devices)} devices this job has; the other "
                    f"{len(devices) - device_num} stay idle")
    return devices[:device_num]


def _names(devices: list[jax.Device]) -> str:
    """``cpu:0-3`` for consecutive ids of one platform, else each device."""
    ids = [d.id for d in devices]
    platform = devices[0].platform
    if all(d.platform == platform for d in devices) and ids == list(range(ids[0], ids[0] + len(ids))):
        return f"{platform}:{ids[0]}" + (f"-{ids[-1]}" if len(ids) > 1 else "")
    return ", ".join(f"{d.platform}:{d.id}" for d in devices)


def rank_of(device: jax.Device) -> int:
    return all_devices().index(device)


def local_ranks(devices: list[jax.Device]) -> list[int]:
    """Ranks among ``devices`` that this process drives (in order)."""
    me = jax.process_index()
    return [i for i, d in enumerate(devices) if d.process_index == me]
