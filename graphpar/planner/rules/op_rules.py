"""Sharding rules of graphpar ops, keyed by MindSpore primitive name.

Each rule returns the labelled dimensions of the op's tensor inputs and outputs (``graphpar.planner.dims``); the
device-matrix order follows MindSpore's ``OperatorInfo`` (MatMul ``[i, k, j]``, elementwise = the output's dims).
"""

from __future__ import annotations

from graphpar.planner.dims import DimSpec, elementwise, reduction, register, reshape, shapes_of
from graphpar.planner.slicing import dim_map, strided_index

_UNARY = ("ReLU", "ReLU6", "GeLU", "FastGeLU", "SiLU", "Exp", "Log", "Sqrt", "Rsqrt", "Square", "Neg", "Abs",
          "Sign", "Floor", "Ceil", "Reciprocal", "Sin", "Cos", "Tanh", "Erf", "Sigmoid", "ZerosLike", "OnesLike",
          "Identity", "StopGradient", "LogicalNot", "Cast")
_BINARY = ("Add", "Sub", "Mul", "RealDiv", "Div", "FloorDiv", "FloorMod", "Maximum", "Minimum", "Pow",
           "SquaredDifference", "Equal", "NotEqual", "Greater", "GreaterEqual", "Less", "LessEqual", "LogicalAnd",
           "LogicalOr", "Select", "AddN", "Mod", "TruncateDiv", "TruncateMod", "Xlogy", "Xdivy", "MulNoNan",
           "DivNoNan", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "Atan2", "MaskedFill", "AddExt", "SubExt",
           "AddcmulExt")


ELEMENTWISE = frozenset(_UNARY + _BINARY)  # what set_algo_parameters(elementwise_op_strategy_follow) calls elementwise


@register(*_UNARY, *_BINARY)
def _elementwise(node, graph):
    ins, outs = shapes_of(node, graph)
    return elementwise(ins, outs)


@register("Depend")
def _depend(node, graph):
    """``Depend(value, expr)``: ``value`` handed on; ``expr`` only orders the program, no dim of it is read (its
    layout is the one it arrives in: ``graphpar.planner.follow``). The trace may hand ``value`` on itself, leaving
    the node without outputs."""
    ins, outs = shapes_of(node, graph)
    row = tuple(f"d{i}" for i in range(len(ins[0])))
    rest = tuple(tuple(None for _ in s) for s in ins[1:])
    out_rows = tuple(row if tuple(o) == tuple(ins[0]) else tuple(None for _ in o) for o in outs)
    return DimSpec((row,) + rest, out_rows, row)


@register("Dropout")
def _dropout(node, graph):
    ins, outs = shapes_of(node, graph)
    spec = elementwise(ins[:1], outs)
    return DimSpec(spec.inputs + (tuple(None for _ in ins[1]),), spec.outputs, spec.order)


@register("BiasAdd")
def _bias_add(node, graph):
    ins, outs = shapes_of(node, graph)
    x = ins[0]
    labels = tuple(f"d{i}" for i in range(len(x)))
    channel = len(x) - 1 if node.attrs.get("data_format") == "NHWC" or len(x) <= 2 else 1
    return DimSpec((labels, (labels[channel],)), (labels,), labels)


@register("MatMul")
def _matmul(node, graph):
    ta, tb = node.attrs.get("transpose_a", False), node.attrs.get("transpose_b", False)
    x = ("k", "i") if ta else ("i", "k")
    w = ("j", "k") if tb else ("k", "j")
    return DimSpec((x, w), (("i", "j"),), ("i", "k", "j"))


@register("BatchMatMul")
def _batch_matmul(node, graph):
    ins, outs = shapes_of(node, graph)
    out = outs[0]
    nb = len(out) - 2
    batch = tuple(f"b{i}" for i in range(nb))
    ta, tb = node.attrs.get("transpose_a", False), node.attrs.get("transpose_b", False)

    def row(shape, last2):
        off = nb - (len(shape) - 2)
        lead = tuple(batch[j + off] if shape[j] == out[j + off] else None for j in range(len(shape) - 2))
        return lead + last2

    x = row(ins[0], ("k", "i") if ta else ("i", "k"))
    w = row(ins[1], ("j", "k") if tb else ("k", "j"))
    return DimSpec((x, w), (batch + ("i", "j"),), batch + ("i", "k", "j"))


@register("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceAll", "ReduceAny")
def _reduce(node, graph):
    ins, _ = shapes_of(node, graph)
    axis = node.static_args.get(1, ())
    rank = len(ins[0])
    axes = range(rank) if axis in ((), [], None) else ((axis,) if isinstance(axis, int) else tuple(axis))
    return reduction(ins[0], list(axes), node.attrs.get("keep_dims", False))


