"""Which rank the code being traced runs as: the named "rank axis" of a per-rank run.

Code runs once per rank in three places: DATA_PARALLEL's per-device loss (``jax.vmap`` over the device axis, see
``compile.plan``), a top-level GRAPH_MODE call of a Cell holding collective ops (``jax.shard_map`` over the job's
devices, see ``compile.spmd_call``), and :func:`graphpar.compile.runtime.spmd_call.run_per_rank`. Each sets the axis with
:func:`replica_axis`; ``jax.lax.axis_index(name)`` is then the rank. Collective ops
(``graphpar.ops.AllReduce`` ...) reduce over it, and stochastic Cells (Dropout) fold the index into their key so each
device draws its own mask, as each MindSpore device does with its own seed.

``native_groups`` tells the collectives whether ``axis_index_groups`` may be used (under ``shard_map``; ``vmap``
refuses it, so sub-groups are emulated there).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass

import jax


@dataclass(frozen=True)
class RankAxis:
    name: str
    native_groups: bool = False


_axis: contextvars.ContextVar[RankAxis | None] = contextvars.ContextVar("graphpar_replica_axis", default=None)


@contextlib.contextmanager
def replica_axis(name: str, native_groups: bool = False) -> Iterator[None]:
    token = _axis.set(RankAxis(name, native_groups))
    try:
        yield
    finally:
        _axis.reset(token)


def current_axis() -> str | None:
    axis = _axis.get()
    return None if axis is None else axis.name


def current_rank_axis() -> RankAxis | None:
    return _axis.get()


def fold_in_replica(key: jax.Array) -> jax.Array:
    """``key`` folded with this replica's index when tracing under the data-parallel vmap, else ``key``."""
    name = current_axis()
    if name is None:
        return key
    return jax.random.fold_in(key, jax.lax.axis_index(name))
