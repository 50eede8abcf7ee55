"""Resizing: separable interpolation kernels in numpy, and the transforms built on them.

Each output coordinate reads a few input coordinates ("taps") with weights; resizing an image applies the row taps,
then the column taps. The geometry follows OpenCV, which MindSpore's C++ transforms call: half-pixel centres and
replicated borders for LINEAR/CUBIC (a = -0.75), ``floor(dst * scale)`` for NEAREST, box averaging for AREA when
shrinking (AREA enlarges as LINEAR). Integer images are rounded and saturated back to their dtype; OpenCV's
fixed-point arithmetic can differ from this by one grey level.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np

from graphpar.dataset.transforms._base import Transform
from graphpar.dataset.vision._enums import Inter
from graphpar.errors import DatasetError


@functools.lru_cache(maxsize=64)
def _taps(n_in: int, n_out: int, mode: Inter) -> tuple[np.ndarray, np.ndarray]:
    """(indices, weights), both (n_out, k): output i = sum_j weights[i, j] * input[indices[i, j]]."""
    scale = n_in / n_out
    dst = np.arange(n_out, dtype=np.float64)
    if mode is Inter.NEAREST:
        idx = np.minimum(np.floor(dst * scale).astype(np.int64), n_in - 1)[:, None]
        return idx, np.ones((n_out, 1), np.float32)
    if mode is Inter.AREA and scale > 1.0:
        k = int(math.ceil(scale)) + 1
        start = dst * scale
        first = np.floor(start).astype(np.int64)
        idx = first[:, None] + np.arange(k)[None, :]
        lo = np.maximum(idx, start[:, None])
        hi = np.minimum(idx + 1, (start + scale)[:, None])
        weights = np.clip(hi - lo, 0.0, None) / scale
        return np.clip(idx, 0, n_in - 1), weights.astype(np.float32)
    src = (dst + 0.5) * scale - 0.5
    base = np.floor(src)
    frac = src - base
    base = base.astype(np.int64)
    if mode is Inter.CUBIC:
        a = -0.75
        offsets = np.arange(-1, 3)
        d = np.abs(frac[:, None] - offsets[None, :])
        weights = np.where(d <= 1, ((a + 2) * d - (a + 3)) * d * d + 1,
                           np.where(d < 2, ((a * d - 5 * a) * d + 8 * a) * d - 4 * a, 0.0))
        idx = base[:, None] + offsets[None, :]
    else:  # LINEAR, and AREA when enlarging
        weights = np.stack([1.0 - frac, frac], axis=1)
        idx = np.stack([base, base + 1], axis=1)
    return np.clip(idx, 0, n_in - 1), weights.astype(np.float32)


def _along(img: np.ndarray, axis: int, taps: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    idx, w = taps
    shape = [1] * img.ndim
    shape[axis] = idx.shape[0]
    # In-place arithmetic: every fresh large temporary costs page faults, which dominated the naive version.
    out = np.take(img, idx[:, 0], axis=axis)
    out *= w[:, 0].reshape(shape)
    for j in range(1, idx.shape[1]):
        tap = np.take(img, idx[:, j], axis=axis)
        tap *= w[:, j].reshape(shape)
        out += tap
    return out


def resize(img: np.ndarray, height: int, width: int, mode: Inter = Inter.LINEAR) -> np.ndarray:
    """``img`` (H, W) or (H, W, C) resized to (height, width), keeping its dtype."""
    if img.ndim not in (2, 3):
        raise DatasetError(f"Resize: expected an HWC or HW image, got shape {img.shape}")
    h, w = img.shape[:2]
    if (h, w) == (height, width):
        return img
    if mode is Inter.NEAREST:
        rows, cols = _taps(h, height, mode)[0][:, 0], _taps(w, width, mode)[0][:, 0]
        return img[rows][:, cols]
    out = np.ascontiguousarray(img, dtype=np.float32)  # a flipped view would keep its strides under astype
    # Columns first: the row pass then gathers whole contiguous rows, about 3x faster than the other order.
    out = _along(out, 1, _taps(w, width, mode))
    out = _along(out, 0, _taps(h, height, mode))
    if np.issubdtype(img.dtype, np.integer):
        info = np.iinfo(img.dtype)
        np.rint(out, out=out)
        return np.clip(out, info.min, info.max, out=out).astype(img.dtype)
    return out.astype(img.dtype, copy=False)


_BATCH_ELEMENTS = 1 << 16  # output values per image up to which a batch is resized in one vectorized pass


def resize_batch(x: np.ndarray, height: int, width: int, mode: Inter = Inter.LINEAR) -> np.ndarray:
    """Every image of the stack ``x`` (N, H, W[, C]) resized as :func:`resize` resizes it (the same float32
    operations, element for element). Small images go in one pass over the stack; large ones one at a time, where
    a stack's temporaries would leave the cache."""
    if x.ndim not in (3, 4):
        raise DatasetError(f"Resize: expected HWC or HW images, got a batch of shape {x.shape}")
    h, w = x.shape[1:3]
    if (h, w) == (height, width):
        return x
    if mode is Inter.NEAREST:
        rows, cols = _taps(h, height, mode)[0][:, 0], _taps(w, width, mode)[0][:, 0]
        return x[:, rows][:, :, cols]
    if height * width * int(np.prod(x.shape[3:])) > _BATCH_ELEMENTS:
        out = np.empty((len(x), height, width) + x.shape[3:], x.dtype)
        for k in range(len(x)):
            out[k] = resize(x[k], height, width, mode)
        return out
    out = np.ascontiguousarray(x, dtype=np.float32)
    out = _along(out, 2, _taps(w, width, mode))
    out = _along(out, 1, _taps(h, height, mode))
    if np.issubdtype(x.dtype, np.integer):
        info = np.iinfo(x.dtype)
        np.rint(out, out=out)
        return np.clip(out, info.min, info.max, out=out).astype(x.dtype)
    return out.astype(x.dtype, copy=False)


