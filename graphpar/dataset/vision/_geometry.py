"""Pixel-moving transforms on HWC images: padding, crops, flips, and the HWC→CHW layout change."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from graphpar.dataset.transforms._base import Transform
from graphpar.dataset.vision._enums import Border
from graphpar.dataset.vision._resize import size_pair
from graphpar.errors import DatasetError


def _padding(padding: int | Sequence[int], who: str) -> tuple[int, int, int, int]:
    """(left, top, right, bottom) from MindSpore 2.x's forms: one value, (left/right, top/bottom), or four."""
    values = (padding,) if isinstance(padding, int) else tuple(padding)
    if not values or not all(isinstance(v, (int, np.integer)) and v >= 0 for v in values):
        raise DatasetError(f"{who}: padding must be non-negative ints, got {padding!r}")
    if len(values) == 1:
        return (int(values[0]),) * 4
    if len(values) == 2:
        return int(values[0]), int(values[1]), int(values[0]), int(values[1])
    if len(values) == 4:
        return tuple(int(v) for v in values)  # type: ignore[return-value]
    raise DatasetError(f"{who}: padding must have 1, 2 or 4 values, got {padding!r}")


def _fill(fill_value: int | Sequence[int], who: str) -> tuple[int, ...]:
    values = (fill_value,) if isinstance(fill_value, (int, np.integer)) else tuple(fill_value)
    if len(values) not in (1, 3) or not all(isinstance(v, (int, np.integer)) and 0 <= v <= 255 for v in values):
        raise DatasetError(f"{who}: fill_value must be an int or 3 ints in [0, 255], got {fill_value!r}")
    return tuple(int(v) for v in values)


def _border(mode: Border, who: str) -> Border:
    if not isinstance(mode, Border):
        raise DatasetError(f"{who}: padding_mode must be a vision.Border, got {mode!r}")
    return mode


def pad(img: np.ndarray, ltrb: tuple[int, int, int, int], fill: tuple[int, ...], mode: Border) -> np.ndarray:
    left, top, right, bottom = ltrb
    if not any(ltrb):
        return img
    widths = [(top, bottom), (left, right)] + [(0, 0)] * (img.ndim - 2)
    if mode is not Border.CONSTANT:
        return np.pad(img, widths, mode=mode.value)
    if len(fill) == 3 and img.ndim == 3 and img.shape[2] != 3:
        raise DatasetError(f"padding: fill_value {fill} has 3 values for {img.shape[2]} channels")
    # Written out rather than np.pad: this is the hot path of the CIFAR augmentation, and np.pad's generality
    # costs more than the copy.
    out = np.empty((img.shape[0] + top + bottom, img.shape[1] + left + right) + img.shape[2:], img.dtype)
    out[...] = np.asarray(fill if img.ndim == 3 else fill[:1], dtype=img.dtype)
    out[top:top + img.shape[0], left:left + img.shape[1]] = img
    return out


def _check_image(x: np.ndarray, who: str) -> None:
    if x.ndim not in (2, 3):
        raise DatasetError(f"{who}: expected an HWC (or HW) image, got shape {x.shape}")


