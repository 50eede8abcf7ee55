"""The collectives behind ``graphpar.ops.AllReduce`` & co., over the rank axis of a per-rank run.

Each function takes this rank's value, the :class:`~graphpar.communication.rank_axis.RankAxis` and the group's blocks
(``partition.blocks``; ``None`` = the world) and returns this rank's result, MindSpore's semantics:

* ``all_gather``: the group's values concatenated along dimension 0, in group-rank order;
* ``all_reduce``: elementwise sum / max / min / prod over the group;
* ``reduce_scatter``: the reduction, split along dimension 0 into group-size chunks; group rank ``i`` keeps chunk i;
* ``broadcast``: the value of world rank ``root`` (in other blocks: the rank at the root's position);
* ``all_to_all``: split along ``split_dim`` into group-size pieces, piece ``j`` goes to group rank ``j``, the
  received pieces are concatenated along ``concat_dim``.

Gradients follow MindSpore's bprops (``ops/_grad_experimental/grad_comm_ops.py``), not JAX's transposes: AllReduce
SUM → AllReduce SUM of the cotangent, MAX/MIN → that times ``x == out``, PROD → ``AllReduce(dout * out) / x``;
AllGather → ReduceScatter SUM; ReduceScatter SUM → AllGather (other ops have no gradient, as in MindSpore);
Broadcast → the cotangent unchanged; AlltoAll → AlltoAll with split and concat dimensions swapped.

Sub-groups use ``axis_index_groups`` where JAX supports it (under ``shard_map``); under ``vmap`` (DATA_PARALLEL)
they are emulated by gathering the world and selecting the block, which computes the same values.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from graphpar.communication.errors import CommunicationError
from graphpar.communication.partition import Blocks
from graphpar.communication.rank_axis import RankAxis

SUM, MAX, MIN, PROD = "sum", "max", "min", "prod"
_REDUCE = {SUM: jnp.sum, MAX: jnp.max, MIN: jnp.min, PROD: jnp.prod}


def _tables(blocks: Blocks, world: int) -> tuple[np.ndarray, np.ndarray]:
    """``members[r]``: the ranks of r's block in block order; ``position[r]``: r's index in its block."""
    size = len(blocks[0])
    members = np.zeros((world, size), np.int32)
    position = np.zeros((world,), np.int32)
    for block in blocks:
        for i, r in enumerate(block):
            members[r] = block
            position[r] = i
    return members, position


def _native(axis: RankAxis, blocks: Blocks | None) -> bool:
    return blocks is None or axis.native_groups


def _groups(blocks: Blocks | None) -> list[list[int]] | None:
    return None if blocks is None else [list(b) for b in blocks]


def _block_values(x: jax.Array, axis: RankAxis, blocks: Blocks) -> jax.Array:
    """(group size, *x.shape): the values of this rank's block, gathered from the world (emulation path)."""
    world = jax.lax.axis_size(axis.name)
    members, _ = _tables(blocks, world)
    full = jax.lax.all_gather(x, axis.name)
    return full[jnp.asarray(members)[jax.lax.axis_index(axis.name)]]


def _my_position(axis: RankAxis, blocks: Blocks | None) -> jax.Array:
    index = jax.lax.axis_index(axis.name)
    if blocks is None:
        return index
    _, position = _tables(blocks, jax.lax.axis_size(axis.name))
    return jnp.asarray(position)[index]


def group_size(axis: RankAxis, blocks: Blocks | None) -> int:
    return jax.lax.axis_size(axis.name) if blocks is None else len(blocks[0])


# --- forward implementations ---------------------------------------------------------------------------------------
def _all_reduce(x, op, axis, blocks):
    if op == PROD or not _native(axis, blocks):
        values = (jax.lax.all_gather(x, axis.name, axis_index_groups=_groups(blocks)) if _native(axis, blocks)
                  else _block_values(x, axis, blocks))
        return _REDUCE[op](values, axis=0).astype(x.dtype)
    reducer = {SUM: jax.lax.psum, MAX: jax.lax.pmax, MIN: jax.lax.pmin}[op]
    return reducer(x, axis.name, axis_index_groups=_groups(blocks))


def _all_gather(x, axis, blocks):
    if _native(axis, blocks):
        return jax.lax.all_gather(x, axis.name, axis_index_groups=_groups(blocks), tiled=True)
    values = _block_values(x, axis, blocks)
    return values.reshape((values.shape[0] * values.shape[1],) + values.shape[2:])


