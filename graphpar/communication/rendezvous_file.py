"""A coordinator port agreed through a file, for jobs whose ranks all run on one host and name no coordinator:
``mpirun`` ranks on one host, and MindSpore's one process per device (``RANK_SIZE``/``RANK_ID``, seed 003).

Rank 0 picks a free loopback port and publishes ``127.0.0.1:PORT`` with its pid in a file named after the job key;
the other ranks wait for the file. The file is removed once the job has formed (:func:`withdraw`).

Where, and for whom: the file lives in this user's private directory (:mod:`graphpar.communication.private_dir`,
``$TMPDIR/graphpar-<uid>``, mode 0700) with mode 0600, so another local user can neither plant an address there nor
read it; a directory or file owned by another user, or with looser permissions, is refused by name. The job key
says which job: ``mpirun``'s job id, else a ``GRAPHPAR_JOB_ID`` given to every rank, else the process that started
the ranks (its pid and start time: seed 003's ``run.sh`` starts every rank from one shell), together with RANK_SIZE
and the rank table, so two jobs with the same RANK_SIZE started from different shells never meet. Two jobs that
share a key and start at once (one parent starting both) are caught: the second rank 0 finds the first one's live
file and is refused, naming it. Jobs spanning hosts name their coordinator explicitly (``GRAPHPAR_COORDINATOR``).
"""

from __future__ import annotations

import hashlib
import json
import os
import time

from graphpar.communication import private_dir
from graphpar.communication.addresses import free_port
from graphpar.communication.errors import ClusterError

_published: list[str] = []
_STALE_SECONDS = 30.0


def launching_parent() -> str:
    """The process that started this one, as ``pid-starttime`` (the start time, from /proc, tells a reused pid
    apart); ranks started by one shell script share it."""
    parent = os.getppid()
    try:
        with open(f"/proc/{parent}/stat") as fh:
            started = fh.read().rsplit(")", 1)[1].split()[19]  # field 22, counted after the command name
    except (OSError, IndexError):
        started = "?"
    return f"{parent}-{started}"


def _path(key: str) -> str:
    digest = hashlib.sha256(key.encode()).hexdigest()[:32]
    return os.path.join(private_dir.user_dir(), f"coordinator-{digest}")


def _read(path: str, since: float) -> dict | None:
    """The published record when ``path`` is a fresh one of this user's, from a live rank 0; None when absent or
    left by a dead or earlier job. A file that is not this user's alone is refused (UnsafePathError)."""
    try:
        info = private_dir.check_private(path, "file")
        with open(path) as fh:
            record = json.load(fh)
    except FileNotFoundError:
        return None
    except ValueError:
        return None  # not ours to interpret: a half-dead writer; wait for a fresh one
    if not isinstance(record, dict) or not isinstance(record.get("address"), str) \
            or not isinstance(record.get("pid"), int):
        return None
    if info.st_mtime < since or not private_dir.alive(record["pid"]):
        return None
    return record


def coordinator_for(key: str, leader: bool, timeout: float, source: str = "rank 0") -> str:
    """``127.0.0.1:PORT`` for the job ``key``: chosen and published by the leader, read by the others. A file
    written more than 30 s before this process began waiting, or by a process that is gone, is a crashed earlier
    job's and is not used."""
    path = _path(key)
    since = time.time() - _STALE_SECONDS
    if leader:
        return _publish(path, key, since)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        record = _read(path, since)
        if record is not None:
            return record["address"]
        time.sleep(0.05)
    raise ClusterError(f"{source} did not publish the coordinator address in {path} within {timeout:.0f} s (job key "
                       f"{key!r}). Is it running on this host, started by the same process as this rank? Ranks started "
                       "from different shells need the same GRAPHPAR_JOB_ID, or give every process "
                       "GRAPHPAR_COORDINATOR=HOST:PORT", "GRAPHPAR_COORDINATOR")


def _publish(path: str, key: str, since: float) -> str:
    address = f"127.0.0.1:{free_port('127.0.0.1')}"
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with open(fd, "w") as fh:
        json.dump({"address": address, "pid": os.getpid(), "key": key}, fh)
    try:
        os.link(tmp, path)  # atomic and exclusive: of two rank 0s publishing at once, one wins
    except FileExistsError:
        other = _read(path, since)
        if other is not None and other["pid"] != os.getpid():
            os.remove(tmp)
            raise ClusterError(f"another job's rank 0 (pid {other['pid']}, coordinator {other['address']}) has "
                               f"published its address in {path} under the same job key {key!r}: two jobs with the "
                               "same RANK_SIZE started at once by the same process. Give each job its own "
                               "GRAPHPAR_JOB_ID (the same value in all ranks of one job) or GRAPHPAR_COORDINATOR",
                               "GRAPHPAR_JOB_ID") from None
        os.replace(tmp, path)  # an earlier, finished or crashed job's file
    else:
        os.remove(tmp)
    _published.append(path)
    return address


def withdraw() -> None:
    """Remove the files this process published (every rank has joined by then)."""
    while _published:
        try:
            os.remove(_published.pop())
        except FileNotFoundError:
            pass
