"""Sharding rules of ``graphpar.ops.misc_ops`` and ``graphpar.ops.resize_ops``, after MindSpore's ``CdistInfo``,
``CheckValidInfo``, ``SplitVInfo``, ``TopKInfo``, ``ArgMinWithValueInfo`` and ``ResizeBilinearInfo`` /
``ResizeNearestNeighborInfo``."""

from __future__ import annotations

from graphpar.planner.dims import DimSpec, reduction, register, shapes_of


@register("Cdist")
def _cdist(node, graph):
    """Batch dimensions split alike on both inputs, ``P`` and ``R`` independently; the feature dimension ``M``
    (summed over) stays whole."""
    ins, _ = shapes_of(node, graph)
    batch = tuple(f"b{i}" for i in range(len(ins[0]) - 2))
    x, y = batch + ("p", None), batch + ("r", None)
    return DimSpec((x, y), (batch + ("p", "r"),), batch + ("p", "r"))


@register("CheckValid")
def _check_valid(node, graph):
    """Boxes split by row; a box's four coordinates and the image's meta stay whole."""
    return DimSpec((("n", None), (None,)), (("n",),), ("n",))


@register("SplitV")
def _split_v(node, graph):
    """Every dimension but ``split_dim`` splits; the pieces follow the input."""
    ins, outs = shapes_of(node, graph)
    rank = len(ins[0])
    axis = node.attrs["split_dim"] % rank
    labels = tuple(None if i == axis else f"d{i}" for i in range(rank))
    return DimSpec((labels,), tuple(labels for _ in outs), tuple(l for l in labels if l))


@register("TopK")
def _top_k(node, graph):
    """The selection dimension (the last) stays whole; the others split, and both outputs follow them."""
    ins, _ = shapes_of(node, graph)
    labels = tuple(f"d{i}" for i in range(len(ins[0]) - 1)) + (None,)
    return DimSpec((labels,), (labels, labels), tuple(l for l in labels if l))


@register("ArgMinWithValue")
def _arg_min_with_value(node, graph):
    ins, _ = shapes_of(node, graph)
    spec = reduction(ins[0], [node.attrs.get("axis", 0)], node.attrs.get("keep_dims", False))
    return DimSpec(spec.inputs, spec.outputs * 2, spec.order)


@register("ResizeBilinearV2")
def _resize_bilinear(node, graph):
    """MindSpore's ResizeBilinearInfo: N, C and W split (a W split borrows a neighbour's edge column); H stays
    whole."""
    return DimSpec((("n", "c", None, "w"),), (("n", "c", None, "w"),), ("n", "c", "w"))


@register("ResizeNearestNeighbor")
def _resize_nearest(node, graph):
    """MindSpore's ResizeNearestNeighborInfo: N and C split; H and W split too unless ``align_corners`` (whose
    source rows do not line up with equal output slices)."""
    hw = (None, None) if node.attrs.get("align_corners") else ("h", "w")
    row = ("n", "c") + hw
    return DimSpec((row,), (row,), tuple(l for l in row if l))


@register("CropAndResize")
def _crop_and_resize(node, graph):
    """MindSpore's CropAndResizeInfo: the images split by batch (each device crops the boxes whose image it holds,
    the others contribute zeros to a sum) and channel; height and width stay whole; boxes and box_index split
    alike by box, and the output follows the boxes and the channels."""
    return DimSpec((("n", None, None, "c"), ("b", None), ("b",)), (("b", None, None, "c"),), ("b", "n", "c"))


@register("IOU")
def _iou(node, graph):
    """MindSpore's IOUInfo: anchors and ground-truth boxes split by box, their coordinates stay whole; the (M, N)
    output follows both."""
    return DimSpec((("n", None), ("m", None)), (("m", "n"),), ("n", "m"))
