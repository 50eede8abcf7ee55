"""MindSpore 2.6's ``mindspore.runtime`` executor API: CPU binding, dispatch threads, launch groups, blocking launch.

MindSpore's runtime launches one kernel at a time from its own threads; XLA launches a compiled program as one
executable from its own thread pools, sized when the backend starts. So the thread knobs are validated as MindSpore
does and reported once as having no effect, and ``set_cpu_affinity`` binds the whole process (every thread it has,
and those it starts later inherit the set) to the CPUs MindSpore would give this process's device.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping

from graphpar._cluster import placement
from graphpar._logging import notice_once
from graphpar.errors import ConfigError, SettingTypeError

_RANGE = re.compile(r"^(\d+)-(\d+)$")
_DEVICE = re.compile(r"^device(\d+)$")


def _positive_int(api: str, key: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise SettingTypeError(api, key, value, reason=f"{key} must be an int, got {value!r}")
    if value < 1:
        raise ConfigError(api, key, value, reason=f"{key} must be an int >= 1, got {value!r}")
    return value


def dispatch_threads_num(num_threads: int) -> None:
    """MindSpore's runtime thread count: validated; XLA sizes its own thread pools (said once)."""
    _positive_int("dispatch_threads_num", "num_threads", num_threads)
    notice_once("dispatch-threads-num", f"dispatch_threads_num({num_threads}) has no effect in graphpar: XLA runs "
                "each compiled program from thread pools it sizes when the backend starts", logging.INFO)


def set_kernel_launch_group(thread_num: int = 2, kernel_group_num: int = 8) -> None:
    """MindSpore's batched kernel launch (O0): validated; XLA launches a compiled program as one executable, not
    kernel by kernel, so there are no kernels to group (said once)."""
    _positive_int("set_kernel_launch_group", "thread_num", thread_num)
    _positive_int("set_kernel_launch_group", "kernel_group_num", kernel_group_num)
    notice_once("kernel-launch-group", "set_kernel_launch_group(...) has no effect in graphpar: XLA launches each "
                "compiled program as one executable, not kernel by kernel", logging.INFO)


def launch_blocking() -> None:
    """MindSpore's synchronous launch (to locate a failing kernel): XLA keeps dispatching asynchronously; a step's
    error is raised where its results are read. Said once, with what to write instead."""
    notice_once("launch-blocking", "launch_blocking(): XLA still dispatches each compiled program asynchronously; an "
                "error of a step is raised where its results are read (asnumpy(), print, the loss); call "
                "graphpar.runtime.synchronize() after a call to stop at it", logging.WARNING)


def _cpus(api: str, key: str, ranges: object) -> list[int]:
    """The CPUs of MindSpore's ``["a-b", ...]`` list."""
    if not isinstance(ranges, list):
        raise ConfigError(api, key, ranges, reason=f"{key}'s values must be lists such as ['0-3', '8-11'], got "
                                                   f"{ranges!r}")
    cpus = []
    for item in ranges:
        m = _RANGE.match(item) if isinstance(item, str) else None
        if m is None or int(m.group(1)) > int(m.group(2)):
            raise ConfigError(api, key, item, reason=f"{item!r} in {key} is not a range 'cpuidX-cpuidY' with X <= Y "
                                                     "(e.g. '0-3')")
        cpus += range(int(m.group(1)), int(m.group(2)) + 1)
    return cpus


def affinity_plan(affinity_cpu_list: Mapping[str, list[str]] | None, device: int, devices_on_host: int,
                  available: list[int]) -> list[int]:
    """The CPUs for ``device`` (this process's device on its host): its entry ``"device{N}"`` of the list when
    given, else MindSpore's automatic policy without NUMA or device topology: the available CPUs cut into equal
    consecutive slices, one per device of the host."""
    api, key = "set_cpu_affinity", "affinity_cpu_list"
    if affinity_cpu_list:
        plan = {}
        for name, ranges in affinity_cpu_list.items():
            m = _DEVICE.match(name) if isinstance(name, str) else None
            if m is None:
                raise ConfigError(api, key, name, reason=f"key {name!r} of {key} is not of the form 'deviceX'")
            plan[int(m.group(1))] = _cpus(api, key, ranges)
        if device not in plan:
            raise ConfigError(api, key, sorted(plan), reason=f"{key} has no entry 'device{device}' for this "
                              f"process's device; keys given: {', '.join(f'device{d}' for d in sorted(plan))}")
        missing = sorted(set(plan[device]) - set(available))
        if missing:
            raise ConfigError(api, key, missing, reason=f"CPUs {missing} of 'device{device}' are not available to "
                              f"this process (available: {_ranges(available)})")
        return plan[device]
    share = len(available) // devices_on_host
    if share < 1:
        raise ConfigError(api, key, None, reason=f"{len(available)} available CPUs cannot be shared among "
                          f"{devices_on_host} devices of this host; give affinity_cpu_list")
    return available[device * share:(device + 1) * share]


def _ranges(cpus: list[int]) -> str:
    return ", ".join(str(c) for c in cpus)


def set_cpu_affinity(enable_affinity: bool, affinity_cpu_list: Mapping[str, list[str]] | None = None) -> None:
    """MindSpore 2.6's ``runtime.set_cpu_affinity``: binds this process (all its threads) to the CPUs of its device
    (:func:`affinity_plan`); ``enable_affinity=False`` binds nothing, as in MindSpore. MindSpore also splits the
    set among its modules' threads (main, runtime, pynative, minddata); XLA's threads are not named, so the
    process shares the set."""
    if not isinstance(enable_affinity, bool):
        raise SettingTypeError("set_cpu_affinity", "enable_affinity", enable_affinity,
                               reason=f"enable_affinity must be a bool, got {enable_affinity!r}")
    if affinity_cpu_list is not None and not isinstance(affinity_cpu_list, Mapping):
        raise SettingTypeError("set_cpu_affinity", "affinity_cpu_list", affinity_cpu_list,
                               reason="affinity_cpu_list must be a dict such as {'device0': ['0-3']} or None, got "
                                      f"{affinity_cpu_list!r}")
    if not enable_affinity:
        return
    where = placement()
    cpus = affinity_plan(affinity_cpu_list, where.local_process_id, where.local_process_count,
                         sorted(os.sched_getaffinity(0)))
    for tid in os.listdir("/proc/self/task"):  # every thread now; threads started later inherit the set
        try:
            os.sched_setaffinity(int(tid), cpus)
        except ProcessLookupError:  # a thread that ended meanwhile
            continue
    notice_once("cpu-affinity", f"set_cpu_affinity: this process runs on CPUs {_ranges(cpus)}", logging.INFO)
