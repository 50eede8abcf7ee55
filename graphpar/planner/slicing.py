"""MindSpore's ``StridedSlice`` arguments as one numpy index, shared by the op (which applies it) and its sharding
rule (which reads which input dimension lands on which output dimension).

TensorFlow's semantics, which MindSpore follows: position ``i`` of ``begin``/``end``/``strides`` is an ellipsis
(``ellipsis_mask`` bit ``i``: the dimensions not otherwise indexed, only the first one counts), a new axis of size 1
(``new_axis_mask``; it wins over ``shrink_axis_mask`` on the same bit), one index that drops its dimension
(``shrink_axis_mask``), or a slice whose start/stop ``begin_mask``/``end_mask`` leave open. Bits past
``len(begin)`` are ignored; dimensions after the last position are taken whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def strided_index(begin: Sequence[int], end: Sequence[int], strides: Sequence[int], begin_mask: int = 0,
                  end_mask: int = 0, ellipsis_mask: int = 0, new_axis_mask: int = 0,
                  shrink_axis_mask: int = 0) -> tuple[Any, ...]:
    index: list[Any] = []
    seen_ellipsis = False
    for i, b in enumerate(begin):
        bit = 1 << i
        if ellipsis_mask & bit:
            if not seen_ellipsis:
                index.append(Ellipsis)
                seen_ellipsis = True
        elif new_axis_mask & bit:
            index.append(None)
        elif shrink_axis_mask & bit:
            index.append(int(b))
        else:
            index.append(slice(None if begin_mask & bit else int(b), None if end_mask & bit else int(end[i]),
                               int(strides[i])))
    return tuple(index)


def dim_map(index: tuple[Any, ...], rank: int) -> list[tuple[int | None, int | None]]:
    """(input dim, output dim) pairs the index makes: (i, None) for a dropped dim, (None, o) for a new axis."""
    consuming = sum(1 for it in index if it is not None and it is not Ellipsis)
    pairs: list[tuple[int | None, int | None]] = []
    d = o = 0
    items = list(index) + ([] if Ellipsis in index else [Ellipsis])
    for it in items:
        if it is Ellipsis:
            for _ in range(rank - consuming):
                pairs.append((d, o))
                d, o = d + 1, o + 1
        elif it is None:
            pairs.append((None, o))
            o += 1
        elif isinstance(it, int):
            pairs.append((d, None))
            d += 1
        else:
            pairs.append((d, o))
            d, o = d + 1, o + 1
    return pairs
