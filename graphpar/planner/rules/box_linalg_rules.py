"""Sharding rules of BoundingBoxEncode (``graphpar.ops.detection_ops``) and the batched linear-algebra ones
(``graphpar.ops.linalg_ops``), as MindSpore's OperatorInfo classes decide them:

* ``BoundingBoxEncode``: both inputs ``(n, -)`` split alike, the output ``(n, -)``;
* ``TraceV2``: ``axis1``/``axis2`` whole, the other dims split and carry to the output;
* ``SolveTriangular``, ``LstsqV2``: the matrix dims whole, the batch dims split alike on both inputs and the
  outputs.
"""

from __future__ import annotations

from graphpar.planner.dims import DimSpec, register, shapes_of


@register("BoundingBoxEncode")
def _bounding_box_encode(node, graph):
    return DimSpec((("n", None), ("n", None)), (("n", None),), ("n",))


@register("TraceV2")
def _trace_v2(node, graph):
    ins, _ = shapes_of(node, graph)
    rank = len(ins[0])
    axis1, axis2 = node.static_args.get(2), node.static_args.get(3)
    whole = {(1 if axis1 is None else axis1) % rank, (0 if axis2 is None else axis2) % rank}
    labels = tuple(None if d in whole else f"d{d}" for d in range(rank))
    kept = tuple(l for l in labels if l is not None)
    return DimSpec((labels,), (kept,), kept)


@register("SolveTriangular")
def _solve_triangular(node, graph):
    ins, outs = shapes_of(node, graph)
    a_rank, b_rank = len(ins[0]), len(ins[1])
    b_matrix = 1 if b_rank == a_rank - 1 else 2
    batch = tuple(f"b{i}" for i in range(a_rank - 2))
    b_row = batch[len(batch) - (b_rank - b_matrix):] + (None,) * b_matrix
    return DimSpec((batch + (None, None), b_row), (b_row,), batch)


@register("LstsqV2")
def _lstsq_v2(node, graph):
    ins, outs = shapes_of(node, graph)
    batch = tuple(f"b{i}" for i in range(len(ins[0]) - 2))
    b_matrix = 1 if len(ins[1]) == len(ins[0]) - 1 else 2
    b_row = batch + (None,) * b_matrix
    # every output leads with the batch dims, but the empty (0,) ones a driver does not compute
    rows = tuple(batch + (None,) * (len(out) - len(batch)) if tuple(out[:len(batch)]) == tuple(ins[0][:len(batch)])
                 and len(out) >= len(batch) else (None,) * len(out) for out in outs)
    return DimSpec((batch + (None, None), b_row), rows, batch)
