"""Pixel-moving transforms on HWC images: padding, crops, flips, and the HWC→CHW layout change."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from graphpar.dataset._rng import below
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
    batch_drawn = True

    def __init__(self, size: int | Sequence[int], padding: int | Sequence[int] | None = None,
                 pad_if_needed: bool = False, fill_value: int | Sequence[int] = 0,
                 padding_mode: Border = Border.CONSTANT):
        self.size = size_pair(size, "RandomCrop")
        self.padding = _padding(padding, "RandomCrop") if padding is not None else (0, 0, 0, 0)
        self.pad_if_needed = bool(pad_if_needed)
        self.fill_value = _fill(fill_value, "RandomCrop")
        self.padding_mode = _border(padding_mode, "RandomCrop")
        self._padded_sizes: dict[tuple[int, ...], tuple[int, int]] = {}

    def _padded(self, shape: tuple[int, ...]) -> tuple[int, int]:
        """Height and width of the padded image an input of ``shape`` is cropped from (checked once per shape:
        this runs for every sample's draw)."""
        size = self._padded_sizes.get(shape)
        if size is None:
            size = self._padded_sizes[shape] = self._check_padded(shape)
        return size

    def _check_padded(self, shape: tuple[int, ...]) -> tuple[int, int]:
        if len(shape) not in (2, 3):
            raise DatasetError(f"RandomCrop: expected an HWC (or HW) image, got shape {shape}")
        left, top, right, bottom = self.padding
        ph, pw = shape[0] + top + bottom, shape[1] + left + right
        h, w = self.size
        grow = self.pad_if_needed and (ph < h or pw < w)
        if len(self.fill_value) == 3 and len(shape) == 3 and shape[2] != 3 and \
                self.padding_mode is Border.CONSTANT and (any(self.padding) or grow):
            raise DatasetError(f"padding: fill_value {self.fill_value} has 3 values for {shape[2]} channels")
        if grow:
            ph, pw = ph + 2 * max(h - ph, 0), pw + 2 * max(w - pw, 0)
        if ph < h or pw < w:
            raise DatasetError(f"RandomCrop: crop size {self.size} exceeds the (padded) image {(ph, pw)}; "
                               "pass padding or pad_if_needed=True")
        return ph, pw

    def out_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return self.size + tuple(shape[2:])

    def draw(self, rng: np.random.Generator, shape: tuple[int, ...]) -> tuple[int, int]:
        """(top, left) of the window in the padded image."""
        ph, pw = self._padded(shape)
        h, w = self.size
        top = below(rng, ph - h + 1)
        return top, below(rng, pw - w + 1)

    def _pad_all(self, x: np.ndarray, batch: bool) -> np.ndarray:
        """``x`` (one image, or a stack of them when ``batch``) padded as the crop reads it."""
        fn, lead = (_pad_stack, 1) if batch else (pad, 0)
        x = fn(x, self.padding, self.fill_value, self.padding_mode)
        h, w = self.size
        if self.pad_if_needed and (x.shape[lead] < h or x.shape[lead + 1] < w):
            dh, dw = max(h - x.shape[lead], 0), max(w - x.shape[lead + 1], 0)
            x = fn(x, (dw, dh, dw, dh), self.fill_value, self.padding_mode)
        return x

    def apply_drawn(self, x: np.ndarray, params: tuple[int, int]) -> np.ndarray:
        self._padded(x.shape)
        top, left = params
        h, w = self.size
        if self.padding_mode is Border.CONSTANT and not self.pad_if_needed:
            return self._window(x, top - self.padding[1], left - self.padding[0])
        x = self._pad_all(x, batch=False)
        return x[top:top + h, left:left + w]

    def _window(self, x: np.ndarray, top: int, left: int) -> np.ndarray:
        """The crop at (``top``, ``left``) of the constant-padded image, without building it (only the window is
        copied, and not even that when it lies inside the image)."""
        h, w = self.size
        r0, r1 = max(top, 0), min(top + h, x.shape[0])
        c0, c1 = max(left, 0), min(left + w, x.shape[1])
        if (r0, r1, c0, c1) == (top, top + h, left, left + w):
            return x[r0:r1, c0:c1]
        out = np.empty((h, w) + x.shape[2:], x.dtype)
        out[...] = np.asarray(self.fill_value if x.ndim == 3 else self.fill_value[:1], dtype=x.dtype)
        if r0 < r1 and c0 < c1:
            out[r0 - top:r1 - top, c0 - left:c1 - left] = x[r0:r1, c0:c1]
        return out

    def apply_batch_drawn(self, x: np.ndarray, params: Sequence[tuple[int, int]]) -> np.ndarray:
        self._padded(x.shape[1:])
        h, w = self.size
        out = np.empty((len(x), h, w) + x.shape[3:], x.dtype)
        padded = self._pad_all(x, batch=True)  # one padded copy of the stack, then a window copy per row
        for k, (top, left) in enumerate(params):
            out[k] = padded[k, top:top + h, left:left + w]
        return out


def _pad_stack(x: np.ndarray, ltrb: tuple[int, int, int, int], fill: tuple[int, ...], mode: Border) -> np.ndarray:
    """``pad`` of every image of the stack ``x`` ((N, H, W, C) or (N, H, W)), as ``pad`` pads each."""
    left, top, right, bottom = ltrb
    if not any(ltrb):
        return x
    widths = [(0, 0), (top, bottom), (left, right)] + [(0, 0)] * (x.ndim - 3)
    if mode is not Border.CONSTANT:
        return np.pad(x, widths, mode=mode.value)
    out = np.empty((x.shape[0], x.shape[1] + top + bottom, x.shape[2] + left + right) + x.shape[3:], x.dtype)
    out[...] = np.asarray(fill if x.ndim == 4 else fill[:1], dtype=x.dtype)
    out[:, top:top + x.shape[1], left:left + x.shape[2]] = x
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
    batch_drawn = True
    axis = 1

    def __init__(self, prob: float = 0.5):
        if not 0.0 <= prob <= 1.0:
            raise DatasetError(f"{type(self).__name__}: prob must be in [0, 1], got {prob!r}")
        self.prob = float(prob)

    def out_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(shape)

    def draw(self, rng: np.random.Generator, shape: tuple[int, ...]) -> bool:
        """Whether to flip."""
        if len(shape) not in (2, 3):
            raise DatasetError(f"{type(self).__name__}: expected an HWC (or HW) image, got shape {shape}")
        return bool(rng.random() < self.prob)

    def apply_drawn(self, x: np.ndarray, params: bool) -> np.ndarray:
        _check_image(x, type(self).__name__)
        if not params:
            return x
        return x[:, ::-1] if self.axis == 1 else x[::-1]  # slicing: np.flip's axis handling costs more

    def apply_batch_drawn(self, x: np.ndarray, params: Sequence[bool]) -> np.ndarray:
        if x.ndim not in (3, 4):
            raise DatasetError(f"{type(self).__name__}: expected HWC (or HW) images, got a batch of shape {x.shape}")
        flip = np.flatnonzero(np.fromiter(params, bool, len(x)))
        if not len(flip):
            return x
        out = np.array(x)
        out[flip] = x[flip, :, ::-1] if self.axis == 1 else x[flip, ::-1]
        return out


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

    def out_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        if len(shape) == 2:
            return (1,) + tuple(shape)
        return (shape[2], shape[0], shape[1]) if len(shape) == 3 else tuple(shape)

    def apply_batch(self, x: np.ndarray) -> np.ndarray:
        if x.ndim == 3:
            return x[:, None]
        if x.ndim != 4:
            raise DatasetError(f"HWC2CHW: expected HWC images, got a batch of shape {x.shape}")
        return np.ascontiguousarray(x.transpose(0, 3, 1, 2))
