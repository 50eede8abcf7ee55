"""Image resizing on NCHW: MindSpore's ``ResizeBilinearV2`` and ``ResizeNearestNeighbor``, with its three
coordinate conventions (``align_corners``, ``half_pixel_centers``, or neither: TensorFlow's legacy mapping).
Sharding rules: ``graphpar.planner.rules.misc_rules``."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np

from graphpar.ops.primitive import Primitive


def source_coords(in_size: int, out_size: int, align_corners: bool, half_pixel: bool) -> np.ndarray:
    """The (fractional) input coordinate each output index samples."""
    i = np.arange(out_size, dtype=np.float64)
    if align_corners:
        return i * ((in_size - 1) / (out_size - 1)) if out_size > 1 else np.zeros(out_size)
    scale = in_size / out_size
    return (i + 0.5) * scale - 0.5 if half_pixel else i * scale


def _check_flags(op: str, align_corners: bool, half_pixel_centers: bool) -> None:
    if align_corners and half_pixel_centers:
        raise ValueError(f"{op}: align_corners and half_pixel_centers cannot both be True")


def _size(size: Any, op: str) -> tuple[int, int]:
    size = tuple(int(s) for s in np.asarray(size).reshape(-1))
    if len(size) != 2 or min(size) <= 0:
        raise ValueError(f"{op}: size must be 2 positive ints (new_height, new_width), got {size}")
    return size


class ResizeBilinearV2(Primitive):
    """``ResizeBilinearV2(align_corners=False, half_pixel_centers=False)(x, size)``: bilinear resize of NCHW ``x``
    to ``size = (new_height, new_width)`` (a tuple or a constant)."""

    def __init__(self, align_corners: bool = False, half_pixel_centers: bool = False):
        _check_flags("ResizeBilinearV2", align_corners, half_pixel_centers)
        super().__init__(align_corners=bool(align_corners), half_pixel_centers=bool(half_pixel_centers))

    def compute(self, x, size):
        out = x
        for axis, new in zip((2, 3), _size(size, "ResizeBilinearV2")):
            n = jnp.shape(x)[axis]
            src = np.maximum(source_coords(n, new, self.attrs["align_corners"], self.attrs["half_pixel_centers"]), 0)
            lo = np.minimum(np.floor(src).astype(np.int32), n - 1)
            hi = np.minimum(lo + 1, n - 1)
            frac = jnp.asarray(src - lo, jnp.result_type(x)).reshape((-1,) + (1,) * (3 - axis))
            out = jnp.take(out, lo, axis=axis) * (1 - frac) + jnp.take(out, hi, axis=axis) * frac
        return out


class ResizeNearestNeighbor(Primitive):
    """``ResizeNearestNeighbor(size, align_corners=False, half_pixel_centers=False)(input_x)``: nearest-neighbour
    resize of NCHW ``input_x`` to ``size = (new_height, new_width)``."""

    def __init__(self, size: Any, align_corners: bool = False, half_pixel_centers: bool = False):
        _check_flags("ResizeNearestNeighbor", align_corners, half_pixel_centers)
        super().__init__(size=_size(size, "ResizeNearestNeighbor"), align_corners=bool(align_corners),
                         half_pixel_centers=bool(half_pixel_centers))

    def compute(self, x):
        out = x
        for axis, new in zip((2, 3), self.attrs["size"]):
            n = jnp.shape(x)[axis]
            if self.attrs["align_corners"]:
                idx = np.floor(source_coords(n, new, True, False) + 0.5)
            else:
                idx = np.floor((np.arange(new) + (0.5 if self.attrs["half_pixel_centers"] else 0.0)) * (n / new))
            out = jnp.take(out, np.clip(idx.astype(np.int32), 0, n - 1), axis=axis)
        return out
