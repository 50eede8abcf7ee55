"""Shared by the search tests and the search benchmark: models with hand plans, measured collective bytes."""

from __future__ import annotations

import numpy as np

import graphpar as ms
from graphpar import nn

# hand plans of the MLP: the strategy of layer i's MatMul(transpose_b=True) (x: (batch, in), w: (out, in))
HAND_PLANS = {
    "data_parallel": lambda i: ((8, 1), (1, 1)),
    "megatron": lambda i: ((1, 1), (8, 1)) if i % 2 == 0 else ((1, 8), (1, 8)),
    "hybrid_4x2": lambda i: ((4, 1), (2, 1)) if i % 2 == 0 else ((4, 2), (1, 2)),
}


class MLP(nn.Cell):
    """``layers`` Dense(width, width) + ReLU; ``plan`` names a hand plan (None: no hints)."""

    def __init__(self, layers=8, width=1024, plan=None, seed=0):
        super().__init__()
        rng = np.random.default_rng(seed)
        self.layers = nn.CellList([nn.Dense(width, width) for _ in range(layers)])
        for i, layer in enumerate(self.layers):
            layer.weight.set_data(ms.Tensor((rng.normal(size=(width, width)) / np.sqrt(width)).astype(np.float32)))
            layer.bias.set_data(ms.Tensor((rng.normal(size=(width,)) * 0.1).astype(np.float32)))
            if plan is not None:
                s = HAND_PLANS[plan](i)
                layer.matmul.shard(s)
                layer.bias_add.shard((s[0][:1] + s[1][:1], s[1][:1]))
        self.relu = nn.ReLU()

    def construct(self, x):
        for layer in self.layers:
            x = self.relu(layer(x))
        return x


def mlp_train(plan=None, layers=8, width=1024, mode=None, **ctx):
    ms.reset_auto_parallel_context()
    if mode is None:
        mode = "auto_parallel" if plan is None else "semi_auto_parallel"
    ms.set_auto_parallel_context(parallel_mode=mode, **ctx)
    net = MLP(layers, width, plan)
    return nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.Momentum(net.trainable_params(), 0.01, 0.9))


def mlp_data(batch, width=1024):
    rng = np.random.default_rng(1)
    return rng.normal(size=(batch, width)).astype(np.float32), rng.normal(size=(batch, width)).astype(np.float32)


def measured_bytes(train, inputs, rank=0) -> float:
    """Collective bytes per step one device sends (the project's unit), from the compiled train step's HLO."""
    from graphpar.dump.hlo import parse_collectives, wire_bytes

    hlo = train.program.lower_step(list(inputs)).compile().as_text()
    n = len(train.program.plan.devices)
    return sum(wire_bytes(c.kind, c.nbytes, len(c.group_of(rank))) for c in parse_collectives(hlo, n))


def losses(train, inputs, steps=3) -> list[float]:
    return [float(train(*inputs)) for _ in range(steps)]


def compiled_memory(train, inputs) -> int:
    """The compiled step's resident bytes per device, the quantity the memory model predicts."""
    from graphpar.planner.memory_model import compiled_peak_bytes

    return compiled_peak_bytes(train.program.lower_step(list(inputs)).compile().memory_analysis())