class Pad(Transform):
    """Pad the borders by ``padding`` pixels (one value, (left/right, top/bottom), or left, top, right, bottom)."""

    def __init__(self, padding: int | Sequence[int], fill_value: int | Sequence[int] = 0,
                 padding_mode: Border = Border.CONSTANT):
        self.padding = _padding(padding, "Pad")
        self.fill_value = _fill(fill_value, "Pad")
        self.padding_mode = _border(padding_mode, "Pad")

    def apply(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        _check_image(x, "Pad")
        return pad(x, self.padding, self.fill_value, self.padding_mode)


class RandomCrop(Transform):
    """Pad (optionally), then crop ``size`` at a uniformly random position."""

    is_random = True

    def __init__(self, size: int | Sequence[int], padding: int | Sequence[int] | None = None,
                 pad_if_needed: bool = False, fill_value: int | Sequence[int] = 0,
                 padding_mode: Border = Border.CONSTANT):
        self.size = size_pair(size, "RandomCrop")
        self.padding = _padding(padding, "RandomCrop") if padding is not None else (0, 0, 0, 0)
        self.pad_if_needed = bool(pad_if_needed)
        self.fill_value = _fill(fill_value, "RandomCrop")
        self.padding_mode = _border(padding_mode, "RandomCrop")

    def apply(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        _check_image(x, "RandomCrop")
        if self.padding_mode is Border.CONSTANT and not self.pad_if_needed:
            return self._crop_constant(x, rng)
        x = pad(x, self.padding, self.fill_value, self.padding_mode)
        h, w = self.size
        if self.pad_if_needed and (x.shape[0] < h or x.shape[1] < w):
            dh, dw = max(h - x.shape[0], 0), max(w - x.shape[1], 0)
            x = pad(x, (dw, dh, dw, dh), self.fill_value, self.padding_mode)
        if x.shape[0] < h or x.shape[1] < w:
            raise DatasetError(f"RandomCrop: crop size {self.size} exceeds the (padded) image {x.shape[:2]}; "
                               "pass padding or pad_if_needed=True")
        top = int(rng.integers(0, x.shape[0] - h + 1))
        left = int(rng.integers(0, x.shape[1] - w + 1))
        return x[top:top + h, left:left + w]


    def _crop_constant(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The crop of the constant-padded image without building it: the same draws, only the window copied."""
        left_pad, top_pad, right_pad, bottom_pad = self.padding
        ph, pw = x.shape[0] + top_pad + bottom_pad, x.shape[1] + left_pad + right_pad
        h, w = self.size
        if ph < h or pw < w:
            raise DatasetError(f"RandomCrop: crop size {self.size} exceeds the (padded) image {(ph, pw)}; "
                               "pass padding or pad_if_needed=True")
        if len(self.fill_value) == 3 and x.ndim == 3 and x.shape[2] != 3:
            raise DatasetError(f"padding: fill_value {self.fill_value} has 3 values for {x.shape[2]} channels")
        top = int(rng.integers(0, ph - h + 1)) - top_pad
        left = int(rng.integers(0, pw - w + 1)) - left_pad
        r0, r1 = max(top, 0), min(top + h, x.shape[0])
        c0, c1 = max(left, 0), min(left + w, x.shape[1])
        if (r0, r1, c0, c1) == (top, top + h, left, left + w):
            return x[r0:r1, c0:c1]
        out = np.empty((h, w) + x.shape[2:], x.dtype)
        out[...] = np.asarray(self.fill_value if x.ndim == 3 else self.fill_value[:1], dtype=x.dtype)
        if r0 < r1 and c0 < c1:
            out[r0 - top:r1 - top, c0 - left:c1 - left] = x[r0:r1, c0:c1]
        return out


class CenterCrop(Transform):
    """Crop ``size`` at the centre; a smaller image is zero-padded first (as MindSpore)."""

    def __init__(self, size: int | Sequence[int]):
        self.size = size_pair(size, "CenterCrop")

    def apply(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        _check_image(x, "CenterCrop")
        h, w = self.size
        dh, dw = max(h - x.shape[0], 0), max(w - x.shape[1], 0)
        if dh or dw:
            x = pad(x, (dw // 2, dh // 2, dw - dw // 2, dh - dh // 2), (0,), Border.CONSTANT)
        top, left = (x.shape[0] - h) // 2, (x.shape[1] - w) // 2
        return x[top:top + h, left:left + w]


class _RandomFlip(Transform):
    is_random = True
    axis = 1

    def __init__(self, prob: float = 0.5):
        if not 0.0 <= prob <= 1.0:
            raise DatasetError(f"{type(self).__name__}: prob must be in [0, 1], got {prob!r}")
        self.prob = float(prob)

    def apply(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        _check_image(x, type(self).__name__)
        if rng.random() >= self.prob:
            return x
        return x[:, ::-1] if self.axis == 1 else x[::-1]  # slicing: np.flip's axis handling costs more


class RandomHorizontalFlip(_RandomFlip):
    """Mirror left-right with probability ``prob``."""

    axis = 1


class RandomVerticalFlip(_RandomFlip):
    """Mirror top-bottom with probability ``prob``."""

    axis = 0


class HWC2CHW(Transform):
    """Channels-last to channels-first (the layout ``nn.Conv2d`` expects); an HW image gains a channel axis."""

    def apply(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        if x.ndim == 2:
            return x[None]
        if x.ndim != 3:
            raise DatasetError(f"HWC2CHW: expected an HWC image, got shape {x.shape}")
        return np.ascontiguousarray(x.transpose(2, 0, 1))

    batchable = True

    def apply_batch(self, x: np.ndarray) -> np.ndarray:
        if x.ndim == 3:
            return x[:, None]
        if x.ndim != 4:
            raise DatasetError(f"HWC2CHW: expected HWC images, got a batch of shape {x.shape}")
        return np.ascontiguousarray(x.transpose(0, 3, 1, 2))
