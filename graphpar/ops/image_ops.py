"""MindSpore's image-sampling primitives, with MindSpore's arguments and outputs:

* ``CropAndResize(method="bilinear", extrapolation_value=0.0)(image, boxes, box_index, crop_size)``: for each box
  ``(y1, x1, y2, x2)`` (normalised: 0 and 1 are the first and last pixel) of image ``box_index[i]`` of ``image``
  (B, H, W, C), a ``crop_size`` (h, w) crop sampled bilinearly (or to the nearest pixel), float32 (N, h, w, C);
  samples outside the image take ``extrapolation_value``;
* ``GridSampler2D(interpolation_mode='bilinear', padding_mode='zeros', align_corners=False)(input_x, grid)``: samples
  ``input_x`` (N, C, H, W) at the normalised positions ``grid`` (N, H_out, W_out, 2), ``grid[..., 0]`` along the
  width, ``[-1, 1]`` spanning the input (pixel centres with ``align_corners``, else pixel edges); positions outside
  read 0 (``zeros``), the nearest edge pixel (``border``) or the mirrored position (``reflection``).

MindSpore's ``bilinear_v2`` crop method and ``bicubic`` sampling are refused by name. Sharding
(``graphpar.planner.rules.image_rules``): CropAndResize splits the boxes (boxes and box_index alike), the image's
batch (each device crops from the images it holds, the crops summed across devices, as a Gather from a split
table) and the channels; GridSampler2D splits the batch, input and grid alike (MindSpore's GridSampler2DInfo).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from graphpar.ops.primitive import Primitive


def _bilinear(image, y, x, extrapolate):
    """``image`` (H, W, C) read at float positions ``y``, ``x`` (same shape): bilinear, with ``extrapolate(valid,
    values)`` deciding what out-of-range positions read."""
    h, w = image.shape[0], image.shape[1]
    y0, x0 = jnp.floor(y), jnp.floor(x)
    wy, wx = (y - y0)[..., None], (x - x0)[..., None]

    def read(yy, xx):
        inside = (yy >= 0) & (yy <= h - 1) & (xx >= 0) & (xx <= w - 1)
        px = image[jnp.clip(yy, 0, h - 1).astype(jnp.int32), jnp.clip(xx, 0, w - 1).astype(jnp.int32)]
        return extrapolate(inside[..., None], px)

    top = read(y0, x0) * (1 - wx) + read(y0, x0 + 1) * wx
    bottom = read(y0 + 1, x0) * (1 - wx) + read(y0 + 1, x0 + 1) * wx
    return top * (1 - wy) + bottom * wy


class CropAndResize(Primitive):
    """``CropAndResize(method="bilinear", extrapolation_value=0.0)(image, boxes, box_index, crop_size)``."""

    input_names = ("image", "boxes", "box_index")

    def __init__(self, method: str = "bilinear", extrapolation_value: float = 0.0):
        if method not in ("bilinear", "nearest"):
            raise ValueError(f"CropAndResize: method must be 'bilinear' or 'nearest' (MindSpore's 'bilinear_v2' is "
                             f"not supported), got {method!r}")
        if isinstance(extrapolation_value, bool) or not isinstance(extrapolation_value, (int, float)):
            raise TypeError(f"CropAndResize: extrapolation_value must be a number, got {extrapolation_value!r}")
        super().__init__(method=method, extrapolation_value=float(extrapolation_value))

    def compute(self, image, boxes, box_index, crop_size):
        if (not isinstance(crop_size, (tuple, list)) or len(crop_size) != 2
                or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in crop_size)):
            raise ValueError(f"CropAndResize: crop_size must be a tuple of two ints >= 1, got {crop_size!r}")
        if image.ndim != 4 or boxes.shape[-1:] != (4,) or box_index.shape != boxes.shape[:1]:
            raise ValueError(f"CropAndResize: image must be (B, H, W, C), boxes (N, 4) and box_index (N,); got "
                             f"{image.shape}, {boxes.shape}, {box_index.shape}")
        ch, cw = crop_size
        h, w = image.shape[1], image.shape[2]
        image = image.astype(jnp.float32)
        boxes = boxes.astype(jnp.float32)
        fill = self.attrs["extrapolation_value"]

        def axis(start, end, size, steps):
            if steps == 1:
                return jnp.full((1,), 0.5 * (start + end) * (size - 1))
            return start * (size - 1) + jnp.arange(steps) * (end - start) * (size - 1) / (steps - 1)

        def one(box, index):
            ys, xs = axis(box[0], box[2], h, ch), axis(box[1], box[3], w, cw)
            y, x = jnp.meshgrid(ys, xs, indexing="ij")
            picture = image[index]
            inside = ((y >= 0) & (y <= h - 1) & (x >= 0) & (x <= w - 1))[..., None]
            if self.attrs["method"] == "nearest":
                values = picture[jnp.clip(jnp.round(y), 0, h - 1).astype(jnp.int32),
                                 jnp.clip(jnp.round(x), 0, w - 1).astype(jnp.int32)]
            else:
                values = _bilinear(picture, y, x, lambda ok, px: px)
            return jnp.where(inside, values, fill)

        return jax.vmap(one)(boxes, box_index.astype(jnp.int32))


def _unnormalise(g, size, align_corners):
    return (g + 1) / 2 * (size - 1) if align_corners else ((g + 1) * size - 1) / 2


def _reflect(coord, size, align_corners):
    """Mirror ``coord`` into range: about the pixel centres 0 and size - 1 (align_corners), else the edges."""
    low, span = (0.0, size - 1.0) if align_corners else (-0.5, float(size))
    if span <= 0:
        return jnp.zeros_like(coord)
    rel = jnp.abs(coord - low)
    flips = jnp.floor(rel / span)
    extra = rel - flips * span
    out = jnp.where(flips % 2 == 0, low + extra, low + span - extra)
    return out if align_corners else jnp.clip(out, 0, size - 1)


class GridSampler2D(Primitive):
    """``GridSampler2D(interpolation_mode='bilinear', padding_mode='zeros', align_corners=False)(input_x, grid)``."""

    input_names = ("input_x", "grid")

    def __init__(self, interpolation_mode: str = "bilinear", padding_mode: str = "zeros", align_corners: bool = False):
        if interpolation_mode not in ("bilinear", "nearest"):
            raise ValueError(f"GridSampler2D: interpolation_mode must be 'bilinear' or 'nearest' ('bicubic' is not "
                             f"supported), got {interpolation_mode!r}")
        if padding_mode not in ("zeros", "border", "reflection"):
            raise ValueError(f"GridSampler2D: padding_mode must be 'zeros', 'border' or 'reflection', got "
                             f"{padding_mode!r}")
        super().__init__(interpolation_mode=interpolation_mode, padding_mode=padding_mode,
                         align_corners=bool(align_corners))

    def compute(self, x, grid):
        if x.ndim != 4 or grid.ndim != 4 or grid.shape[-1] != 2 or grid.shape[0] != x.shape[0]:
            raise ValueError(f"GridSampler2D: input_x must be (N, C, H, W) and grid (N, H_out, W_out, 2) with the "
                             f"same N; got {x.shape} and {grid.shape}")
        h, w = x.shape[2], x.shape[3]
        align, padding = self.attrs["align_corners"], self.attrs["padding_mode"]
        px = _unnormalise(grid[..., 0], w, align)
        py = _unnormalise(grid[..., 1], h, align)
        if padding == "border":
            px, py = jnp.clip(px, 0, w - 1), jnp.clip(py, 0, h - 1)
        elif padding == "reflection":
            px, py = _reflect(px, w, align), _reflect(py, h, align)

        def one(image, ys, xs):  # image (C, H, W) -> (H, W, C) for the reader; out (C, H_out, W_out)
            picture = jnp.moveaxis(image, 0, -1)
            if self.attrs["interpolation_mode"] == "nearest":
                yy, xx = jnp.round(ys), jnp.round(xs)
                inside = ((yy >= 0) & (yy <= h - 1) & (xx >= 0) & (xx <= w - 1))[..., None]
                values = picture[jnp.clip(yy, 0, h - 1).astype(jnp.int32), jnp.clip(xx, 0, w - 1).astype(jnp.int32)]
                out = jnp.where(inside, values, 0)
            else:
                out = _bilinear(picture, ys, xs, lambda ok, v: jnp.where(ok, v, 0))
            return jnp.moveaxis(out, -1, 0)

        return jax.vmap(one)(x, py, px).astype(x.dtype)
