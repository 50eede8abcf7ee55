"""Values of a multi-process pipeline job gathered to every process before an integrated save.

A pipelined job keeps each stage's parameters (and their optimizer state) on that stage's devices, which belong to
one process or a few; the other processes hold the same global array with no shard of their own (see
``compile.pipeline.processes``). orbax refuses to save an array with no shard in some process, or one that lives on
one process's devices, in a multi-process job, so before an integrated save each such value is gathered whole by
the processes holding it and broadcast from the first of them to every process's host (one collective per source
process for all of its values), and written like any value every process holds alike: by process 0, once.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from graphpar.checkpoint.entries import Entry


def _owners(entry: Entry) -> frozenset[int] | None:
    """The processes whose devices hold a pipeline stage's value, when not every process does; else None."""
    value = entry.value
    if entry.pipeline_stage is None or not isinstance(value, jax.Array):
        return None
    processes = frozenset(d.process_index for d in value.sharding.device_set)
    return processes if len(processes) < jax.process_count() else None


def _whole(value: jax.Array) -> np.ndarray:
    """The whole of a value this process holds (some of) its shards of; collective over the processes holding
    it when they are several (a stage over processes)."""
    if value.is_fully_addressable:
        return np.asarray(value)
    whole = jax.jit(lambda x: x, out_shardings=NamedSharding(value.sharding.mesh, PartitionSpec()))(value)
    return np.asarray(whole.addressable_shards[0].data)


def gather_staged(entries: Sequence[Entry]) -> None:
    """Replace, on every process, each stage-held value of ``entries`` by a host copy. Collective; a no-op in a
    one-process job."""
    if jax.process_count() == 1:
        return
    from jax.experimental import multihost_utils

    by_source: dict[int, list[Entry]] = {}
    me = jax.process_index()
    wholes: dict[int, np.ndarray] = {}
    for entry in entries:
        owners = _owners(entry)
        if owners is None:
            continue
        by_source.setdefault(min(owners), []).append(entry)
        if me in owners:
            wholes[id(entry)] = _whole(entry.value)
    for source in sorted(by_source):
        mine = source == me
        tree = [wholes[id(e)] if mine else np.zeros(e.value.shape, e.value.dtype) for e in by_source[source]]
        for entry, value in zip(by_source[source], multihost_utils.broadcast_one_to_all(tree, is_source=mine)):
            entry.value = np.asarray(value)