def size_pair(size: int | Sequence[int], who: str) -> tuple[int, int]:
    """MindSpore's size argument: an int (square) or (height, width), all positive."""
    pair = (size, size) if isinstance(size, int) else tuple(size)
    if len(pair) != 2 or not all(isinstance(v, (int, np.integer)) and v > 0 for v in pair):
        raise DatasetError(f"{who}: size must be a positive int or a (height, width) pair, got {size!r}")
    return int(pair[0]), int(pair[1])


def _inter(interpolation: Inter, who: str) -> Inter:
    if not isinstance(interpolation, Inter):
        raise DatasetError(f"{who}: interpolation must be a vision.Inter, got {interpolation!r}")
    return interpolation


class Resize(Transform):
    """Resize to (height, width); an int ``size`` sets the shorter side and keeps the aspect ratio."""

    def __init__(self, size: int | Sequence[int], interpolation: Inter = Inter.LINEAR):
        pair = size_pair(size, "Resize")
        self.size = size if isinstance(size, int) else pair
        self.interpolation = _inter(interpolation, "Resize")

    batchable = True

    def _target(self, shape: tuple[int, ...]) -> tuple[int, int]:
        if isinstance(self.size, int):
            h, w = shape[:2]
            if h <= w:
                return self.size, max(1, int(w * self.size / h))
            return max(1, int(h * self.size / w)), self.size
        return self.size

    def out_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return self._target(shape) + tuple(shape[2:])

    def apply(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return resize(x, *self._target(x.shape), self.interpolation)

    def apply_batch(self, x: np.ndarray) -> np.ndarray:
        return resize_batch(x, *self._target(x.shape[1:]), self.interpolation)


class RandomResizedCrop(Transform):
    """Crop a random area (fraction ``scale`` of the image, aspect ``ratio``) and resize it to ``size``; after
    ``max_attempts`` misses, fall back to a centre crop of the nearest valid aspect ratio."""

    is_random = True

    def __init__(self, size: int | Sequence[int], scale: Sequence[float] = (0.08, 1.0),
                 ratio: Sequence[float] = (3.0 / 4.0, 4.0 / 3.0), interpolation: Inter = Inter.BILINEAR,
                 max_attempts: int = 10):
        self.size = size_pair(size, "RandomResizedCrop")
        if len(scale) != 2 or not 0 <= scale[0] <= scale[1]:
            raise DatasetError(f"RandomResizedCrop: scale must be (min, max) with 0 <= min <= max, got {scale!r}")
        if len(ratio) != 2 or not 0 < ratio[0] <= ratio[1]:
            raise DatasetError(f"RandomResizedCrop: ratio must be (min, max) with 0 < min <= max, got {ratio!r}")
        if not isinstance(max_attempts, int) or max_attempts < 1:
            raise DatasetError(f"RandomResizedCrop: max_attempts must be an int >= 1, got {max_attempts!r}")
        self.scale, self.ratio = tuple(scale), tuple(ratio)
        self.interpolation = _inter(interpolation, "RandomResizedCrop")
        self.max_attempts = max_attempts

    def _window(self, h: int, w: int, rng: np.random.Generator) -> tuple[int, int, int, int]:
        area = h * w
        log_ratio = (math.log(self.ratio[0]), math.log(self.ratio[1]))
        for _ in range(self.max_attempts):
            target = area * rng.uniform(*self.scale)
            aspect = math.exp(rng.uniform(*log_ratio))
            cw = int(round(math.sqrt(target * aspect)))
            ch = int(round(math.sqrt(target / aspect)))
            if 0 < cw <= w and 0 < ch <= h:
                return int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1)), ch, cw
        aspect = w / h
        if aspect < self.ratio[0]:
            cw, ch = w, int(round(w / self.ratio[0]))
        elif aspect > self.ratio[1]:
            ch, cw = h, int(round(h * self.ratio[1]))
        else:
            ch, cw = h, w
        return (h - ch) // 2, (w - cw) // 2, ch, cw

    def apply(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        top, left, ch, cw = self._window(x.shape[0], x.shape[1], rng)
        return resize(x[top:top + ch, left:left + cw], *self.size, self.interpolation)
