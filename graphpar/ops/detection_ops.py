"""MindSpore's ``BoundingBoxEncode`` box primitive, with MindSpore's arguments and outputs:

* ``BoundingBoxEncode(means=(0., 0., 0., 0.), stds=(1., 1., 1., 1.))(anchor_box, groundtruth_box)`` → ``(N, 4)``:
  the deltas ``(dx, dy, dw, dh)`` from each anchor to its ground truth, normalised by ``means``/``stds``.

Boxes are ``(x0, y0, x1, y1)`` in pixel coordinates, whose width is ``x1 - x0 + 1`` as MindSpore's kernels count
it. Sharding (``graphpar.planner.rules.box_linalg_rules``) as MindSpore's BoundingBoxEncodeInfo: the box
coordinate dim is never split, both inputs' N split alike. (``IOU`` lives beside the other box checks.)
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from graphpar.ops.primitive import Primitive


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
