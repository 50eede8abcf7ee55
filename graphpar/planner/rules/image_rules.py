"""Sharding rule of ``graphpar.ops.image_ops``' ``GridSampler2D``: the batch splits alike on input_x, grid and
output (MindSpore's GridSampler2DInfo asks the two strategies to be equal); the other dims stay whole (a split H or
W would need halo pixels)."""

from __future__ import annotations

from graphpar.planner.dims import DimSpec, register


@register("GridSampler2D")
def _grid_sampler_2d(node, graph):
    return DimSpec((("n", None, None, None), ("n", None, None, None)), (("n", None, None, None),), ("n",))


@register("ROIAlign")
def _roi_align(node, graph):
    """MindSpore's ROIAlignInfo (device matrix ``(features N, C, rois_n)``): features split on N and C, rois on
    rois_n, the output on rois_n and C; a split N leaves partial sums (each device sees its images only); H, W and
    the box coordinates stay whole."""
    return DimSpec((("n", "c", None, None), ("r", None)), (("r", "c", None, None),), ("n", "c", "r"))
