"""MindSpore's tensor layouts (device matrix + tensor map) and graphpar's mesh-axis specs, and the slice each rank
holds under either.

MindSpore describes a tensor's layout by a *device matrix* ``dev_matrix`` (ranks fill it row-major) and a *tensor
map*: one entry per tensor dimension, ``-1`` when the dimension is whole, else the index of the device-matrix
dimension that splits it, counted **from the right** (``dev_matrix [2, 4]``, ``tensor_map [0, -1]``: dimension 0 is
split 4 ways by the last device-matrix dimension). graphpar's plans give each tensor dimension a tuple of mesh axes
(``(("m1", "m2"), ())`` on the ``(2, 2, 2)`` mesh ``m0, m1, m2``). :func:`from_mesh_spec` converts a spec to
MindSpore's form by grouping consecutive mesh axes that serve the same tensor dimension (or none) into one
device-matrix dimension; a tensor dimension split by axes that are not consecutive in the mesh gets a list of
device-matrix dimensions (major first) in its tensor-map entry, MindSpore's form for interleaved layouts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

TensorMapEntry = Any  # int, or a list of ints for a dimension split by several device-matrix dimensions


def from_mesh_spec(spec: Sequence[Sequence[str]], axis_names: Sequence[str],
                   axis_sizes: Sequence[int]) -> tuple[list[int], list[TensorMapEntry]]:
    """``(dev_matrix, tensor_map)`` of a tensor whose dimension ``i`` is split by the mesh axes ``spec[i]``."""
    owner = {axis: dim for dim, axes in enumerate(spec) for axis in axes}
    runs: list[tuple[int | None, list[str]]] = []  # (tensor dim or None, consecutive mesh axes)
    for axis in axis_names:
        dim = owner.get(axis)
        if runs and runs[-1][0] == dim and (dim is None or list(spec[dim]).index(axis) ==
                                             list(spec[dim]).index(runs[-1][1][-1]) + 1):
            runs[-1][1].append(axis)
        else:
            runs.append((dim, [axis]))
    size = dict(zip(axis_names, axis_sizes))
    dev_matrix = [int(np.prod([size[a] for a in axes])) for _, axes in runs]
    position: dict[str, int] = {}
    for k, (_, axes) in enumerate(runs):
        for axis in axes:
            position[axis] = len(runs) - 1 - k  # counted from the right
    tensor_map: list[TensorMapEntry] = []
    for axes in spec:
        indices = list(dict.fromkeys(position[a] for a in axes))
        tensor_map.append(-1 if not indices else indices[0] if len(indices) == 1 else indices)
    return dev_matrix, tensor_map


def rank_slices(dev_matrix: Sequence[int], tensor_map: Sequence[TensorMapEntry],
                shape: Sequence[int]) -> list[tuple[slice, ...]]:
    """The slice of a tensor of global ``shape`` that each rank (0 .. prod(dev_matrix) - 1) holds."""
    dev_matrix = [int(d) for d in dev_matrix]
    if len(tensor_map) != len(shape):
        raise ValueError(f"tensor_map {list(tensor_map)} has {len(tensor_map)} entries for a tensor of shape "
                         f"{tuple(shape)}")
    m = len(dev_matrix)
    out = []
    for rank in range(int(np.prod(dev_matrix)) if dev_matrix else 1):
        coords = np.unravel_index(rank, dev_matrix) if dev_matrix else ()
        index = []
        for dim, (entry, size) in enumerate(zip(tensor_map, shape)):
            entries = [] if entry == -1 else (list(entry) if isinstance(entry, (list, tuple)) else [entry])
            split, coord = 1, 0
            for t in entries:
                if not 0 <= t < m:
                    raise ValueError(f"tensor_map entry {entry} of dimension {dim} is outside device matrix "
                                     f"{dev_matrix}")
                d = m - 1 - t
                split, coord = split * dev_matrix[d], coord * dev_matrix[d] + int(coords[d])
            if size % split:
                raise ValueError(f"dimension {dim} of size {size} cannot be split {split} ways (dev_matrix "
                                 f"{dev_matrix}, tensor_map {list(tensor_map)})")
            step = size // split
            index.append(slice(coord * step, (coord + 1) * step))
        out.append(tuple(index))
    return out


def slices_to_json(index: Sequence[slice], shape: Sequence[int]) -> list[list[int]]:
    return [[s.start or 0, size if s.stop is None else s.stop] for s, size in zip(index, shape)]


def slices_from_json(rows: Sequence[Sequence[int]]) -> tuple[slice, ...]:
    return tuple(slice(int(a), int(b)) for a, b in rows)
