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

from graphpar import _context
from graphpar.compile.plans.global_batch import from_process_zero, make_global


def global_aval(x: Any, stacked: bool = False) -> jax.ShapeDtypeStruct:
    """The global shape of a process-local batch input (rows of every process stacked on dimension 0); of one
    step's batch when ``x`` is a stack of batches."""
    shape = tuple(np.shape(x))[1:] if stacked else tuple(np.shape(x))
    dtype = x.dtype if isinstance(x, (jax.Array, jax.ShapeDtypeStruct, np.ndarray, np.generic)) else np.asarray(x).dtype
    dtype = jax.dtypes.canonicalize_dtype(dtype)
    if jax.process_count() > 1 and shape and not isinstance(x, jax.Array):
        if not _context.current_parallel().loads_full_batch:
            shape = (shape[0] * jax.process_count(),) + shape[1:]
    return jax.ShapeDtypeStruct(shape, dtype)


def ensure_placed(x: Any, sharding: jax.sharding.Sharding) -> Any:
    """A state value (parameter, optimizer leaf) in ``sharding``: itself when it is there already; in a
    multi-process job a host value is the same on every process, so process 0's copy is spread."""
    if isinstance(x, jax.Array) and x.sharding == sharding:
        return x
    if jax.process_count() > 1 and (not isinstance(x, jax.Array) or x.is_fully_addressable):
        return from_process_zero(np.asarray(x), sharding)
    return jax.device_put(x, sharding)


def put_batch(x: Any, sharding: jax.sharding.Sharding) -> jax.Array:
    """A batch input in ``sharding``; in a multi-process job a host value is this process's rows of the global
    batch."""
    if jax.process_count() > 1 and isinstance(sharding, NamedSharding) and not isinstance(x, jax.Array):
        return make_global(np.asarray(x), sharding)
    if isinstance(sharding, SingleDeviceSharding) or not isinstance(x, jax.Array):
        return jax.device_put(np.asarray(x) if not isinstance(x, jax.Array) else x, sharding)
    return jax.device_put(x, sharding)