@register("Softmax", "LogSoftmax", "L2Normalize", "CumSum")
def _softmax(node, graph):
    ins, outs = shapes_of(node, graph)
    axis = node.attrs.get("axis", node.static_args.get(1, -1))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    return elementwise(ins[:1], outs, fixed_axes=axes)


@register("Argmax", "Argmin")
def _argmax(node, graph):
    ins, _ = shapes_of(node, graph)
    return reduction(ins[0], [node.attrs.get("axis", -1)], False)


@register("ArgMaxWithValue")
def _argmax_with_value(node, graph):
    ins, _ = shapes_of(node, graph)
    spec = reduction(ins[0], [node.attrs.get("axis", 0)], node.attrs.get("keep_dims", False))
    return DimSpec(spec.inputs, spec.outputs * 2, spec.order)


@register("Reshape", "Flatten", "ExpandDims", "Squeeze")
def _reshape(node, graph):
    ins, outs = shapes_of(node, graph)
    return reshape(ins[0], outs[0], len(ins))


@register("Transpose")
def _transpose(node, graph):
    ins, _ = shapes_of(node, graph)
    perm = node.static_args.get(1)
    labels = tuple(f"d{i}" for i in range(len(ins[0])))
    if perm is None:
        return None
    return DimSpec((labels,), (tuple(labels[p] for p in perm),), labels)


@register("Concat", "Stack")
def _concat(node, graph):
    ins, outs = shapes_of(node, graph)
    rank = len(outs[0])
    axis = node.attrs.get("axis", 0) % rank
    labels = tuple(f"d{i}" for i in range(rank))
    if node.kind == "Stack":
        in_labels = tuple(l for i, l in enumerate(labels) if i != axis)
        return DimSpec(tuple(in_labels for _ in ins), (labels,), labels, frozenset({labels[axis]}))
    return DimSpec(tuple(labels for _ in ins), (labels,), labels, frozenset({labels[axis]}))


@register("Split")
def _split(node, graph):
    ins, outs = shapes_of(node, graph)
    rank = len(ins[0])
    labels = tuple(f"d{i}" for i in range(rank))
    axis = node.attrs.get("axis", 0) % rank
    return DimSpec((labels,), tuple(labels for _ in outs), labels, frozenset({labels[axis]}))


@register("Slice", "Pad")
def _slice_like(node, graph):
    ins, outs = shapes_of(node, graph)
    if len(ins[0]) != len(outs[0]):
        return None
    labels = tuple(f"d{i}" if a == b else None for i, (a, b) in enumerate(zip(ins[0], outs[0])))
    return DimSpec((labels,), (labels,), tuple(l for l in labels if l))


@register("StridedSlice")
def _strided_slice(node, graph):
    """MindSpore's StridedSliceInfo: the strategy splits the input; a dim fetched whole may be split (input and
    output alike), a sliced dim, one ``shrink_axis_mask`` drops, and the new axes may not."""
    ins, outs = shapes_of(node, graph)
    x, out = ins[0], outs[0]
    args = node.static_args
    if any(args.get(k) is None for k in (1, 2, 3)):
        return None
    masks = {k: node.attrs.get(k, 0) for k in ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask",
                                              "shrink_axis_mask")}
    pairs = dim_map(strided_index(args[1], args[2], args[3], **masks), len(x))
    x_row: list = [None] * len(x)
    out_row: list = [None] * len(out)
    for d, o in pairs:
        if d is not None and o is not None and d < len(x) and o < len(out) and x[d] == out[o]:
            x_row[d] = out_row[o] = f"d{d}"
    ellipsis = masks["ellipsis_mask"]

    def check(splits: dict[str, int]):  # MindSpore's StridedSliceInfo refuses ellipsis_mask in parallel
        if ellipsis:
            return (f"MindSpore's parallel StridedSlice does not take ellipsis_mask ({ellipsis}) with a strategy",
                    "Write the dims out in begin/end/strides with begin_mask/end_mask, or drop the shard() call")
        return None
    return DimSpec((tuple(x_row),), (tuple(out_row),), tuple(l for l in x_row if l), check=check)


