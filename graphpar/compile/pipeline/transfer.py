"""Moving activations, their gradients and shared parameters' gradients between pipeline stages.

Between two stages of one process (or two chunks of one device group: virtual stages) an activation moves with
``jax.device_put`` into the receiver's layout. Between
processes nothing can be put on another process's device, so the move is a small compiled program on a *pair mesh*:
the sender's and the receiver's stage meshes stacked on a leading axis ``stage_pair`` (both have the plan's mesh
shape), running ``lax.ppermute`` from row 0 to row 1 under ``shard_map``: device ``j`` of the sender sends its shard
to device ``j`` of the receiver (one collective permute; the value keeps its planned layout, which both stages give
it). Both processes launch that program at the same point of the global schedule (every process walks the same
order, so the collectives of any two processes are issued in the same order: no deadlock); the sender gives its
shards, the receiver zeros of the shard's shape, and each keeps the rows on its own devices.

A Parameter used by several stages (tied embeddings) has a copy in each: :func:`sum_copies` adds the copies'
gradients with one ``psum`` over the stacked meshes of those stages (every stage gets the sum, so the copies,
updated alike, stay equal), whichever processes own them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

PAIR_AXIS = "stage_pair"


def _local(sharding: NamedSharding) -> bool:
    """Whether every device of ``sharding`` is this process's."""
    return sharding.is_fully_addressable


def _takes_part(sharding: NamedSharding) -> bool:
    """Whether some device of ``sharding`` is this process's."""
    return bool(sharding.addressable_devices)


def _stacked(meshes: Sequence[Mesh]) -> Mesh:
    """The stage meshes (one shape, one set of axis names) stacked on a leading ``stage_pair`` axis."""
    return Mesh(np.stack([m.devices for m in meshes]), (PAIR_AXIS,) + tuple(meshes[0].axis_names),
                axis_types=(jax.sharding.AxisType.Auto,) * (1 + len(meshes[0].axis_names)))


def _rows(x: jax.Array | None, sharding: NamedSharding, shape: Sequence[int], dtype: Any) -> list[jax.Array]:
    """This process's shards of one row of the stacked array: ``x``'s (each with a leading 1), or zeros when this
    process does not hold the value (none when it has no device there)."""
    if x is not None:
        return [s.data[None] for s in x.addressable_shards]
    block = np.zeros((1,) + tuple(sharding.shard_shape(tuple(shape))), dtype)
    return [jax.device_put(block, d) for d in sharding.addressable_devices]


def _unstack(out: jax.Array, sharding: NamedSharding, shape: Sequence[int]) -> jax.Array:
    """The row of ``out`` on ``sharding``'s devices (this process's) as an array in ``sharding``."""
    mine = set(sharding.device_set)
    return jax.make_array_from_single_device_arrays(
        tuple(shape), sharding, [s.data[0] for s in out.addressable_shards if s.device in mine])


class Links:
    """The cross-process transfer programs of one built pipeline, jitted once per (sender, receiver, value) and
    compiled on first use (counted in :attr:`compiled`)."""

    def __init__(self) -> None:
        self._programs: dict[Any, Any] = {}

    @property
    def compiled(self) -> int:
        return len(self._programs)

    def _program(self, key: Any, meshes: Sequence[Mesh], spec: PartitionSpec, collective: str) -> tuple[Any, Any]:
        found = self._programs.get(key)
        if found is None:
            mesh = _stacked(meshes)
            stacked = PartitionSpec(PAIR_AXIS, *spec)
            if collective == "send":
                def body(a):
                    return jax.lax.ppermute(a, PAIR_AXIS, [(0, 1)])
            else:
                def body(a):
                    return jax.lax.psum(a, PAIR_AXIS)
            program = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=stacked, out_specs=stacked))
            found = self._programs[key] = (program, NamedSharding(mesh, stacked))
        return found

    def move(self, key: Any, x: jax.Array | None, src: NamedSharding, dst: NamedSharding, shape: Sequence[int],
             dtype: Any) -> jax.Array | None:
        """``x`` (held by this process when it owns the sender, else None) in ``dst``; None when this process
        owns none of the receiver's devices. Called by every process owning devices of either end, at the same
        point of the schedule."""
        if _local(src) and _local(dst):
            return jax.device_put(x, dst)
        if src.device_set == dst.device_set:  # two chunks of one device group (virtual stages) over processes
            return jax.device_put(x, dst) if _takes_part(dst) else None
        if not _takes_part(src) and not _takes_part(dst):
            return None
        program, stacked = self._program(("send", key), [src.mesh, dst.mesh], src.spec, "send")
        arriving = NamedSharding(dst.mesh, src.spec)
        rows = (_rows(x, src, shape, dtype) if _takes_part(src) else []) + _rows(None, arriving, shape, dtype)
        out = program(jax.make_array_from_single_device_arrays((2,) + tuple(shape), stacked, rows))
        if not _takes_part(dst):
            return None
        got = _unstack(out, arriving, shape)
        return got if got.sharding == dst else jax.device_put(got, dst)

    def sum_copies(self, key: Any, copies: Sequence[jax.Array | None], shardings: Sequence[NamedSharding],
                   shape: Sequence[int], dtype: Any) -> list[jax.Array | None]:
        """The sum of the copies' values (one per stage, ``shardings``: theirs, one spec), for every copy this
        process holds (None for the others). Called by every process owning one of the stages, at the same point
        of the schedule."""
        if not any(_takes_part(s) for s in shardings):  # the processes owning those stages sum them
            return [None] * len(shardings)
        spec = shardings[0].spec
        program, stacked = self._program(("sum", key), [s.mesh for s in shardings], spec, "sum")
        rows = [r for x, s in zip(copies, shardings) if _takes_part(s) for r in _rows(x, s, shape, dtype)]
        out = program(jax.make_array_from_single_device_arrays((len(copies),) + tuple(shape), stacked, rows))
        return [_unstack(out, s, shape) if _takes_part(s) else None for s in shardings]
