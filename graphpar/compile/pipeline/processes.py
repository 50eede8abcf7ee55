"""Which process runs which pipeline stage, and the values a process keeps of the stages it does not run.

In a multi-process job (``jax.distributed``: graphpar launch, msrun, Dynamic Cluster, mpirun) every process runs the
same pipelined step over the global schedule, but only the programs of the stages whose devices it owns (a stage's
``device_num / pipeline_stages`` consecutive ranks must lie in one process). A value that lives on another process's
stage is kept here as a *placeholder*: a ``jax.Array`` of the right shape, dtype and sharding with no shard in this
process, so that every process holds the same tree of global arrays (what a collective checkpoint save needs; the
owner's shards hold the data). One process owning every stage (the single-process job) is the same code with no
placeholder.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils

from graphpar.compile.pipeline.stage_split import PipelineError
from graphpar.compile.runtime.placement import born_in_place, ensure_placed


def stage_processes(devices: Sequence[jax.Device], n_stages: int, per_stage: int) -> list[int]:
    """The process that owns each stage's devices; a stage split over processes is refused by name."""
    owners = []
    for s in range(n_stages):
        group = devices[s * per_stage:(s + 1) * per_stage]
        processes = sorted({d.process_index for d in group})
        if len(processes) > 1:
            raise PipelineError(
                f"pipeline stage {s} (ranks {s * per_stage}-{(s + 1) * per_stage - 1})",
                f"spans processes {processes}; a stage's devices must belong to one process",
                f"use at least {per_stage} devices per process (device_num / pipeline_stages), or more stages")
        owners.append(processes[0])
    return owners


def placeholder(shape: Sequence[int], dtype: Any, sharding: jax.sharding.Sharding) -> jax.Array:
    """A global array in ``sharding`` (on another process's devices) with no shard in this process."""
    return jax.make_array_from_single_device_arrays(tuple(shape), sharding, [], dtype=np.dtype(dtype))


def place_owned(values: Sequence[Any], shardings: Sequence[jax.sharding.Sharding]) -> list[Any]:
    """State values of a stage this process owns placed in its ``shardings`` without any other process taking part
    (deferred ones drawn there; host values, the same on every process, copied in): in a multi-process job
    ``placement.ensure_placed`` spreads process 0's copy, a collective the other processes would not join."""
    drawn = born_in_place(values, shardings)
    out = []
    for value, old, sharding in zip(drawn, values, shardings):
        if value is not old or (isinstance(value, jax.Array) and value.sharding == sharding):
            out.append(value)
        elif jax.process_count() == 1:
            out.append(ensure_placed(value, sharding))
        elif isinstance(value, jax.Array) and value.is_fully_addressable:
            out.append(jax.device_put(value, sharding))
        else:
            out.append(jax.device_put(np.asarray(value), sharding))
    return out


def share_loss(total: np.float32, source: bool) -> np.float32:
    """The step's loss on every process: computed by the process owning the last stage (``source``), broadcast to
    the others (one small collective per step; none in a one-process job)."""
    if jax.process_count() == 1:
        return total
    return np.float32(multihost_utils.broadcast_one_to_all(np.float32(total if source else 0.0), is_source=source))
