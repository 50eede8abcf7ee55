"""``SlicePatches``: one image cut into a grid of patches, one output column per patch (MindSpore's dataset-slicing
transform, used to give each device its own patch of a large image)."""

from __future__ import annotations

import numpy as np

from graphpar.dataset.transforms._base import Columns, Transform
from graphpar.dataset.vision._enums import SliceMode
from graphpar.errors import DatasetError


def _count(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise DatasetError(f"SlicePatches: {name} must be an int, got {value!r}")
    if value < 1:
        raise DatasetError(f"SlicePatches: {name} must be a positive int, got {value!r}")
    return int(value)


class SlicePatches(Transform):
    """``SlicePatches(num_height=1, num_width=1, slice_mode=SliceMode.PAD, fill_value=0)``: an HW or HWC image cut
    into ``num_height x num_width`` patches, returned row by row (patch ``i * num_width + j`` is row ``i``, column
    ``j``), as MindSpore's. With ``SliceMode.PAD`` a patch is ``ceil(H / num_height) x ceil(W / num_width)`` and the
    bottom and right edges are padded with ``fill_value``; with ``SliceMode.DROP`` it is ``floor(...)`` and the
    remainder is dropped. ``map`` it with one output column per patch::

        dataset.map(SlicePatches(2, 2), input_columns="image", output_columns=["img0", "img1", "img2", "img3"])
    """

    def __init__(self, num_height: int = 1, num_width: int = 1, slice_mode: SliceMode = SliceMode.PAD,
                 fill_value: int = 0):
        self.num_height = _count(num_height, "num_height")
        self.num_width = _count(num_width, "num_width")
        if not isinstance(slice_mode, SliceMode):
            raise DatasetError(f"SlicePatches: slice_mode must be a vision.SliceMode (PAD or DROP), got "
                               f"{slice_mode!r}")
        self.slice_mode = slice_mode
        if isinstance(fill_value, bool) or not isinstance(fill_value, (int, np.integer)) or not 0 <= fill_value <= 255:
            raise DatasetError(f"SlicePatches: fill_value must be an int in [0, 255], got {fill_value!r}")
        self.fill_value = int(fill_value)

    def apply_columns(self, cols: Columns, rng: np.random.Generator) -> Columns:
        if len(cols) != 1:
            raise DatasetError(f"{self!r} takes 1 column, got {len(cols)}; give map() one input column for it")
        x = np.asarray(cols[0])
        if x.ndim not in (2, 3):
            raise DatasetError(f"SlicePatches: expected an <H, W> or <H, W, C> image, got shape {x.shape}")
        height, width = x.shape[:2]
        if self.slice_mode is SliceMode.PAD:
            ph, pw = -(-height // self.num_height), -(-width // self.num_width)
            padded = np.full((ph * self.num_height, pw * self.num_width) + x.shape[2:], self.fill_value, x.dtype)
            padded[:height, :width] = x
            x = padded
        else:
            ph, pw = height // self.num_height, width // self.num_width
            if ph == 0 or pw == 0:
                raise DatasetError(f"SlicePatches: an image of {height}x{width} pixels cut into {self.num_height}x"
                                   f"{self.num_width} patches with SliceMode.DROP leaves empty patches; use "
                                   "SliceMode.PAD or fewer patches")
        return tuple(np.ascontiguousarray(x[i * ph:(i + 1) * ph, j * pw:(j + 1) * pw])
                     for i in range(self.num_height) for j in range(self.num_width))
