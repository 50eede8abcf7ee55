"""Per-rank checkpoint directories as MindSpore writes them: ``{root}/rank_{r}/{name}.ckpt`` for every rank.

MindSpore runs one process per device, and its samples give each its own directory
(``ModelCheckpoint(directory="./ckpt/rank_" + str(get_rank()))``), then load the list of every rank's file
(``load_distributed_checkpoint(net, [f"./ckpt/rank_{i}/x.ckpt" for i in range(8)])``). graphpar drives several ranks
from one process and writes **one** checkpoint for all of them (each rank's slices recorded in it), under the path
of process 0 (``rank_0``). So that the other ranks' names exist too, process 0 writes a *view* for each other rank
of the job once the checkpoint has committed: ``rank_{k}/{name}.ckpt/`` holding only a manifest that names the
checkpoint (relative path) and the rank. No data is copied. Reading a view reads that rank's part of the
checkpoint: its rows of a sliced checkpoint (as MindSpore's rank file holds that rank's slices), the whole tensors
of an integrated one (as every MindSpore rank file does then). Retention deletes a checkpoint's views with it.
"""

from __future__ import annotations

import os
import re
import shutil
from typing import Any

import jax
import numpy as np

from graphpar._logging import notice_once
from graphpar.checkpoint import manifest
from graphpar.checkpoint.errors import CheckpointError

VIEW = "view"
_RANK_FOLDER = re.compile(r"^rank_(\d+)$")


def rank_folder(path: str) -> tuple[str, int] | None:
    """``(root, r)`` when checkpoint ``path`` lies in a folder named ``rank_{r}`` (MindSpore's per-rank form)."""
    folder = os.path.dirname(os.path.abspath(path))
    found = _RANK_FOLDER.match(os.path.basename(folder))
    return (os.path.dirname(folder), int(found.group(1))) if found else None


def view_paths(path: str) -> list[tuple[int, str]]:
    """``(rank, view path)`` for every other rank of the job when ``path`` is in a ``rank_{r}`` folder and this job
    has several ranks (none otherwise)."""
    found = rank_folder(path)
    ranks = jax.device_count()
    if found is None or ranks < 2 or found[1] >= ranks:
        return []
    root, own = found
    name = os.path.basename(os.path.abspath(path))
    return [(k, os.path.join(root, f"rank_{k}", name)) for k in range(ranks) if k != own]


def write_views(path: str) -> list[str]:
    """Process 0, after ``path`` committed: a view of it in every other rank's folder (see the module doc). A name
    that already holds something other than a view is left alone, said once."""
    path = os.path.abspath(path)
    written = []
    saved_at = manifest.read(path).get("saved_at")
    for rank, view in view_paths(path):
        if os.path.exists(view) and not is_view(view):
            notice_once(f"rank-view-taken:{view}", f"checkpoint {path}: no view for rank {rank} written at {view}, "
                        "which holds something else (left as it is)")
            continue
        os.makedirs(view, mode=0o700, exist_ok=True)
        manifest.write(view, {"layout": VIEW, "of": os.path.relpath(path, view), "rank": rank,
                              "saved_at": saved_at, "entries": [], "files": {}})
        os.chmod(os.path.join(view, manifest.MANIFEST), 0o600)
        written.append(view)
    return written


def is_view(path: str) -> bool:
    try:
        return manifest.read(path).get("layout") == VIEW
    except CheckpointError:
        return False


def remove_views(path: str) -> None:
    """Delete the views of checkpoint ``path`` (retention deleted it)."""
    for _, view in view_paths(path):
        if is_view(view) and os.path.abspath(view_target(view, manifest.read(view))) == os.path.abspath(path):
            shutil.rmtree(view, ignore_errors=True)


def view_target(path: str, body: dict[str, Any]) -> str:
    return os.path.normpath(os.path.join(os.path.abspath(path), body["of"]))


def resolve(path: str, body: dict[str, Any]) -> tuple[str, int | None]:
    """``(checkpoint, rank)`` for a view (``rank``: whose part it shows), ``(path, None)`` for a checkpoint."""
    if body.get("layout") != VIEW:
        return path, None
    target = view_target(path, body)
    if not os.path.exists(target):
        raise CheckpointError(path, f"the per-rank view of rank {body['rank']} names the checkpoint {target}, which "
                              "is gone (deleted, or moved without its rank_* folders)",
                              "Load a checkpoint that exists; move rank_* folders together")
    return target, int(body["rank"])


def select_rows(path: str, body: dict[str, Any], arrays: dict[str, dict[str, np.ndarray]],
                ranks: set[int] | None) -> tuple[dict[str, Any], dict[str, dict[str, np.ndarray]]]:
    """The part of a sliced checkpoint's ``(body, arrays)`` that belongs to ``ranks`` (all of it for ``None`` or an
    integrated checkpoint, whose tensors every rank holds whole)."""
    if ranks is None or body.get("layout") != "sliced":
        return body, arrays
    saved = list(body.get("ranks", []))
    missing = sorted(ranks - set(saved))
    if missing:
        raise CheckpointError(path, f"it holds the slices of ranks {saved}, not of rank(s) {missing}",
                              "Give the per-rank checkpoints of the ranks that saved it")
    rows = [i for i, r in enumerate(saved) if r in ranks]
    entries = [{**record, "slices": [record["slices"][i] for i in rows]} for record in body["entries"]]
    kept = {g: {n: a[rows] for n, a in group.items()} for g, group in arrays.items()}
    return {**body, "entries": entries, "ranks": [saved[i] for i in rows]}, kept
