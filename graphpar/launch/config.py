"""What ``graphpar launch`` was asked to run, resolved from both spellings of its options.

``--nproc N`` is msrun's ``--local_worker_num N``; ``--worker_num`` is the job's process count over all nodes
(default: this node's count); ``--hostfile`` supplies both from ``HOST slots=N`` lines. Two ways to form the job:

* direct (default): every process gets its index from the launcher (node ``r``'s first process is the sum of the
  earlier nodes' counts); the JAX coordinator is process 0, bound to ``--master_addr:--master_port``;
* Dynamic Cluster (``--scheduler`` on the node that hosts it, ``--dynamic-cluster`` on the others, or
  ``--node_rank -1`` on a multi-node job): the workers get MindSpore's ``MS_*`` variables and a scheduler at
  ``--master_addr:--master_port`` assigns their indices.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass

from graphpar import _env
from graphpar.communication.addresses import free_port
from graphpar.communication.port_check import check_listen_address
from graphpar.errors import EnvVarError
from graphpar.launch import hostfile

DEFAULT_MASTER_PORT = 8118  # msrun's default
DEFAULT_LOG_DIR = "graphpar_logs"
DEFAULT_CLUSTER_TIMEOUT = 600  # msrun's --cluster_time_out default
RECOVERY_RESTARTS = 3  # --max-restarts when MS_ENABLE_RECOVERY=1 and none is given


class LaunchError(ValueError):
    """Options that do not describe a job; the message says which and what would be valid."""


@dataclass(frozen=True)
class LaunchConfig:
    command: tuple[str, ...]
    local_procs: int
    total_procs: int
    first_process: int | None  # index of this node's first process; None: the scheduler assigns (Dynamic Cluster)
    devices_per_proc: int | None
    master_addr: str
    master_port: int
    log_dir: str
    cluster_timeout: int
    max_restarts: int
    dynamic_cluster: bool
    run_scheduler: bool
    early_exit_grace: float = _env.DEFAULT_EARLY_EXIT_GRACE  # seconds; negative: no limit (see launch.exits)

    def process_id(self, local_index: int) -> int | None:
        return None if self.first_process is None else self.first_process + local_index

    def ranks_of(self, local_index: int) -> str:
        """``process 2 (ranks 4-5)``: how a message names a worker."""
        pid = self.process_id(local_index)
        if pid is None:
            return f"local worker {local_index}"
        if self.devices_per_proc is None:
            return f"process {pid}"
        first = pid * self.devices_per_proc
        last = first + self.devices_per_proc - 1
        return f"process {pid} (rank{'s' if last > first else ''} {first}{f'-{last}' if last > first else ''})"

    def log_name(self, local_index: int) -> str:
        pid = self.process_id(local_index)
        return f"worker_{local_index if pid is None else pid}.log"


def _command(command: list[str]) -> tuple[str, ...]:
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise LaunchError("graphpar launch: give the command to run, e.g. graphpar launch --nproc 2 python train.py")
    if command[0].endswith(".py") or (os.path.isfile(command[0]) and not os.access(command[0], os.X_OK)):
        return (sys.executable, *command)  # a script path: run it with this Python
    if shutil.which(command[0]) is None and not os.path.exists(command[0]):
        raise LaunchError(f"graphpar launch: {command[0]!r} is neither a program on PATH nor a file")
    return tuple(command)


def _positive(name: str, value: int | None) -> None:
    if value is not None and value < 1:
        raise LaunchError(f"graphpar launch: {name} must be >= 1, got {value}")


def _check_settings(args) -> None:
    """Settings that used to fail inside the workers (or in C++), refused here by name before anything starts."""
    if args.master_port is not None and not 1 <= args.master_port <= 65535:
        raise LaunchError(f"graphpar launch: --master_port {args.master_port} is not a TCP port; valid: 1..65535 "
                          "(or leave it out on one host to get a free one)")
    if args.cluster_time_out == 0:
        raise LaunchError("graphpar launch: --cluster_time_out 0 would give up on the other processes at once; "
                          "valid: seconds >= 1 (default 600), or negative to wait without limit")
    try:  # passed on to every worker as they are
        _env.cluster_env().check("GRAPHPAR_HEARTBEAT_TIMEOUT")
        if args.devices_per_proc is None:  # else the launcher writes the CPU device count itself
            _env.host_device_count()
    except EnvVarError as exc:
        raise LaunchError(f"graphpar launch: {exc}") from None


def _cluster_timeout(args) -> int:
    """``--cluster_time_out``, else the environment's GRAPHPAR_CLUSTER_TIMEOUT / MS_TOPO_TIMEOUT (the launcher
    writes both for its workers, so one set by hand would otherwise be replaced without a word), else 600 s."""
    if args.cluster_time_out is not None:
        return args.cluster_time_out
    env = _env.cluster_env()
    try:
        env.check("GRAPHPAR_CLUSTER_TIMEOUT" if env.present("GRAPHPAR_CLUSTER_TIMEOUT") else "MS_TOPO_TIMEOUT")
    except EnvVarError as exc:
        raise LaunchError(f"graphpar launch: {exc}") from None
    return env.cluster_timeout if env.cluster_timeout is not None else DEFAULT_CLUSTER_TIMEOUT


def _early_exit_grace(args) -> float:
    if args.early_exit_grace is None:
        try:
            return _env.early_exit_grace()
        except EnvVarError as exc:
            raise LaunchError(f"graphpar launch: {exc}") from None
    return args.early_exit_grace


def check_listen_address_here(config: LaunchConfig) -> None:
    """When this node runs process 0 (whose coordinator binds ``--master_addr:--master_port``) or the Dynamic Cluster
    scheduler, that address must be bindable here: a busy port or another host's address made JAX fail in every
    worker with "Failed to start RPC server". Asked before any process starts (not in :func:`resolve`, which only
    reads what was asked and may describe another node)."""
    if config.run_scheduler:
        who = "the Dynamic Cluster scheduler"
    elif not config.dynamic_cluster and config.first_process == 0:
        who = "process 0's coordinator"
    else:
        return
    problem = check_listen_address(config.master_addr, config.master_port)
    if problem is not None:
        raise LaunchError(f"graphpar launch: {who} listens at --master_addr {config.master_addr} --master_port "
                          f"{config.master_port} on this node, but {problem}; valid: a free port on an address of "
                          "this host (leave --master_port out on one host to get a free one)")


def resolve(args) -> LaunchConfig:
    """Turn parsed CLI arguments (see ``graphpar.launch.cli``) into a :class:`LaunchConfig`."""
    _check_settings(args)
    if args.nproc is not None and args.local_worker_num is not None and args.nproc != args.local_worker_num:
        raise LaunchError(f"graphpar launch: --nproc {args.nproc} and --local_worker_num {args.local_worker_num} "
                          "disagree (they are two spellings of the same option)")
    for flag, value in (("--nproc", args.nproc), ("--local_worker_num", args.local_worker_num),
                        ("--worker_num", args.worker_num), ("--devices-per-proc", args.devices_per_proc)):
        _positive(flag, value)
    local = args.nproc if args.nproc is not None else args.local_worker_num
    total = args.worker_num
    node_rank = args.node_rank
    first = None
    master_addr = args.master_addr
    if args.hostfile:
        entries = hostfile.parse(args.hostfile)
        index = hostfile.locate(entries, node_rank, args.hostfile)
        local = local if local is not None else entries[index].slots
        total = total if total is not None else sum(e.slots for e in entries)
        node_rank = index
        first = sum(e.slots for e in entries[:index])
        master_addr = master_addr or entries[0].host
    local = local if local is not None else 1
    total = total if total is not None else local
    if local > total:
        raise LaunchError(f"graphpar launch: this node's {local} processes exceed --worker_num {total}")
    single_node = local == total
    if node_rank is None or node_rank < 0:
        node_rank = 0 if single_node else -1
    dynamic = bool(args.scheduler or args.dynamic_cluster or node_rank < 0)
    if first is None and node_rank >= 0:
        first = node_rank * local  # nodes with equal process counts; use --hostfile for unequal ones
    if first is not None and first + local > total:
        raise LaunchError(f"graphpar launch: node {node_rank} would run processes {first}..{first + local - 1} but the "
                          f"job has --worker_num {total} (valid node ranks: 0..{total // local - 1})")
    max_restarts = args.max_restarts
    if max_restarts is None:  # MindSpore's disaster recovery switch makes a job restartable by default
        max_restarts = RECOVERY_RESTARTS if _env.cluster_env().ms_enable_recovery else 0
    if max_restarts < 0:
        raise LaunchError(f"graphpar launch: --max-restarts must be >= 0, got {max_restarts}")
    master_addr = master_addr or "127.0.0.1"
    port = args.master_port
    if port is None:
        port = free_port(master_addr) if single_node and not args.dynamic_cluster else DEFAULT_MASTER_PORT
    return LaunchConfig(
        command=_command(list(args.command)), local_procs=local, total_procs=total,
        first_process=first if (not dynamic or node_rank >= 0) else None, devices_per_proc=args.devices_per_proc,
        master_addr=master_addr, master_port=port, log_dir=args.log_dir or DEFAULT_LOG_DIR,
        cluster_timeout=_cluster_timeout(args), max_restarts=max_restarts, dynamic_cluster=dynamic,
        run_scheduler=bool(args.scheduler or (dynamic and not args.dynamic_cluster and (
            node_rank == 0 or (node_rank < 0 and master_addr in hostfile.local_names())))),
        early_exit_grace=_early_exit_grace(args))
