"""A Gather whose table is split along its gather axis, as MindSpore's parallel graph shows it.

Each rank holds rows ``[bias, bias + slice)`` of the table's ``axis``; an index outside them must contribute
zeros, and the ranks' partial results are summed. MindSpore writes that as the sub-graph its ``ShardAxisImpl``
replaces the Gather by (gather_info.cc): ``Sub(indices, bias)``, ``ReLU``, ``Minimum(.., slice - 1)`` (the index
clamped into the local rows), ``Equal(sub, minimum)`` (the mask of the indices this rank holds), the local
``Gather`` at the clamped indices, ``DType`` / ``DtypeToEnum`` / ``Cast`` of the mask to the table's dtype,
``ExpandDims(mask, axis - 1)`` (not for a 1-D table) and ``Mul`` of the gathered rows by the mask, followed by the
reduction over the splitting ranks. XLA's SPMD partitioner compiles graphpar's plan of such a Gather the same way
(clamped local gather, select by the in-range mask, all-reduce), so the dump shows the sub-graph with this rank's
``bias``; the reduction itself is added by the caller, from the strategy's partial axes, as for any partial op.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from graphpar.ir.graph import MeshInfo, Spec


def split_axis_gather(add: Callable[..., str], kind: str, call: list[Any], attrs: Any, table_shape: Sequence[int],
                      table_spec: Spec, mesh: MeshInfo, rank: int) -> str | None:
    """Append the masked gather of rank ``rank`` through ``add`` (the builder's ``add(kind, inputs, attrs)``) and
    return the ``Mul`` that the reduction reads; None when the table's ``axis`` is whole (a plain Gather).
    ``kind`` / ``call`` / ``attrs``: the Gather's primitive, call inputs (table, indices, axis ...) and attributes."""
    axis = int(call[2]) % len(table_shape) if len(call) > 2 else 0
    axes = table_spec[axis] if axis < len(table_spec) else ()
    if not axes:
        return None
    coords = dict(zip(mesh.names, np.unravel_index(rank, mesh.sizes)))
    index, parts = 0, 1
    for a in axes:
        index = index * mesh.size((a,)) + int(coords[a])
        parts *= mesh.size((a,))
    size = table_shape[axis] // parts
    sub = add("Sub", [call[1], index * size])
    minimum = add("Minimum", [add("ReLU", [sub]), size - 1])
    equal = add("Equal", [sub, minimum])
    gathered = add(kind, [call[0], minimum, *call[2:]], attrs)
    dtype = add("DtypeToEnum", ["DtypeToEnum", "dtype", add("DType", [gathered])])
    mask = add("Cast", [equal, dtype])
    if len(table_shape) > 1:
        mask = add("ExpandDims", [mask, axis - 1])
    return add("Mul", [gathered, mask])
