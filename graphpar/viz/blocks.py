"""Which device holds which block of a tensor, computed from its layout and the mesh (no arrays needed).

A layout gives, per tensor dimension, the mesh axes that split it (major axis first, as the dumps print
``(m0, m1.m2)``). Ranks fill the mesh row-major, so rank ``r``'s coordinate on each axis, combined major-first over
a dimension's axes, is the index of the block it holds along that dimension. This is exactly how a
``NamedSharding`` over ``Mesh(devices.reshape(sizes), names)`` with ``PartitionSpec(('m1', 'm2'), ...)`` places
shards (tests compare with ``addressable_shards``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

Layout = Sequence[Sequence[str]]


class LayoutError(ValueError):
    """A layout that does not fit its tensor or mesh: names the ``layout`` and the reason."""

    def __init__(self, layout: Layout, shape: Sequence[int], reason: str):
        self.layout, self.shape, self.reason = layout, tuple(shape), reason
        super().__init__(f"layout {_text(layout)} of a tensor of shape {tuple(shape)}: {reason}")


def _text(layout: Layout) -> str:
    return "(" + ", ".join(".".join(a) if a else "-" for a in layout) + ")"


def mesh_coords(rank: int, mesh: Mapping[str, int]) -> dict[str, int]:
    """Rank ``rank``'s coordinate on every mesh axis (row-major: the last axis varies fastest)."""
    coords = {}
    for name in reversed(list(mesh)):
        coords[name] = rank % mesh[name]
        rank //= mesh[name]
    return coords


def splits(layout: Layout, mesh: Mapping[str, int]) -> tuple[int, ...]:
    """How many ways each dimension is split."""
    return tuple(math.prod(mesh[a] for a in axes) for axes in layout)


def _check(shape: Sequence[int], layout: Layout, mesh: Mapping[str, int]) -> None:
    if len(layout) != len(shape):
        raise LayoutError(layout, shape, f"{len(layout)} entries for {len(shape)} dimensions")
    used = [a for axes in layout for a in axes]
    unknown = [a for a in used if a not in mesh]
    if unknown:
        raise LayoutError(layout, shape, f"axis {unknown[0]!r} is not in the mesh {dict(mesh)}")
    if len(set(used)) != len(used):
        raise LayoutError(layout, shape, "a mesh axis splits two dimensions")
    for size, ways in zip(shape, splits(layout, mesh)):
        if size % ways:
            raise LayoutError(layout, shape, f"dimension of size {size} cannot be split {ways} ways")


def block_of(rank: int, layout: Layout, mesh: Mapping[str, int]) -> tuple[int, ...]:
    """The block index (per dimension) that ``rank`` holds."""
    coords = mesh_coords(rank, mesh)
    out = []
    for axes in layout:
        index = 0
        for a in axes:
            index = index * mesh[a] + coords[a]
        out.append(index)
    return tuple(out)


def device_blocks(shape: Sequence[int], layout: Layout, mesh: Mapping[str, int]) -> dict[int, tuple[slice, ...]]:
    """For every rank, the slice of the global tensor it holds (``start:stop`` per dimension)."""
    _check(shape, layout, mesh)
    ways = splits(layout, mesh)
    n = math.prod(mesh.values()) if mesh else 1
    out = {}
    for rank in range(n):
        block = block_of(rank, layout, mesh)
        out[rank] = tuple(slice(b * (size // w), (b + 1) * (size // w)) for b, size, w in zip(block, shape, ways))
    return out


def block_holders(shape: Sequence[int], layout: Layout, mesh: Mapping[str, int]) -> dict[tuple[int, ...], list[int]]:
    """Every block index (row-major order) and the ranks holding a copy of it."""
    _check(shape, layout, mesh)
    ways = splits(layout, mesh)
    holders: dict[tuple[int, ...], list[int]] = {}
    for index in _all_indices(ways):
        holders[index] = []
    n = math.prod(mesh.values()) if mesh else 1
    for rank in range(n):
        holders[block_of(rank, layout, mesh)].append(rank)
    return holders


def _all_indices(ways: Sequence[int]) -> list[tuple[int, ...]]:
    out: list[tuple[int, ...]] = [()]
    for w in ways:
        out = [i + (k,) for i in out for k in range(w)]
    return out