@register("Tile")
def _tile(node, graph):
    """MindSpore's TileInfo: the strategy has one split per element of ``multiples`` (the output's rank). Where the
    multiple is above 1 the split divides the multiple: each device tiles its whole input dim ``multiple / split``
    times, a block of the output, and the input dim stays whole; where it is 1 the input dim is split (a dim
    ``multiples`` prepends cannot be). Splits of a tiled dim exist on the output only, so the search leaves them to
    a user's strategy (``hint_only``) as it did before they were accepted."""
    ins, outs = shapes_of(node, graph)
    multiples = node.static_args.get(1)
    if multiples is None:
        return None
    x, out = ins[0], outs[0]
    multiples = (1,) * (len(x) - len(multiples)) + tuple(int(m) for m in multiples)
    lead = len(out) - len(x)
    labels = tuple(f"d{i}" for i in range(len(out)))
    row = tuple(labels[j + lead] if multiples[j + lead] == 1 else None for j in range(len(x)))
    sizes = tuple(m if m > 1 else (x[i - lead] if i >= lead else 1) for i, m in enumerate(multiples))
    tiled = frozenset(l for l in labels if l not in row)

    def check(splits: dict[str, int]):  # an output layout's split of a tiled dim must divide its multiple
        for i, label in enumerate(labels):
            if label in tiled and multiples[i] % splits.get(label, 1):
                return (f"Tile cannot split output dim {i} {splits[label]} ways: its multiple {multiples[i]} is not "
                        "divisible by the split", f"Split output dim {i} by a divisor of {multiples[i]}")
        return None
    return DimSpec((row,), (labels,), labels, hint_only=tiled, hint_rows=(labels,), hint_shapes=(sizes,),
                   check=check)


@register("Gather", "SparseGatherV2")
def _gather(node, graph):
    ins, outs = shapes_of(node, graph)
    params, indices = ins[0], ins[1]
    axis = node.static_args.get(2, 0) % len(params)
    b = node.attrs.get("batch_dims", 0)
    b = b + len(indices) if b < 0 else b
    # batch_dims leading dimensions are shared by the table, the indices and the output
    p_labels = tuple(f"q{i}" if i < b else "v" if i == axis else f"p{i}" for i in range(len(params)))
    i_labels = tuple(f"q{i}" for i in range(len(indices)))
    out = p_labels[:axis] + i_labels[b:] + p_labels[axis + 1:]
    order = i_labels + p_labels[b:]
    # MindSpore's GatherInfo batch strategy splits the indices' batch dimension, never the table
    return DimSpec((p_labels, i_labels), (out,), order, batch=i_labels[0] if i_labels else None)


@register("OneHot")
def _one_hot(node, graph):
    ins, outs = shapes_of(node, graph)
    idx = tuple(f"d{i}" for i in range(len(ins[0])))
    axis = node.attrs.get("axis", -1) % len(outs[0])
    out = list(idx)
    out.insert(axis, "depth")
    extra = tuple(tuple(None for _ in s) for s in ins[1:])
    # MindSpore's OneHot puts the repeated dimension first in its device matrix.
    return DimSpec((idx,) + extra, (tuple(out),), idx + ("depth",), repeat_first=True)


@register("AdaptiveAvgPool2D")
def _adaptive_pool(node, graph):
    ins, _ = shapes_of(node, graph)
    lead = ("n", "c")[-(len(ins[0]) - 2):]
    return DimSpec((lead + (None, None),), (lead + (None, None),), lead)


@register("BatchNorm", "SyncBatchNorm")
def _batch_norm(node, graph):
    ins, outs = shapes_of(node, graph)
    rank = len(ins[0])
    x = ("n", "c") + tuple(f"s{i}" for i in range(rank - 2))
    vec = (("c",),) * (len(ins) - 1)
    group = node.attrs.get("group_size")
    check = None if group is None else (lambda splits: _batch_norm_group(int(group), splits))
    return DimSpec((x,) + vec, (x, ("c",), ("c",)), x, check=check)


def _batch_norm_group(group: int, splits: dict[str, int]) -> tuple[str, str] | None:
    """MindSpore's BatchNormInfo ``group_size``: the devices splitting N whose statistics one AllReduce combines.
    MindSpore refuses a size that is not a power of 2 and a group with C split; graphpar's BatchNorm combines the
    statistics of every device splitting N (XLA's reduction over the split batch), so that is the one size built."""
    n = splits.get("n", 1)
    if group < 1 or group & (group - 1):
        return (f"group_size {group} is not a power of 2", "Give a power of 2 that divides N's split")
    if splits.get("c", 1) > 1:
        return (f"group_size {group} is set while C is split {splits['c']} ways",
                "Leave C whole, or drop the group_size attribute")
    if group != n:
        return (f"group_size {group} would combine the statistics of {group} of the {n} devices splitting N, which "
                "graphpar does not build (it combines all of them)",
                f"Give group_size {n}, or drop the attribute")
    return None


