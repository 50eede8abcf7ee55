"""Redistribution cost: the bytes each device receives to turn one layout of a tensor into another.

MindSpore's propagation chooses, edge by edge, the strategy whose tensor redistribution sends the fewest bytes per
device. Here a layout is a canonical spec (per tensor dimension, the mesh axes splitting it, major first). For a
device with given mesh coordinates, the block it holds under the source layout and the block it needs under the
target layout are products of per-dimension intervals; the cost is the part of the needed block it does not hold,
averaged over devices. Slicing a replicated dimension is free; an all-gather, all-to-all or shift costs what it
moves. Results are cached per (source, target, mesh), since a plan asks for the same pairs many times.
"""

from __future__ import annotations

import itertools
from functools import lru_cache
from math import gcd

import numpy as np

from graphpar.parallel.strategy import MeshInfo, Spec


def _block(coords: dict[str, int], axes: tuple[str, ...], sizes: dict[str, int], grid: int) -> tuple[int, int]:
    """The [start, stop) cells of a dimension cut into ``grid`` cells held by a device split over ``axes``."""
    index, count = 0, 1
    for a in axes:
        index = index * sizes[a] + coords[a]
        count *= sizes[a]
    width = grid // count
    return index * width, (index + 1) * width


@lru_cache(maxsize=65536)
def local_fraction(src: Spec, dst: Spec, mesh: MeshInfo) -> float:
    """Average fraction of the target block that a device already holds under the source layout."""
    if src == dst:
        return 1.0
    sizes = dict(zip(mesh.names, mesh.sizes))
    used = sorted({a for spec in (src, dst) for axes in spec for a in axes})
    total = 0.0
    combos = list(itertools.product(*[range(sizes[a]) for a in used])) if used else [()]
    for values in combos:
        coords = dict(zip(used, values))
        frac = 1.0
        for a_axes, b_axes in zip(src, dst):
            na, nb = mesh.size(a_axes), mesh.size(b_axes)
            grid = na * nb // gcd(na, nb)
            a0, a1 = _block(coords, a_axes, sizes, grid)
            b0, b1 = _block(coords, b_axes, sizes, grid)
            frac *= max(0, min(a1, b1) - max(a0, b0)) / (b1 - b0)
            if frac == 0.0:
                break
        total += frac
    return total / len(combos)


def redistribution_bytes(src: Spec, dst: Spec, shape: tuple[int, ...], itemsize: int, mesh: MeshInfo) -> float:
    """Bytes each device receives (on average) to go from layout ``src`` to ``dst``."""
    if src == dst or not shape:
        return 0.0
    block = float(np.prod(shape, dtype=np.float64)) * itemsize / mesh.size(
        tuple(a for axes in dst for a in axes))
    return (1.0 - local_fraction(src, dst, mesh)) * block


def replicated_spec(rank: int) -> Spec:
    return tuple(() for _ in range(rank))
