"""Where this process sits in a job, read from the environment of the launcher that started it.

Each launcher convention yields one :class:`ProcessPlan` (coordinator address, process count, this process's index,
its place on its host). Dynamic Cluster is different: its ranks come from the scheduler at run time, so
``graphpar.communication.dynamic_cluster`` makes that plan. This module only reads; it starts nothing.

The coordinator (the JAX coordination service) runs inside process 0 and binds the address it is given, never all
interfaces: ``bind_address`` is the numeric form of the coordinator's host.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from graphpar._cluster import convention as convention  # the convention is read below the settings (see _cluster)
from graphpar._env import ClusterEnv
from graphpar.communication import rendezvous_file
from graphpar.communication.addresses import free_port as free_port
from graphpar.communication.addresses import numeric_host as numeric_host
from graphpar.communication.addresses import split_address as split_address
from graphpar.communication.errors import ClusterError

DEFAULT_CLUSTER_TIMEOUT = 600  # seconds, msrun's --cluster_time_out default
DEFAULT_HEARTBEAT_TIMEOUT = 100  # seconds, jax.distributed's default


@dataclass(frozen=True)
class ProcessPlan:
    """This process's place in the job. ``source`` names the convention it was read from (for messages)."""

    source: str
    coordinator: str  # "host:port"
    num_processes: int
    process_id: int
    local_process_id: int = 0
    local_process_count: int = 1
    local_devices: int | None = None  # devices per process, when the launcher fixed it

    @property
    def bind_address(self) -> str:
        host, port = split_address(self.coordinator, self.source)
        return f"{numeric_host(host)}:{port}"


def _check_index(source: str, name: str, index: int, count: int, count_name: str) -> None:
    if count < 1:
        raise ClusterError(f"{source}: {count_name}={count} must be >= 1", count_name)
    if not 0 <= index < count:
        raise ClusterError(f"{source}: {name}={index} is out of range; valid: 0..{count - 1} ({count_name}={count})",
                           name)


def from_launcher(env: ClusterEnv) -> ProcessPlan:
    """``graphpar launch``'s variables: GRAPHPAR_COORDINATOR, GRAPHPAR_NUM_PROCESSES, GRAPHPAR_PROCESS_ID, ..."""
    source = "graphpar launch environment"
    env.check(*VARIABLES["launch"])
    missing = [n for n, v in (("GRAPHPAR_COORDINATOR", env.coordinator), ("GRAPHPAR_NUM_PROCESSES",
                                                                          env.num_processes),
                              ("GRAPHPAR_PROCESS_ID", env.process_id)) if v is None]
    if missing:
        raise ClusterError(f"{source}: {', '.join(missing)} must be set together with the other GRAPHPAR_* "
                           "placement variables (graphpar launch sets all of them)", missing[0])
    _check_index(source, "GRAPHPAR_PROCESS_ID", env.process_id, env.num_processes, "GRAPHPAR_NUM_PROCESSES")
    split_address(env.coordinator, source)
    local_count = env.local_process_count or 1
    local_id = env.local_process_id or 0
    _check_index(source, "GRAPHPAR_LOCAL_PROCESS_ID", local_id, local_count, "GRAPHPAR_LOCAL_PROCESS_COUNT")
    return ProcessPlan(source, env.coordinator, env.num_processes, env.process_id, local_id, local_count,
                       env.local_devices)


