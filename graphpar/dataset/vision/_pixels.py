"""Pixel-value transforms: rescaling, normalizing, tensor conversion, and decoding encoded images."""

from __future__ import annotations

import io
from collections.abc import Sequence

import numpy as np

from graphpar.dataset.transforms._base import Transform
from graphpar.errors import DatasetError


class Rescale(Transform):
    """``x * rescale + shift`` as float32 (``Rescale(1 / 255, 0)`` maps uint8 pixels to [0, 1])."""

    batchable = True

    def __init__(self, rescale: float, shift: float):
        self.rescale, self.shift = float(rescale), float(shift)

    def apply_batch(self, x: np.ndarray) -> np.ndarray:
        return self.apply(x, None)

    def out_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(shape)

    def apply(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        out = x.astype(np.float32) * np.float32(self.rescale)
        if self.shift:
            out += np.float32(self.shift)
        return out


class Normalize(Transform):
    """``(x - mean) / std`` per channel, as float32, in the units of the input (0-255 for uint8 images, 0-1 after
    ``Rescale(1/255)``). ``is_hwc=False`` reads channels first."""

    def __init__(self, mean: Sequence[float], std: Sequence[float], is_hwc: bool = True):
        self.mean = tuple(float(m) for m in mean)
        self.std = tuple(float(s) for s in std)
        if len(self.mean) != len(self.std) or not self.mean:
            raise DatasetError(f"Normalize: mean {mean!r} and std {std!r} must have the same, non-zero length")
        if not all(0.0 <= m <= 255.0 for m in self.mean) or not all(0.0 < s <= 255.0 for s in self.std):
            raise DatasetError(f"Normalize: mean must be in [0, 255] and std in (0, 255], got {mean!r}, {std!r}")
        self.is_hwc = bool(is_hwc)
        self._scale = (1.0 / np.asarray(self.std, np.float32)).astype(np.float32)
        self._mean = np.asarray(self.mean, np.float32)
        self._tiled: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def _rows(self, width: int) -> tuple[np.ndarray, np.ndarray]:
        """Mean and 1/std repeated along an image row of ``width`` pixels (cached per width)."""
        tiled = self._tiled.get(width)
        if tiled is None:
            tiled = self._tiled[width] = (np.tile(self._mean, width), np.tile(self._scale, width))
        return tiled

    batchable = True

    def check_channels(self, x: np.ndarray) -> None:
        """Raise if ``x`` (one image) has a channel count the mean and std do not fit."""
        if x.ndim == 2:
            channels = 1
        else:
            channels = x.shape[-1] if self.is_hwc else x.shape[0]
        if len(self.mean) not in (1, channels):
            layout = "HWC" if self.is_hwc else "CHW"
            raise DatasetError(f"Normalize: {len(self.mean)} mean values for an image of shape {x.shape} "
                               f"({channels} channels read as {layout}); pass is_hwc={not self.is_hwc} if the "
                               "layout is the other one")

    def out_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(shape)

    def apply_batch(self, x: np.ndarray) -> np.ndarray:
        if x.ndim < 3:
            raise DatasetError(f"Normalize: expected a batch of images, got shape {x.shape}")
        self.check_channels(x[0])
        out = np.array(x, dtype=np.float32, order="C")
        if len(self.mean) == 1 or x.ndim == 3:
            out -= self._mean[0]
            out *= self._scale[0]
        elif self.is_hwc:
            rows = out.reshape(out.shape[0] * out.shape[1], -1)
            mean, scale = self._rows(out.shape[2])
            rows -= mean
            rows *= scale
        else:
            out -= self._mean.reshape(1, -1, 1, 1)
            out *= self._scale.reshape(1, -1, 1, 1)
        return out

    def apply(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        self.check_channels(x)
        out = np.array(x, dtype=np.float32, order="C")
        if len(self.mean) == 1 or x.ndim == 2:
            out -= self._mean[0]
            out *= self._scale[0]
        elif self.is_hwc:
            # Broadcasting over a trailing axis of 3 is slow in numpy; rows of W*C values are fast.
            rows = out.reshape(out.shape[0], -1)
            mean, scale = self._rows(out.shape[1])
            rows -= mean
            rows *= scale
        else:
            out -= self._mean.reshape(-1, 1, 1)
            out *= self._scale.reshape(-1, 1, 1)
        return out


class ToTensor(Transform):
    """HWC image (0-255) to a CHW float array in [0, 1] (``py_transforms.ToTensor``)."""

    def __init__(self, output_type: np.dtype | type = np.float32):
        self.output_type = np.dtype(output_type)

    def apply(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        if x.ndim == 2:
            x = x[:, :, None]
        return np.ascontiguousarray((x.astype(np.float32) / 255.0).transpose(2, 0, 1)).astype(self.output_type)


class Decode(Transform):
    """Encoded image bytes (a 1-D uint8 array: JPEG, PNG, BMP, ...) to an HWC uint8 RGB array, with Pillow."""

    def __init__(self, rgb: bool = True):
        self.rgb = bool(rgb)

    def apply(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return decode_image(x.tobytes(), "the input column", rgb=self.rgb)


def decode_image(data: bytes, where: str, rgb: bool = True) -> np.ndarray:
    """Decode with Pillow (imported only here, so the rest of graphpar.dataset does not need it)."""
    try:
        from PIL import Image, UnidentifiedImageError
    except ImportError as exc:
        raise DatasetError("decoding images needs Pillow: pip install pillow") from exc
    try:
        with Image.open(io.BytesIO(data)) as img:
            img = img.convert("RGB") if rgb else img
            out = np.asarray(img)
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise DatasetError(f"cannot decode {where} as an image ({len(data)} bytes): {exc}") from exc
    return out if out.ndim == 3 else out[:, :, None]