def _reduce_scatter(x, op, axis, blocks):
    size = group_size(axis, blocks)
    if op == SUM and _native(axis, blocks):
        return jax.lax.psum_scatter(x, axis.name, scatter_dimension=0, axis_index_groups=_groups(blocks), tiled=True)
    chunk = x.shape[0] // size
    reduced = _all_reduce(x, op, axis, blocks)
    return jax.lax.dynamic_slice_in_dim(reduced, _my_position(axis, blocks) * chunk, chunk, axis=0)


def _broadcast(x, root, axis, blocks):
    root_position = root if blocks is None else blocks[0].index(root)
    if not _native(axis, blocks):
        return _block_values(x, axis, blocks)[root_position]
    dtype = x.dtype
    carrier = x.astype(jnp.int32) if dtype == jnp.bool_ else x
    mine = jnp.where(_my_position(axis, blocks) == root_position, carrier, jnp.zeros_like(carrier))
    return jax.lax.psum(mine, axis.name, axis_index_groups=_groups(blocks)).astype(dtype)


def _all_to_all(x, split_dim, concat_dim, axis, blocks):
    if _native(axis, blocks):
        return jax.lax.all_to_all(x, axis.name, split_dim, concat_dim, axis_index_groups=_groups(blocks), tiled=True)
    size = len(blocks[0])
    chunk = x.shape[split_dim] // size
    values = _block_values(x, axis, blocks)  # (size, *x.shape): member j's whole input
    mine = jax.lax.dynamic_slice_in_dim(values, _my_position(axis, blocks) * chunk, chunk, axis=split_dim + 1)
    moved = jnp.moveaxis(mine, 0, concat_dim)  # pieces side by side, member order, before the concat dim
    shape = list(x.shape)
    shape[split_dim] = chunk
    shape[concat_dim] *= size
    return moved.reshape(shape)


# --- with MindSpore's gradients ------------------------------------------------------------------------------------
# SUM reductions, gathers, reduce-scatters and all-to-alls are linear: JAX's own transposes are exactly MindSpore's
# bprops (psum -> psum, all_gather -> psum_scatter, psum_scatter -> all_gather, all_to_all -> swapped all_to_all),
# under shard_map and under vmap alike, and PROD differentiates through its gather. The others get a custom JVP whose
# transpose is MindSpore's bprop. (A custom_vjp would not do: under vmap its bwd runs outside the named axis.)
def _with_tangent(forward: Callable, tangent: Callable, x: jax.Array) -> jax.Array:
    fn = jax.custom_jvp(forward)

    @fn.defjvp
    def _jvp(primals, tangents):
        (v,), (t,) = primals, tangents
        out = forward(v)
        return out, tangent(v, out, t)

    return fn(x)


def all_reduce(x, op: str, axis: RankAxis, blocks: Blocks | None):
    if op in (SUM, PROD):
        return _all_reduce(x, op, axis, blocks)

    def tangent(v, out, t):  # transposes to MindSpore's AllReduce(SUM)(dout) * (x == out)
        return _all_reduce(jnp.where(v == out, t, jnp.zeros_like(t)), SUM, axis, blocks)

    return _with_tangent(lambda v: _all_reduce(v, op, axis, blocks), tangent, x)


def all_gather(x, axis: RankAxis, blocks: Blocks | None):
    return _all_gather(x, axis, blocks)


def reduce_scatter(x, op: str, axis: RankAxis, blocks: Blocks | None):
    if op == SUM:
        return _reduce_scatter(x, op, axis, blocks)

    def tangent(v, out, t):
        raise CommunicationError(f"ReduceScatter(op={op!r}) has no gradient: MindSpore defines the ReduceScatter "
                                 "bprop for ReduceOp.SUM only")

    return _with_tangent(lambda v: _reduce_scatter(v, op, axis, blocks), tangent, x)


def broadcast(x, root: int, axis: RankAxis, blocks: Blocks | None):
    # MindSpore's bprop passes each rank's cotangent straight back (dx = dout): an identity tangent.
    return _with_tangent(lambda v: _broadcast(v, root, axis, blocks), lambda v, out, t: t, x)


def all_to_all(x, split_dim: int, concat_dim: int, axis: RankAxis, blocks: Blocks | None):
    return _all_to_all(x, split_dim, concat_dim, axis, blocks)
