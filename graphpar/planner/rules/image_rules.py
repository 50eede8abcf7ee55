"""Sharding rules of ``graphpar.ops.image_ops``:

* ``CropAndResize``: boxes and box_index split alike on N (the output's dim 0); the image's batch may split (label
  on the image only: each device crops from the images it holds and the crops are summed across devices, as a
  Gather from a split table) and its channels (the output's last dim); the image's H and W stay whole;
* ``GridSampler2D``: the batch splits alike on input_x, grid and output (MindSpore's GridSampler2DInfo asks the two
  strategies to be equal); the other dims stay whole (a split H or W would need halo pixels).
"""

from __future__ import annotations

from graphpar.planner.dims import DimSpec, register


@register("CropAndResize")
def _crop_and_resize(node, graph):
    return DimSpec((("b", None, None, "c"), ("n", None), ("n",)), (("n", None, None, "c"),), ("n", "b", "c"),
                   batch="n")


@register("GridSampler2D")
def _grid_sampler_2d(node, graph):
    return DimSpec((("n", None, None, None), ("n", None, None, None)), (("n", None, None, None),), ("n",))
