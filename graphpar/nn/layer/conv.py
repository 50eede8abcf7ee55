"""``Conv2d``: MindSpore's 2-D convolution layer, built from ``ops.Conv2D`` and ``ops.BiasAdd``.

The layer holds its ops as attributes (instance names ``conv2d`` and ``bias_add``), so the IR shows them by name and
``layer.conv2d.shard(((8, 1, 1, 1), (1, 1, 1, 1)))`` gives the convolution a strategy, as in MindSpore.
"""

from __future__ import annotations

import math
from typing import Any

from graphpar.common import dtype as mstype
from graphpar.common.initializer import HeUniform, Uniform, initializer
from graphpar.common.parameter import Parameter
from graphpar.nn.cell import Cell
from graphpar.ops import nn_ops

_PAD_MODES = ("same", "valid", "pad")


def _positive_pair(value: Any, name: str, layer: str) -> tuple[int, int]:
    """An int or a pair of ints, each >= 1 (MindSpore's ``twice``)."""
    pair = (value, value) if isinstance(value, int) and not isinstance(value, bool) else value
    if (not isinstance(pair, (tuple, list)) or len(pair) != 2
            or any(not isinstance(v, int) or isinstance(v, bool) or v < 1 for v in pair)):
        raise ValueError(f"{layer}: {name} must be a positive int or a pair of positive ints, got {value!r}")
    return int(pair[0]), int(pair[1])


def _padding(padding: Any, pad_mode: str, layer: str) -> int | tuple[int, int, int, int]:
    """``padding`` checked against ``pad_mode``: an int or (top, bottom, left, right), non-zero only for 'pad'."""
    if isinstance(padding, int) and not isinstance(padding, bool):
        values: tuple[int, ...] = (padding,)
    elif isinstance(padding, (tuple, list)) and len(padding) == 4:
        values = tuple(padding)
    else:
        raise ValueError(f"{layer}: padding must be an int or a tuple of 4 ints (top, bottom, left, right), "
                         f"got {padding!r}")
    if any(not isinstance(v, int) or isinstance(v, bool) or v < 0 for v in values):
        raise ValueError(f"{layer}: padding values must be ints >= 0, got {padding!r}")
    if pad_mode != "pad" and any(values):
        raise ValueError(f"{layer}: padding={padding!r} needs pad_mode='pad' (got pad_mode={pad_mode!r}, which "
                         "pads by itself); use pad_mode='pad' or padding=0")
    return values[0] if len(values) == 1 else tuple(values)  # type: ignore[return-value]


def fan_in(shape: tuple[int, ...]) -> int:
    """MindSpore's fan-in of a weight (out, in, *kernel): in × prod(kernel)."""
    return int(shape[1]) * int(math.prod(shape[2:])) if len(shape) > 1 else int(shape[0])


class Conv2d(Cell):
    """``Conv2d(in_channels, out_channels, kernel_size, stride=1, pad_mode="same", padding=0, dilation=1, group=1,
    has_bias=False, weight_init=None, bias_init=None, data_format="NCHW", dtype=float32)``.

    Input (N, C_in, H, W); weight (out_channels, in_channels / group, kh, kw); output (N, C_out, H_out, W_out) with
    MindSpore's pad modes: ``"same"`` (H_out = ceil(H / stride), the extra padding row at the bottom/right),
    ``"valid"`` (no padding) and ``"pad"`` (``padding`` zeros: an int, or (top, bottom, left, right)).

    Defaults are MindSpore 2.x's: weight ``HeUniform(negative_slope=sqrt(5))``, bias ``Uniform(1 / sqrt(fan_in))``
    with fan_in = in_channels / group × kh × kw. Only ``data_format="NCHW"`` is supported (MindSpore accepts NHWC on
    GPU only).
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1,
                 pad_mode: str = "same", padding: Any = 0, dilation: Any = 1, group: int = 1,
                 has_bias: bool = False, weight_init: Any = None, bias_init: Any = None, data_format: str = "NCHW",
                 dtype: Any = mstype.float32):
        super().__init__()
        name = type(self).__name__
        for arg, value in (("in_channels", in_channels), ("out_channels", out_channels), ("group", group)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name}: {arg} must be a positive int, got {value!r}")
        if in_channels % group or out_channels % group:
            raise ValueError(f"{name}: in_channels ({in_channels}) and out_channels ({out_channels}) must both be "
                             f"divisible by group ({group})")
        if not isinstance(pad_mode, str) or pad_mode.lower() not in _PAD_MODES:
            raise ValueError(f"{name}: pad_mode must be one of {_PAD_MODES}, got {pad_mode!r}")
        if data_format != "NCHW":
            raise ValueError(f"{name}: data_format={data_format!r} is not supported; valid: 'NCHW' (MindSpore "
                             "accepts 'NHWC' on GPU only)")
        self.in_channels, self.out_channels, self.group = in_channels, out_channels, group
        self.kernel_size = _positive_pair(kernel_size, "kernel_size", name)
        self.stride = _positive_pair(stride, "stride", name)
        self.dilation = _positive_pair(dilation, "dilation", name)
        self.pad_mode = pad_mode.lower()
        self.padding = _padding(padding, self.pad_mode, name)
        self.has_bias = bool(has_bias)
        self.data_format = data_format
        shape = (out_channels, in_channels // group) + self.kernel_size
        if weight_init is None:
            weight_init = HeUniform(negative_slope=math.sqrt(5))
        self.weight = Parameter(initializer(weight_init, shape, dtype), name="weight")
        self.conv2d = nn_ops.Conv2D(out_channels, self.kernel_size, mode=1, pad_mode=self.pad_mode, pad=self.padding,
                                    stride=self.stride, dilation=self.dilation, group=group, data_format=data_format)
        if self.has_bias:
            if bias_init is None:
                bias_init = Uniform(1.0 / math.sqrt(fan_in(shape)))
            self.bias = Parameter(initializer(bias_init, (out_channels,), dtype), name="bias")
            self.bias_add = nn_ops.BiasAdd(data_format=data_format)

    def construct(self, x):
        if x.ndim != 4 or x.shape[1] != self.in_channels:
            raise ValueError(f"{type(self).__name__}: expected an input of shape (N, {self.in_channels}, H, W), got "
                             f"{tuple(x.shape)}")
        out = self.conv2d(x, self.weight)
        if self.has_bias:
            out = self.bias_add(out, self.bias)
        return out

    def extend_repr(self) -> str:
        return (f"input_channels={self.in_channels}, output_channels={self.out_channels}, "
                f"kernel_size={self.kernel_size}, stride={self.stride}, pad_mode={self.pad_mode}, "
                f"padding={self.padding}, dilation={self.dilation}, group={self.group}, has_bias={self.has_bias}")
