"""Per-sample work moved after ``batch``: column transforms run once per batch, vectorized.

A map's trailing operations that act on one column and have a batch form give the same stacked result whether they
run on every row before ``batch`` or once on the stacked batch:

- deterministic ones (``TypeCast``, ``Resize``, ``Rescale``, ``Normalize``, ``HWC2CHW``: ``Transform.batchable``);
- random ones whose draws can be made apart from their work (``RandomCrop``, ``RandomHorizontalFlip``,
  ``RandomVerticalFlip``: ``Transform.batch_drawn``). Each sample's parameters are drawn from the generator the
  sample would have had per sample (the map's stream at the sample's index, which every row carries to the batch as
  a trailing tag), in the same order, so the values are bitwise those of the per-sample path; only the work is done
  per batch. They move only when the operations staying per sample in that map draw nothing (the moved ones then
  start the sample's generator, as they would per sample).

Running them on the batch replaces thousands of small numpy calls (and the pipeline's per-row machinery) with a few
large ones, and stacks the smaller input type (uint8 pixels rather than float32). A run of affine pixel ops
(``Rescale`` then ``Normalize``, optionally followed by ``HWC2CHW``) is fused into one per-channel multiply-add
written straight into the output layout. A batch whose rows differ in shape before the moved operations (images of
different sizes cropped or resized to one) runs them row by row with the same draws, then stacks.

:func:`plan` decides, given the ``map`` and ``shuffle`` nodes right below a ``batch`` node (``BatchDataset.deferral``
walks down to them), which operations move: a map's batchable suffix moves when no per-sample work above it (nearer to ``batch``) reads the same column.
Values are unchanged, and so are the random draws of the operations that stay per sample (they keep their sample
index and seed).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from graphpar.dataset._mapfn import ApplyOps
from graphpar.dataset._rows import stack_column
from graphpar.dataset.transforms._base import Transform
from graphpar.dataset.vision._geometry import HWC2CHW
from graphpar.dataset.vision._pixels import Normalize, Rescale


def batchable(op: Any) -> bool:
    return isinstance(op, Transform) and ((op.batchable and not op.is_random) or op.batch_drawn)


def _draws(op: Any) -> bool:
    return isinstance(op, Transform) and op.is_random


def _shaped(op: Transform) -> bool:
    """Whether ``op`` tells its output shape (the batch draws every sample's parameters before any work, so the
    operations up to the last one that draws must)."""
    return type(op).out_shape is not Transform.out_shape


@dataclass
class Moved:
    """Operations of one map moved to the batch: ``ops`` on column ``col``; ``node`` is the map when they draw
    (its per-sample streams give the draws; its rows carry their index to the batch), else None."""

    col: int
    ops: list[Transform]
    node: Any = None


@dataclass
class Deferral:
    """What to do per sample and per batch for one pipeline: ``keep[id(map node)]`` ops stay per sample, and
    ``ops`` run on the stacked batch, in pipeline order."""

    keep: dict[int, int]
    ops: list[Moved]

    def tagged(self) -> list[Any]:
        """The maps whose rows carry their sample index to the batch, in the order the tags are appended."""
        return [m.node for m in self.ops if m.node is not None]


@dataclass(frozen=True)
class Stage:
    """One per-sample node right below a ``batch``: a map (``fn``: its operations) or a shuffle (``fn`` None)."""

    node: Any
    fn: ApplyOps | None


def plan(stages: Sequence[Stage]) -> Deferral | None:
    """The deferral for the ``stages`` below a batch, nearest first (None when nothing moves)."""
    keep: dict[int, int] = {}
    moved: list[Moved] = []
    blocked: set[int] = set()  # columns that per-sample work above reads or writes
    for stage in stages:
        node, fn = stage.node, stage.fn
        if fn is not None:
            if not fn.replace or len(fn.in_pos) != 1:
                break  # column layout changes: stop here, everything below stays per sample
            col = fn.in_pos[0]
            if col in blocked:
                break
            n = len(fn.ops)
            while n and batchable(fn.ops[n - 1]):
                n -= 1
            last_draw = max((i for i in range(n, len(fn.ops)) if _draws(fn.ops[i])), default=None)
            if last_draw is not None and (any(map(_draws, fn.ops[:n]))  # the moved draws would not start the
                                          or not all(map(_shaped, fn.ops[n:last_draw + 1]))):  # generator
                n = last_draw + 1
            if n < len(fn.ops):
                keep[id(node)] = n
                tail = list(fn.ops[n:])
                moved.insert(0, Moved(col, tail, node if any(map(_draws, tail)) else None))
            if n:
                blocked.add(col)
    return Deferral(keep, moved) if moved else None


class _Run:
    """One map's moved operations on its column, with the per-sample streams their draws come from."""

    def __init__(self, moved: Moved, streams: Any, tag: int | None):
        self.col, self.ops, self.streams, self.tag = moved.col, moved.ops, streams, tag
        self.steps: list[tuple[Any, int | None]] = []  # (batch callable, index of its op when it draws)
        i = 0
        while i < len(self.ops):
            j = i
            while j < len(self.ops) and not self.ops[j].batch_drawn:
                j += 1
            self.steps += [(step, None) for step in _fuse(self.ops[i:j])]
            if j < len(self.ops):
                self.steps.append((self.ops[j].apply_batch_drawn, j))
            i = j + 1

    def _drawn(self, shape: tuple[int, ...], indices: Sequence[int]) -> dict[int, list]:
        """Every sample's parameters for each drawing op, sample by sample in op order (the order of the sample's
        generator per sample); ``shape`` is one row's shape on entry."""
        shapes = []
        for op in self.ops:
            shapes.append(shape)
            shape = op.out_shape(shape)
        drawing = [(i, op, shapes[i]) for i, op in enumerate(self.ops) if op.batch_drawn]
        params: dict[int, list] = {i: [] for i, _, _ in drawing}
        generator = self.streams.generator
        for index in indices:
            rng = generator(index)
            for i, op, in_shape in drawing:
                params[i].append(op.draw(rng, in_shape))
        return params

    def batch(self, x: np.ndarray, tags: list[list[int]]) -> np.ndarray:
        params = self._drawn(x.shape[1:], tags[self.tag]) if self.streams is not None else {}
        for step, i in self.steps:
            x = step(x) if i is None else step(x, params[i])
        return x

    def row(self, x: np.ndarray, k: int, tags: list[list[int]]) -> np.ndarray:
        """Row ``k`` alone (the per-sample path, for batches whose rows differ in shape)."""
        rng = self.streams.generator(tags[self.tag][k]) if self.streams is not None else None
        for op in self.ops:
            x = op.apply(np.asarray(x), rng)
        return x


