"""Sharding rules of the generated top-k and sized-split primitives (``graphpar.ops.selection_ops``), as
MindSpore's OperatorInfo classes decide them:

* ``TopkExt`` (TopKInfo's rule, "can not support to split last dimension", on its ``dim``): every dim but the
  selected one splits; values and indices keep the input's layout;
* ``SplitWithSize``/``SplitTensor``: the split dim stays whole, every part keeps the input's layout.
"""

from __future__ import annotations

from graphpar.planner.dims import DimSpec, register, shapes_of


def _keep_whole(rank: int, dim: int, n_inputs: int, outs: list) -> DimSpec:
    labels = tuple(None if d == dim else f"d{d}" for d in range(rank))
    rows = tuple(labels if len(out) == rank else (None,) * len(out) for out in outs)
    return DimSpec((labels,) * n_inputs, rows, tuple(l for l in labels if l is not None))


@register("TopkExt")
def _topk_ext(node, graph):
    ins, outs = shapes_of(node, graph)
    rank = len(ins[0])
    dim = node.static_args.get(2)
    return _keep_whole(rank, (-1 if dim is None else dim) % rank, 1, outs)


@register("SplitWithSize", "SplitTensor")
def _split_with_size(node, graph):
    ins, outs = shapes_of(node, graph)
    rank = len(ins[0])
    dim = node.static_args.get(2)
    return _keep_whole(rank, (0 if dim is None else dim) % rank, 1, outs)
