"""MindSpore's interpolation and border-mode names."""

from __future__ import annotations

from enum import Enum


class Inter(Enum):
    """Interpolation mode of resizing transforms. ``BILINEAR`` is ``LINEAR``, ``BICUBIC`` and ``PILCUBIC`` are
    ``CUBIC`` (graphpar has one implementation of each kernel)."""

    NEAREST = 0
    LINEAR = 1
    BILINEAR = 1
    CUBIC = 2
    BICUBIC = 2
    PILCUBIC = 2
    AREA = 3


class Border(Enum):
    """How padding fills new pixels: a constant, the edge pixel, a reflection without or with the edge pixel."""

    CONSTANT = "constant"
    EDGE = "edge"
    REFLECT = "reflect"
    SYMMETRIC = "symmetric"


class SliceMode(Enum):
    """How ``SlicePatches`` treats an image whose sides the patch counts do not divide: ``PAD`` pads the bottom and
    right edges with ``fill_value`` up to whole patches, ``DROP`` drops the remainder."""

    PAD = 0
    DROP = 1
