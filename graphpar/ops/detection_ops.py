"""MindSpore's box primitives, with MindSpore's arguments and outputs:

* ``IOU(mode='iou')(anchor_boxes, gt_boxes)`` → ``(M, N)``: the overlap of every ground-truth box (M of them) with
  every anchor (N), over their union (``'iou'``) or over the ground truth's area (``'iof'``);
* ``BoundingBoxEncode(means=(0., 0., 0., 0.), stds=(1., 1., 1., 1.))(anchor_box, groundtruth_box)`` → ``(N, 4)``:
  the deltas ``(dx, dy, dw, dh)`` from each anchor to its ground truth, normalised by ``means``/``stds``.

Boxes are ``(x0, y0, x1, y1)`` in pixel coordinates, whose width is ``x1 - x0 + 1`` as MindSpore's kernels count
it. Sharding (``graphpar.planner.rules.detection_rules``) as MindSpore's IOUInfo / BoundingBoxEncodeInfo: the box
coordinate dim is never split; IOU splits N and M independently, BoundingBoxEncode splits both inputs' N alike.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from graphpar.ops.primitive import Primitive


def _area(boxes):
    return (boxes[..., 2] - boxes[..., 0] + 1) * (boxes[..., 3] - boxes[..., 1] + 1)


class IOU(Primitive):
    """``IOU(mode='iou')(anchor_boxes, gt_boxes)``: ``(M, N)`` overlaps of ``gt_boxes`` (M, 4) with
    ``anchor_boxes`` (N, 4), in ``anchor_boxes``' dtype."""

    input_names = ("anchor_boxes", "gt_boxes")

    def __init__(self, mode: str = "iou"):
        if mode not in ("iou", "iof"):
            raise KeyError(f"IOU: mode must be 'iou' or 'iof', got {mode!r}")
        super().__init__(mode=mode)

    def compute(self, anchor_boxes, gt_boxes):
        a, g = anchor_boxes[None, :, :], gt_boxes[:, None, :]
        width = jnp.maximum(jnp.minimum(a[..., 2], g[..., 2]) - jnp.maximum(a[..., 0], g[..., 0]) + 1, 0)
        height = jnp.maximum(jnp.minimum(a[..., 3], g[..., 3]) - jnp.maximum(a[..., 1], g[..., 1]) + 1, 0)
        overlap = width * height
        if self.attrs["mode"] == "iou":
            denominator = _area(a) + _area(g) - overlap
        else:
            denominator = jnp.broadcast_to(_area(g), overlap.shape)
        return (overlap / denominator).astype(anchor_boxes.dtype)


def _four_floats(kind: str, name: str, value: Any) -> tuple[float, ...]:
    if not isinstance(value, (tuple, list)) or len(value) != 4 or any(
            isinstance(v, bool) or not isinstance(v, (int, float)) for v in value):
        raise TypeError(f"{kind}: {name} must be a tuple of 4 numbers, got {value!r}")
    return tuple(float(v) for v in value)


class BoundingBoxEncode(Primitive):
    """``BoundingBoxEncode(means=(0., 0., 0., 0.), stds=(1., 1., 1., 1.))(anchor_box, groundtruth_box)``: for each
    pair, ``((gx - px) / pw, (gy - py) / ph, log(gw / pw), log(gh / ph))`` (centres and widths), minus ``means``,
    over ``stds``."""

    input_names = ("anchor_box", "groundtruth_box")

    def __init__(self, means: Any = (0.0, 0.0, 0.0, 0.0), stds: Any = (1.0, 1.0, 1.0, 1.0)):
        means, stds = _four_floats(self.name, "means", means), _four_floats(self.name, "stds", stds)
        if any(s == 0 for s in stds):
            raise ValueError(f"BoundingBoxEncode: stds must not contain 0, got {stds}")
        super().__init__(means=means, stds=stds)

    def compute(self, anchor_box, groundtruth_box):
        def centre_size(b):
            return ((b[..., 0] + b[..., 2]) * 0.5, (b[..., 1] + b[..., 3]) * 0.5,
                    b[..., 2] - b[..., 0] + 1.0, b[..., 3] - b[..., 1] + 1.0)

        px, py, pw, ph = centre_size(anchor_box)
        gx, gy, gw, gh = centre_size(groundtruth_box)
        deltas = jnp.stack([(gx - px) / pw, (gy - py) / ph, jnp.log(gw / pw), jnp.log(gh / ph)], axis=-1)
        means = jnp.asarray(self.attrs["means"], deltas.dtype)
        stds = jnp.asarray(self.attrs["stds"], deltas.dtype)
        return ((deltas - means) / stds).astype(anchor_box.dtype)
