"""One writer per checkpoint directory and prefix: a lock file that ``ModelCheckpoint`` holds while training runs.

Two jobs writing one directory under one prefix corrupt each other: one job's start-up clean-up deletes the other's
save in flight (orbax's temporary directory), its retention deletes the other's checkpoints, and a later
``resume=True`` loads the other job's weights. So process 0 of a job takes ``{directory}/.{prefix}.graphpar-lock``
with ``flock`` before it touches the directory, and a second job is refused, naming the holder.

``flock`` is released by the kernel when its holder dies, so a lock is *live* exactly while its holder runs; the
file also records the holder (pid, host, job identity, the prefix it writes) and is removed when training ends. A
record found by a new holder is the one of a process that died without releasing (it is taken over, said in one
line), and a restart of the same job reads the prefix it wrote under from it (see ``ModelCheckpoint``).
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from dataclasses import asdict, dataclass

from graphpar.checkpoint.errors import CheckpointError

_held: dict[str, int] = {}  # lock path -> open descriptor: the locks this process holds (released with the process)


@dataclass(frozen=True)
class Owner:
    """Who holds (or last held) a lock: enough to name it in a refusal, and the prefix its job writes under."""

    pid: int
    host: str
    job: str | None
    prefix: str
    since: float

    def describe(self) -> str:
        job = f", job {self.job}" if self.job else ""
        return f"pid {self.pid} on {self.host}{job}, writing {self.prefix}-*.ckpt since " \
            f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(self.since))}"

    def is_this_process(self) -> bool:
        """Whether this record is this very process's (it replaced itself with ``os.execv``: same pid and host)."""
        return self.pid == os.getpid() and self.host == socket.gethostname()

    @staticmethod
    def this_process(job: str | None, prefix: str) -> "Owner":
        return Owner(os.getpid(), socket.gethostname(), job, prefix, time.time())


@dataclass(frozen=True)
class Taken:
    """A lock this process now holds, with the record its previous holder left (None: released cleanly)."""

    path: str
    previous: Owner | None


def lock_path(directory: str, prefix: str) -> str:
    return os.path.join(directory, f".{prefix}.graphpar-lock")


def _read_owner(fd: int) -> Owner | None:
    os.lseek(fd, 0, os.SEEK_SET)
    text = os.read(fd, 1 << 16).decode(errors="replace").strip()
    if not text:
        return None
    try:
        fields = json.loads(text)
        return Owner(int(fields["pid"]), str(fields["host"]), fields.get("job"), str(fields["prefix"]),
                     float(fields["since"]))
    except (ValueError, KeyError, TypeError):
        return Owner(0, "an unknown host", None, "?", 0.0)  # unreadable: a holder that died while writing it


def acquire(directory: str, prefix: str) -> Taken:
    """Take the lock of ``directory`` + ``prefix`` (creating ``directory``); a :class:`CheckpointError` naming the
    holder when another live process holds it."""
    path = lock_path(directory, prefix)
    if path in _held:
        return Taken(path, None)  # this process holds it already (a second Model.train with the same callback)
    os.makedirs(directory, mode=0o700, exist_ok=True)  # owner-only, as the checkpoints it will hold
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_owner(fd)
            os.close(fd)
            who = holder.describe() if holder else "a process that has not written its name yet"
            raise CheckpointError(directory, f"another live job writes checkpoints of prefix '{prefix}' here "
                                  f"({who}); two jobs in one directory with one prefix delete each other's saves in "
                                  "flight and resume each other's weights", "Give this job its own "
                                  "ModelCheckpoint(directory=...) or prefix, or wait until the other job ends") from None
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                break  # still the file at that name (a releasing holder unlinks it: then lock the new one)
        except FileNotFoundError:
            pass
        os.close(fd)
    _held[path] = fd
    return Taken(path, _read_owner(fd))


def record(taken: Taken, owner: Owner) -> None:
    """Write ``owner`` into a lock this process holds."""
    fd = _held[taken.path]
    text = json.dumps(asdict(owner)).encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, text, 0)
    os.fsync(fd)


def release(directory: str, prefix: str) -> None:
    """Training ended: remove the lock file (so no record is left) and let the lock go (a no-op when this process
    does not hold it)."""
    path = lock_path(directory, prefix)
    fd = _held.pop(path, None)
    if fd is None:
        return
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)
