"""Sharding rules of ``graphpar.ops.scatter_ops`` (MindSpore's ScatterUpdateInfo, ScatterMathOpsInfo and
ScatterNdOpsInfo): the indices stay whole; ``input_x``'s dims past the K indexed ones (K = 1 for the Scatter* ops,
``indices.shape[-1]`` for the ScatterNd* ones) split alike with the matching trailing dims of ``updates``;
ScatterUpdate keeps dim 0 whole, the others may split the indexed dims (an update lands on the device holding its
row); the output is laid out as ``input_x``."""

from __future__ import annotations

from graphpar.planner.dims import DimSpec, register, shapes_of


@register("ScatterUpdate", "ScatterAdd", "ScatterSub", "ScatterMul", "ScatterDiv", "ScatterMin", "ScatterMax",
          "ScatterNdUpdate", "ScatterNdAdd", "ScatterNdSub")
def _scatter(node, graph):
    ins, _ = shapes_of(node, graph)
    x, indices, updates = ins
    depth = indices[-1] if node.kind.startswith("ScatterNd") and indices else 1
    indexed = tuple(None if node.kind == "ScatterUpdate" else f"i{d}" for d in range(depth))
    trailing = tuple(f"d{d}" for d in range(depth, len(x)))
    x_row = indexed + trailing
    u_row = (None,) * (len(updates) - len(trailing)) + trailing
    return DimSpec((x_row, (None,) * len(indices), u_row), (x_row,), tuple(l for l in x_row if l is not None))
