"""Pooling layers: ``MaxPool2d``, ``AvgPool2d``, ``AdaptiveAvgPool2d`` (MindSpore's names and defaults), each a thin
Cell around its op (instance names ``max_pool``, ``avg_pool``, ``adaptive_avg_pool2d``) so strategies can be set on
it and the IR names it."""

from __future__ import annotations

from typing import Any

from graphpar.nn.cell import Cell
from graphpar.ops import nn_ops

_POOL_PAD_MODES = ("same", "valid")


def _pool_pair(value: Any, name: str, layer: str) -> tuple[int, int]:
    pair = (value, value) if isinstance(value, int) and not isinstance(value, bool) else value
    if (not isinstance(pair, (tuple, list)) or len(pair) != 2
            or any(not isinstance(v, int) or isinstance(v, bool) or v < 1 for v in pair)):
        raise ValueError(f"{layer}: {name} must be a positive int or a pair of positive ints, got {value!r}")
    return int(pair[0]), int(pair[1])


class _Pool2d(Cell):
    _OP: type = nn_ops.MaxPool
    _ATTR = "pool"

    def __init__(self, kernel_size: Any = 1, stride: Any = 1, pad_mode: str = "valid", padding: Any = 0,
                 data_format: str = "NCHW", **unsupported: Any):
        super().__init__()
        layer = type(self).__name__
        self.kernel_size = _pool_pair(kernel_size, "kernel_size", layer)
        self.stride = _pool_pair(stride, "stride", layer)
        mode = pad_mode.lower() if isinstance(pad_mode, str) else pad_mode
        if mode == "pad":
            raise ValueError(f"{layer}: pad_mode='pad' (explicit padding) is not supported yet; valid: 'same', "
                             "'valid' (pad with nn.Pad first for explicit padding)")
        if mode not in _POOL_PAD_MODES:
            raise ValueError(f"{layer}: pad_mode must be one of {_POOL_PAD_MODES}, got {pad_mode!r}")
        if padding not in (0, (0, 0), (0, 0, 0, 0)):
            raise ValueError(f"{layer}: padding={padding!r} needs pad_mode='pad', which is not supported yet")
        if data_format != "NCHW":
            raise ValueError(f"{layer}: data_format={data_format!r} is not supported; valid: 'NCHW'")
        defaults = {"dilation": 1, "return_indices": False, "ceil_mode": False, "count_include_pad": True,
                    "divisor_override": None}
        for key, value in unsupported.items():
            if key not in defaults:
                raise TypeError(f"{layer}() got an unexpected argument {key!r}")
            if value != defaults[key]:
                raise ValueError(f"{layer}: {key}={value!r} is not supported yet; only the default "
                                 f"{defaults[key]!r}")
        self.pad_mode = mode
        setattr(self, self._ATTR, self._OP(self.kernel_size, self.stride, mode, data_format))

    def construct(self, x):
        if x.ndim != 4:
            raise ValueError(f"{type(self).__name__}: expected an input of shape (N, C, H, W), got {tuple(x.shape)}")
        return getattr(self, self._ATTR)(x)

    def extend_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, pad_mode={self.pad_mode}"


class MaxPool2d(_Pool2d):
    """``MaxPool2d(kernel_size=1, stride=1, pad_mode="valid", data_format="NCHW")`` over (N, C, H, W).

    ``"same"`` pads with -inf so that H_out = ceil(H / stride) (extra padding at the bottom/right); ``"valid"`` does
    not pad. MindSpore 2.x's ``padding``/``dilation``/``return_indices``/``ceil_mode`` are accepted at their
    defaults only.
    """

    _OP = nn_ops.MaxPool
    _ATTR = "max_pool"


class AvgPool2d(_Pool2d):
    """``AvgPool2d(kernel_size=1, stride=1, pad_mode="valid", data_format="NCHW")`` over (N, C, H, W); with
    ``"same"`` the padded cells are not counted in the average (MindSpore's behaviour for that mode)."""

    _OP = nn_ops.AvgPool
    _ATTR = "avg_pool"


class AdaptiveAvgPool2d(Cell):
    """``AdaptiveAvgPool2d(output_size)``: average pooling to a fixed (H_out, W_out) over (N, C, H, W) or (C, H, W).

    ``output_size`` is an int (square), or a pair whose entries may be None (keep that dimension).
    ``AdaptiveAvgPool2d(1)`` is global average pooling.
    """

    def __init__(self, output_size: Any):
        super().__init__()
        self.output_size = output_size
        self.adaptive_avg_pool2d = nn_ops.AdaptiveAvgPool2D(output_size)

    def construct(self, x):
        return self.adaptive_avg_pool2d(x)

    def extend_repr(self) -> str:
        return f"output_size={self.output_size}"
