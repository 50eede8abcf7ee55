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
