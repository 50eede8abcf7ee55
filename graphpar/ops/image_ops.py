"""MindSpore's ``GridSampler2D`` image-sampling primitive, with MindSpore's arguments and outputs:

* ``GridSampler2D(interpolation_mode='bilinear', padding_mode='zeros', align_corners=False)(input_x, grid)``: samples
  ``input_x`` (N, C, H, W) at the normalised positions ``grid`` (N, H_out, W_out, 2), ``grid[..., 0]`` along the
  width, ``[-1, 1]`` spanning the input (pixel centres with ``align_corners``, else pixel edges); positions outside
  read 0 (``zeros``), the nearest edge pixel (``border``) or the mirrored position (``reflection``).

``bicubic`` sampling is refused by name. Sharding (``graphpar.planner.rules.image_rules``): the batch, input and
grid alike (MindSpore's GridSampler2DInfo asks the two strategies to be equal).
"""

from __future__ import annotations

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
