"""Sharding rules of Conv3D, MaxPool3D and AvgPool3D (``graphpar.ops.pool3d_ops``), after MindSpore's
``MaxPool3DInfo`` and ``Conv3DInfo``.

N and C split freely (Conv3D: C is the contracted input channel, the weight's dim 1, and the output channel
splits with the weight's dim 0; a grouped convolution keeps both whole). The width (last) dimension never splits.
Depth and height split when MindSpore's window conditions hold: the output's size divides by the split; with
kernel <= stride, no padding and each input slice a multiple of the stride (no window crosses a slice); with
kernel > stride, in 'valid' mode never, in 'pad'/'same' mode when ``(out * stride - in)`` divides by the split
(the halo each slice borrows from its neighbours is the same everywhere). Where a user's strategy splits a depth or
height that fails them, the dimension is reported as one that cannot split.
"""

from __future__ import annotations

from graphpar.planner.dims import DimSpec, register, shapes_of


def window_pads(in_size: int, kernel: int, stride: int, mode: str, pads: tuple[int, int],
                ceil_mode: bool = False) -> tuple[int, int]:
    """``(before, after)`` padding of one spatial dimension: none for 'valid', XLA's/MindSpore's split of the
    needed total (the smaller half first) for 'same', ``pads`` for 'pad' (plus the right padding a ceil-mode
    output needs)."""
    if mode == "valid":
        return 0, 0
    if mode == "same":
        out = -(-in_size // stride)
        total = max((out - 1) * stride + kernel - in_size, 0)
        return total // 2, total - total // 2
    before, after = pads
    if ceil_mode:
        span = in_size + before + after - kernel
        out = -(-span // stride) + 1
        after += (out - 1) * stride + kernel - (in_size + before + after)
    return before, after


def spatial_split_ok(in_size: int, out_size: int, kernel: int, stride: int, mode: str, pads: tuple[int, int],
                     split: int) -> bool:
    """MindSpore's conditions for splitting one of depth/height ``split`` ways (see the module docstring)."""
    if split == 1:
        return True
    if out_size % split:
        return False
    before, after = window_pads(in_size, kernel, stride, mode, pads)
    if mode == "pad":  # MindSpore trims the tail padding no window reads
        after -= min(after, (in_size + before + after - kernel) % stride)
    if kernel <= stride:
        return before + after == 0 and (in_size // split) % stride == 0
    if mode == "valid":
        return False
    return (in_size + before + after - kernel) % stride == 0 and (out_size * stride - in_size) % split == 0


def _spatial_labels(node, x, out, kernel) -> tuple:
    """Labels of x's depth, height and width: depth/height only where a split is possible (and the user's split,
    if any, valid); width never."""
    attrs = node.attrs
    hint = node.hint[0] if node.hint and len(node.hint[0]) == 5 else None
    labels = []
    for i, name in ((0, "d"), (1, "h")):
        pads = tuple(attrs["pad_list"][2 * i:2 * i + 2])
        args = (x[2 + i], out[2 + i], kernel[i], attrs["strides"][i], attrs["pad_mode"], pads)
        possible = any(spatial_split_ok(*args, s) for s in (2, 3, 4, 5, 7, 8) if x[2 + i] % s == 0)
        wanted = hint[2 + i] if hint is not None and isinstance(hint[2 + i], int) else None
        ok = spatial_split_ok(*args, wanted) if wanted else possible
        labels.append(name if ok and not attrs.get("ceil_mode") else None)
    return tuple(labels) + (None,)


@register("MaxPool3D", "AvgPool3D")
def _pool3d(node, graph):
    ins, outs = shapes_of(node, graph)
    spatial = _spatial_labels(node, ins[0], outs[0], node.attrs["kernel_size"])
    row = ("n", "c") + spatial
    return DimSpec((row,), (row,), tuple(l for l in row if l))


@register("Conv3D")
def _conv3d(node, graph):
    ins, outs = shapes_of(node, graph)
    a = node.attrs
    kernel = tuple((k - 1) * d + 1 for k, d in zip(a["kernel_size"], a["dilation"]))
    spatial = _spatial_labels(node, ins[0], outs[0], kernel)
    c, o = ("c", "o") if a.get("group", 1) == 1 else (None, None)
    x = ("n", c) + spatial
    w = (o, c, None, None, None)
    out = ("n", o) + spatial
    return DimSpec((x, w), (out,), tuple(l for l in ("n", c, o) + spatial if l))
