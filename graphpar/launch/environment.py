"""The environment of each child ``graphpar launch`` starts: this process's environment plus the placement
variables that ``graphpar.communication.init()`` reads (see ``graphpar._env``).

Direct mode writes GRAPHPAR_COORDINATOR / _NUM_PROCESSES / _PROCESS_ID / _LOCAL_PROCESS_ID / _LOCAL_PROCESS_COUNT;
Dynamic Cluster mode writes MindSpore's MS_ROLE / MS_SCHED_HOST / MS_SCHED_PORT / MS_WORKER_NUM / MS_NODE_ID /
MS_TOPO_TIMEOUT. Both get GRAPHPAR_LOCAL_DEVICES and, for CPU devices, ``XLA_FLAGS`` with
``--xla_force_host_platform_device_count`` (JAX reads it when its CPU backend starts, so it must be in the child's
environment from the beginning). ``GRAPHPAR_RESTART_COUNT`` tells a restarted job which attempt it is;
``GRAPHPAR_EXIT_NOTE`` where a worker notes that its script ended (see ``graphpar.launch.exits``).
"""

from __future__ import annotations

import re

from graphpar import _env
from graphpar.launch.config import LaunchConfig

_COUNT_FLAG = "--xla_force_host_platform_device_count"
# Variables of another convention that must not leak into a child (they would take precedence or confuse it).
_PLACEMENT = ("GRAPHPAR_COORDINATOR", "GRAPHPAR_NUM_PROCESSES", "GRAPHPAR_PROCESS_ID", "GRAPHPAR_LOCAL_PROCESS_ID",
              "GRAPHPAR_LOCAL_PROCESS_COUNT", "GRAPHPAR_EXIT_NOTE", "MS_ROLE", "MS_SCHED_HOST", "MS_SCHED_PORT",
              "MS_WORKER_NUM", "MS_NODE_ID", "RANK_TABLE_FILE", "RANK_ID", "RANK_SIZE")


def replaced_variables() -> list[str]:
    """``NAME=value`` of the placement variables in the launcher's own environment: the launcher places its
    processes itself, so these do not reach them (said once at start, never silently)."""
    env = _env.process_environment()
    return [f"{name}={env[name]!r}" for name in _PLACEMENT if env.get(name)]


def xla_flags_with_devices(flags: str, count: int) -> str:
    """``flags`` with the CPU device count set to ``count`` (an existing count flag is replaced)."""
    flags = re.sub(rf"{_COUNT_FLAG}=\S*", "", flags).strip()
    return f"{flags} {_COUNT_FLAG}={count}".strip()


def _base(config: LaunchConfig, restart: int) -> dict[str, str]:
    env = _env.process_environment()
    for name in _PLACEMENT:
        env.pop(name, None)
    env["PYTHONUNBUFFERED"] = "1"  # logs stream as they are written
    env["GRAPHPAR_RESTART_COUNT"] = str(restart)
    env["GRAPHPAR_CLUSTER_TIMEOUT"] = str(config.cluster_timeout)
    env["MS_TOPO_TIMEOUT"] = str(config.cluster_timeout)
    return env


def worker_environment(config: LaunchConfig, local_index: int, restart: int,
                       exit_note: str | None = None) -> dict[str, str]:
    """The environment of local worker ``local_index``; ``exit_note`` is where its script notes that it ended
    (``GRAPHPAR_EXIT_NOTE``, see ``graphpar.launch.exits``)."""
    env = _base(config, restart)
    if exit_note is not None:
        env["GRAPHPAR_EXIT_NOTE"] = exit_note
    if config.devices_per_proc is not None:
        env["GRAPHPAR_LOCAL_DEVICES"] = str(config.devices_per_proc)
        env["XLA_FLAGS"] = xla_flags_with_devices(_env.xla_flags(), config.devices_per_proc)
    pid = config.process_id(local_index)
    # the device it drives on its host, as MindSpore's one-process-per-device scripts read it (seed 003)
    env["DEVICE_ID"] = str(local_index * (config.devices_per_proc or 1))
    if config.dynamic_cluster:
        env.update(MS_ROLE="MS_WORKER", MS_SCHED_HOST=config.master_addr, MS_SCHED_PORT=str(config.master_port),
                   MS_WORKER_NUM=str(config.total_procs))
        if pid is not None:
            env["MS_NODE_ID"] = str(pid)
    else:
        env.update(GRAPHPAR_COORDINATOR=f"{config.master_addr}:{config.master_port}",
                   GRAPHPAR_NUM_PROCESSES=str(config.total_procs), GRAPHPAR_PROCESS_ID=str(pid),
                   GRAPHPAR_LOCAL_PROCESS_ID=str(local_index),
                   GRAPHPAR_LOCAL_PROCESS_COUNT=str(config.local_procs))
    return env


def scheduler_environment(config: LaunchConfig, restart: int) -> dict[str, str]:
    env = _base(config, restart)
    env.update(MS_ROLE="MS_SCHED", MS_SCHED_HOST=config.master_addr, MS_SCHED_PORT=str(config.master_port),
               MS_WORKER_NUM=str(config.total_procs), JAX_PLATFORMS="cpu")
    return env
