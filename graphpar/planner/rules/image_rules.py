"""Sharding rule of ``graphpar.ops.image_ops``' ``GridSampler2D``: the batch splits alike on input_x, grid and
output (MindSpore's GridSampler2DInfo asks the two strategies to be equal); the other dims stay whole (a split H or
W would need halo pixels)."""

from __future__ import annotations

from graphpar.planner.dims import DimSpec, register


@register("GridSampler2D")
def _grid_sampler_2d(node, graph):
    return DimSpec((("n", None, None, None), ("n", None, None, None)), (("n", None, None, None),), ("n",))
