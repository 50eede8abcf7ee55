"""mpirun-style host files: one ``HOST slots=N`` line per node (``#`` comments, blank lines ignored).

``graphpar launch --hostfile FILE`` runs the same command on every host; each finds its own line (by host name or
address, or ``--node_rank``) and so its node rank, its process count and the index of its first process.
"""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass


class HostfileError(ValueError):
    """A host file that cannot be read, or that does not name this host."""


@dataclass(frozen=True)
class HostEntry:
    host: str
    slots: int


def parse(path: str) -> list[HostEntry]:
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError as exc:
        raise HostfileError(f"--hostfile {path}: cannot read it: {exc}") from exc
    entries: list[HostEntry] = []
    for number, raw in enumerate(lines, 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"(\S+)(?:\s+slots\s*=\s*(\d+))?(?:\s+max_slots\s*=\s*\d+)?", line)
        if not match:
            raise HostfileError(f"--hostfile {path}, line {number}: {raw!r} is not 'HOST slots=N'")
        slots = int(match.group(2)) if match.group(2) else 1
        if slots < 1:
            raise HostfileError(f"--hostfile {path}, line {number}: slots must be >= 1, got {slots}")
        if any(e.host == match.group(1) for e in entries):
            raise HostfileError(f"--hostfile {path}, line {number}: host {match.group(1)!r} is listed twice")
        entries.append(HostEntry(match.group(1), slots))
    if not entries:
        raise HostfileError(f"--hostfile {path}: no hosts listed")
    return entries


def local_names() -> set[str]:
    names = {"localhost", "127.0.0.1", "::1", socket.gethostname(), socket.getfqdn()}
    try:
        names.update(info[4][0] for info in socket.getaddrinfo(socket.gethostname(), None))
    except OSError:
        pass
    return names


def locate(entries: list[HostEntry], node_rank: int | None, path: str) -> int:
    """This host's index in ``entries``: ``node_rank`` when given, else the line naming this host."""
    if node_rank is not None and node_rank >= 0:
        if node_rank >= len(entries):
            raise HostfileError(f"--node_rank {node_rank}: --hostfile {path} lists only {len(entries)} host(s)")
        return node_rank
    local = local_names()
    found = [i for i, e in enumerate(entries) if e.host in local]
    if len(found) != 1:
        raise HostfileError(f"--hostfile {path}: {'no line' if not found else 'several lines'} name this host "
                            f"({socket.gethostname()}); pass --node_rank to say which line is this node")
    return found[0]
