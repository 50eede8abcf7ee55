"""Placing a program's arguments: the global aval of a process-local batch input, and the moves onto a sharding.

Every program (train step, forward call, pipelined step) receives numpy or jax arrays and runs on global arrays
in its plan's shardings; these are the few rules for getting there, shared rather than re-written per program.
In a multi-process job a process-local batch is one process's rows of the global batch (unless the settings load
the full batch on every process), and a non-array value is the same on every process (taken from process 0).
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding, SingleDeviceSharding

from graphpar.compile.plans.global_batch import from_process_zero, global_shape, make_global


def is_process_local(x: Any) -> bool:
    """Whether a batch input of a multi-process job is this process's part of the global batch: a host value, or a
    ``Tensor`` (a ``jax.Array``) on this process's devices, as each MindSpore rank's Tensor is its own batch (a
    custom loop over ``create_tuple_iterator()``); only an array spanning the processes is global already."""
    return not isinstance(x, jax.Array) or x.is_fully_addressable


def global_aval(x: Any, stacked: bool = False, index: int | None = None) -> jax.ShapeDtypeStruct:
    """The global shape of a process-local batch input (rows of every process stacked on dimension 0, or, for
    input ``index`` of a ``dataset_strategy`` tuple, the blocks it splits); of one step's batch when ``x`` is a
    stack of batches."""
    shape = tuple(np.shape(x))[1:] if stacked else tuple(np.shape(x))
    dtype = x.dtype if isinstance(x, (jax.Array, jax.ShapeDtypeStruct, np.ndarray, np.generic)) else np.asarray(x).dtype
    dtype = jax.dtypes.canonicalize_dtype(dtype)
    if jax.process_count() > 1 and is_process_local(x):
        shape = global_shape(shape, index)
    return jax.ShapeDtypeStruct(shape, dtype)


def ensure_placed(x: Any, sharding: jax.sharding.Sharding) -> Any:
    """A state value (parameter, optimizer leaf) in ``sharding``: itself when it is there already; in a
    multi-process job a host value is the same on every process, so process 0's copy is spread."""
    if isinstance(x, jax.Array) and x.sharding == sharding:
        return x
    if jax.process_count() > 1 and (not isinstance(x, jax.Array) or x.is_fully_addressable):
        return from_process_zero(np.asarray(x), sharding)
    return jax.device_put(x, sharding)


def put_batch(x: Any, sharding: jax.sharding.Sharding, shape: tuple[int, ...] | None = None) -> jax.Array:
    """A batch input in ``sharding``; in a multi-process job a host value is this process's part of the global
    batch of ``shape`` (by default its rows)."""
    if jax.process_count() > 1 and isinstance(sharding, NamedSharding) and is_process_local(x):
        return make_global(np.asarray(x), sharding, shape)
    if isinstance(sharding, SingleDeviceSharding) or not isinstance(x, jax.Array):
        return jax.device_put(np.asarray(x) if not isinstance(x, jax.Array) else x, sharding)
    return jax.device_put(x, sharding)
