"""``Layout``: MindSpore 2.x's explicit tensor layouts (``mindspore.Layout`` / ``mindspore.parallel.Layout``).

A layout names the axes of a *device matrix* (``Layout((2, 2, 2), ("dp", "sp", "mp"))``: ranks fill it row-major)
and, once called, maps each tensor dimension onto them: ``layout("dp", "mp")`` splits dimension 0 over ``dp`` and
dimension 1 over ``mp`` (``sp`` repeats the tensor); an entry may be a tuple of aliases (``("dp", "sp")``: the
dimension split over both, ``dp`` major) or ``"None"`` (not split). Where a strategy tuple only says how many
pieces each dimension is cut into, a layout also says *which* device-matrix axes cut it, so the planner places it
exactly (``planner.layout_hint``) instead of on consecutive axes in the op's own order.

The alias ``"interleaved_parallel"`` (last in ``alias_name``) is MindSpore's virtual split: its device-matrix
dimension is not a set of devices but a number of pieces each device computes the op in, one after another. It is
not counted among the devices; ``planner.layout_hint`` says what graphpar does with it.

Construction and call errors follow MindSpore's types (``TypeError`` for a wrong type, a ``LayoutError``, which is
a ``ValueError``, for a wrong value), each naming the layout and what would be valid.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from graphpar.errors import LayoutError

INTERLEAVED = "interleaved_parallel"
NONE = "None"

Entry = tuple[str, ...]  # the aliases splitting one tensor dimension, major first; () = not split


class Layout:
    """A device matrix with an alias per axis, and (after a call) one entry per tensor dimension.

    ``Layout(device_matrix, alias_name, rank_list=None)`` as MindSpore 2.6 defines it. ``rank_list`` says which
    rank sits at each position of the device matrix; graphpar's mesh lists the devices in rank order, so only the
    identity order (``None`` or ``[0, 1, ..., n - 1]``) is accepted and any other is refused by name.
    """

    __slots__ = ("_device_matrix", "_alias_name", "_rank_list", "_entries")

    def __init__(self, device_matrix: tuple[int, ...], alias_name: tuple[str, ...],
                 rank_list: Sequence[int] | None = None):
        if not isinstance(device_matrix, tuple):
            raise TypeError(f"Layout: device_matrix must be a tuple of ints, got {type(device_matrix).__name__} "
                            f"{device_matrix!r}; e.g. Layout((2, 4), ('dp', 'mp'))")
        if not isinstance(alias_name, tuple):
            raise TypeError(f"Layout: alias_name must be a tuple of str, got {type(alias_name).__name__} "
                            f"{alias_name!r}; e.g. Layout((2, 4), ('dp', 'mp'))")
        for d in device_matrix:
            if isinstance(d, bool) or not isinstance(d, int):
                raise TypeError(f"Layout: every element of device_matrix {device_matrix} must be an int, got "
                                f"{type(d).__name__} {d!r}")
        for a in alias_name:
            if not isinstance(a, str):
                raise TypeError(f"Layout: every element of alias_name {alias_name} must be a str, got "
                                f"{type(a).__name__} {a!r}")
        if len(device_matrix) != len(alias_name):
            raise LayoutError(device_matrix, alias_name, f"device_matrix has {len(device_matrix)} axes but "
                              f"alias_name has {len(alias_name)} names", "Give one alias per device-matrix axis")
        if any(d <= 0 for d in device_matrix):
            raise LayoutError(device_matrix, alias_name, "every device-matrix axis must be a positive int")
        if any(not a for a in alias_name):
            raise LayoutError(device_matrix, alias_name, "an alias is the empty string", "Name every axis")
        if NONE in alias_name:
            raise LayoutError(device_matrix, alias_name, "'None' cannot be an alias: it means 'not split' in a "
                              "tensor map", "Choose another name")
        if len(set(alias_name)) != len(alias_name):
            raise LayoutError(device_matrix, alias_name, "an alias appears twice", "Name every axis differently")
        if INTERLEAVED in alias_name and alias_name[-1] != INTERLEAVED:
            raise LayoutError(device_matrix, alias_name, f"'{INTERLEAVED}' must be the last alias (the virtual "
                              "split inside each device)", f"Move '{INTERLEAVED}' to the end of alias_name")
        devices = math.prod(d for d, a in zip(device_matrix, alias_name) if a != INTERLEAVED)
        if rank_list is not None:
            if not isinstance(rank_list, list):
                raise TypeError(f"Layout: rank_list must be a list of ints, got {type(rank_list).__name__}")
            if any(isinstance(r, bool) or not isinstance(r, int) for r in rank_list):
                raise TypeError(f"Layout: every element of rank_list {rank_list} must be an int")
            if list(rank_list) != list(range(devices)):
                raise LayoutError(device_matrix, alias_name, f"rank_list {rank_list} places the ranks in another "
                                  "order than graphpar's device mesh (ranks fill the device matrix in rank order)",
                                  f"Drop rank_list, or pass list(range({devices}))")
        self._device_matrix = device_matrix
        self._alias_name = alias_name
        self._rank_list = list(range(devices))
        self._entries: tuple[Entry, ...] | None = None

    # --- MindSpore surface -------------------------------------------------------------------------------------
    def __call__(self, *tensor_map: Any) -> Layout:
        """This layout with one entry per tensor dimension: an alias, a tuple of aliases, or ``"None"``."""
        entries: list[Entry] = []
        used: set[str] = set()
        for entry in tensor_map:
            names = entry if isinstance(entry, tuple) else (entry,)
            kept = []
            for name in names:
                if name == NONE:
                    continue
                if not isinstance(name, str) or name not in self._alias_name:
                    raise LayoutError(self._device_matrix, self._alias_name, f"the tensor map {tensor_map} names "
                                      f"{name!r}, which is not an alias", f"Use one of {self._alias_name} or 'None'")
                if name in used:
                    raise LayoutError(self._device_matrix, self._alias_name, f"the tensor map {tensor_map} uses "
                                      f"the alias {name!r} twice; a device-matrix axis can split one dimension of "
                                      "a tensor only", "Use each alias at most once per tensor")
                used.add(name)
                kept.append(name)
            entries.append(tuple(kept))
        out = Layout.__new__(Layout)
        out._device_matrix, out._alias_name, out._rank_list = self._device_matrix, self._alias_name, self._rank_list
        out._entries = tuple(entries)
        return out

    def to_dict(self) -> dict[str, Any]:
        """MindSpore's dictionary: ``device_matrix``, ``tensor_map`` (device-matrix axes counted from the right, -1
        for an unsplit dimension, a tuple for a dimension split over several axes), ``interleaved_parallel``,
        ``alias_name`` and ``rank_list``."""
        if self._entries is None:
            raise LayoutError(self._device_matrix, self._alias_name, "the layout has no tensor map yet",
                              "Call it with one entry per tensor dimension first, e.g. layout('dp', 'None')")
        return {"device_matrix": self._device_matrix, "tensor_map": self.tensor_map,
                "interleaved_parallel": self.interleaved, "alias_name": self._alias_name,
                "rank_list": list(self._rank_list)}

    # --- what graphpar reads -----------------------------------------------------------------------------------
    @property
    def device_matrix(self) -> tuple[int, ...]:
        return self._device_matrix

    @property
    def alias_name(self) -> tuple[str, ...]:
        return self._alias_name

    @property
    def rank_list(self) -> list[int]:
        return list(self._rank_list)

    @property
    def entries(self) -> tuple[Entry, ...] | None:
        """Per tensor dimension, the aliases splitting it (major first); None before the layout is called."""
        return self._entries

    @property
    def interleaved(self) -> bool:
        return INTERLEAVED in self._alias_name

    @property
    def tensor_map(self) -> tuple | None:
        if self._entries is None:
            return None
        index = {a: len(self._alias_name) - 1 - i for i, a in enumerate(self._alias_name)}
        return tuple(-1 if not e else index[e[0]] if len(e) == 1 else tuple(index[a] for a in e)
                     for e in self._entries)

    def size(self, alias: str) -> int:
        return self._device_matrix[self._alias_name.index(alias)]

    def real_axes(self) -> tuple[tuple[str, int], ...]:
        """The device-matrix axes that are devices (``interleaved_parallel`` left out), in order."""
        return tuple((a, d) for a, d in zip(self._alias_name, self._device_matrix) if a != INTERLEAVED)

    def same_matrix(self, other: Layout) -> bool:
        return self._device_matrix == other._device_matrix and self._alias_name == other._alias_name

    def _key(self) -> tuple:
        return (self._device_matrix, self._alias_name, self._entries)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Layout) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        """MindSpore's printing in its IR dumps: ``{'device_matrix': (2, 2, 2), 'tensor_map': (2, 0),
        'interleaved_parallel': false, 'alias_name': (dp, sp, mp)}``."""
        def tup(items):
            return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"

        tensor_map = self.tensor_map
        tm = "None" if tensor_map is None else tup([str(e) if isinstance(e, int) else tup([str(i) for i in e])
                                                      for e in tensor_map])
        return (f"{{'device_matrix': {tup([str(d) for d in self._device_matrix])}, 'tensor_map': {tm}, "
                f"'interleaved_parallel': {'true' if self.interleaved else 'false'}, "
                f"'alias_name': {tup(list(self._alias_name))}}}")


def is_layout_strategy(strategy: Any) -> bool:
    """A ``shard()`` strategy written with layouts: a non-empty tuple whose entries are all :class:`Layout`."""
    return isinstance(strategy, tuple) and bool(strategy) and all(isinstance(e, Layout) for e in strategy)


def from_tensor_map(device_matrix: Sequence[int], alias_name: Sequence[str], tensor_map: Sequence[Any]) -> Layout:
    """The layout MindSpore's ``dev_matrix`` + ``tensor_map`` describe (a strategy file's form), with ``alias_name``
    naming the device-matrix axes."""
    base = Layout(tuple(int(d) for d in device_matrix), tuple(alias_name))
    n = len(alias_name)

    def alias(t: int) -> str:
        return NONE if t == -1 else alias_name[n - 1 - int(t)]

    return base(*[tuple(alias(t) for t in e) if isinstance(e, (list, tuple)) else alias(e) for e in tensor_map])
