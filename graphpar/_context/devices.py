"""The checks of ``device_target`` and ``device_id`` against the devices of this machine.

They start a JAX backend, which must not happen before a multi-process job has formed (``jax.distributed`` refuses
to initialize afterwards): while ``graphpar._cluster`` says a job is pending they pass, and
``graphpar.communication.init()`` runs them again once the job has formed. The CPU device count of ``XLA_FLAGS`` is
checked first, pending job or not: the first backend to start reads it, and XLA answers a bad one with its help
text or an error about process indices.
"""

from __future__ import annotations

import jax

from graphpar import _cluster, _env
from graphpar._logging import notice_once
from graphpar.errors import DeviceError

_JAX_PLATFORM = {"CPU": "cpu", "GPU": "gpu", "TPU": "tpu"}


def ascend_stand_in() -> str:
    """The target ``set_context(device_target="Ascend")`` runs on: JAX's default platform ("GPU", "TPU" or "CPU").

    XLA has no Ascend backend. A MindSpore script names Ascend because that was its accelerator, not because its
    results depend on Ascend's kernels, so it runs on the accelerator JAX has (the notice says which, once). In a
    multi-process job that has not formed yet no backend may start to tell which platform that is: the script must
    name it there (a :class:`DeviceError` says so).
    """
    if _cluster.cluster_pending():
        raise DeviceError(
            "set_context(device_target='Ascend'): graphpar has no Ascend backend and runs an Ascend script on JAX's "
            "default platform, which cannot be known before this multi-process job has formed (no backend may start "
            "before init()); name the platform instead: device_target='GPU', 'CPU' or 'TPU'")
    target = jax.default_backend().upper()
    target = target if target in _JAX_PLATFORM else "CPU"
    notice_once(f"context:ascend:{target}", f"set_context(device_target='Ascend'): graphpar has no Ascend backend; "
                f"this script runs on JAX's default platform instead, device_target={target!r} (as "
                f"get_context('device_target') reports)")
    return target


def check_platform(device_target: str) -> None:
    """JAX must have a backend for ``device_target`` on this machine (and XLA_FLAGS a usable CPU device count)."""
    _env.host_device_count()
    if _cluster.cluster_pending():  # no backend may start before init() joins the job; init() checks then
        return
    platform = _JAX_PLATFORM[device_target]
    try:
        devices = jax.devices(platform)
    except RuntimeError:
        devices = []
    if not devices:
        have = sorted({d.platform.upper() for d in jax.devices()})
        raise DeviceError(
            f"set_context(device_target={device_target!r}): JAX has no {platform} backend on this machine "
            f"(it has: {', '.join(have)}). Use device_target={have[0]!r}, or install the jax plugin for "
            f"{device_target} (e.g. pip install 'jax[cuda12]').")


def check_device_id(device_id: int) -> None:
    """``device_id`` must name a device of this host: one of this process's devices times the processes of the
    host (one process per device, the seeds' way, gives each process DEVICE_ID = its device on the host). Deferred
    to ``init()`` while a multi-process job has not formed (no backend may start before)."""
    if _cluster.cluster_pending():
        return
    devices = jax.local_devices()
    host = len(devices) * _cluster.placement().local_process_count
    if device_id >= host:
        raise DeviceError(f"set_context(device_id={device_id}): this host has {host} {devices[0].platform.upper()} "
                          f"device(s); valid device_id: 0..{host - 1} (graphpar uses every device of the job; "
                          "device_num in set_auto_parallel_context selects how many)")
