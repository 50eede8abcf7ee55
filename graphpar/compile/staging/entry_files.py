"""A folder of cache entries bounded in size, shared by processes without a lock: the file layer of graphpar's
executable cache (``staging.executables``).

Every process that compiles writes into the same user cache folder, and any of them may drop entries to keep the
folder under its bound while others read. Nothing here takes a lock (a lock file on a network file system can hang
a training job; JAX's bounded cache needs the ``filelock`` package for one); each operation is one the file system
makes atomic:

* a write goes to a temporary file in the folder and is renamed onto the entry's name (``os.replace``): a reader
  opens the old file or the new one, never half a file;
* an eviction unlinks whole entries: a reader that has opened one reads it to the end (POSIX keeps an unlinked
  file's contents while it is open), one that comes after finds no file (a miss);
* each entry carries the sha256 of its payload, so whatever else could happen (a full disk, a file copied in by
  hand) is a miss, never a wrong payload.

Recency is the entry's modification time: set by the write, moved to now by each hit (:func:`read`), so
:func:`evict` drops the least recently used entries first. Two processes evicting at once may drop a little more
than needed (each drops its oldest, most often the same files); the cache is then refilled by later compiles.

Standard library only: these operations need nothing else, and a test's processes load this file alone.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
from pathlib import Path

SUFFIX = ".exe"
_PARTIAL = ".tmp"
# A temporary file older than this is what a writer killed mid-write left behind: evict() removes it. A live
# writer renames its file within the time one write takes (milliseconds for the largest executables).
ORPHAN_SECONDS = 600.0


def write(folder: Path, key: str, magic: bytes, payload: bytes) -> Path:
    """Write ``payload`` as entry ``key`` (after ``magic`` and the payload's sha256), atomically; returns its path.
    Raises OSError when the folder cannot be written."""
    path = folder / f"{key}{SUFFIX}"
    replace(path, magic + hashlib.sha256(payload).digest() + payload)
    return path


def replace(path: Path, data: bytes) -> None:
    """Make ``data`` the content of ``path`` atomically: written to a temporary file in its folder (one that
    :func:`evict` removes if this writer is killed mid-write) and renamed onto it. Raises OSError when the folder
    cannot be written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, delete=False, suffix=_PARTIAL) as out:
        try:
            out.write(data)
        except OSError:
            os.unlink(out.name)
            raise
    os.replace(out.name, path)


def read(path: Path, magic: bytes) -> bytes | str | None:
    """The payload of the entry at ``path`` (and its use recorded: its modification time moves to now), None when
    there is none, or why it cannot be used (a str: unreadable, not an entry of ``magic``'s kind, truncated or
    corrupt)."""
    try:
        blob = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"it cannot be read ({exc})"
    head = len(magic) + 32
    if len(blob) < head or not blob.startswith(magic):
        return "it is not an entry of this cache or is truncated"
    payload = blob[head:]
    if hashlib.sha256(payload).digest() != blob[len(magic):head]:
        return "its checksum does not match (truncated or corrupted)"
    try:
        os.utime(path)
    except OSError:  # evicted meanwhile, or a folder of someone else's: the payload read is whole all the same
        pass
    return payload


def evict(folder: Path, max_bytes: int, keep: Path | None = None) -> list[Path]:
    """Drop the least recently used entries of ``folder`` until its entries take at most ``max_bytes`` (-1: no
    bound), never ``keep`` (the entry just written), and temporary files left by killed writers; returns the
    entries dropped. Files that vanish meanwhile (another process evicting) are skipped."""
    entries: list[tuple[float, int, Path]] = []
    now = time.time()
    try:
        listing = list(os.scandir(folder))
    except OSError:
        return []
    for item in listing:
        try:
            stat = item.stat(follow_symlinks=False)
        except OSError:
            continue
        if item.name.endswith(_PARTIAL):
            if now - stat.st_mtime > ORPHAN_SECONDS:
                _unlink(Path(item.path))
        elif item.name.endswith(SUFFIX) and item.is_file(follow_symlinks=False):
            entries.append((stat.st_mtime, stat.st_size, Path(item.path)))
    if max_bytes < 0:
        return []
    total = sum(size for _, size, _ in entries)
    dropped = []
    for _, size, path in sorted(entries, key=lambda e: (e[0], e[2].name)):
        if total <= max_bytes:
            break
        if path == keep:
            continue
        _unlink(path)
        total -= size
        dropped.append(path)
    return dropped


def size(folder: Path) -> int:
    """The bytes the entries of ``folder`` take now (0 when there is no folder)."""
    total = 0
    try:
        listing = list(os.scandir(folder))
    except OSError:
        return 0
    for item in listing:
        try:
            total += item.stat(follow_symlinks=False).st_size if item.name.endswith(SUFFIX) else 0
        except OSError:
            continue
    return total


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass
