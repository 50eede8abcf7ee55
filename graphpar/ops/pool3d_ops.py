"""3-D convolution and pooling on NCDHW: MindSpore's ``Conv3D``, ``MaxPool3D`` and ``AvgPool3D``.

The window arithmetic (``window_pads``: the padding of each spatial dimension for pad modes 'valid', 'same' and
'pad', and 'pad' mode's ``ceil_mode``) lives with the sharding rule (``graphpar.planner.rules.pool3d_rules``), which
decides from it when a depth or height split is valid as MindSpore's ``MaxPool3DInfo``/``Conv3DInfo`` do.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

from graphpar.ops.primitive import Primitive
from graphpar.planner.rules.pool3d_rules import window_pads


def _triple(value: Any, what: str, op: str, lead: int = 0) -> tuple[int, ...]:
    """An int or a 3-tuple (MindSpore also takes a 5-tuple whose first two entries are 1)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,) * 3
    value = tuple(value)
    if len(value) == 5 and value[:2] == (1, 1):
        value = value[2:]
    if len(value) != 3 or not all(isinstance(v, int) and v > lead for v in value):
        raise ValueError(f"{op}: {what} must be a positive int or a tuple of 3 positive ints, got {value!r}")
    return value


def _pad_list(value: Any, op: str) -> tuple[int, ...]:
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value,) * 6
    value = tuple(value)
    if len(value) != 6 or not all(isinstance(v, int) and v >= 0 for v in value):
        raise ValueError(f"{op}: the pad must be an int >= 0 or 6 of them (head, tail, top, bottom, left, right), "
                         f"got {value!r}")
    return value


def _mode(pad_mode: str, op: str) -> str:
    mode = str(pad_mode).lower()
    if mode not in ("valid", "same", "pad"):
        raise ValueError(f"{op}: pad_mode must be 'valid', 'same' or 'pad', got {pad_mode!r}")
    return mode


class _Window3D(Primitive):
    def _spatial_pads(self, shape: tuple[int, ...], kernel: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
        a = self.attrs
        pads = a["pad_list"]
        return tuple(window_pads(shape[2 + i], kernel[i], a["strides"][i], a["pad_mode"], pads[2 * i:2 * i + 2],
                                 bool(a.get("ceil_mode"))) for i in range(3))


class MaxPool3D(_Window3D):
    """``MaxPool3D(kernel_size=1, strides=1, pad_mode="VALID", pad_list=0, ceil_mode=None,
    data_format="NCDHW")(x)``: the maximum of each window (padding never wins)."""

    def __init__(self, kernel_size: Any = 1, strides: Any = 1, pad_mode: str = "VALID", pad_list: Any = 0,
                 ceil_mode: Any = None, data_format: str = "NCDHW"):
        if data_format != "NCDHW":
            raise ValueError(f"MaxPool3D: data_format must be 'NCDHW', got {data_format!r}")
        mode = _mode(pad_mode, "MaxPool3D")
        if ceil_mode is not None and mode != "pad":
            raise ValueError("MaxPool3D: ceil_mode is only valid with pad_mode='pad'")
        super().__init__(kernel_size=_triple(kernel_size, "kernel_size", "MaxPool3D"),
                         strides=_triple(strides, "strides", "MaxPool3D"), pad_mode=mode,
                         pad_list=_pad_list(pad_list, "MaxPool3D"), ceil_mode=bool(ceil_mode), data_format=data_format)

    def compute(self, x):
        a = self.attrs
        pads = ((0, 0), (0, 0)) + self._spatial_pads(jnp.shape(x), a["kernel_size"])
        init = -jnp.inf if jnp.issubdtype(jnp.result_type(x), jnp.floating) else jnp.iinfo(jnp.result_type(x)).min
        return lax.reduce_window(x, jnp.asarray(init, jnp.result_type(x)), lax.max, (1, 1) + a["kernel_size"],
                                 (1, 1) + a["strides"], pads)


class AvgPool3D(_Window3D):
    """``AvgPool3D(kernel_size=1, strides=1, pad_mode="valid", pad=0, ceil_mode=False, count_include_pad=True,
    divisor_override=0, data_format="NCDHW")(x)``: the mean of each window; padded zeros count in the divisor when
    ``count_include_pad``; a non-zero ``divisor_override`` replaces the divisor."""

    def __init__(self, kernel_size: Any = 1, strides: Any = 1, pad_mode: str = "valid", pad: Any = 0,
                 ceil_mode: bool = False, count_include_pad: bool = True, divisor_override: int = 0,
                 data_format: str = "NCDHW"):
        if data_format != "NCDHW":
            raise ValueError(f"AvgPool3D: data_format must be 'NCDHW', got {data_format!r}")
        super().__init__(kernel_size=_triple(kernel_size, "kernel_size", "AvgPool3D"),
                         strides=_triple(strides, "strides", "AvgPool3D"), pad_mode=_mode(pad_mode, "AvgPool3D"),
                         pad_list=_pad_list(pad, "AvgPool3D"), ceil_mode=bool(ceil_mode),
                         count_include_pad=bool(count_include_pad), divisor_override=int(divisor_override),
                         data_format=data_format)

    def compute(self, x):
        a = self.attrs
        pads = ((0, 0), (0, 0)) + self._spatial_pads(jnp.shape(x), a["kernel_size"])
        window, strides = (1, 1) + a["kernel_size"], (1, 1) + a["strides"]
        total = lax.reduce_window(x, jnp.asarray(0, jnp.result_type(x)), lax.add, window, strides, pads)
        if a["divisor_override"]:
            return total / a["divisor_override"]
        if a["count_include_pad"]:
            return total / float(np.prod(a["kernel_size"]))
        ones = jnp.ones((1, 1) + tuple(jnp.shape(x)[2:]), jnp.result_type(x))
        count = lax.reduce_window(ones, jnp.asarray(0, ones.dtype), lax.add, window, strides, pads)
        return total / count


class Conv3D(_Window3D):
    """``Conv3D(out_channel, kernel_size, mode=1, pad_mode="valid", pad=0, stride=1, dilation=1, group=1,
    data_format="NCDHW")(x, weight)``; ``weight`` is (out_channel, in_channel / group, kd, kh, kw)."""

    input_names = ("x", "weight")

    def __init__(self, out_channel: int, kernel_size: Any, mode: int = 1, pad_mode: str = "valid", pad: Any = 0,
                 stride: Any = 1, dilation: Any = 1, group: int = 1, data_format: str = "NCDHW"):
        if data_format != "NCDHW":
            raise ValueError(f"Conv3D: data_format must be 'NCDHW', got {data_format!r}")
        pad_mode = _mode(pad_mode, "Conv3D")
        pad_list = _pad_list(pad, "Conv3D")
        if pad_mode != "pad" and any(pad_list):
            raise ValueError(f"Conv3D: pad {pad!r} needs pad_mode='pad' (got {pad_mode!r})")
        super().__init__(out_channel=int(out_channel), kernel_size=_triple(kernel_size, "kernel_size", "Conv3D"),
                         mode=mode, pad_mode=pad_mode, pad_list=pad_list, strides=_triple(stride, "stride", "Conv3D"),
                         dilation=_triple(dilation, "dilation", "Conv3D"), group=int(group), data_format=data_format)

    def effective_kernel(self) -> tuple[int, ...]:
        return tuple((k - 1) * d + 1 for k, d in zip(self.attrs["kernel_size"], self.attrs["dilation"]))

    def compute(self, x, weight):
        a = self.attrs
        return lax.conv_general_dilated(
            x, weight, window_strides=a["strides"], padding=self._spatial_pads(jnp.shape(x), self.effective_kernel()),
            rhs_dilation=a["dilation"], dimension_numbers=("NCDHW", "OIDHW", "NCDHW"), feature_group_count=a["group"])
