"""A coordinator port agreed through a file, for ``mpirun`` jobs whose ranks all run on one host.

``mpirun`` gives each rank its index but no free port. Rank 0 picks a free loopback port and publishes
``127.0.0.1:PORT`` in a file named after the MPI job id (unique per ``mpirun``); the other ranks wait for the
file. The file is removed once the job has formed (:func:`withdraw`). Jobs spanning hosts name their coordinator
explicitly instead (``-x GRAPHPAR_COORDINATOR=...``).
"""

from __future__ import annotations

import os
import re
import tempfile
import time

from graphpar.communication.addresses import free_port
from graphpar.communication.errors import ClusterError

_published: list[str] = []


def _path(key: str) -> str:
    return os.path.join(tempfile.gettempdir(), "graphpar-coordinator-" + re.sub(r"[^A-Za-z0-9_.-]", "_", key))


_STALE_SECONDS = 30.0


def coordinator_for(key: str, leader: bool, timeout: float, source: str = "rank 0") -> str:
    """``127.0.0.1:PORT`` for the job ``key``: chosen and published by the leader, read by the others. A file
    written more than 30 s before this process began waiting is a crashed earlier job's and is not used (keys that
    are not unique per run, like a rank table's path, would otherwise find it)."""
    path = _path(key)
    since = time.time() - _STALE_SECONDS
    if leader:
        address = f"127.0.0.1:{free_port('127.0.0.1')}"
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(address)
        os.replace(tmp, path)  # atomic: readers never see a partial address
        _published.append(path)
        return address
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            fresh = os.path.getmtime(path) >= since
            with open(path) as f:
                address = f.read().strip()
            if address and fresh:
                return address
        except FileNotFoundError:
            pass
        time.sleep(0.05)
    raise ClusterError(f"{source} did not publish the coordinator address in {path} within {timeout:.0f} s (is it "
                       "running on this host?); or give every process GRAPHPAR_COORDINATOR=HOST:PORT",
                       "GRAPHPAR_COORDINATOR")


def withdraw() -> None:
    """Remove the files this process published (every rank has joined by then)."""
    while _published:
        try:
            os.remove(_published.pop())
        except FileNotFoundError:
            pass
