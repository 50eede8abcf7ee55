"""Image resizing on NCHW: MindSpore's ``ResizeBilinearV2`` and ``ResizeNearestNeighbor``, with its three
coordinate conventions (``align_corners``, ``half_pixel_centers``, or neither: TensorFlow's legacy mapping).
Sharding rules: ``graphpar.planner.rules.misc_rules``."""

from __future__ import annotations

from typing import Any

import jax
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


class CropAndResize(Primitive):
    """``CropAndResize(method="bilinear", extrapolation_value=0.0)(x, boxes, box_index, crop_size)``: for each box
    ``(y1, x1, y2, x2)`` (normalised: 0 and 1 are the first and last pixel) of image ``box_index[i]`` of NHWC
    ``x``, a ``crop_size = (crop_height, crop_width)`` resampling (bilinear or nearest); samples outside the image
    take ``extrapolation_value``. Output (num_boxes, crop_height, crop_width, C), float32. MindSpore's
    "bilinear_v2" method is not built (refused by name)."""

    input_names = ("x", "boxes", "box_index")

    def __init__(self, method: str = "bilinear", extrapolation_value: float = 0.0):
        if method not in ("bilinear", "nearest"):
            raise ValueError(f"CropAndResize(method): {method!r} is not supported; valid: 'bilinear', 'nearest'")
        super().__init__(method=method, extrapolation_value=float(extrapolation_value))

    def compute(self, x, boxes, box_index, crop_size):
        crop_h, crop_w = _size(crop_size, "CropAndResize")
        _, height, width, _ = jnp.shape(x)
        images = jnp.take(jnp.asarray(x, jnp.float32), jnp.asarray(box_index), axis=0)  # (B, H, W, C)

        def coords(lo, hi, size, n):
            step = (hi - lo) * (size - 1) / (n - 1) if n > 1 else jnp.zeros_like(lo)
            start = lo * (size - 1) if n > 1 else 0.5 * (lo + hi) * (size - 1)
            return start[:, None] + jnp.arange(n)[None, :] * step[:, None]  # (B, n)

        ys = coords(boxes[:, 0], boxes[:, 2], height, crop_h)
        xs = coords(boxes[:, 1], boxes[:, 3], width, crop_w)
        inside = ((ys >= 0) & (ys <= height - 1))[:, :, None] & ((xs >= 0) & (xs <= width - 1))[:, None, :]
        pick = jax.vmap(lambda img, yi, xi: img[yi[:, None], xi[None, :]])  # (B, h, w, C)
        if self.attrs["method"] == "nearest":
            out = pick(images, jnp.clip(jnp.round(ys), 0, height - 1).astype(jnp.int32),
                       jnp.clip(jnp.round(xs), 0, width - 1).astype(jnp.int32))
        else:
            y0 = jnp.clip(jnp.floor(ys), 0, height - 1)
            x0 = jnp.clip(jnp.floor(xs), 0, width - 1)
            y1, x1 = jnp.clip(y0 + 1, 0, height - 1), jnp.clip(x0 + 1, 0, width - 1)
            dy, dx = (ys - y0)[:, :, None, None], (xs - x0)[:, None, :, None]
            i = lambda a: a.astype(jnp.int32)  # noqa: E731
            top = pick(images, i(y0), i(x0)) * (1 - dx) + pick(images, i(y0), i(x1)) * dx
            bottom = pick(images, i(y1), i(x0)) * (1 - dx) + pick(images, i(y1), i(x1)) * dx
            out = top * (1 - dy) + bottom * dy
        return jnp.where(inside[..., None], out, self.attrs["extrapolation_value"])
