"""Sharding rules of the indexing ops (``graphpar.ops.index_ops``) and the unsorted segment reductions
(``graphpar.ops.segment_ops``), after MindSpore's ``GatherNdInfo``, ``GatherDInfo``, ``ScatterNdOpsInfo``,
``BroadcastToInfo`` and ``UnsortedSegmentOpInfo``."""

from __future__ import annotations

from graphpar.planner.dims import DimSpec, register, shapes_of


@register("GatherNd")
def _gather_nd(node, graph):
    """MindSpore's GatherNdInfo: the table is never split (any index may read any row) and neither is the index
    tuple (indices' last dimension); the other dimensions of ``indices`` may split, and the output, shaped
    ``indices.shape[:-1] + x.shape[k:]``, follows them. Its batch strategy splits the indices."""
    ins, outs = shapes_of(node, graph)
    x, indices = ins
    lead = tuple(f"q{i}" for i in range(len(indices) - 1))
    out = lead + (None,) * (len(outs[0]) - len(lead))
    return DimSpec(((None,) * len(x), lead + (None,)), (out,), lead, batch=lead[0] if lead else None)


@register("GatherD")
def _gather_d(node, graph):
    """MindSpore's GatherDInfo: ``x`` and ``index`` split alike on every dimension but ``dim``, and the output has
    ``index``'s layout. Along ``dim`` the index stays whole (an index may point anywhere in it) while ``x`` may split
    (MindSpore 2.x: each device gathers the indices that fall in its slice, the others give 0, and the output sums
    them)."""
    ins, _ = shapes_of(node, graph)
    rank = len(ins[0])
    dim = int(node.static_args.get(1, 0)) % rank
    index = tuple(None if i == dim else f"d{i}" for i in range(rank))
    x = tuple("v" if i == dim else f"d{i}" for i in range(rank))
    return DimSpec((x, index), (index,), tuple(l for l in x if l))


@register("TensorScatterUpdate")
def _tensor_scatter_update(node, graph):
    """MindSpore's ScatterNdOpsInfo: the ``k = indices.shape[-1]`` leading dimensions of ``input_x`` (the ones an
    index addresses) and ``indices`` stay whole; the trailing dimensions of ``input_x`` may split, and ``updates``
    (``indices.shape[:-1] + input_x.shape[k:]``) splits its trailing dimensions alike."""
    ins, _ = shapes_of(node, graph)
    x, indices, updates = ins
    k = indices[-1] if indices else 0
    tail = tuple(f"d{i}" for i in range(k, len(x)))
    x_row = (None,) * k + tail
    upd_row = (None,) * (len(updates) - len(tail)) + tail
    return DimSpec((x_row, (None,) * len(indices), upd_row), (x_row,), tail)


@register("BroadcastTo")
def _broadcast_to(node, graph):
    """MindSpore's BroadcastToInfo: an input dimension that keeps its size may split, and the output's matching
    dimension follows; the dimensions the broadcast creates or stretches (size 1 → n) stay whole."""
    ins, outs = shapes_of(node, graph)
    src, dst = ins[0], outs[0]
    offset = len(dst) - len(src)
    labels = tuple(f"d{i + offset}" if size == dst[i + offset] else None for i, size in enumerate(src))
    out = (None,) * offset + labels
    return DimSpec((labels,), (out,), tuple(l for l in labels if l))


@register("UnsortedSegmentSum", "UnsortedSegmentProd", "UnsortedSegmentMin", "UnsortedSegmentMax")
def _unsorted_segment(node, graph):
    """MindSpore's UnsortedSegmentOpInfo: ``segment_ids`` splits as the leading dimensions of ``input_x`` it
    labels; the output's segment dimension stays whole (any row may feed any segment), so a split there leaves
    each device a partial reduction that the output's layout combines (a sum, product, min or max)."""
    ins, outs = shapes_of(node, graph)
    x, ids = ins
    labels = tuple(f"d{i}" for i in range(len(x)))
    out = (None,) + labels[len(ids):]
    return DimSpec((labels, labels[:len(ids)]), (out,), labels)


@register("PadV3")
def _pad_v3(node, graph):
    """MindSpore's PadV3Info: a dimension that is padded (or cropped) stays whole; the others split, and the
    output follows them. ``value`` is a scalar."""
    ins, outs = shapes_of(node, graph)
    labels = tuple(f"d{i}" if a == b else None for i, (a, b) in enumerate(zip(ins[0], outs[0])))
    return DimSpec((labels,) + tuple(() for _ in ins[1:]), (labels,), tuple(l for l in labels if l))


@register("EmbeddingLookup")
def _embedding_lookup(node, graph):
    """A Gather on axis 0 (MindSpore plans EmbeddingLookup with its GatherInfo): a split of the table's rows
    leaves each device the rows it holds (the others give zeros) and the output sums them; the columns and the
    indices split freely."""
    ins, _ = shapes_of(node, graph)
    params, indices = ins
    p_labels = ("v",) + tuple(f"p{i}" for i in range(1, len(params)))
    i_labels = tuple(f"q{i}" for i in range(len(indices)))
    return DimSpec((p_labels, i_labels), (i_labels + p_labels[1:],), i_labels + p_labels,
                   batch=i_labels[0] if i_labels else None)


@register("InplaceAdd", "InplaceSub", "InplaceUpdate")
def _inplace_rows(node, graph):
    """MindSpore's InplaceOpInfo: the indexed (first) dimension stays whole; the others split alike on ``x``, ``v``
    and the output."""
    ins, _ = shapes_of(node, graph)
    labels = (None,) + tuple(f"d{i}" for i in range(1, len(ins[0])))
    return DimSpec((labels, labels), (labels,), labels[1:])
