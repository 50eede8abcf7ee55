"""The contract between a transform and the pipeline that runs it.

A graphpar transform takes its input columns and a ``numpy.random.Generator`` and returns its output columns. The
pipeline hands each sample a generator seeded from (seed, epoch, sample index), so a random crop is the same on any
number of workers and after a resume. Called directly (``RandomCrop(...)(image)``), a transform draws from the
process-wide eager generator instead and returns a numpy array, as MindSpore's eager mode does.

Any other Python callable is also a valid map operation: it is called with the column values and cannot see the
pipeline's generator (randomness it draws from elsewhere is not reproducible across workers).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from graphpar.dataset._rng import eager_rng
from graphpar.errors import DatasetError

Columns = tuple[np.ndarray, ...]


class Transform:
    """Base of every graphpar transform. Subclasses implement :meth:`apply` (one column in, one out) or, for other
    arities, override :meth:`apply_columns` and :attr:`num_inputs`.

    Attributes:
        is_random: whether the transform draws from the generator (pipelines seed those per sample).
        num_inputs: how many columns it consumes when ``map`` is given no ``input_columns``.
    """

    is_random: bool = False
    num_inputs: int = 1
    batchable: bool = False  # apply_batch on a stacked batch == stacking apply on each row (see dataset/_batched)
    batch_drawn: bool = False  # random, with apply(x, rng) == apply_drawn(x, draw(rng, x.shape)): the draws are
    # made per sample and the work per batch (apply_batch_drawn; see dataset/_batched)

    def apply(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        if self.batch_drawn:
            return self.apply_drawn(x, self.draw(rng, x.shape))
        raise NotImplementedError(f"{type(self).__name__} must implement apply(x, rng)")

    def apply_batch(self, x: np.ndarray) -> np.ndarray:
        """The transform of every row of the stacked batch ``x`` at once (``batchable`` transforms)."""
        raise NotImplementedError(f"{type(self).__name__} has no batched form")

    def out_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """The shape of the output for an input of ``shape`` (``batchable`` and ``batch_drawn`` transforms: the
        batch draws every sample's parameters first, so it needs each operation's input shape up front)."""
        raise NotImplementedError(f"{type(self).__name__} has no batched form")

    def draw(self, rng: np.random.Generator, shape: tuple[int, ...]) -> Any:
        """The random parameters for one input of ``shape`` (``batch_drawn`` transforms)."""
        raise NotImplementedError(f"{type(self).__name__} has no batched form")

    def apply_drawn(self, x: np.ndarray, params: Any) -> np.ndarray:
        """The transform of one input with parameters from :meth:`draw`."""
        raise NotImplementedError(f"{type(self).__name__} has no batched form")

    def apply_batch_drawn(self, x: np.ndarray, params: Sequence[Any]) -> np.ndarray:
        """The transform of every row of the stacked batch ``x``, row ``k`` with ``params[k]``."""
        return np.stack([self.apply_drawn(row, p) for row, p in zip(x, params)])

    def apply_columns(self, cols: Columns, rng: np.random.Generator) -> Columns:
        if len(cols) != 1:
            raise DatasetError(f"{self!r} takes 1 column, got {len(cols)}; give map() one input column for it")
        return (self.apply(np.asarray(cols[0]), rng),)

    def __call__(self, *cols: Any) -> Any:
        out = self.apply_columns(tuple(np.asarray(c) for c in cols), eager_rng())
        return out[0] if len(out) == 1 else out

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({fields})"


def is_random(op: Any) -> bool:
    return isinstance(op, Transform) and op.is_random


def num_inputs(op: Any) -> int | None:
    """How many leading columns ``op`` consumes when no ``input_columns`` are named (None: all of them)."""
    if isinstance(op, Transform):
        return op.num_inputs
    try:
        params = inspect.signature(op).parameters.values()
    except (TypeError, ValueError):
        return 1
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return None
    required = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty]
    return max(len(required), 1)


def as_columns(out: Any) -> Columns:
    """An operation's result as a tuple of arrays (a tuple result is several columns)."""
    if isinstance(out, tuple):
        return tuple(np.asarray(v) for v in out)
    return (np.asarray(out),)


def run_op(op: Callable[..., Any], cols: Columns, rng: np.random.Generator) -> Columns:
    if isinstance(op, Transform):
        return op.apply_columns(cols, rng)
    return as_columns(op(*cols))


def run_ops(ops: Sequence[Callable[..., Any]], cols: Columns, rng: np.random.Generator) -> Columns:
    for op in ops:
        cols = run_op(op, cols, rng)
    return cols
