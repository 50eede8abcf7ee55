"""MindSpore's ``step_auto_parallel_begin_{NNNN}.ir``: the graph AUTO_PARALLEL's strategy search starts from.

With ``save_graphs`` MindSpore dumps the graph when its ``step_auto_parallel`` pass begins, before any strategy is
searched, in AUTO_PARALLEL only: every op as parsed, with the primitive attributes its ``shard()`` set
(``in_strategy``/``out_strategy``, or ``in_layout``/``out_layout`` for ``Layout`` objects), named after the
``construct`` variable its result is assigned to (``%7(out1) = PrimFunc_MatMul(...)``; ``ir.debug_names``). Its
unit tests grep it (``grep '(out1) = PrimFunc_MatMul' ./ir/<case>/rank_0/step_auto_parallel_begin_*``).
graphpar writes it beside ``step_parallel_begin_{NNNN}.ir`` (same directory and ``NNNN``) whenever it writes that
dump for an AUTO_PARALLEL graph. It is MindSpore's form only, nothing graphpar's readers (``graphpar ir``) read:
the plan is in ``step_parallel_begin``. A node no variable names is ``CNode_{id}``, as MindSpore numbers it; an op
that MindSpore generates from its op definitions (:data:`PRIM_FUNC_KINDS`) prints as ``PrimFunc_{Kind}``, as
MindSpore's ``Primitive::ToString`` does, any other by its kind.
"""

from __future__ import annotations

import os
from pathlib import Path

from graphpar._context import ParallelMode
from graphpar.dump.format import attrs_text, primitive_attrs, tensor_type, value_ref
from graphpar.ir.graph import Graph, Node

KIND = "step_auto_parallel_begin"

# The graphpar ops MindSpore defines in mindspore/ops/op_def/yaml (its PrimitiveFunctions; its IR prints them with
# the PrimFunc_ prefix). Generated from that directory's class names, intersected with graphpar's primitives.
PRIM_FUNC_KINDS = frozenset({
    "Abs", "Add", "AddExt", "AddN", "AddcmulExt", "ArgMaxWithValue", "ArgMinWithValue", "Argmax", "Argmin",
    "Atan2", "AvgPool", "BatchMatMul", "BatchNorm", "BiasAdd", "BroadcastTo", "Cast", "Cdist", "Ceil",
    "Cholesky", "Concat", "Cos", "CumProd", "CumSum", "Cummax", "Cummin", "DCT", "DCTN", "Div", "Dropout",
    "Elu", "Equal", "Erf", "Exp", "ExpandDims", "Eye", "FFT", "FFT2", "FFTN", "FFTShift", "FastGeLU",
    "FlashAttentionScore", "Flatten", "Floor", "FloorDiv", "FloorMod", "FusedInferAttentionScore", "Gather",
    "GatherD", "GatherNd", "GeLU", "Greater", "GreaterEqual", "GridSampler2D", "HFFT", "HFFT2", "HFFTN",
    "HShrink", "IDCT", "IDCTN", "IFFT", "IFFT2", "IFFTN", "IFFTShift", "IHFFT", "IHFFT2", "IHFFTN", "IRFFT",
    "IRFFT2", "IRFFTN", "Identity", "IncreFlashAttention", "LayerNorm", "Lerp", "Less", "LessEqual", "Log",
    "LogSoftmax", "LogicalAnd", "LogicalNot", "LogicalOr", "LstsqV2", "MaskedFill", "MatMul", "Maximum",
    "Minimum", "Mul", "Neg", "NotEqual", "OneHot", "OnesLike", "PReLU", "Pow", "PromptFlashAttention", "RFFT",
    "RFFT2", "RFFTN", "ReLU", "ReLU6", "RealDiv", "Reciprocal", "ReduceAll", "ReduceAny", "ReduceMax",
    "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum", "Reshape", "ResizeBilinearV2",
    "ResizeNearestNeighbor", "ReverseV2", "RmsNorm", "Rsqrt", "Select", "Shape", "SiLU", "Sigmoid", "Sign",
    "Sin", "Slice", "Softmax", "SolveTriangular", "Split", "SplitTensor", "SplitWithSize", "Sqrt", "Square",
    "Squeeze", "StridedSlice", "Sub", "SubExt", "Tanh", "Tile", "TopkExt", "TraceV2", "Transpose", "Trunc",
    "UnsortedSegmentSum", "Xlogy", "ZerosLike"
})


def _name(node: Node) -> str:
    return f"PrimFunc_{node.kind}" if node.is_op and node.kind in PRIM_FUNC_KINDS else node.kind


def node_line(graph: Graph, node: Node) -> str:
    """One op as MindSpore's begin dump prints it (global shapes, the user's attributes, no searched strategy)."""
    values = graph.values
    out = f"%{node.outputs[0]}" if node.outputs else f"%n{node.id}"
    ins = ", ".join(tensor_type(values[v].dtype, values[v].shape) for v in node.inputs)
    outs = ", ".join(tensor_type(values[v].dtype, values[v].shape) for v in node.outputs)
    args = ", ".join(value_ref(values[v]) for v in node.inputs)
    return (f"{out}({node.debug_name or f'CNode_{node.id}'}) = {_name(node)}({args}) "
            f"{{instance name: {node.instance_name}}} primitive_attrs: {attrs_text(primitive_attrs(node))} : "
            f"({ins}) -> ({outs})  # scope: ({node.scope})")


def text(graph: Graph) -> str:
    values = graph.values
    lines = [f"# MindSpore IR form: {KIND} (graphpar writes its plan in step_parallel_begin)", ""]
    lines += [f"{value_ref(values[v])} : {tensor_type(values[v].dtype, values[v].shape)}" for v in graph.inputs]
    lines.append("")
    lines += [node_line(graph, node) for node in graph.node_list()]
    lines.append("return " + ", ".join(value_ref(values[v]) for v in graph.outputs))
    return "\n".join(lines) + "\n"


def write(graph: Graph, parallel_mode: str, directory: str | os.PathLike, ranks: list[int], index: int) -> list[Path]:
    """Write the dump for ``ranks`` (global shapes: the same text on each) when ``parallel_mode`` is AUTO_PARALLEL,
    as graph ``index`` (the ``NNNN`` of the graph's other dumps)."""
    if parallel_mode != ParallelMode.AUTO_PARALLEL:
        return []
    body = text(graph)
    written = []
    for rank in ranks:
        path = Path(directory) / f"rank_{rank}" / f"{KIND}_{index:04d}.ir"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)
        written.append(path)
    return written
