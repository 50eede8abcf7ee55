"""Per-rank slices: what ``integrated_save=False`` writes, and how slices become whole tensors again.

MindSpore's sliced save has every rank write the slice of each parameter it holds (replicas included) to its own
file. graphpar writes the same rows, in parallel, into one checkpoint: each saved array is the stack of the
ranks' slices, shape ``(ranks, *slice_shape)``, sharded so that row ``r`` lives on (and is written by the process
of) rank ``r``'s device; the manifest records, for every row, which part of the global tensor it is. Merging is then
a copy of each row into place (:func:`merge_rows`), whatever layout or device count the rows came from.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from graphpar.planner.tensor_layout import slices_from_json, slices_to_json

RANK_AXIS = "graphpar_rank"


def global_rank(device: jax.Device) -> int:
    return jax.devices().index(device)


def rank_devices(values: Sequence[Any]) -> list[jax.Device]:
    """The devices the arrays live on, in rank order (the ranks of a sliced checkpoint)."""
    devices: set = set()
    for value in values:
        if isinstance(value, jax.Array):
            devices |= set(value.sharding.device_set)
    if not devices:
        devices = {jax.devices()[0]}
    return sorted(devices, key=global_rank)


def _host_whole(value: Any) -> np.ndarray | None:
    """The whole value on this host, when it can be had without communication."""
    if not isinstance(value, jax.Array):
        return np.asarray(value)
    if value.is_fully_addressable:
        return np.asarray(value)
    if value.is_fully_replicated:
        return np.asarray(value.addressable_data(0))
    return None


def stack_rows(value: Any, ranks: Sequence[jax.Device], name: str) -> tuple[jax.Array, list[list[list[int]]]]:
    """``(stacked, slices)``: the per-rank slices of ``value`` as one array of shape ``(len(ranks), *slice)``
    (row ``r`` on ``ranks[r]``) and, per row, ``[[start, stop], ...]`` of its part of the global tensor."""
    shape = tuple(np.shape(value))
    mesh = Mesh(np.asarray(ranks, dtype=object), (RANK_AXIS,))
    sharding = NamedSharding(mesh, PartitionSpec(RANK_AXIS))
    on_ranks = isinstance(value, jax.Array) and set(value.sharding.device_set) == set(ranks)
    if on_ranks:
        index = value.sharding.devices_indices_map(shape)
        slices = [slices_to_json(index[d], shape) for d in ranks]
        shards = {s.device: s.data for s in value.addressable_shards}
        rows = [jax.device_put(shards[d][None], d) for d in ranks if d in shards]
        row_shape = tuple(np.shape(rows[0]))[1:] if rows else tuple(b - a for a, b in slices[0])
        sizes = {tuple(b - a for a, b in s) for s in slices}
        if len(sizes) != 1:
            raise ValueError(f"save_checkpoint(integrated_save=False): '{name}' {shape} is split unevenly "
                             f"({sorted(sizes)}); sliced checkpoints need equal slices")
        return jax.make_array_from_single_device_arrays((len(ranks),) + row_shape, sharding, rows), slices
    whole = _host_whole(value)
    if whole is None:
        raise ValueError(f"save_checkpoint(integrated_save=False): '{name}' lives on devices "
                         f"{sorted(global_rank(d) for d in value.sharding.device_set)} but the other arrays on "
                         f"{[global_rank(d) for d in ranks]}; save it with integrated_save=True")
    full = [[0, n] for n in shape]
    stacked = jax.make_array_from_callback((len(ranks),) + shape, sharding,
                                           lambda index: np.broadcast_to(whole, (len(ranks),) + shape)[index])
    return stacked, [full for _ in ranks]


def merge_rows(name: str, shape: Sequence[int], dtype: Any, rows: Sequence[tuple[Any, np.ndarray]]) -> np.ndarray | None:
    """The whole tensor from ``(slices, data)`` rows (``slices`` as saved), or None if the rows do not cover it."""
    whole = np.zeros(tuple(shape), dtype=dtype)
    covered = np.zeros(tuple(shape), dtype=bool)
    for slices, data in rows:
        index = slices_from_json(slices) if slices and not isinstance(slices[0], slice) else tuple(slices)
        target_shape = tuple(s.stop - s.start for s in index)
        if tuple(np.shape(data)) != target_shape:
            raise ValueError(f"'{name}': a slice of shape {tuple(np.shape(data))} does not fit its place {index} in "
                             f"a tensor of shape {tuple(shape)}")
        whole[index] = data
        covered[index] = True
    return whole if covered.all() else None
