"""``Conv2DTranspose``: MindSpore's transposed 2-D convolution (the gradient of ``Conv2D`` with respect to its input).

MindSpore's argument order: ``Conv2DTranspose(out_channel, kernel_size, ...)(dout, weight, input_size)`` where
``weight`` is the forward ``Conv2D``'s weight ``(out_channel, in_channel / group, kh, kw)``, ``dout`` has
``out_channel`` channels and ``input_size`` is the output shape ``(N, in_channel, H, W)``. The math is the exact
transpose of the forward convolution (``jax.linear_transpose``), so every ``pad_mode``, stride, dilation and group
gives the shape MindSpore gives.
"""

from __future__ import annotations

from typing import Any

import jax
from jax import lax

from graphpar.ops.nn_ops import _pair, conv_padding, nc_stride
from graphpar.ops.primitive import Primitive


class Conv2DTranspose(Primitive):
    """``Conv2DTranspose(out_channel, kernel_size, pad_mode="valid", pad=0, pad_list=None, mode=1, stride=1,
    dilation=1, group=1, data_format="NCHW")(dout, weight, input_size)``; its strategy splits ``dout``
    ``(n, out_channel, h, w)`` and ``weight`` ``(out_channel, in_channel, 1, 1)`` (``planner.rules.conv_rules``)."""

    input_names = ("dout", "weight")

    def __init__(self, out_channel: int, kernel_size: Any, pad_mode: str = "valid", pad: Any = 0,
                 pad_list: Any = None, mode: int = 1, stride: Any = 1, dilation: Any = 1, group: int = 1,
                 data_format: str = "NCHW"):
        if data_format != "NCHW":
            raise ValueError(f"Conv2DTranspose: data_format {data_format!r} is not supported; valid: 'NCHW'")
        pad = pad_list if pad_list is not None and pad_mode.lower() == "pad" else pad
        super().__init__(out_channel=out_channel, kernel_size=_pair(kernel_size, "kernel_size"), mode=mode,
                         pad_mode=pad_mode.lower(), pad=pad, stride=_pair(stride, "stride"),
                         dilation=_pair(dilation, "dilation"), group=group, data_format=data_format,
                         **nc_stride(stride))
        conv_padding(self.attrs["pad_mode"], pad)  # an unknown pad_mode is refused now, not at the first call

    def compute(self, dout, weight, input_size):
        a = self.attrs
        input_size = tuple(int(d) for d in input_size)

        def forward(x):
            return lax.conv_general_dilated(
                x, weight, window_strides=a["stride"], padding=conv_padding(a["pad_mode"], a["pad"]),
                rhs_dilation=a["dilation"], dimension_numbers=("NCHW", "OIHW", "NCHW"),
                feature_group_count=a["group"])

        (dx,) = jax.linear_transpose(forward, jax.ShapeDtypeStruct(input_size, dout.dtype))(dout)
        return dx


Conv2DBackpropInput = Conv2DTranspose  # MindSpore's older name of the same primitive
