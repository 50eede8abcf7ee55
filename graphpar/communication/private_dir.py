"""Per-user private places for a job's local rendezvous: the coordinator address files and the Unix sockets of the
TLS tunnel.

Everything lives under ``$TMPDIR/graphpar-<uid>``, a directory of this user only (mode 0700). Inside it, files are
0600 and each TLS tunnel gets its own 0700 directory with a random name. A place that is owned by another user, is a
symbolic link, or lets other users in (group/other permission bits) is refused by name rather than used: another
local user could otherwise plant a coordinator address or listen where a job's processes connect. Processes of the
same user are trusted (they can read this user's keys and attach to its processes anyway); docs/distributed.md §7
states the whole threat model.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile

from graphpar.communication.errors import UnsafePathError

_SOCKET_PATH_MAX = 107  # sockaddr_un.sun_path holds 108 bytes with the terminating NUL on Linux


def check_private(path: str, kind: str) -> os.stat_result:
    """``path``'s status when it is a ``kind`` ("directory" or "file") of this user only; else UnsafePathError."""
    info = os.lstat(path)
    is_kind = stat.S_ISDIR(info.st_mode) if kind == "directory" else stat.S_ISREG(info.st_mode)
    if stat.S_ISLNK(info.st_mode) or not is_kind:
        what = "a symbolic link" if stat.S_ISLNK(info.st_mode) else "not a " + kind
        raise UnsafePathError(path, f"is {what}; graphpar keeps a job's rendezvous in a {kind} of this user only")
    if info.st_uid != os.geteuid():
        raise UnsafePathError(path, f"is owned by uid {info.st_uid}, not by this user (uid {os.geteuid()}); another "
                                    "user may have placed it: remove it, or point TMPDIR elsewhere")
    loose = stat.S_IMODE(info.st_mode) & 0o077
    if loose:
        wanted = 0o700 if kind == "directory" else 0o600
        raise UnsafePathError(path, f"has mode {stat.S_IMODE(info.st_mode):04o}, which lets other users in; "
                                    f"expected {wanted:04o} (chmod {wanted:o} it or remove it)")
    return info


def user_dir() -> str:
    """``$TMPDIR/graphpar-<uid>``, created 0700 when missing, checked to be this user's alone."""
    path = os.path.join(tempfile.gettempdir(), f"graphpar-{os.geteuid()}")
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    check_private(path, "directory")
    return path


def job_dir(prefix: str) -> str:
    """A fresh 0700 directory ``{prefix}{pid}-{random}`` under :func:`user_dir` (the caller removes it). Those of
    processes that are gone (killed before they could remove theirs) are swept away first."""
    base = user_dir()
    _sweep(base, prefix)
    return tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=base)


def _sweep(base: str, prefix: str) -> None:
    for name in os.listdir(base):
        owner = name[len(prefix):].split("-", 1)[0]
        if not name.startswith(prefix) or not owner.isdigit() or alive(int(owner)):
            continue
        shutil.rmtree(os.path.join(base, name), ignore_errors=True)


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists (of any user)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def socket_path(directory: str, name: str) -> str:
    """``directory/name`` as a Unix socket path, refused by name when the kernel cannot hold it."""
    path = os.path.join(directory, name)
    if len(os.fsencode(path)) > _SOCKET_PATH_MAX:
        raise UnsafePathError(path, f"is longer than the {_SOCKET_PATH_MAX} bytes a Unix socket path may have; set "
                                    "TMPDIR to a shorter directory")
    return path
