"""The checkpoints of one directory: which are complete, which is newest, which to delete.

``ModelCheckpoint`` names its checkpoints ``{prefix}-{epoch}_{step}.ckpt`` (``step`` counted within the epoch, as
MindSpore does). "Newest" means most recently committed (the manifest's ``saved_at``), which is also what a
restarted job must roll back to. Deletion only ever happens after a newer checkpoint has been committed, so a crash
in the middle of a save never leaves fewer complete checkpoints than before.
"""

from __future__ import annotations

import os
import re
import shutil
import time

from graphpar.checkpoint import manifest, replacing
from graphpar.checkpoint.errors import CheckpointError
from graphpar.checkpoint.store import TMP_MARKER


def name_pattern(prefix: str | None) -> re.Pattern:
    head = re.escape(prefix) + r"-\d+_\d+" if prefix is not None else r".+"
    return re.compile(rf"^{head}\.ckpt$")


def checkpoint_dirs(directory: str, prefix: str | None = None) -> list[str]:
    """Paths of the checkpoint directories (complete or not) named like ``prefix``'s."""
    if not os.path.isdir(directory):
        return []
    pattern = name_pattern(prefix)
    return [os.path.join(directory, n) for n in sorted(os.listdir(directory))
            if pattern.match(n) and os.path.isdir(os.path.join(directory, n))]


def complete_checkpoints(directory: str, prefix: str | None = None) -> list[tuple[float, str, dict]]:
    """``(saved_at, path, manifest)`` of the complete checkpoints, oldest first."""
    out = []
    for path in checkpoint_dirs(directory, prefix):
        try:
            body = manifest.read(path)
        except CheckpointError:
            continue
        out.append((float(body.get("saved_at", os.path.getmtime(path))), path, body))
    return sorted(out, key=lambda item: (item[0], item[1]))


def latest_checkpoint(directory: str, prefix: str | None = None) -> str | None:
    """The newest complete checkpoint in ``directory`` (of ``prefix``'s, when given), or None."""
    found = complete_checkpoints(directory, prefix)
    return found[-1][1] if found else None


def unfinished_saves(directory: str, prefix: str | None = None) -> list[str]:
    """The checkpoints of ``prefix`` whose save never completed (orbax's temporary directory, or a directory
    without a manifest), oldest first: what was still in flight when the job stopped. Their names are the final
    checkpoint names (``fault-1_5.ckpt``), without orbax's temporary suffix."""
    if not os.path.isdir(directory):
        return []
    pattern = name_pattern(prefix)
    found = []
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        base = name.split(TMP_MARKER)[0]
        if not os.path.isdir(path) or not pattern.match(base):
            continue
        if TMP_MARKER in name or not os.path.exists(os.path.join(path, manifest.MANIFEST)):
            found.append((os.path.getmtime(path), os.path.join(directory, base)))
    return [p for _, p in sorted(found)]


def remove_stale(directory: str, prefix: str) -> list[str]:
    """Delete what interrupted saves of ``prefix`` left behind: orbax's temporary directories and checkpoint
    directories without a manifest. Call only when no save of this prefix is in flight."""
    removed = []
    if not os.path.isdir(directory):
        return removed
    pattern = name_pattern(prefix)
    replacing.settle_directory(directory, pattern)  # finish replacements a killed save left (before the scan)
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        base = name.split(TMP_MARKER)[0]
        stale_tmp = TMP_MARKER in name and pattern.match(base)
        incomplete = pattern.match(name) and os.path.isdir(path) and not os.path.exists(
            os.path.join(path, manifest.MANIFEST))
        if stale_tmp or incomplete:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def enforce_retention(directory: str, prefix: str, keep_max: int | None, keep_per_n_minutes: int | None,
                      newest: str) -> list[str]:
    """Delete old complete checkpoints of ``prefix`` after ``newest`` was committed: beyond the ``keep_max``
    newest; or, with ``keep_per_n_minutes``, all but the oldest of those saved within the last n minutes."""
    found = [(t, p) for t, p, _ in complete_checkpoints(directory, prefix)]
    doomed: list[str] = []
    if keep_max and keep_max > 0:
        doomed = [p for _, p in found[:-keep_max]] if len(found) > keep_max else []
    elif keep_per_n_minutes and keep_per_n_minutes > 0:
        now = time.time()
        recent = [(t, p) for t, p in found if p != newest and now - t < keep_per_n_minutes * 60]
        doomed = [p for _, p in recent[1:]]
    for path in doomed:
        if os.path.abspath(path) != os.path.abspath(newest):
            shutil.rmtree(path, ignore_errors=True)
    return doomed