class BatchOps:
    """``batch`` of rows whose moved operations run on the stacked columns (``Deferral.ops`` for one pass)."""

    def __init__(self, ops: Sequence[Moved], streams: dict[int, Any], columns: Sequence[str]):
        tags = {id(node): t for t, node in enumerate(dict.fromkeys(m.node for m in ops if m.node is not None))}
        self.columns = list(columns)
        self.runs: dict[int, list[_Run]] = {}
        for m in ops:
            run = _Run(m, streams.get(id(m.node)) if m.node is not None else None,
                       tags.get(id(m.node)) if m.node is not None else None)
            self.runs.setdefault(m.col, []).append(run)
        self.n_tags = len(tags)

    def __call__(self, rows: Sequence[tuple]) -> tuple:
        width = len(self.columns)
        tags = [[r[width + t] for r in rows] for t in range(self.n_tags)]
        out = []
        for c, name in enumerate(self.columns):
            runs = self.runs.get(c)
            values = [r[c] for r in rows]
            if runs and len({v.shape for v in values}) > 1:
                for run in runs:
                    values = [run.row(v, k, tags) for k, v in enumerate(values)]
                out.append(stack_column(values, name))
                continue
            x = stack_column(values, name)
            for run in runs or ():
                x = run.batch(x, tags)
            out.append(x)
        return tuple(out)


def _fuse(ops: list[Transform]) -> list[Any]:
    """Batch callables for ``ops``: runs of Rescale/Normalize(HWC) [+ HWC2CHW] become one :class:`_Affine`."""
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
