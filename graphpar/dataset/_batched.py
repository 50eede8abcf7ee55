"""Per-sample work moved after ``batch``: deterministic column transforms run once per batch, vectorized.

A map's trailing operations that are deterministic and act on one column (``TypeCast``, ``Rescale``,
``Normalize``, ``HWC2CHW``: ``Transform.batchable``) give the same stacked result whether they run on every row
before ``batch`` or once on the stacked batch. Running them on the batch replaces thousands of small numpy calls
with a few large ones and stacks the smaller input type (uint8 pixels rather than float32). A run of affine pixel
ops (``Rescale`` then ``Normalize``, optionally followed by ``HWC2CHW``) is fused into one per-channel
multiply-add written straight into the output layout.

:func:`plan` decides, walking down from a ``batch`` node through ``map`` and ``shuffle`` nodes, which operations
move: a map's batchable suffix moves when no per-sample work above it (nearer to ``batch``) reads the same column.
Values are unchanged, and so are the random draws of the operations that stay per sample (they keep their sample
index and seed).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from graphpar.dataset.transforms._base import Transform


def batchable(op: Any) -> bool:
    return isinstance(op, Transform) and op.batchable and not op.is_random


@dataclass
class Deferral:
    """What to do per sample and per batch for one pipeline: ``keep[id(map node)]`` ops stay per sample, and
    ``ops`` (column position, operations) run on the stacked batch, in pipeline order."""

    keep: dict[int, int]
    ops: list[tuple[int, list[Transform]]]


def plan(batch_node: Any) -> Deferral | None:
    """The deferral for the chain below ``batch_node`` (None when nothing moves)."""
    from graphpar.dataset._ops import MapDataset, ShuffleDataset

    keep: dict[int, int] = {}
    moved: list[tuple[int, list[Transform]]] = []
    blocked: set[int] = set()  # columns that per-sample work above reads or writes
    node = batch_node._child
    while isinstance(node, (MapDataset, ShuffleDataset)):
        if isinstance(node, MapDataset):
            fn = node._fn
            if not fn.replace or len(fn.in_pos) != 1:
                break  # column layout changes: stop here, everything below stays per sample
            col = fn.in_pos[0]
            if col in blocked:
                break
            n = len(fn.ops)
            while n and batchable(fn.ops[n - 1]):
                n -= 1
            if n < len(fn.ops):
                keep[id(node)] = n
                moved.insert(0, (col, list(fn.ops[n:])))
            if n:
                blocked.add(col)
        node = node._child
    return Deferral(keep, moved) if moved else None


class BatchOps:
    """Run deferred operations on a stacked batch (a row of stacked columns), fusing affine pixel runs."""

    def __init__(self, ops: Sequence[tuple[int, Sequence[Transform]]]):
        self.ops = [(col, _fuse(list(run))) for col, run in ops]

    def __call__(self, row: tuple) -> tuple:
        out = list(row)
        for col, steps in self.ops:
            x = out[col]
            for step in steps:
                x = step(x)
            out[col] = x
        return tuple(out)


def _fuse(ops: list[Transform]) -> list[Any]:
    """Batch callables for ``ops``: runs of Rescale/Normalize(HWC) [+ HWC2CHW] become one :class:`_Affine`."""
    from graphpar.dataset.vision._geometry import HWC2CHW
    from graphpar.dataset.vision._pixels import Normalize, Rescale

    steps: list[Any] = []
    i = 0
    while i < len(ops):
        j = i
        affine: _Affine | None = None
        while j < len(ops) and (isinstance(ops[j], Rescale) or (isinstance(ops[j], Normalize) and ops[j].is_hwc)):
            affine = (affine or _Affine()).then(ops[j])
            j += 1
        if affine is not None:
            if j < len(ops) and isinstance(ops[j], HWC2CHW):
                affine.to_chw = True
                j += 1
            steps.append(affine)
            i = j
            continue
        steps.append(ops[i].apply_batch)
        i += 1
    return steps


class _Affine:
    """``x * scale + shift`` per channel (channels last) in float32, optionally written channels first."""

    def __init__(self) -> None:
        self.scale: np.ndarray = np.ones(1, np.float32)
        self.shift: np.ndarray = np.zeros(1, np.float32)
        self.to_chw = False
        self.checks: list[Transform] = []

    def then(self, op: Transform) -> _Affine:
        from graphpar.dataset.vision._pixels import Rescale

        if isinstance(op, Rescale):
            a, b = np.float32(op.rescale), np.float32(op.shift)
        else:
            inv = (1.0 / np.asarray(op.std, np.float32)).astype(np.float32)
            a, b = inv, (-np.asarray(op.mean, np.float32) * inv).astype(np.float32)
            self.checks.append(op)
        self.scale = (self.scale * a).astype(np.float32)
        self.shift = (self.shift * a + b).astype(np.float32)
        return self

    def __call__(self, x: np.ndarray) -> np.ndarray:
        channels = x.shape[-1] if x.ndim == 4 else 1
        for op in self.checks:  # the per-image errors, once per batch
            op.check_channels(x[0])
        scale, shift = self.scale, self.shift
        if x.ndim != 4 and (scale.size > 1 or shift.size > 1):
            scale, shift = scale[:1], shift[:1]
        elif scale.size == 1 and shift.size == 1 and channels > 1:
            scale, shift = np.broadcast_to(scale, channels), np.broadcast_to(shift, channels)
        if self.to_chw and x.ndim == 4:
            out = np.empty((x.shape[0], x.shape[3], x.shape[1], x.shape[2]), np.float32)
            src = x.transpose(0, 3, 1, 2)
            np.multiply(src, scale.reshape(1, -1, 1, 1), out=out, dtype=np.float32, casting="unsafe")
            out += shift.reshape(1, -1, 1, 1)
            return out
        if x.ndim == 4:
            out = np.empty(x.shape, np.float32)
            rows = out.reshape(x.shape[0] * x.shape[1], -1)
            np.multiply(x.reshape(rows.shape), np.tile(scale, x.shape[2]), out=rows, dtype=np.float32,
                        casting="unsafe")
            rows += np.tile(shift, x.shape[2])
        else:
            out = np.multiply(x, scale[0], dtype=np.float32, casting="unsafe")
            out += shift[0]
        if self.to_chw:  # (B, H, W) images gain a channel axis
            out = out[:, None]
        return out
