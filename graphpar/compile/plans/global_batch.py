"""Global batches from process-local data (multi-process jobs).

Each process holds the rows of its own devices; ``jax.make_array_from_process_local_data`` stitches them into one
global array laid out by the plan's sharding. A dimension the sharding does not split must be identical on every
process (a replicated input).
"""

from __future__ import annotations

import jax
import numpy as np

from graphpar._logging import notice_once


def make_global(local: np.ndarray, sharding: jax.sharding.Sharding) -> jax.Array:
    return jax.make_array_from_process_local_data(sharding, np.asarray(local))


def gather_process_rows(local: np.ndarray) -> np.ndarray:
    """Every process's rows stacked on dimension 0 (in process order), on every process."""
    if jax.process_count() == 1:
        return local
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(local, tiled=True))


def to_host(x) -> np.ndarray:
    """A global array as a numpy array on this process (gathered across processes when it is split)."""
    if isinstance(x, jax.Array) and not x.is_fully_addressable and not x.is_fully_replicated:
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(x)


def from_process_zero(value: np.ndarray, sharding: jax.sharding.Sharding) -> jax.Array:
    """A global array holding process 0's ``value`` (MindSpore's ``parameter_broadcast``: rank 0's initial values
    are authoritative). A process whose own value differs is told once, since unseeded initialization is the
    usual cause."""
    from jax.experimental import multihost_utils

    chosen = np.asarray(multihost_utils.broadcast_one_to_all(value))
    if not np.array_equal(chosen, value, equal_nan=True):
        notice_once("param-broadcast", "initial values differ between processes; every process uses process 0's "
                    "(as MindSpore's parameter_broadcast=True). Call graphpar.set_seed(...) before building the "
                    "network for identical initialization everywhere")
    return jax.make_array_from_callback(chosen.shape, sharding, lambda index: chosen[index])
