"""MindSpore's ``mindspore.nn.layer.activation`` module path: the activation Cells and ``get_activation``, and
``PReLU``, the activation with a learned slope."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from graphpar.common.parameter import Parameter
from graphpar.nn.cell import Cell
from graphpar.nn.layer.basic import (  # noqa: F401
    GELU, FastGelu, LogSoftmax, ReLU, ReLU6, Sigmoid, Softmax, Tanh, get_activation)
from graphpar.ops.norm_act_ops import PReLU as _PReLUOp


def _slopes(channel: Any, w: Any) -> np.ndarray:
    """MindSpore's ``nn.PReLU`` argument checks: ``w`` a float (every channel's slope), a list of ``channel``
    floats, or a float16 / float32 Tensor of shape ``(channel,)``."""
    if isinstance(channel, bool) or not isinstance(channel, int) or channel < 1:
        raise ValueError(f"PReLU: channel must be a positive int, got {channel!r}")
    if isinstance(w, (float, np.float32)):
        return np.full((channel,), w, np.float32)
    if isinstance(w, list):
        if len(w) != channel:
            raise ValueError(f"PReLU: w as a list must have channel={channel} elements, got {len(w)}")
        if not all(isinstance(v, (float, np.float32)) for v in w):
            raise ValueError(f"PReLU: every element of the list w must be a float, got {w!r}")
        return np.asarray(w, np.float32)
    if isinstance(w, (jax.Array, np.ndarray)):
        if w.dtype not in (np.float16, np.float32):
            raise ValueError(f"PReLU: w as a Tensor must be float16 or float32, got {w.dtype}")
        if w.ndim != 1 or w.shape[0] != channel:
            raise ValueError(f"PReLU: w as a Tensor must have shape ({channel},) (channel), got {tuple(w.shape)}")
        return np.asarray(w)
    raise TypeError(f"PReLU: w must be a float, a list or a Tensor, got {type(w).__name__}")


class PReLU(Cell):
    """``nn.PReLU(channel=1, w=0.25)``: ``x`` where positive, else ``a * x``, with ``a`` the trainable Parameter
    ``'a'`` of shape ``(channel,)``, one slope per channel (dimension 1 of ``x``; ``channel=1`` shares one slope).
    The op is ``ops.PReLU`` (its strategy: ``self.prelu.shard(((8, 1), (1,)))``)."""

    def __init__(self, channel: int = 1, w: Any = 0.25):
        super().__init__()
        self.w = Parameter(_slopes(channel, w), name="a")
        self.prelu = _PReLUOp()

    def construct(self, x):
        return self.prelu(x, self.w)
