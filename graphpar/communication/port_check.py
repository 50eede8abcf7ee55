"""Whether this machine can listen where a job's coordinator must listen, asked before anything tries to.

Process 0 runs the JAX coordination service (or, in Dynamic Cluster mode, the scheduler runs on its node); when the
address cannot be bound, JAX fails deep, with "Failed to start RPC server" and an abort that names neither the
address nor the setting it came from. Two causes account for nearly every case: the port is taken (another job's
coordinator, a second launch with the same ``--master_port``) or the host is not an address of this machine (a
coordinator address meant for another node). Both are asked of the kernel here with a probe socket bound to that one
address (never all interfaces) and closed at once.
"""

from __future__ import annotations

import errno
import socket

from graphpar.communication.addresses import numeric_host, split_address
from graphpar.communication.errors import ClusterError
from graphpar.communication.process_plan import ProcessPlan


def bind_problem(host: str, port: int) -> str | None:
    """Why a listener cannot bind ``host:port`` now (``host`` an IP literal), or None when it can.

    SO_REUSEADDR is set as servers set it, so that a port in TIME_WAIT (a job that just ended) counts as free while
    a port another socket listens on does not."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return f"port {port} on {host} is in use by another process"
            if exc.errno == errno.EADDRNOTAVAIL:
                return f"{host} is not an address of this machine"
            return f"{host}:{port} cannot be bound here: {exc.strerror or exc}"
    return None


def check_coordinator(plan: ProcessPlan) -> None:
    """In process 0, which runs the coordinator, refuse by name an address it cannot bind (other processes only
    connect to it). Called by ``graphpar.communication.bootstrap`` before ``jax.distributed.initialize``."""
    if plan.process_id != 0:
        return
    host, port = split_address(plan.bind_address, plan.source)
    problem = bind_problem(host, port)
    if problem is None:
        return
    variable = "GRAPHPAR_COORDINATOR" if plan.source.startswith("graphpar launch") else None
    raise ClusterError(
        f"{plan.source}: process 0 runs the job's coordinator at {plan.coordinator}, but {problem}; valid: a free port "
        "on an address of process 0's host (graphpar launch: --master_addr / --master_port, or leave --master_port "
        "out on one host to get a free one; otherwise GRAPHPAR_COORDINATOR=HOST:PORT)", variable)


def check_listen_address(host: str, port: int) -> str | None:
    """``bind_problem`` for a host name or literal as the user wrote it (resolved once, as the coordinator does)."""
    try:
        return bind_problem(numeric_host(host), port)
    except ClusterError as exc:
        return str(exc)
