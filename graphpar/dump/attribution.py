"""Which op a fused gradient reduction's bytes belong to, so that measured bytes per op compare with predicted.

The cost model predicts, per op, the collectives its forward and backward need, the gradient AllReduce of the
Parameters it reads included (``predicted_bytes``). XLA fuses those reductions: one AllReduce carries the gradients
of many Parameters, and the execute dump lists it apart from any op ("gradient reductions", ``parameters: ...``
naming the Parameters whose gradients it carries, in the order of its outputs). Measured per op, such an op shows
its predicted bytes against 0 while the totals agree (``matmul``: 28672 predicted, 0 measured; 24576 of it is the
fused backward AllReduce, 4096 its weight's share of the fused gradient AllReduce).

:func:`gradient_shares` gives each op back its share: a fused reduction's wire bytes are split over its outputs in
proportion to their bytes; output ``k`` belongs to Parameter ``k`` when there are as many outputs as Parameters,
otherwise each Parameter takes its own per-device bytes and the rest stays unattributed; a Parameter's share goes to
the op that reads it (split evenly between several). What stays unattributed is returned under ``None``.
:func:`measured_wire` adds each op's own collectives, with the redistribution of an op's output counted on the op
that reads it, where the cost model predicts it (``relu``: 384 predicted, 0 measured before: the AllGather of
``matmul``'s output that ``relu`` needs).
"""

from __future__ import annotations

import math

from graphpar.dump.model import Dump, TensorType

_DTYPE_BYTES = {"Float64": 8, "Int64": 8, "UInt64": 8, "Float16": 2, "BFloat16": 2, "Int16": 2, "UInt16": 2,
                "Bool": 1, "Int8": 1, "UInt8": 1}


def tensor_bytes(t: TensorType) -> int:
    return math.prod(t.shape) * _DTYPE_BYTES.get(t.dtype, 4)


def gradient_shares(execute: Dump) -> dict[int | None, float]:
    """Wire bytes (what one device sends) of the fused gradient reductions per op id; ``None``: not attributed."""
    inputs = {i.name.lstrip("%").partition("_")[2]: i for i in execute.inputs if i.role == "Parameter"}
    readers: dict[str, list[int]] = {}
    for node in execute.nodes:
        for arg in node.args:
            readers.setdefault(arg, []).append(node.id)
    shares: dict[int | None, float] = {}
    for c in execute.unattributed:
        wire = c.wire_bytes if c.wire_bytes is not None else float(c.bytes)
        if not c.parameters:  # not a gradient reduction (an HLO op the dump could not name): no op takes it
            shares[None] = shares.get(None, 0.0) + wire
            continue
        total = sum(tensor_bytes(t) for t in c.output_types) or c.bytes or 1
        if len(c.output_types) == len(c.parameters):
            sizes = [tensor_bytes(t) for t in c.output_types]
        else:
            sizes = [tensor_bytes(inputs[p].type) if p in inputs else 0 for p in c.parameters]
        left = wire
        for param, size in zip(c.parameters, sizes):
            ops = readers.get(inputs[param].name, []) if param in inputs else []
            if not ops or size <= 0:
                continue
            part = wire * min(size, total) / total
            for op in ops:
                shares[op] = shares.get(op, 0.0) + part / len(ops)
            left -= part
        if left > 1e-6:
            shares[None] = shares.get(None, 0.0) + left
    return shares


def measured_wire(execute: Dump) -> dict[int | None, float]:
    """Measured wire bytes per op id counted as the cost model counts its prediction: the op's own collectives,
    less the redistributions of its outputs, which count on the ops that read them (the cost model predicts a
    redistribution on the edge into its consumer; the execute dump lists it after the producer, as "redistribution
    of output k", split evenly between several readers), plus the op's share of the fused gradient reductions.
    ``None``: what no op takes."""
    readers: dict[str, list[int]] = {}
    for node in execute.nodes:
        for arg in node.args:
            readers.setdefault(arg, []).append(node.id)
    out = dict(gradient_shares(execute))
    for node in execute.nodes:
        for c in node.collectives:
            wire = c.wire_bytes if c.wire_bytes is not None else float(c.bytes)
            to = [node.id]
            if c.cause.startswith("redistribution of output "):
                k = int(c.cause.rsplit(" ", 1)[1])
                to = readers.get(node.outputs[k], [node.id]) if k < len(node.outputs) else [node.id]
            for op in to:
                out[op] = out.get(op, 0.0) + wire / len(to)
    return out
