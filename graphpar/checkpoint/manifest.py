"""The manifest: the one file that makes a checkpoint directory complete, and proves its files intact.

A checkpoint directory is written by orbax (which commits it atomically by renaming a temporary directory), then
``graphpar.json`` is written into it, last, by process 0. It records what the checkpoint holds (names, shapes,
dtypes, layouts, training progress) and the size and CRC-32 of every other file. So:

* a directory without a manifest is an interrupted save (the process died after orbax committed, or orbax's rename
  never happened): :func:`is_complete` says no, and loading it names the missing manifest;
* a truncated or bit-flipped file fails :func:`verify` with the file's name (orbax reads compressed chunks without
  checksums, so it would not always notice);
* the manifest protects itself: its body is stored with its own CRC-32, so a damaged manifest is an error too.

The manifest is written to a temporary file and renamed over the final name, so it is either absent or whole.
Checksums of large files are computed in chunks on a thread pool (``zlib.crc32`` releases the GIL), which keeps
saving within a few percent of orbax's own time.
"""

from __future__ import annotations

import json
import os
import zlib
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from graphpar.checkpoint.errors import CheckpointError

MANIFEST = "graphpar.json"
FORMAT = "graphpar-checkpoint"
VERSION = 1
CHUNK = 16 << 20  # bytes per checksummed piece of a file


def _crc(path: str, offset: int, length: int) -> int:
    with open(path, "rb") as fh:
        fh.seek(offset)
        return zlib.crc32(fh.read(length))


def _pieces(root: str) -> list[tuple[str, int, int]]:
    pieces = []
    for folder, _, files in os.walk(root):
        for name in sorted(files):
            rel = os.path.relpath(os.path.join(folder, name), root)
            if rel == MANIFEST or rel.startswith(MANIFEST + "."):
                continue
            size = os.path.getsize(os.path.join(root, rel))
            pieces += [(rel, offset, min(CHUNK, size - offset)) for offset in range(0, max(size, 1), CHUNK)]
    return pieces


def file_checksums(root: str) -> dict[str, dict[str, Any]]:
    """``{relative path: {"size": bytes, "crc32": [crc of each CHUNK-sized piece]}}`` of every file under root."""
    pieces = _pieces(root)
    with ThreadPoolExecutor(max_workers=min(4, max(2, os.cpu_count() or 2))) as pool:
        crcs = list(pool.map(lambda p: _crc(os.path.join(root, p[0]), p[1], p[2]), pieces))
    out: dict[str, dict[str, Any]] = {}
    for (rel, offset, length), crc in zip(pieces, crcs):
        entry = out.setdefault(rel, {"size": 0, "crc32": []})
        entry["size"] = max(entry["size"], offset + length)
        entry["crc32"].append(crc)
    return out


def _seal(body: dict[str, Any]) -> str:
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return json.dumps({"crc32": zlib.crc32(text.encode()), "body": body}, sort_keys=True, indent=1)


def write(root: str, body: dict[str, Any]) -> None:
    """Write the manifest of ``root`` (atomically: a temporary file renamed over ``graphpar.json``)."""
    body = {"format": FORMAT, "version": VERSION, **body}
    final = os.path.join(root, MANIFEST)
    tmp = f"{final}.tmp-{os.getpid()}"
    with open(tmp, "w") as fh:
        fh.write(_seal(body))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, final)


def is_complete(root: str) -> bool:
    """True when ``root`` has a readable, self-consistent manifest (the data files are not read)."""
    try:
        read(root)
        return True
    except CheckpointError:
        return False


def read(root: str) -> dict[str, Any]:
    """The manifest body of checkpoint ``root``; a :class:`CheckpointError` if it is missing or damaged."""
    path = os.path.join(root, MANIFEST)
    if not os.path.isdir(root):
        raise CheckpointError(root, "no such checkpoint directory" if not os.path.exists(root) else
                              "is a file, not a graphpar checkpoint directory",
                              "Give the path of a checkpoint directory written by save_checkpoint or "
                              "ModelCheckpoint (named like CKP-1_4.ckpt)")
    if not os.path.exists(path):
        if not root.rstrip("/").endswith(".ckpt") and not os.path.exists(os.path.join(root, "_CHECKPOINT_METADATA")):
            raise CheckpointError(root, f"not a graphpar checkpoint (it has no {MANIFEST}) and holds no complete "
                                  "checkpoint either", "Give a checkpoint directory such as CKP-1_4.ckpt, or a "
                                  "directory that holds some")
        raise CheckpointError(root, f"incomplete checkpoint: it has no {MANIFEST}, so its save was interrupted "
                              "(a process died while writing it)", "Load an earlier checkpoint; "
                              "graphpar.checkpoint.latest_checkpoint(directory) finds the newest complete one")
    try:
        with open(path) as fh:
            sealed = json.load(fh)
        body = sealed["body"]
        text = json.dumps(body, sort_keys=True, separators=(",", ":"))
        intact = zlib.crc32(text.encode()) == sealed["crc32"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(path, f"the manifest is damaged and cannot be read ({exc})",
                              "The checkpoint cannot be trusted; load an earlier one") from exc
    if not intact:
        raise CheckpointError(path, "the manifest is damaged (its checksum does not match its contents)",
                              "The checkpoint cannot be trusted; load an earlier one")
    if body.get("format") != FORMAT or not isinstance(body.get("version"), int) or body["version"] > VERSION:
        raise CheckpointError(path, f"not a graphpar checkpoint manifest of version <= {VERSION} "
                              f"(format {body.get('format')!r}, version {body.get('version')!r})")
    return body


def verify(root: str, body: dict[str, Any]) -> None:
    """Check every file the manifest lists: present, of the recorded size, with the recorded checksums."""
    listed = body.get("files", {})
    pieces = []
    for rel, entry in sorted(listed.items()):
        path = os.path.join(root, rel)
        if not os.path.isfile(path):
            raise CheckpointError(path, "file missing: the checkpoint lists it but it is not there",
                                  "The checkpoint is damaged; load an earlier one")
        size = os.path.getsize(path)
        if size != entry["size"]:
            raise CheckpointError(path, f"file truncated or altered: {size} bytes, the manifest recorded "
                                  f"{entry['size']}", "The checkpoint is damaged; load an earlier one")
        pieces += [(rel, offset, min(CHUNK, size - offset), k)
                   for k, offset in enumerate(range(0, max(size, 1), CHUNK))]
    with ThreadPoolExecutor(max_workers=min(4, max(2, os.cpu_count() or 2))) as pool:
        crcs = list(pool.map(lambda p: _crc(os.path.join(root, p[0]), p[1], p[2]), pieces))
    for (rel, offset, _, k), crc in zip(pieces, crcs):
        if crc != listed[rel]["crc32"][k]:
            raise CheckpointError(os.path.join(root, rel), f"file corrupted: bytes {offset}..{offset + CHUNK} do "
                                  "not match the checksum recorded when it was saved",
                                  "The checkpoint is damaged; load an earlier one")
