"""Every environment variable graphpar reads, read here and nowhere else.

Reading is lazy (a function call), so importing graphpar never looks at the environment.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class ClusterEnv:
    """Process-placement variables of the launchers graphpar understands (see ``graphpar.communication``)."""

    # graphpar launch (see graphpar.launch.environment, which writes them)
    coordinator: str | None
    num_processes: int | None
    process_id: int | None
    local_devices: int | None
    local_process_id: int | None
    local_process_count: int | None
    cluster_timeout: int | None  # GRAPHPAR_CLUSTER_TIMEOUT, else MindSpore's MS_TOPO_TIMEOUT (seconds)
    heartbeat_timeout: int | None
    restart_count: int
    # MindSpore Dynamic Cluster
    ms_role: str | None
    ms_sched_host: str | None
    ms_sched_port: int | None
    ms_worker_num: int | None
    ms_node_id: str | None
    ms_enable_recovery: bool
    ms_recovery_path: str | None
    # OpenMPI
    ompi_world_size: int | None
    ompi_world_rank: int | None
    ompi_local_rank: int | None
    ompi_local_size: int | None
    ompi_hnp_uri: str | None
    ompi_job_id: str | None
    # SLURM
    slurm_ntasks: int | None
    slurm_procid: int | None
    slurm_localid: int | None
    slurm_nodelist: str | None
    slurm_job_id: int | None
    slurm_tasks_per_node: str | None


def _int(name: str) -> int | None:
    value = os.environ.get(name)
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError as exc:
        raise ValueError(f"environment variable {name}={value!r} must be an integer") from exc


def cluster_env() -> ClusterEnv:
    return ClusterEnv(
        coordinator=os.environ.get("GRAPHPAR_COORDINATOR") or None,
        num_processes=_int("GRAPHPAR_NUM_PROCESSES"),
        process_id=_int("GRAPHPAR_PROCESS_ID"),
        local_devices=_int("GRAPHPAR_LOCAL_DEVICES"),
        local_process_id=_int("GRAPHPAR_LOCAL_PROCESS_ID"),
        local_process_count=_int("GRAPHPAR_LOCAL_PROCESS_COUNT"),
        cluster_timeout=_int("GRAPHPAR_CLUSTER_TIMEOUT") if os.environ.get("GRAPHPAR_CLUSTER_TIMEOUT")
        else _int("MS_TOPO_TIMEOUT"),
        heartbeat_timeout=_int("GRAPHPAR_HEARTBEAT_TIMEOUT"),
        restart_count=_int("GRAPHPAR_RESTART_COUNT") or 0,
        ms_role=os.environ.get("MS_ROLE") or None,
        ms_sched_host=os.environ.get("MS_SCHED_HOST") or None,
        ms_sched_port=_int("MS_SCHED_PORT"),
        ms_worker_num=_int("MS_WORKER_NUM"),
        ms_node_id=os.environ.get("MS_NODE_ID") or None,
        ms_enable_recovery=os.environ.get("MS_ENABLE_RECOVERY", "0") not in ("", "0", "false", "False"),
        ms_recovery_path=os.environ.get("MS_RECOVERY_PATH") or None,
        ompi_world_size=_int("OMPI_COMM_WORLD_SIZE"),
        ompi_world_rank=_int("OMPI_COMM_WORLD_RANK"),
        ompi_local_rank=_int("OMPI_COMM_WORLD_LOCAL_RANK"),
        ompi_local_size=_int("OMPI_COMM_WORLD_LOCAL_SIZE"),
        ompi_hnp_uri=os.environ.get("OMPI_MCA_orte_hnp_uri") or None,
        ompi_job_id=os.environ.get("OMPI_MCA_ess_base_jobid") or os.environ.get("PMIX_NAMESPACE") or None,
        slurm_ntasks=_int("SLURM_NTASKS"),
        slurm_procid=_int("SLURM_PROCID"),
        slurm_localid=_int("SLURM_LOCALID"),
        slurm_nodelist=os.environ.get("SLURM_STEP_NODELIST") or os.environ.get("SLURM_JOB_NODELIST") or None,
        slurm_job_id=_int("SLURM_JOB_ID"),
        slurm_tasks_per_node=os.environ.get("SLURM_STEP_TASKS_PER_NODE") or None,
    )


def xla_flags() -> str:
    """``XLA_FLAGS`` as set for this process (the launcher rewrites the CPU device count in its children's copy)."""
    return os.environ.get("XLA_FLAGS", "")


def process_environment() -> dict[str, str]:
    """A copy of this process's environment, the base of the environment ``graphpar launch`` gives its children."""
    return dict(os.environ)



def data_path() -> str | None:
    """``DATA_PATH``, as the seed scripts read it."""
    return os.environ.get("DATA_PATH") or None


def progress_bar_enabled() -> bool | None:
    """``GRAPHPAR_PROGRESS``: 1 forces the progress bar on, 0 off; unset means "when stdout is a terminal"."""
    value = os.environ.get("GRAPHPAR_PROGRESS")
    if value is None or value == "":
        return None
    return value not in ("0", "false", "False")
