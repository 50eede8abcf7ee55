"""Sharding rules of the windowed ops: ``Conv2D``, ``Conv2DTranspose``, ``MaxPool``/``AvgPool``.

As MindSpore's ``Conv2DInfo``/``Conv2DBackpropInputInfo``/``MaxPoolInfo``, a strategy may split the spatial
dimensions H and W of the input (and the output with them) under conditions on kernel, stride and padding; the
device matrix is ``(n, c_in, h, w, c_out)`` for a convolution, ``(n, c, h, w)`` for a pooling. Where MindSpore
exchanges the halo rows itself (``NeighborExchangeV2``), graphpar leaves it to XLA's SPMD partitioner, which
partitions a windowed op over a split spatial dimension with its own halo exchange; the conditions are still
MindSpore's, so a strategy MindSpore refuses is refused here with its reason. H and W are *hint-only* labels: the
cost model does not price a halo exchange, so graphpar's search never proposes to split them; a user's strategy
does, and propagation carries a decided neighbour's H/W split in (``layout_hint.aligned_strategies``).
"""

from __future__ import annotations

from collections.abc import Sequence

from graphpar.planner.dims import DimSpec, register, shapes_of

_SPATIAL = ("h", "w")


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _pads(mode: str, pad, in_len: int, out_len: int, k: int, s: int, axis: int) -> tuple[int, int]:
    """The (low, high) padding of one spatial axis, as MindSpore's pad_list: "same" pads what the output needs,
    half before (rounded down); "pad" takes the user's (top, bottom, left, right)."""
    if mode == "same":
        need = max(0, (out_len - 1) * s + k - in_len)
        return need // 2, need - need // 2
    if mode == "pad":
        if isinstance(pad, int):
            return pad, pad
        return int(pad[2 * axis]), int(pad[2 * axis + 1])
    return 0, 0


def _conv_axis(name: str, split: int, in_len: int, out_len: int, k: int, s: int, lo: int, hi: int,
               mode: str) -> str | None:
    """Why ``Conv2D`` cannot split one spatial axis ``split`` ways, or None (MindSpore's CheckHWStrategy rules and
    its halo sizes, which must be non-negative and no larger than a slice, on every rank)."""
    if out_len % split:
        return f"its output's {name} ({out_len}) is not divisible by the split {split}"
    slice_len = in_len // split
    if mode == "valid":
        if k > s:
            return (f"pad_mode 'valid' cannot split {name} when the dilated kernel ({k}) is larger than the stride "
                    f"({s})")
        if slice_len % s:
            return f"pad_mode 'valid' cannot split {name}: the slice ({slice_len}) is not divisible by the stride ({s})"
        return None
    if mode == "pad":  # MindSpore drops the bottom/right rows no window reads
        useless = (in_len + lo + hi - k) % s
        if useless > hi:
            return f"the rows no window reads along {name} ({useless}) exceed the bottom/right pad ({hi})"
        hi -= useless
    if k <= s:
        if lo + hi:
            return f"a kernel ({k}) no larger than the stride ({s}) with padding ({lo}, {hi}) cannot split {name}"
        if slice_len % s:
            return f"the slice of {name} ({slice_len}) is not divisible by the stride ({s})"
        return None
    if (in_len + lo + hi - k) % s:
        return (f"{name}: input ({in_len}) + padding ({lo + hi}) - dilated kernel ({k}) is not divisible by the "
                f"stride ({s})")
    if (out_len * s - in_len) % split:
        return f"{name}: output ({out_len}) * stride ({s}) - input ({in_len}) is not divisible by the split {split}"
    step = (out_len * s - in_len) // split
    tops = [lo - step * r for r in range(1, split)]  # halo each rank but the first receives from above
    bottoms = [(r + 1) * step + k - s - lo for r in range(split - 1)]  # ... and each but the last from below
    return _halo_problem(name, tops, bottoms, slice_len)


def _halo_problem(name: str, tops: Sequence[int], bottoms: Sequence[int], slice_len: int) -> str | None:
    if min(tops + bottoms, default=0) < 0:
        return f"the halo along {name} would be negative (the padding overlaps the neighbour's rows)"
    if max(tops + bottoms, default=0) > slice_len:
        return (f"the halo along {name} ({max(tops + bottoms)} rows) is larger than a slice ({slice_len}): the slice "
                "is too small for the kernel")
    return None


