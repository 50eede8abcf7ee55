"""Network addresses of a job's coordinator: ``HOST:PORT`` parsing, a host as the IP literal to bind, a free port.

Shared by the launcher conventions (``process_plan``), the file rendezvous of one-host jobs (``rendezvous_file``),
Dynamic Cluster and the TLS tunnel; it reads and binds nothing beyond a probe socket in :func:`free_port`.
"""

from __future__ import annotations

import ipaddress
import socket

from graphpar.communication.errors import ClusterError


def split_address(address: str, source: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ClusterError(f"{source}: coordinator address {address!r} is not HOST:PORT (e.g. 127.0.0.1:8118)")
    return host.strip("[]"), int(port)


def numeric_host(host: str) -> str:
    """``host`` as an IP literal (a name is resolved once), so that the coordinator binds that one interface."""
    try:
        ipaddress.ip_address(host)
        return host
    except ValueError:
        pass
    try:
        return socket.gethostbyname(host)
    except OSError as exc:
        raise ClusterError(f"cannot resolve the coordinator host {host!r}: {exc}") from exc


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` now (the OS picks it; a later bind may still race, rarely)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]
