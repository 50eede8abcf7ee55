"""Losses with MindSpore's names, defaults and reductions (``reduction`` is ``'mean'``, ``'sum'`` or ``'none'``).

Each loss is written with graphpar ops, so it appears in the graph IR as named op nodes and its ops can be sharded.
A loss with ``reduction='none'`` returns one value per sample; training then follows MindSpore, whose gradient
uses a sensitivity of ones (the gradient of the sum) while ``LossMonitor`` prints the mean.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from graphpar.nn.cell import Cell
from graphpar.ops import math_ops, nn_ops

_REDUCTIONS = ("mean", "sum", "none")


class LossBase(Cell):
    """Base class: subclasses compute an elementwise loss and call ``self.get_loss(x, weights)``."""

    def __init__(self, reduction: str = "mean"):
        super().__init__()
        if reduction not in _REDUCTIONS:
            raise ValueError(f"{type(self).__name__}: reduction must be one of {_REDUCTIONS}, got {reduction!r}")
        self.reduction = reduction
        self.reduce_mean = math_ops.ReduceMean()
        self.reduce_sum = math_ops.ReduceSum()
        self.mul = math_ops.Mul()

    def get_loss(self, x: Any, weights: Any = 1.0) -> Any:
        x = x.astype(jnp.float32) if x.dtype != jnp.float32 else x
        if not (isinstance(weights, float) and weights == 1.0):
            x = self.mul(weights, x)
        if self.reduction == "mean":
            return self.reduce_mean(x)
        if self.reduction == "sum":
            return self.reduce_sum(x)
        return x


Loss = LossBase


class MSELoss(LossBase):
    """``MSELoss(reduction='mean')``: (logits - labels)²."""

    def __init__(self, reduction: str = "mean"):
        super().__init__(reduction)
        self.sub = math_ops.Sub()
        self.square = math_ops.Square()

    def construct(self, logits, labels):
        return self.get_loss(self.square(self.sub(logits, labels)))


class L1Loss(LossBase):
    """``L1Loss(reduction='mean')``: |logits - labels|."""

    def __init__(self, reduction: str = "mean"):
        super().__init__(reduction)
        self.sub = math_ops.Sub()
        self.abs = math_ops.Abs()

    def construct(self, logits, labels):
        return self.get_loss(self.abs(self.sub(logits, labels)))


class MAELoss(L1Loss):
    """``MAELoss(reduction='mean')``: the mean absolute error |logits - labels|, the two broadcast against each
    other (MindSpore's ``(3,)`` logits against ``(2, 3)`` labels give a ``(2, 3)`` loss with ``reduction='none'``):
    L1Loss's computation under MindSpore's other name."""


class SmoothL1Loss(LossBase):
    def __init__(self, beta: float = 1.0, reduction: str = "none"):
        super().__init__(reduction)
        self.beta = beta

    def construct(self, logits, labels):
        diff = jnp.abs(logits - labels)
        x = jnp.where(diff < self.beta, 0.5 * diff * diff / self.beta, diff - 0.5 * self.beta)
        return self.get_loss(x)


class SoftmaxCrossEntropyWithLogits(LossBase):
    """``SoftmaxCrossEntropyWithLogits(sparse=False, reduction='none')``; with ``sparse=True`` labels are class
    indices of shape (N,), otherwise one-hot or probabilities of shape (N, C)."""

    def __init__(self, sparse: bool = False, reduction: str = "none"):
        super().__init__(reduction)
        self.sparse = sparse
        self.softmax_cross_entropy = nn_ops.SoftmaxCrossEntropyWithLogits()
        self.one_hot = nn_ops.LabelOneHot()  # refuses labels outside [0, classes), after the step

    def construct(self, logits, labels):
        if self.sparse:
            if labels.ndim != 1 or logits.ndim != 2 or labels.shape[0] != logits.shape[0]:
                raise ValueError(f"SoftmaxCrossEntropyWithLogits(sparse=True): labels must have shape "
                                 f"({logits.shape[0]},) for logits {tuple(logits.shape)}, got "
                                 f"{tuple(labels.shape)}")
            if not jnp.issubdtype(labels.dtype, jnp.integer):  # MindSpore's kernel takes int32/int64 only
                raise TypeError(f"SoftmaxCrossEntropyWithLogits(sparse=True): labels are class indices and must have "
                                f"an integer dtype (int32 or int64), got {labels.dtype}; a float label would be "
                                "truncated to a class (2.7 -> 2). Cast the labels in the dataset "
                                "(e.g. TypeCast(mstype.int32)) or pass sparse=False with one-hot labels")
            labels = self.one_hot(labels.astype(jnp.int32), logits.shape[-1], jnp.asarray(1.0, logits.dtype),
                                  jnp.asarray(0.0, logits.dtype))
        elif labels.shape != logits.shape:
            raise ValueError(f"SoftmaxCrossEntropyWithLogits(sparse=False): labels must have the logits' shape "
                             f"{tuple(logits.shape)}, got {tuple(labels.shape)}; pass sparse=True for class indices")
        x = self.softmax_cross_entropy(logits, labels)[0]
        return self.get_loss(x)


class CrossEntropyLoss(LossBase):
    """``CrossEntropyLoss(reduction='mean', label_smoothing=0.0)`` with class-index labels."""

    def __init__(self, weight: Any = None, ignore_index: int = -100, reduction: str = "mean",
                 label_smoothing: float = 0.0):
        super().__init__(reduction)
        self.label_smoothing = label_smoothing

    def construct(self, logits, labels):
        log_p = jnp.asarray(logits) - jnp.max(logits, axis=-1, keepdims=True)
        log_p = log_p - jnp.log(jnp.sum(jnp.exp(log_p), axis=-1, keepdims=True))
        n = logits.shape[-1]
        hot = (labels[..., None] == jnp.arange(n)).astype(log_p.dtype)
        if self.label_smoothing:
            hot = hot * (1 - self.label_smoothing) + self.label_smoothing / n
        return self.get_loss(-jnp.sum(hot * log_p, axis=-1))
