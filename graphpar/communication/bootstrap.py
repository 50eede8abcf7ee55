"""Joining a multi-process job inside ``init()``: read the launcher's environment, call ``jax.distributed``.

Conventions, in order of precedence (the first one present wins; see ``graphpar._cluster.convention``):

1. ``graphpar launch`` — GRAPHPAR_COORDINATOR, GRAPHPAR_NUM_PROCESSES, GRAPHPAR_PROCESS_ID, GRAPHPAR_LOCAL_*;
2. MindSpore Dynamic Cluster — MS_ROLE, MS_SCHED_HOST, MS_SCHED_PORT, MS_WORKER_NUM, MS_NODE_ID (the
   ``MS_SCHED`` role serves ranks and exits here, never returning to the user's script);
3. OpenMPI ``mpirun`` — OMPI_COMM_WORLD_SIZE / _RANK / _LOCAL_RANK;
4. SLURM ``srun`` — SLURM_NTASKS / SLURM_PROCID / SLURM_LOCALID;
5. MindSpore's one process per device (seed 003's ``run.sh``) — RANK_SIZE > 1 / RANK_ID (/ RANK_TABLE_FILE,
   DEVICE_ID): the processes of one host agree on a loopback coordinator through a file;
6. otherwise one process: nothing to join.

``jax.distributed.initialize`` must run before any JAX backend starts, so nothing here touches devices until the
job has formed. The coordinator binds the address it was given (``coordinator_bind_address``), never all
interfaces. On CPU, cross-process collectives use gloo.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading

import jax

from graphpar import _cluster, _env
from graphpar._logging import notice_once
from graphpar.communication import (addresses, dynamic_cluster, port_check, process_plan, rendezvous_file,
                                    scheduler, tls_config, tls_tunnel)
from graphpar.communication.errors import ClusterError
from graphpar.communication.process_plan import ProcessPlan

_COUNT_FLAG = "--xla_force_host_platform_device_count"


_tunnels: list = []  # the TLS proxy or forwarder of this process, alive as long as the process


def initialize(platform: str) -> None:
    """Join the job described by the environment (no-op for one process or when already joined).

    ``platform`` is the JAX platform of the job ("cpu", "gpu", "tpu"): it decides gloo on CPU and whether the
    launcher's per-process device count becomes ``local_device_ids`` (accelerators) or a CPU device count.
    """
    if _cluster.joined() or jax.distributed.is_initialized():
        return
    env = _env.cluster_env()
    kind = _cluster.convention(env)
    if kind is None:
        return
    _check_variables(env, kind)
    cluster_timeout, heartbeat = process_plan.timeouts(env)
    if kind == "dynamic_cluster":
        plan = _dynamic_cluster(env, cluster_timeout)
    elif kind == "launch":
        plan = process_plan.from_launcher(env)
    elif kind == "openmpi":
        plan = process_plan.from_openmpi(env, cluster_timeout)
    elif kind == "rank_table":
        plan = process_plan.from_rank_table(env, cluster_timeout)
    else:
        plan = process_plan.from_slurm(env)
    _join(plan, platform, cluster_timeout, heartbeat)
    _cluster.record_join(_cluster.HostPlacement(plan.local_process_id, plan.local_process_count))


def _check_variables(env: _env.ClusterEnv, kind: str) -> None:
    """Refuse an unusable value of a variable this convention reads; note once those it does not read."""
    used = process_plan.VARIABLES[kind] + process_plan.TIMEOUT_VARIABLES
    env.check(*used)
    for name, value in sorted(env.invalid.items()):
        if name not in used:
            notice_once(f"env-ignored:{name}", f"environment variable {name}={value!r} is not an integer; ignored: "
                        f"this process joins its job by the {kind.replace('_', ' ')} convention, which does not read "
                        "it")


def _dynamic_cluster(env: _env.ClusterEnv, timeout: int) -> ProcessPlan:
    """The scheduler role serves and exits here; a worker registers and gets its plan. With ``set_ps_context(
    enable_ssl=True)`` both speak mutual TLS on the scheduler connection (``scheduler``, ``dynamic_cluster``)."""
    role = env.ms_role
    if role not in ("MS_SCHED", "MS_WORKER"):
        detail = " (Parameter Server training is not supported by graphpar)" if role == "MS_PSERVER" else ""
        raise ClusterError(f"MS_ROLE={role!r} is not supported{detail}; valid: 'MS_SCHED' (the scheduler, started "
                           "once per job) or 'MS_WORKER'", "MS_ROLE")
    for name, value in (("MS_SCHED_PORT", env.ms_sched_port), ("MS_WORKER_NUM", env.ms_worker_num)):
        if value is None:
            raise ClusterError(f"Dynamic Cluster (MS_ROLE={role}): {name} must be set", name)
    if env.ms_worker_num < 1:
        raise ClusterError(f"MS_WORKER_NUM={env.ms_worker_num} must be >= 1", "MS_WORKER_NUM")
    host = env.ms_sched_host or "127.0.0.1"
    if role == "MS_SCHED":
        server = scheduler.Scheduler(addresses.numeric_host(host), env.ms_sched_port, env.ms_worker_num, timeout,
                                     recovery=env.ms_enable_recovery, tls=tls_config.active())
        try:
            status = server.serve()
        except ClusterError as exc:
            print(f"[graphpar scheduler] {exc}", file=sys.stderr, flush=True)
            status = 1
        # The scheduler runs no training: leave now, without running the rest of the user's script.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    return dynamic_cluster.join(host, env.ms_sched_port, env.ms_worker_num, env.ms_node_id, timeout,
                                env.local_devices, recovery=env.ms_enable_recovery, tls=tls_config.active())


def _local_device_ids(plan: ProcessPlan, platform: str) -> list[int] | None:
    """Accelerators this process drives on its host: ``local_devices`` consecutive ones after those of the host's
    earlier processes (one each when the launcher did not say and several processes share the host)."""
    if platform == "cpu":
        return None
    per_process = plan.local_devices
    if per_process is None:
        if plan.local_process_count <= 1:
            return None  # one process per host drives all its devices
        per_process = 1
    start = plan.local_process_id * per_process
    return list(range(start, start + per_process))


def _configure_cpu(plan: ProcessPlan) -> None:
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    if plan.local_devices is not None and _COUNT_FLAG not in _env.xla_flags():
        jax.config.update("jax_num_cpu_devices", plan.local_devices)


def _join(plan: ProcessPlan, platform: str, timeout: int, heartbeat: int) -> None:
    if plan.num_processes == 1:
        return  # a job of one process: nothing to coordinate
    if platform == "cpu":
        _configure_cpu(plan)
    kwargs = {}
    ids = _local_device_ids(plan, platform)
    if ids is not None:
        kwargs["local_device_ids"] = ids
    port_check.check_coordinator(plan)  # process 0 binds it: a busy port or another host's address, by name
    coordinator, bind = _through_tls(plan, timeout)
    # JAX aborts the process (uncatchable) when the job does not form in time; say why first.
    watchdog = threading.Timer(timeout, _report_slow_formation, (plan, timeout))
    watchdog.daemon = True
    watchdog.start()
    try:
        jax.distributed.initialize(
            coordinator_address=coordinator, num_processes=plan.num_processes, process_id=plan.process_id,
            initialization_timeout=timeout, heartbeat_timeout_seconds=heartbeat,
            coordinator_bind_address=bind, **kwargs)
    except Exception as exc:  # JAX raises RuntimeError/XlaRuntimeError variants; say what we were doing
        raise ClusterError(
            f"{plan.source}: process {plan.process_id} of {plan.num_processes} could not join the job through the "
            f"coordinator {plan.coordinator} within {timeout} s: {exc}") from exc
    finally:
        watchdog.cancel()
        rendezvous_file.withdraw()


def _through_tls(plan: ProcessPlan, timeout: int) -> tuple[str, str]:
    """(coordinator address, bind address) to give JAX: the plan's own, or, with ``set_ps_context(enable_ssl=
    True)``, the local ends of the TLS tunnel (see ``tls_tunnel``): Unix sockets in 0700 directories of this user,
    never a TCP port, so that no other user's process reaches the coordinator or borrows the certificate."""
    settings = tls_config.active()
    if settings is None:
        return plan.coordinator, plan.bind_address
    host, port = addresses.split_address(plan.bind_address, plan.source)
    if plan.process_id == 0:
        coordinator = tls_tunnel.PrivateSocketDir("coordinator.sock")
        atexit.register(coordinator.remove)
        proxy = tls_tunnel.TlsProxy(settings, (host, port), coordinator.path)
        _tunnels.append(proxy.start())
        return coordinator.address, coordinator.address
    remote = addresses.split_address(plan.coordinator, plan.source)
    forwarder = tls_tunnel.TlsForwarder(settings, (addresses.numeric_host(remote[0]), remote[1]))
    forwarder.probe(timeout)  # a refused certificate is an error now, naming it, before JAX starts
    _tunnels.append(forwarder.start())
    atexit.register(forwarder.close)
    return forwarder.address, forwarder.address


def _report_slow_formation(plan: ProcessPlan, timeout: int) -> None:
    sys.stderr.write(
        f"graphpar: the job did not form within {timeout} s (GRAPHPAR_CLUSTER_TIMEOUT / MS_TOPO_TIMEOUT): process "
        f"{plan.process_id} of {plan.num_processes} ({plan.source}) is still waiting for the other processes at the "
        f"coordinator {plan.coordinator}. Check that all {plan.num_processes} processes were started with the same "
        "coordinator address and process count; JAX will now abort this process.\n")
    sys.stderr.flush()
