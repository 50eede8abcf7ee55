"""The checkpoints of one directory: which are complete, which is newest, which to delete, which prefix a new run
writes under.

``ModelCheckpoint`` names its checkpoints ``{prefix}-{epoch}_{step}.ckpt`` (``step`` counted within the epoch, as
MindSpore does). A fresh run in a directory that already holds checkpoints of its prefix writes under
``{prefix}_1`` (then ``_2``, ...), MindSpore's renaming (:func:`renamed_prefix`), so it never deletes an earlier
run's checkpoints; the prefix and its renamed forms are one *family* (:func:`family_pattern`), which resuming
searches. "Newest" means most recently committed (the manifest's ``saved_at``), which is also what a
restarted job must roll back to. Deletion only ever happens after a newer checkpoint has been committed, so a crash
in the middle of a save never leaves fewer complete checkpoints than before.
"""

from __future__ import annotations

import os
import re
import shutil
import time

from graphpar.checkpoint import manifest, rank_views, replacing
from graphpar.checkpoint.errors import CheckpointError
from graphpar.checkpoint.store import TMP_MARKER


def name_pattern(prefix: str | None) -> re.Pattern:
    head = re.escape(prefix) + r"-\d+_\d+" if prefix is not None else r".+"
    return re.compile(rf"^{head}\.ckpt$")


def family_pattern(prefix: str) -> re.Pattern:
    """Checkpoint names of ``prefix`` and of its renamed forms ``{prefix}_N`` (group 1: the prefix written)."""
    return re.compile(rf"^({re.escape(prefix)}(?:_\d+)?)-\d+_\d+\.ckpt$")


def prefix_of(path: str, prefix: str) -> str | None:
    """The prefix (``prefix`` or a renamed ``{prefix}_N``) that checkpoint ``path`` was written under, or None when
    its name is not of ``prefix``'s family."""
    found = family_pattern(prefix).match(os.path.basename(os.path.normpath(path)))
    return found.group(1) if found else None


def of_family(written: str, prefix: str) -> bool:
    """Whether ``written`` is ``prefix`` or one of its renamed forms ``{prefix}_N``."""
    return re.fullmatch(rf"{re.escape(prefix)}(?:_\d+)?", written) is not None


def renamed_prefix(directory: str, prefix: str) -> str:
    """MindSpore's renaming: ``prefix`` when no checkpoint of it is in ``directory``, else ``{prefix}_N`` with N one
    more than the largest suffix there (``{prefix}-...`` counts as 0). Every entry named like a checkpoint counts,
    complete or not (another job's save in flight too)."""
    if not os.path.isdir(directory):
        return prefix
    pattern = re.compile(rf"^{re.escape(prefix)}(?:_(\d+))?-.*\.ckpt$")
    suffix = 0
    for name in os.listdir(directory):
        found = pattern.match(name.split(TMP_MARKER)[0])
        if found:
            suffix = max(suffix, int(found.group(1) or 0) + 1)
    return f"{prefix}_{suffix}" if suffix else prefix


def readable_checkpoints(directory: str, prefix: str) -> tuple[list[tuple[float, str, dict]], list[tuple[str, str]]]:
    """The checkpoints of ``prefix``'s family with a manifest: ``(saved_at, path, manifest)`` of those whose manifest
    reads, oldest first, and ``(path, reason)`` of those whose manifest is damaged (a directory without a manifest
    is an unfinished save, see :func:`unfinished_saves`, and in neither list). Data files are not checked here."""
    if not os.path.isdir(directory):
        return [], []
    pattern = family_pattern(prefix)
    readable, damaged = [], []
    for name in _checkpoint_names(directory):
        path = os.path.join(directory, name)
        stored = replacing.committed(path)
        if not pattern.match(name) or not os.path.isdir(stored) or \
                not os.path.exists(os.path.join(stored, manifest.MANIFEST)):
            continue
        try:
            body = manifest.read(stored)
        except CheckpointError as exc:
            damaged.append((path, exc.reason))
            continue
        readable.append((float(body.get("saved_at", os.path.getmtime(stored))), path, body))
    return sorted(readable, key=lambda item: (item[0], item[1])), damaged


def checkpoint_dirs(directory: str, prefix: str | None = None) -> list[str]:
    """Paths of the checkpoint directories (complete or not) named like ``prefix``'s."""
    if not os.path.isdir(directory):
        return []
    pattern = name_pattern(prefix)
    return [os.path.join(directory, n) for n in _checkpoint_names(directory)
            if pattern.match(n) and os.path.isdir(replacing.committed(os.path.join(directory, n)))]


def _checkpoint_names(directory: str) -> list[str]:
    """The names in ``directory``, plus the name of each checkpoint that is on disk only as the committed half of an
    interrupted replacement (``X.graphpar-new`` or ``X.graphpar-old`` while ``X`` is gone: see
    :mod:`graphpar.checkpoint.replacing`), so a resume between the two renames still finds it."""
    listed = os.listdir(directory)
    names = set(listed)
    for name in listed:
        for suffix in (replacing.STAGED, replacing.RETIRED):
            if name.endswith(suffix) and replacing.committed(os.path.join(directory, name[:-len(suffix)])) == \
                    os.path.join(directory, name):
                names.add(name[:-len(suffix)])
    return sorted(names)


def complete_checkpoints(directory: str, prefix: str | None = None) -> list[tuple[float, str, dict]]:
    """``(saved_at, path, manifest)`` of the complete checkpoints, oldest first."""
    out = []
    for path in checkpoint_dirs(directory, prefix):
        stored = replacing.committed(path)
        try:
            body = manifest.read(stored)
        except CheckpointError:
            continue
        out.append((float(body.get("saved_at", os.path.getmtime(stored))), path, body))
    return sorted(out, key=lambda item: (item[0], item[1]))


def latest_checkpoint(directory: str, prefix: str | None = None) -> str | None:
    """The newest complete checkpoint in ``directory`` (of ``prefix``'s, when given), or None."""
    found = complete_checkpoints(directory, prefix)
    return found[-1][1] if found else None


def unfinished_saves(directory: str, prefix: str) -> list[tuple[float, str]]:
    """``(mtime, name)`` of the checkpoints of ``prefix``'s family whose save never completed (orbax's temporary
    directory, or a directory without a manifest), oldest first: what was still in flight when the job stopped.
    ``mtime`` is that of what is on disk; ``name`` is the final checkpoint name (``fault-1_5.ckpt``), without orbax's
    temporary suffix (so it need not exist)."""
    if not os.path.isdir(directory):
        return []
    pattern = family_pattern(prefix)
    found = []
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        base = name.split(TMP_MARKER)[0]
        if not os.path.isdir(path) or not pattern.match(base):
            continue
        if TMP_MARKER in name or not os.path.exists(os.path.join(path, manifest.MANIFEST)):
            found.append((os.path.getmtime(path), os.path.join(directory, base)))
    return sorted(found)


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
            rank_views.remove_views(path)  # the other ranks' folders name it (rank_views)
    return doomed
