"""Multi-layer perceptrons built from ``nn.Dense``, with the deterministic initial values the tests and benchmarks
train them from (the same values in every parallel mode, so a plan's numbers can be compared with one device's).

- ``MLP``: two Dense layers ``fc1`` (ReLU) and ``fc2``, optionally a ``Dropout`` between them.
- ``DenseStack``: any number of Dense layers in a CellList ``layers``, from given weights; optional MatMul and
  BiasAdd strategies per layer and pipeline stages (consecutive layers on consecutive stages).
- ``FFN`` / ``DeepFFN``: a transformer block's residual feed-forward (d -> 4d -> d, GELU) and a stack of them.
- ``search_mlp``: the 8-device search problem (a ``DenseStack`` of square layers, a hand plan by name), with
  ``mlp_data`` and ``mlp_train_cell``.

Every initial value comes from ``numpy.random.default_rng(seed)``, never from the global random state.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from graphpar import nn
from graphpar.common.tensor import Tensor

Strategy = tuple[tuple[int, ...], ...]


def _normal(rng: np.random.Generator, shape: tuple[int, ...], scale: float) -> Tensor:
    return Tensor(rng.normal(0, scale, shape).astype(np.float32))


def _scale(scale: float | None, fan_in: int) -> float:
    return 1 / np.sqrt(fan_in) if scale is None else scale


class MLP(nn.Cell):
    """``fc1`` (d_in -> hidden, ReLU), an optional ``drop`` (``nn.Dropout(p=dropout)``), ``fc2`` (hidden -> d_out).

    Weights are normal with standard deviation ``scale`` (``None``: 1/sqrt(fan-in)), drawn fc1 first from
    ``default_rng(seed)``; biases are zero.
    """

    def __init__(self, d_in: int = 16, hidden: int = 32, d_out: int = 8, seed: int = 0, scale: float | None = 0.3,
                 dropout: float | None = None):
        super().__init__()
        rng = np.random.default_rng(seed)
        self.fc1 = nn.Dense(d_in, hidden, weight_init=_normal(rng, (hidden, d_in), _scale(scale, d_in)),
                            bias_init="zeros", activation="relu")
        self.drop = nn.Dropout(p=dropout) if dropout is not None else None
        self.fc2 = nn.Dense(hidden, d_out, weight_init=_normal(rng, (d_out, hidden), _scale(scale, hidden)),
                            bias_init="zeros")

    def construct(self, x):
        x = self.fc1(x)
        if self.drop is not None:
            x = self.drop(x)
        return self.fc2(x)


class DenseStack(nn.Cell):
    """``len(weights)`` Dense layers in the CellList ``layers``; weight i is (out, in) as MindSpore's Dense keeps it.

    Arguments:
        weights: one float32 array per layer.
        biases: one per layer, or ``None`` for zeros.
        stages: put layer i on pipeline stage ``i * stages // len(weights)`` (``None``: no stage set).
        matmul_strategies / bias_strategies: one ``shard()`` strategy per layer for its ``matmul`` / ``bias_add``
            (``None``: that layer's op is not hinted).
        shared_relu: ``False``: each Dense but the last has its own ReLU activation. ``True``: the Dense layers
            have none, and one ``nn.ReLU`` cell ``relu`` follows every layer, the last included.
    """

    def __init__(self, weights: Sequence[np.ndarray], biases: Sequence[np.ndarray] | None = None,
                 stages: int | None = None, matmul_strategies: Sequence[Strategy | None] | None = None,
                 bias_strategies: Sequence[Strategy | None] | None = None, shared_relu: bool = False):
        super().__init__()
        n = len(weights)
        self.layers = nn.CellList([
            nn.Dense(w.shape[1], w.shape[0], weight_init=Tensor(w),
                     bias_init="zeros" if biases is None else Tensor(biases[i]),
                     activation="relu" if i < n - 1 and not shared_relu else None)
            for i, w in enumerate(weights)])
        for i, layer in enumerate(self.layers):
            if stages is not None:
                layer.pipeline_stage = i * stages // n
            if matmul_strategies is not None and matmul_strategies[i] is not None:
                layer.matmul.shard(matmul_strategies[i])
            if bias_strategies is not None and bias_strategies[i] is not None:
                layer.bias_add.shard(bias_strategies[i])
        self.shared_relu = shared_relu
        if shared_relu:
            self.relu = nn.ReLU()

    def construct(self, x):
        for layer in self.layers:
            x = layer(x)
            if self.shared_relu:
                x = self.relu(x)
        return x


class FFN(nn.Cell):
    """d -> 4d (GELU) -> d with a residual connection (a transformer block's MLP); normal 1/sqrt(fan-in) weights
    from ``default_rng(seed)``, zero biases."""

    def __init__(self, d: int, seed: int):
        super().__init__()
        rng = np.random.default_rng(seed)
        self.fc = nn.Dense(d, 4 * d, weight_init=_normal(rng, (4 * d, d), _scale(None, d)), bias_init="zeros")
        self.act = nn.GELU()
        self.proj = nn.Dense(4 * d, d, weight_init=_normal(rng, (d, 4 * d), _scale(None, 4 * d)), bias_init="zeros")

    def construct(self, x):
        return self.proj(self.act(self.fc(x))) + x


class DeepFFN(nn.Cell):
    """``layers`` FFN blocks (block i seeded ``i``); ``recompute`` marks every block with
    ``Cell.recompute(**options)``."""

    def __init__(self, d: int = 32, layers: int = 8, recompute: bool = False, **options: Any):
        super().__init__()
        self.blocks = nn.CellList([FFN(d, i) for i in range(layers)])
        if recompute:
            for block in self.blocks:
                block.recompute(**options)

    def construct(self, x):
        for block in self.blocks:
            x = block(x)
        return x


# hand plans of ``search_mlp`` on 8 devices: the strategy of layer i's MatMul(transpose_b=True) (x: (batch, in),
# w: (out, in))
HAND_PLANS: dict[str, Callable[[int], Strategy]] = {
    "data_parallel": lambda i: ((8, 1), (1, 1)),
    "megatron": lambda i: ((1, 1), (8, 1)) if i % 2 == 0 else ((1, 8), (1, 8)),
    "hybrid_4x2": lambda i: ((4, 1), (2, 1)) if i % 2 == 0 else ((4, 2), (1, 2)),
}


def search_mlp(layers: int = 8, width: int = 1024, plan: str | None = None, seed: int = 0) -> DenseStack:
    """``layers`` Dense(width, width), each followed by the shared ReLU; weights normal 1/sqrt(width), biases
    normal 0.1 (drawn layer by layer, weight then bias); ``plan`` names a ``HAND_PLANS`` entry (None: no hints),
    the bias following the MatMul's output split."""
    rng = np.random.default_rng(seed)
    weights, biases = [], []
    for _ in range(layers):
        weights.append((rng.normal(size=(width, width)) / np.sqrt(width)).astype(np.float32))
        biases.append((rng.normal(size=(width,)) * 0.1).astype(np.float32))
    if plan is None:
        return DenseStack(weights, biases, shared_relu=True)
    matmul = [HAND_PLANS[plan](i) for i in range(layers)]
    bias = [(s[0][:1] + s[1][:1], s[1][:1]) for s in matmul]
    return DenseStack(weights, biases, matmul_strategies=matmul, bias_strategies=bias, shared_relu=True)


def mlp_data(batch: int, width: int = 1024, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(x, y), both (batch, width) float32 normal: ``search_mlp``'s regression batch."""
    rng = np.random.default_rng(seed)
    return rng.normal(size=(batch, width)).astype(np.float32), rng.normal(size=(batch, width)).astype(np.float32)


def mlp_train_cell(net: nn.Cell, lr: float = 0.01) -> nn.TrainOneStepCell:
    """MSE loss and MindSpore's Momentum(lr, 0.9): the search tests' and benchmark's training cell."""
    return nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.Momentum(net.trainable_params(), lr, 0.9))
