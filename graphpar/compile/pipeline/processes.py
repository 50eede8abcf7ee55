"""Which process runs which pipeline stage, and the values a process keeps of the stages it does not run.

In a multi-process job (``jax.distributed``: graphpar launch, msrun, Dynamic Cluster, mpirun) every process runs the
same pipelined step over the global schedule, but only the programs of the stages whose devices it owns (all of
them or some: a stage's ``device_num / pipeline_stages`` ranks may span processes, which then all run its programs).
A value that lives on stages of other processes only is kept here as a *placeholder*: a ``jax.Array`` of the right
shape, dtype and sharding with no shard in this process, so that every process holds the same tree of global
arrays (the owners' shards hold the data). One process owning every stage (the single-process job) is the same code
with no placeholder.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils

from graphpar.compile.runtime.placement import born_in_place, ensure_placed


def stage_processes(devices: Sequence[jax.Device], n_stages: int, per_stage: int) -> list[frozenset[int]]:
    """The processes owning each stage's devices (one, or several when a stage's ranks span processes: then
    they all run its programs, as any multi-process SPMD program)."""
    return [frozenset(d.process_index for d in devices[s * per_stage:(s + 1) * per_stage]) for s in range(n_stages)]


def put_host(value: np.ndarray, sharding: jax.sharding.Sharding) -> jax.Array:
    """A host value (the same on every process) in ``sharding``, each process putting its own devices' blocks."""
    if sharding.is_fully_addressable:
        return jax.device_put(value, sharding)
    return jax.make_array_from_callback(value.shape, sharding, lambda index: value[index])


def local_value(x: jax.Array) -> np.ndarray:
    """A replicated array's value, read from this process's first shard (a stage may span processes)."""
    return np.asarray(x.addressable_shards[0].data)


def placeholder(shape: Sequence[int], dtype: Any, sharding: jax.sharding.Sharding) -> jax.Array:
    """A global array in ``sharding`` (on another process's devices) with no shard in this process."""
    return jax.make_array_from_single_device_arrays(tuple(shape), sharding, [], dtype=np.dtype(dtype))


def place_owned(values: Sequence[Any], shardings: Sequence[jax.sharding.Sharding]) -> list[Any]:
    """State values of a stage this process owns placed in its ``shardings`` without any other process taking part
    (deferred ones drawn there; host values, the same on every process, copied in): in a multi-process job
    ``placement.ensure_placed`` spreads process 0's copy, a collective the other processes would not join. Called
    by every process owning the stage."""
    drawn = born_in_place(values, shardings)
    out = []
    for value, old, sharding in zip(drawn, values, shardings):
        if value is not old or (isinstance(value, jax.Array) and value.sharding == sharding):
            out.append(value)
        elif jax.process_count() == 1:
            out.append(ensure_placed(value, sharding))
        elif isinstance(value, jax.Array) and (value.is_fully_addressable or value.sharding.device_set
                                               == sharding.device_set):
            out.append(jax.device_put(value, sharding))
        else:
            out.append(put_host(np.asarray(value), sharding))
    return out


def own_copy(value: Any, sharding: jax.sharding.Sharding) -> Any:
    """``value`` in ``sharding`` in buffers of its own: the same value placed for two chunks of one device group (a
    Parameter tied between the first and last virtual stage under zero_bubble_v, its optimizer leaves) would share
    one buffer, and each chunk's update donates its own."""
    return jax.device_put(value, sharding, may_alias=False) if isinstance(value, jax.Array) else value


def share_loss(total: np.float32, source: bool) -> np.float32:
    """The step's loss on every process: computed by the processes owning the last stage, broadcast from the first
    of them (``source``) to the others (one small collective per step; none in a one-process job)."""
    if jax.process_count() == 1:
        return total
    return np.float32(multihost_utils.broadcast_one_to_all(np.float32(total if source else 0.0), is_source=source))
