"""MindSpore's ``ROIAlign(pooled_height, pooled_width, spatial_scale, sample_num=2, roi_end_mode=1)(features,
rois)`` → ``(rois_n, C, pooled_height, pooled_width)``: Mask R-CNN's RoI Align, as MindSpore's kernels compute it.

Each row of ``rois`` is ``(image_index, x0, y0, x1, y1)`` in image coordinates; scaled by ``spatial_scale`` (and
``x1, y1`` shifted by +1 first when ``roi_end_mode`` is 1; with 0 the box is at least 1x1), the box is cut into
``pooled_height x pooled_width`` bins, each averaging ``sample_num x sample_num`` bilinear samples at the centres
of its sub-cells; a sample outside ``[-1, H] x [-1, W]`` counts 0, one in ``[-1, 0)`` is clamped to 0, one past the
last row or column reads it. A row whose ``x0`` and ``x1`` are both 0 (within 0.001) is skipped: its output is 0.

The bilinear weights factor into a row matrix ``(rois_n, pooled_height, H)`` and a column matrix ``(rois_n,
pooled_width, W)``, and the image is picked with a one-hot over the batch, so the op is one contraction over
batch, rows and columns: a features batch split leaves partial sums that one AllReduce completes, as MindSpore's
ROIAlignInfo does (sharding rule in ``graphpar.planner.rules.image_rules``).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from graphpar.ops.primitive import Primitive


def _axis_weights(start, bin_size, pooled: int, grid: int, size: int):
    """``(rois_n, pooled, size)``: the averaged bilinear weights of one axis' samples (MindSpore's kernel's
    bilinear_interpolate, which factors per axis)."""
    p = jnp.arange(pooled, dtype=start.dtype)[None, :, None]
    i = jnp.arange(grid, dtype=start.dtype)[None, None, :]
    pos = start[:, None, None] + p * bin_size[:, None, None] + (i + 0.5) * bin_size[:, None, None] / grid
    inside = (pos >= -1.0) & (pos <= size)
    pos = jnp.maximum(pos, 0.0)
    low = jnp.floor(pos).astype(jnp.int32)
    last = low >= size - 1
    low = jnp.where(last, size - 1, low)
    high = jnp.where(last, size - 1, low + 1)
    frac = jnp.where(last, 0.0, pos - low).astype(start.dtype)
    weight = (jax.nn.one_hot(low, size, dtype=start.dtype) * (1.0 - frac)[..., None]
              + jax.nn.one_hot(high, size, dtype=start.dtype) * frac[..., None])
    return jnp.sum(weight * inside[..., None], axis=2) / grid


class ROIAlign(Primitive):
    """``ROIAlign(pooled_height, pooled_width, spatial_scale, sample_num=2, roi_end_mode=1)(features, rois)``."""

    input_names = ("features", "rois")

    def __init__(self, pooled_height: int, pooled_width: int, spatial_scale: float, sample_num: int = 2,
                 roi_end_mode: int = 1):
        for name, value in (("pooled_height", pooled_height), ("pooled_width", pooled_width),
                            ("sample_num", sample_num), ("roi_end_mode", roi_end_mode)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"ROIAlign: {name} must be an int, got {value!r}")
        if isinstance(spatial_scale, bool) or not isinstance(spatial_scale, (int, float)):
            raise TypeError(f"ROIAlign: spatial_scale must be a float, got {spatial_scale!r}")
        if pooled_height < 1 or pooled_width < 1:
            raise ValueError(f"ROIAlign: pooled_height and pooled_width must be >= 1, got {pooled_height}, "
                             f"{pooled_width}")
        if roi_end_mode not in (0, 1):
            raise ValueError(f"ROIAlign: roi_end_mode must be 0 or 1, got {roi_end_mode}")
        if sample_num < 1:
            raise ValueError(f"ROIAlign: sample_num must be >= 1, got {sample_num} (MindSpore's adaptive grid for "
                             f"sample_num <= 0 has a data-dependent number of samples per box, which a compiled "
                             f"program cannot have; give the grid size)")
        super().__init__(pooled_height=pooled_height, pooled_width=pooled_width, spatial_scale=float(spatial_scale),
                         sample_num=sample_num, roi_end_mode=roi_end_mode)

    def compute(self, features, rois):
        a = self.attrs
        if features.ndim != 4 or rois.ndim != 2 or rois.shape[1] != 5:
            raise ValueError(f"ROIAlign: features must be (N, C, H, W) and rois (rois_n, 5), got "
                             f"{list(features.shape)} and {list(rois.shape)}")
        dtype = features.dtype
        boxes = rois.astype(jnp.float32)
        scale, end = a["spatial_scale"], float(a["roi_end_mode"])
        x0, y0 = boxes[:, 1] * scale, boxes[:, 2] * scale
        width, height = (boxes[:, 3] + end) * scale - x0, (boxes[:, 4] + end) * scale - y0
        if a["roi_end_mode"] == 0:
            width, height = jnp.maximum(width, 1.0), jnp.maximum(height, 1.0)
        ph, pw, grid = a["pooled_height"], a["pooled_width"], a["sample_num"]
        rows = _axis_weights(y0, height / ph, ph, grid, features.shape[2])
        cols = _axis_weights(x0, width / pw, pw, grid, features.shape[3])
        skipped = (jnp.abs(boxes[:, 1]) < 0.001) & (jnp.abs(boxes[:, 3]) < 0.001)
        image = jnp.round(boxes[:, 0] + 0.00007).astype(jnp.int32)
        pick = jax.nn.one_hot(image, features.shape[0], dtype=jnp.float32) * ~skipped[:, None]
        out = jnp.einsum("rn,rph,nchw,rqw->rcpq", pick, rows, features.astype(jnp.float32), cols)
        return out.astype(dtype)
