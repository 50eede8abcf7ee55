"""Values of a multi-process pipeline job gathered to every process before an integrated save.

A pipelined job keeps each stage's parameters (and their optimizer state) on that stage's devices, which belong to
one process; the other processes hold the same global array with no shard of their own (see
``compile.pipeline.processes``). orbax refuses to save an array that lives on one process's devices in a
multi-process job, so before an integrated save each such value is broadcast from the process that holds it to
every process's host (one collective per owning process for all of its values), and written like any value every
process holds alike: by process 0, once.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import numpy as np

from graphpar.checkpoint.entries import Entry


def _owner(entry: Entry) -> int | None:
    """The one process whose devices hold a pipeline stage's value, or None."""
    value = entry.value
    if entry.pipeline_stage is None or not isinstance(value, jax.Array):
        return None
    processes = {d.process_index for d in value.sharding.device_set}
    return processes.pop() if len(processes) == 1 else None


def gather_staged(entries: Sequence[Entry]) -> None:
    """Replace, on every process, each stage-held value of ``entries`` by a host copy. Collective; a no-op in a
    one-process job."""
    if jax.process_count() == 1:
        return
    from jax.experimental import multihost_utils

    by_owner: dict[int, list[Entry]] = {}
    for entry in entries:
        owner = _owner(entry)
        if owner is not None:
            by_owner.setdefault(owner, []).append(entry)
    me = jax.process_index()
    for owner in sorted(by_owner):
        mine = owner == me
        tree = [np.asarray(e.value) if mine else np.zeros(e.value.shape, e.value.dtype) for e in by_owner[owner]]
        for entry, value in zip(by_owner[owner], multihost_utils.broadcast_one_to_all(tree, is_source=mine)):
            entry.value = np.asarray(value)
