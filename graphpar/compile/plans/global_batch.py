"""Global batches from process-local data (multi-process jobs).

Each process holds the rows of its own devices; ``jax.make_array_from_process_local_data`` stitches them into one
global array laid out by the plan's sharding. A dimension the sharding does not split must be identical on every
process (a replicated input).

A ``dataset_strategy`` tuple (``((1, 8), (1, 1))``, ``((2, 4), ...)``) says how each input is split over the ranks, as
MindSpore's does: each rank's batch is one block of the global input, the global shape is the rank's shape times
the splits, and the ranks map onto the blocks in row-major order of the device matrix ``splits + (replicas,)``
(the data-parallel default is ``(ranks, 1, ...)``: rows stacked on dimension 0). :func:`assemble_blocks` builds a
process's part of the global input from its devices' batches; :func:`global_shape` the global shape from it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax
import numpy as np

from graphpar import _context
from graphpar._context import ParallelMode
from graphpar._logging import notice_once
from graphpar.communication.devices import all_devices, local_ranks
from graphpar.errors import DatasetError


def make_global(local: np.ndarray, sharding: jax.sharding.Sharding,
                shape: Sequence[int] | None = None) -> jax.Array:
    """The global array of this process's part ``local``; ``shape``: the global shape (inferred along dimension 0
    when not given)."""
    return jax.make_array_from_process_local_data(sharding, np.asarray(local),
                                                  None if shape is None else tuple(shape))


def input_splits(index: int | None, ndim: int) -> tuple[int, ...] | None:
    """How input ``index`` (of rank ``ndim``) is split over the ranks by a ``dataset_strategy`` tuple; None for
    ``"data_parallel"`` / ``"full_batch"`` (rows on dimension 0, or the whole batch everywhere)."""
    strategy = _context.current_parallel().dataset_strategy
    if index is None or not isinstance(strategy, tuple) or index >= len(strategy) or len(strategy[index]) != ndim or not ndim:
        return None
    return tuple(int(s) for s in strategy[index])


def block_of(rank: int, splits: tuple[int, ...], world: int) -> tuple[int, ...]:
    """The block of the global input that ``rank`` (of ``world``) holds: the device matrix is ``splits`` followed
    by the replicas (``world // prod(splits)`` ranks holding the same block, consecutive)."""
    replicas = max(world // math.prod(splits), 1)
    return tuple(int(i) for i in np.unravel_index((rank // replicas) % math.prod(splits), splits))


def _box(ranks: Sequence[int], splits: tuple[int, ...], world: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    blocks = [block_of(r, splits, world) for r in ranks]
    low = tuple(min(b[d] for b in blocks) for d in range(len(splits)))
    extent = tuple(max(b[d] for b in blocks) - low[d] + 1 for d in range(len(splits)))
    return low, extent


def assemble_blocks(parts: Sequence[np.ndarray], ranks: Sequence[int], splits: tuple[int, ...], world: int,
                    index: int = 0) -> np.ndarray:
    """The part of global input ``index`` that ``ranks`` hold, from each rank's batch ``parts[i]``: the blocks
    placed where the device matrix puts them (a block held by several of them is taken from the first). The blocks
    of one process must form a box, as ``jax.make_array_from_process_local_data`` takes one array per process."""
    low, extent = _box(ranks, splits, world)
    grid = np.empty(extent, dtype=object)
    for part, rank in zip(parts, ranks):
        at = tuple(b - lo for b, lo in zip(block_of(rank, splits, world), low))
        if grid[at] is None:
            grid[at] = np.asarray(part)
    if any(cell is None for cell in grid.flat):
        raise DatasetError(f"dataset_strategy entry {index} {splits}: the blocks of input {index} that ranks "
                           f"{list(ranks)} (this process, of {world}) hold do not form one box, so this process's "
                           "batches cannot be one part of the global input; use splits whose blocks each process "
                           "holds together: the process's ranks cover whole rows of the device matrix (e.g. split "
                           "the leading dimension by the number of processes)")
    return np.block(grid.tolist())


def global_shape(local_shape: Sequence[int], index: int | None) -> tuple[int, ...]:
    """The global shape of input ``index`` whose part on this process has ``local_shape``: every process's rows
    stacked on dimension 0 (the whole batch on each with ``full_batch``), or the blocks input ``index`` of a
    ``dataset_strategy`` tuple splits."""
    shape = tuple(local_shape)
    splits = input_splits(index, len(shape))
    if splits is None:
        if jax.process_count() > 1 and shape and not _context.current_parallel().loads_full_batch:
            return (shape[0] * jax.process_count(),) + shape[1:]
        return shape
    devices = all_devices()
    _, extent = _box(local_ranks(devices), splits, len(devices))
    return tuple(n // e * s for n, e, s in zip(shape, extent, splits))


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



def one_rank_to_global(shape: Sequence[int], index: int, device_num: int) -> tuple[int, ...]:
    """The global shape of positional input ``index`` given as ONE RANK's part, as MindSpore's compile reads a
    graph's arguments in SEMI_AUTO / AUTO_PARALLEL (``ToFullShape``, step_parallel_utils.cc): with ``full_batch``
    the rank holds the whole input; with a ``dataset_strategy`` tuple each dimension is its split times the
    rank's block; otherwise (``"data_parallel"``, the default) the ranks of one pipeline stage stack their rows on
    dimension 0. A ``dataset_strategy`` entry that does not fit leaves the shape as given (the planner names it)."""
    shape = tuple(shape)
    pctx = _context.current_parallel()
    if pctx.parallel_mode not in (ParallelMode.SEMI_AUTO_PARALLEL, ParallelMode.AUTO_PARALLEL) or not shape:
        return shape
    strategy = pctx.dataset_strategy
    if isinstance(strategy, tuple):
        if index >= len(strategy) or len(strategy[index]) != len(shape):
            return shape
        return tuple(n * int(s) for n, s in zip(shape, strategy[index]))
    if pctx.full_batch:
        return shape
    return (shape[0] * (device_num // pctx.pipeline_stages),) + shape[1:]
