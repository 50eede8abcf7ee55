"""General-purpose transforms (``mindspore.dataset.transforms``): casts, one-hot, composition."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from graphpar.dataset.transforms._base import Columns, Transform, is_random, num_inputs, run_ops
from graphpar.errors import DatasetError


def _ops_list(transforms: Any, who: str) -> list[Callable[..., Any]]:
    ops = list(transforms) if isinstance(transforms, (list, tuple)) else [transforms]
    if not ops or not all(callable(t) for t in ops):
        raise DatasetError(f"{who}: transforms must be a non-empty list of callables, got {transforms!r}")
    return ops


class TypeCast(Transform):
    """Cast a column to ``data_type`` (a graphpar/numpy dtype such as ``graphpar.int32``, or its name)."""

    def __init__(self, data_type: Any):
        try:
            self.data_type = np.dtype(data_type)
        except TypeError as exc:
            raise DatasetError(f"TypeCast: {data_type!r} is not a dtype; use e.g. graphpar.int32 or 'float32'") from exc

    batchable = True

    def apply(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return x.astype(self.data_type, copy=False)

    def apply_batch(self, x: np.ndarray) -> np.ndarray:
        return x.astype(self.data_type, copy=False)

    def out_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(shape)


class OneHot(Transform):
    """Integer labels to one-hot vectors of length ``num_classes`` (label smoothing as MindSpore's)."""

    def __init__(self, num_classes: int, smoothing_rate: float = 0.0):
        if not isinstance(num_classes, int) or num_classes < 1:
            raise DatasetError(f"OneHot: num_classes must be an int >= 1, got {num_classes!r}")
        if not 0.0 <= smoothing_rate <= 1.0:
            raise DatasetError(f"OneHot: smoothing_rate must be in [0, 1], got {smoothing_rate!r}")
        self.num_classes, self.smoothing_rate = num_classes, float(smoothing_rate)

    def apply(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        if x.dtype.kind not in "iu":
            raise DatasetError(f"OneHot: labels must be integers, got dtype {x.dtype}")
        if x.size and (x.min() < 0 or x.max() >= self.num_classes):
            raise DatasetError(f"OneHot: label values must be in [0, {self.num_classes}), got {x.min()}..{x.max()}")
        eye = np.eye(self.num_classes, dtype=np.float32 if self.smoothing_rate else x.dtype)
        out = eye[x]
        if self.smoothing_rate:
            out = out * (1.0 - self.smoothing_rate) + self.smoothing_rate / self.num_classes
        return out


class Duplicate(Transform):
    """One column in, two identical columns out (name both in ``output_columns``)."""

    def apply_columns(self, cols: Columns, rng: np.random.Generator) -> Columns:
        if len(cols) != 1:
            raise DatasetError(f"Duplicate takes 1 column, got {len(cols)}")
        return (cols[0], cols[0].copy())


class Compose(Transform):
    """Apply ``transforms`` in order as one operation."""

    def __init__(self, transforms: Sequence[Callable[..., Any]]):
        self.transforms = _ops_list(transforms, "Compose")
        self.is_random = any(is_random(t) for t in self.transforms)
        self.num_inputs = num_inputs(self.transforms[0]) or 1

    def apply_columns(self, cols: Columns, rng: np.random.Generator) -> Columns:
        return run_ops(self.transforms, cols, rng)


class RandomApply(Transform):
    """Apply ``transforms`` (in order) with probability ``prob``, else pass the input through."""

    is_random = True

    def __init__(self, transforms: Sequence[Callable[..., Any]], prob: float = 0.5):
        self.transforms = _ops_list(transforms, "RandomApply")
        if not 0.0 <= prob <= 1.0:
            raise DatasetError(f"RandomApply: prob must be in [0, 1], got {prob!r}")
        self.prob = float(prob)
        self.num_inputs = num_inputs(self.transforms[0]) or 1

    def apply_columns(self, cols: Columns, rng: np.random.Generator) -> Columns:
        if rng.random() < self.prob:
            return run_ops(self.transforms, cols, rng)
        return cols


class RandomChoice(Transform):
    """Apply one of ``transforms``, chosen uniformly per sample."""

    is_random = True

    def __init__(self, transforms: Sequence[Callable[..., Any]]):
        self.transforms = _ops_list(transforms, "RandomChoice")
        self.num_inputs = num_inputs(self.transforms[0]) or 1

    def apply_columns(self, cols: Columns, rng: np.random.Generator) -> Columns:
        return run_ops([self.transforms[int(rng.integers(len(self.transforms)))]], cols, rng)