def _transpose_axis(name: str, split: int, in_len: int, out_len: int, k: int, s: int, lo: int, mode: str) -> str | None:
    """Why ``Conv2DTranspose`` cannot split one spatial axis of ``dout`` (``in_len``) and of its output
    (``out_len``) ``split`` ways, or None (MindSpore's Conv2DBackpropInputInfo rules and halo sizes)."""
    if out_len % split:
        return f"its output's {name} ({out_len}) is not divisible by the split {split}"
    if mode not in ("same", "pad"):
        return f"pad_mode {mode!r} cannot split {name}; only 'same' and 'pad' can"
    o, h, n = out_len, in_len, split
    tops = [h * r // n - _ceil_div(r * o // n - k + lo + 1, s) for r in range(1, n - 1)]
    tops.append(_ceil_div(o // n + k - o + h * s - s - lo, s) - h // n)
    bottoms = [_ceil_div(o // n + lo, s) - h // n]
    bottoms += [_ceil_div(r * o // n + o // n + lo, s) - (r + 1) * h // n for r in range(1, n - 1)]
    return _halo_problem(name, tops, bottoms, h // n)


def _nc_stride(node) -> str | None:
    nc = node.attrs.get("stride_nc", (1, 1))
    if tuple(nc) != (1, 1):
        return (f"a parallel {node.kind} needs the first two elements of stride (N, C) to be 1, got {tuple(nc)}",
                "Give stride as an int, a pair (h, w) or (1, 1, h, w)")
    return None


def _conv_check(node, in_shape, out_shape, transpose: bool):
    a = node.attrs
    mode = a.get("pad_mode", "valid")
    ks = [d * (k - 1) + 1 for d, k in zip(a.get("dilation", (1, 1)), a["kernel_size"])]
    strides = a.get("stride", (1, 1))
    valid = (f"Use 1 for H and W, or splits meeting MindSpore's {node.kind} conditions on kernel, stride and "
             "padding (docs/porting_from_mindspore.md, 'Spatial splits')")  # check_hint adds an e.g.

    def check(splits: dict[str, int]):
        bad = _nc_stride(node)
        if bad is not None:
            return bad
        for axis, label in enumerate(_SPATIAL):
            split = splits.get(label, 1)
            if split == 1:
                continue
            name = "HW"[axis]
            k, s = ks[axis], strides[axis]
            if transpose:  # the forward conv's geometry: its input is this op's output
                lo, _ = _pads(mode, a.get("pad", 0), out_shape[2 + axis], in_shape[2 + axis], k, s, axis)
                why = _transpose_axis(name, split, in_shape[2 + axis], out_shape[2 + axis], k, s, lo, mode)
            else:
                lo, hi = _pads(mode, a.get("pad", 0), in_shape[2 + axis], out_shape[2 + axis], k, s, axis)
                why = _conv_axis(name, split, in_shape[2 + axis], out_shape[2 + axis], k, s, lo, hi, mode)
            if why is not None:
                return f"{node.kind} cannot split {name} {split} ways: {why}", valid
        return None
    return check


@register("Conv2D")
def _conv2d(node, graph):
    # MindSpore's Conv2DInfo: x (n, c, h, w), weight (o, c, kh, kw), device matrix (n, c, h, w, o); with group > 1
    # neither channel may be split; the kernel never is.
    ins, outs = shapes_of(node, graph)
    group = node.attrs.get("group", 1)
    c = "c" if group == 1 else None
    o = "o" if group == 1 else None
    x = ("n", c, "h", "w")
    w = (o, c, None, None)
    order = tuple(l for l in ("n", c, "h", "w", o) if l)
    return DimSpec((x, w), (("n", o, "h", "w"),), order, hint_only=frozenset(_SPATIAL),
                   check=_conv_check(node, ins[0], outs[0], transpose=False))


@register("Conv2DTranspose")
def _conv2d_transpose(node, graph):
    # MindSpore's Conv2DBackpropInputInfo: dout (n, o, h, w) and weight (o, i, kh, kw); o (dout's channels, the
    # forward conv's out_channel) is contracted, i is the output's channel; device matrix (n, o, h, w, i).
    ins, outs = shapes_of(node, graph)
    group = node.attrs.get("group", 1)
    o = "c" if group == 1 else None
    i = "o" if group == 1 else None
    order = tuple(l for l in ("n", o, "h", "w", i) if l)
    return DimSpec((("n", o, "h", "w"), (o, i, None, None)), (("n", i, "h", "w"),), order,
                   hint_only=frozenset(_SPATIAL), check=_conv_check(node, ins[0], outs[0], transpose=True))


def _pool_check(node, in_shape):
    kernel, strides = node.attrs["kernel_size"], node.attrs["strides"]

    def check(splits: dict[str, int]):
        for axis, label in enumerate(_SPATIAL):
            split = splits.get(label, 1)
            if split == 1:
                continue
            name, k, s = "HW"[axis], kernel[axis], strides[axis]
            if k > s:
                why = f"the kernel ({k}) is larger than the stride ({s})"
            elif (in_shape[2 + axis] // split) % s:
                why = f"the slice ({in_shape[2 + axis] // split}) is not divisible by the stride ({s})"
            else:
                continue
            return (f"{node.kind} cannot split {name} {split} ways: {why}",
                    f"Use 1 for {name}, or a kernel no larger than the stride and slices the stride divides")
        return None
    return check


@register("MaxPool", "AvgPool")
def _pool(node, graph):
    # MindSpore's MaxPoolInfo/AvgPoolInfo: device matrix (n, c, h, w), output split as the input
    ins, _ = shapes_of(node, graph)
    row = ("n", "c", "h", "w")
    return DimSpec((row,), (row,), row, hint_only=frozenset(_SPATIAL), check=_pool_check(node, ins[0]))