def _ompi_coordinator(env: ClusterEnv, timeout: float) -> str:
    """The coordinator of an ``mpirun`` job.

    In order: GRAPHPAR_COORDINATOR (``mpirun -x GRAPHPAR_COORDINATOR=host:port``); all ranks on this host → rank 0
    picks a free loopback port and publishes it in a file keyed by the MPI job id (``graphpar.communication.
    rendezvous_file``); otherwise the host of ``mpirun`` itself (OpenMPI 4's OMPI_MCA_orte_hnp_uri) with a port
    derived from the job id, as JAX's own OpenMPI detection does.
    """
    if env.coordinator:
        return env.coordinator
    if env.ompi_local_size == env.ompi_world_size:
        if not env.ompi_job_id:
            raise ClusterError("OpenMPI environment: OMPI_MCA_ess_base_jobid/PMIX_NAMESPACE is not set, so the "
                               "ranks cannot agree on a coordinator port; pass one with "
                               "mpirun -x GRAPHPAR_COORDINATOR=127.0.0.1:PORT", "GRAPHPAR_COORDINATOR")
        return rendezvous_file.coordinator_for(f"ompi-{env.ompi_job_id}", env.ompi_world_rank == 0, timeout)
    if env.ompi_hnp_uri:
        match = re.search(r"tcp://([^,:;]+)", env.ompi_hnp_uri)
        jobid = re.match(r"(\d+)", env.ompi_hnp_uri)
        if match and jobid:
            port = (int(jobid.group(1)) // 2 ** 12) % 2 ** 12 + (65535 - 2 ** 12 + 1)
            return f"{match.group(1)}:{port}"
    raise ClusterError("OpenMPI job across several hosts: set the coordinator explicitly with "
                       "mpirun -x GRAPHPAR_COORDINATOR=<host of rank 0>:<free port> ...", "GRAPHPAR_COORDINATOR")


def from_openmpi(env: ClusterEnv, timeout: float) -> ProcessPlan:
    """``mpirun -n N python train.py``: OMPI_COMM_WORLD_SIZE / _RANK / _LOCAL_RANK / _LOCAL_SIZE."""
    source = "OpenMPI environment"
    env.check(*VARIABLES["openmpi"])
    if env.ompi_world_size is None:
        raise ClusterError(f"{source}: OMPI_COMM_WORLD_SIZE is blank; mpirun sets it to the number of ranks",
                           "OMPI_COMM_WORLD_SIZE")
    if env.ompi_world_rank is None:
        raise ClusterError(f"{source}: OMPI_COMM_WORLD_SIZE is set but OMPI_COMM_WORLD_RANK is not",
                           "OMPI_COMM_WORLD_RANK")
    _check_index(source, "OMPI_COMM_WORLD_RANK", env.ompi_world_rank, env.ompi_world_size, "OMPI_COMM_WORLD_SIZE")
    return ProcessPlan(source, _ompi_coordinator(env, timeout), env.ompi_world_size, env.ompi_world_rank,
                       env.ompi_local_rank or 0, env.ompi_local_size or 1, env.local_devices)


def first_slurm_host(nodelist: str) -> str:
    """The first host of a SLURM node list: ``node[03-05,09],gpu1`` → ``node03``."""
    match = re.match(r"([^,\[]+)(\[([^\]]+)\])?", nodelist.strip())
    if not match:
        raise ClusterError(f"SLURM node list {nodelist!r} is not understood", "SLURM_STEP_NODELIST")
    prefix, ranges = match.group(1), match.group(3)
    if not ranges:
        return prefix
    first = ranges.split(",")[0].split("-")[0]
    return prefix + first


def _slurm_local_count(tasks_per_node: str | None) -> int:
    """Tasks on this node from SLURM_STEP_TASKS_PER_NODE (``4(x2)`` or ``4,3``: the first node's count)."""
    if not tasks_per_node:
        return 1
    match = re.match(r"(\d+)", tasks_per_node)
    return int(match.group(1)) if match else 1


def from_slurm(env: ClusterEnv) -> ProcessPlan:
    """``srun python train.py``: SLURM_NTASKS / SLURM_PROCID / SLURM_LOCALID; coordinator on the first node."""
    source = "SLURM environment"
    env.check(*VARIABLES["slurm"])
    if env.slurm_procid is None:
        raise ClusterError(f"{source}: SLURM_NTASKS is set but SLURM_PROCID is not", "SLURM_PROCID")
    _check_index(source, "SLURM_PROCID", env.slurm_procid, env.slurm_ntasks, "SLURM_NTASKS")
    if env.coordinator:
        coordinator = env.coordinator
    else:
        if not env.slurm_nodelist or env.slurm_job_id is None:
            raise ClusterError(f"{source}: SLURM_STEP_NODELIST and SLURM_JOB_ID are needed to place the "
                               "coordinator, or set GRAPHPAR_COORDINATOR=host:port", "GRAPHPAR_COORDINATOR")
        port = env.slurm_job_id % 2 ** 12 + (65535 - 2 ** 12 + 1)
        coordinator = f"{first_slurm_host(env.slurm_nodelist)}:{port}"
    local_count = max(_slurm_local_count(env.slurm_tasks_per_node), (env.slurm_localid or 0) + 1)
    return ProcessPlan(source, coordinator, env.slurm_ntasks, env.slurm_procid, env.slurm_localid or 0,
                       local_count, env.local_devices)


def _rank_table(path: str) -> tuple[int, list[str]]:
    """(device count, server ids) of a MindSpore rank table file (``server_list[].device[]``)."""
    import json

    try:
        with open(path) as fh:
            table = json.load(fh)
        servers = table["server_list"]
        return sum(len(s["device"]) for s in servers), [str(s.get("server_id", "?")) for s in servers]
    except OSError as exc:
        raise ClusterError(f"RANK_TABLE_FILE={path!r} cannot be read: {exc.strerror or exc}", "RANK_TABLE_FILE") \
            from None
    except (ValueError, KeyError, TypeError) as exc:
        raise ClusterError(f"RANK_TABLE_FILE={path!r} is not a MindSpore rank table (JSON with "
                           f"server_list[].device[]): {type(exc).__name__}: {exc}", "RANK_TABLE_FILE") from None


def from_rank_table(env: ClusterEnv, timeout: float) -> ProcessPlan:
    """MindSpore's one-process-per-device launch (seed 003's ``run.sh``): RANK_SIZE processes started by hand on
    one host, each with RANK_ID (and DEVICE_ID, RANK_TABLE_FILE). The processes agree on a loopback coordinator
    through a file, as ``mpirun`` ranks on one host do; a job spanning hosts is refused with what to use instead."""
    source = "MindSpore rank-table environment (RANK_SIZE/RANK_ID)"
    env.check(*VARIABLES["rank_table"])
    if env.rank_id is None:
        raise ClusterError(f"{source}: RANK_SIZE={env.rank_size} is set but RANK_ID is not; give every process "
                           "its RANK_ID (0..RANK_SIZE-1), or start the job with "
                           f"msrun --worker_num {env.rank_size} --local_worker_num {env.rank_size} script.py",
                           "RANK_ID")
    _check_index(source, "RANK_ID", env.rank_id, env.rank_size, "RANK_SIZE")
    # the job: GRAPHPAR_JOB_ID, else the process that started the ranks (see rendezvous_file)
    job = f"job {env.job_id}" if env.job_id else f"parent {rendezvous_file.launching_parent()}"
    table = os.path.abspath(env.rank_table_file) if env.rank_table_file else ""
    key = f"rank-table {job} RANK_SIZE={env.rank_size} RANK_TABLE_FILE={table}"
    if env.rank_table_file:
        devices, servers = _rank_table(env.rank_table_file)
        if len(servers) > 1:
            raise ClusterError(f"RANK_TABLE_FILE={env.rank_table_file!r} lists {len(servers)} servers "
                               f"({', '.join(servers)}): graphpar forms a job across hosts with msrun/graphpar "
                               "launch, e.g. msrun --worker_num N --local_worker_num K --master_addr HOST0 "
                               "--node_rank R script.py on each host", "RANK_TABLE_FILE")
        if devices != env.rank_size:
            raise ClusterError(f"RANK_TABLE_FILE={env.rank_table_file!r} lists {devices} devices but RANK_SIZE="
                               f"{env.rank_size}; they must agree", "RANK_SIZE")
    if env.coordinator:
        coordinator = env.coordinator
    else:
        coordinator = rendezvous_file.coordinator_for(key, env.rank_id == 0, timeout, source="RANK_ID 0")
    return ProcessPlan(source, coordinator, env.rank_size, env.rank_id, env.rank_id, env.rank_size,
                       env.local_devices)


# the variables each convention reads (an unusable value among them is an error; elsewhere it is ignored)
VARIABLES = {
    "launch": ("GRAPHPAR_NUM_PROCESSES", "GRAPHPAR_PROCESS_ID", "GRAPHPAR_LOCAL_DEVICES", "GRAPHPAR_LOCAL_PROCESS_ID",
               "GRAPHPAR_LOCAL_PROCESS_COUNT"),
    "dynamic_cluster": ("MS_SCHED_PORT", "MS_WORKER_NUM", "GRAPHPAR_LOCAL_DEVICES"),
    "openmpi": ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                "OMPI_COMM_WORLD_LOCAL_SIZE", "GRAPHPAR_LOCAL_DEVICES"),
    "slurm": ("SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_JOB_ID", "GRAPHPAR_LOCAL_DEVICES"),
    "rank_table": ("RANK_SIZE", "RANK_ID", "DEVICE_ID", "GRAPHPAR_LOCAL_DEVICES"),
}
TIMEOUT_VARIABLES = ("GRAPHPAR_CLUSTER_TIMEOUT", "MS_TOPO_TIMEOUT", "GRAPHPAR_HEARTBEAT_TIMEOUT")


def timeouts(env: ClusterEnv) -> tuple[int, int]:
    """(cluster timeout, heartbeat timeout) in seconds. A negative cluster timeout (msrun: wait forever) becomes a
    day, JAX needing a finite number."""
    cluster = env.cluster_timeout if env.cluster_timeout is not None else DEFAULT_CLUSTER_TIMEOUT
    if cluster < 0:
        cluster = 24 * 3600
    return max(cluster, 1), env.heartbeat_timeout or DEFAULT_HEARTBEAT_TIMEOUT