@register("LayerNorm")
def _layer_norm(node, graph):
    ins, outs = shapes_of(node, graph)
    rank = len(ins[0])
    begin = node.attrs.get("begin_norm_axis", 1) % rank
    x = tuple(f"d{i}" if i < begin else None for i in range(rank))
    # MindSpore's LayerNormInfo: gamma and beta are right-aligned to x and split as x's dims they line up with (so
    # with begin_params_axis < begin_norm_axis, a gamma dim ahead of the normalised axes may be split)
    params = tuple(x[rank - len(s):] for s in ins[1:])
    stat = tuple(f"d{i}" if i < begin else None for i in range(len(outs[1])))
    # LayerNormInfo infers its outputs' layouts and refuses a user's, unless the op is marked self_define_shard
    return DimSpec((x,) + params, (x, stat, stat), tuple(l for l in x if l),
                   takes_out_strategy=bool(node.attrs.get("self_define_shard", False)))


@register("SoftmaxCrossEntropyWithLogits")
def _softmax_ce(node, graph):
    return DimSpec((("n", "c"), ("n", "c")), (("n",), ("n", "c")), ("n", "c"), frozenset({"c"}))


@register("SparseSoftmaxCrossEntropyWithLogits")
def _sparse_softmax_ce(node, graph):
    return DimSpec((("n", "c"), ("n",)), ((),), ("n", "c"), frozenset({"c"}))


@register("Reshard")
def _reshard(node, graph):
    """``reshard(x, layout)`` (``ops.layout_ops.Reshard``): an identity whose hint pins the value's layout; the
    output keeps the input's labels, so the hint is the layout of both."""
    ins, outs = shapes_of(node, graph)
    return elementwise(ins, outs)


@register("FlashAttentionScore")
def _flash_attention(node, graph):
    """Batch, heads and the query's sequence split freely. The key/value sequence carries the query's label (a
    sequence split puts key/value block i with query block i: the ring of context parallel, never a split of the
    softmax's axis alone) unless a ``shard()`` strategy keeps it whole, or the call has what ring attention is not
    built for (``real_shift``, ``drop_mask``, ``attn_mask``, sparse modes 1-4, fewer key/value heads): then it stays
    whole and a query sequence split is MindSpore's sequence parallelism (each device's query rows against every
    key). BSH / SBH's hidden dimension is the heads' (``N * D``, split by heads); key/value heads fewer than the
    query's (grouped-query) split alike, a single one (multi-query) stays whole. The optional inputs follow the
    query, as MindSpore's FlashAttentionScoreInfo lays them out: ``real_shift`` ``(B or 1, N1, S1, S2)`` and
    ``drop_mask`` ``(B, N1, S1, S2 / 8)`` by batch, heads and query sequence; a full ``attn_mask`` by batch (when it
    has one), heads (when it has them) and query sequence; the compressed ``(2048, 2048)`` mask of sparse modes 2-4
    whole."""
    ins, outs = shapes_of(node, graph)
    names = node.input_names or ("query", "key", "value")
    layout = node.attrs.get("input_layout", "BSH")
    tensor = {"BNSD": ("b", "n", "s", None), "BSND": ("b", "s", "n", None), "SBH": ("s", "b", "n")}.get(
        layout, ("b", "s", "n"))
    heads = tensor.index("n")
    query_heads = int(node.attrs.get("head_num", 1))
    hidden = layout in ("BSH", "SBH")
    kv_heads = query_heads * ins[1][heads] // ins[0][heads] if hidden else ins[1][heads]
    seq = tensor.index("s")
    ring = not (set(names) & {"real_shift", "drop_mask", "attn_mask"} or node.attrs.get("sparse_mode", 0)
                or kv_heads != query_heads)
    if node.hint and len(node.hint) > 1 and isinstance(node.hint[1], tuple) and all(
            isinstance(x, int) for x in node.hint[1]):
        ring = node.hint[1][seq] > 1
    kv = tuple((l if l != "n" or kv_heads > 1 else None) if l != "s" or ring else None for l in tensor)
    batch, rows = ins[0][tensor.index("b")], []
    for name, shape in zip(names, ins):
        if name == "query":
            rows.append(tensor)
        elif name in ("key", "value"):
            rows.append(kv)
        elif name in ("real_shift", "drop_mask", "attn_mask") and len(shape) == 4 and (
                name != "attn_mask" or node.attrs.get("sparse_mode", 0) in (0, 1)):
            rows.append(("b" if shape[0] == batch else None, "n" if shape[1] == query_heads > 1 else None, "s", None))
        elif name == "attn_mask" and len(shape) == 2 and node.attrs.get("sparse_mode", 0) in (0, 1):
            rows.append(("s", None))
        else:
            rows.append((None,) * len(shape))
    stats = ("b", "n", "s", None)
    return DimSpec(tuple(rows), (stats, stats, (None,) * len(outs[2]), tensor), ("b", "n", "s"))
