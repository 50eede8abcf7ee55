"""Placing a program's arguments: the global aval of a process-local batch input, and the moves onto a sharding.

Every program (train step, forward call, pipelined step) receives numpy or jax arrays and runs on global arrays
in its plan's shardings; these are the few rules for getting there, shared rather than re-written per program.
In a multi-process job a process-local batch is one process's rows of the global batch (unless the settings load
the full batch on every process), and a non-array value is the same on every process (taken from process 0). A
deferred parameter (made inside ``no_init_parameters()``) is drawn where it lives, all of a program's in one jitted
initializer (:func:`born_in_place`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding, SingleDeviceSharding

from graphpar.common.deferred import Deferred, born
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
    if isinstance(x, Deferred):
        return born([x], [sharding])[0][0]
    if jax.process_count() > 1 and (not isinstance(x, jax.Array) or x.is_fully_addressable):
        return from_process_zero(np.asarray(x), sharding)
    if isinstance(x, jax.Array) and len(x.sharding.device_set) == 1 and not _whole_on_each(sharding):
        # JAX splits a one-device array onto a split sharding with a jitted ``_multi_slice``, compiled once per
        # shape (seven compiles, 0.3 s of the GPT bench model's 1.5 s first step); from the host, each device's
        # block is copied out of a host copy, with no program (a copy: on CPU, device_put of a host view could
        # alias the old array's buffer, which the step then donates). An eagerly made parameter lives on one device.
        x = np.array(x)
    return jax.device_put(x, sharding)


def _whole_on_each(sharding: jax.sharding.Sharding) -> bool:
    """Whether every device of ``sharding`` holds the whole array (a copy needs no slicing)."""
    return sharding.is_fully_replicated or len(sharding.device_set) == 1


def born_in_place(values: Sequence[Any], shardings: Sequence[jax.sharding.Sharding]) -> list[Any]:
    """``values`` with every deferred one drawn in its sharding, all in one jitted program (each device draws its
    own block, with the values an eager draw gives for the same seed); the others are returned untouched."""
    values = list(values)
    pending = [i for i, v in enumerate(values) if isinstance(v, Deferred)]
    if pending:
        arrays, _ = born([values[i] for i in pending], [shardings[i] for i in pending])
        for i, array in zip(pending, arrays):
            values[i] = array
    return values


def place_state(values: Sequence[Any], shardings: Sequence[jax.sharding.Sharding]) -> list[Any]:
    """State values (parameters, other state) in ``shardings``: deferred ones drawn there (:func:`born_in_place`),
    the others moved (:func:`ensure_placed`)."""
    drawn = born_in_place(values, shardings)
    return [v if isinstance(old, Deferred) else ensure_placed(v, s)
            for v, old, s in zip(drawn, values, shardings)]


def put_batch(x: Any, sharding: jax.sharding.Sharding, shape: tuple[int, ...] | None = None) -> jax.Array:
    """A batch input in ``sharding``; in a multi-process job a host value is this process's part of the global
    batch of ``shape`` (by default its rows)."""
    if jax.process_count() > 1 and isinstance(sharding, NamedSharding) and is_process_local(x):
        return make_global(np.asarray(x), sharding, shape)
    if isinstance(sharding, SingleDeviceSharding) or not isinstance(x, jax.Array):
        return jax.device_put(np.asarray(x) if not isinstance(x, jax.Array) else x, sharding)
    return jax.device_put(x, sharding)
