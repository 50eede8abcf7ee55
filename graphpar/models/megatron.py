"""Two-MatMul networks written with raw ops and MindSpore strategies: Megatron's MLP block (column-split then
row-split MatMul) and the quickstart's network (one hinted MatMul, the rest left to the planner).

Weights are given (arrays, or for ``QuickstartNet`` an initializer name), so each caller keeps its own initial
values.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from graphpar import nn, ops
from graphpar.common.initializer import initializer
from graphpar.common.parameter import Parameter
from graphpar.common.tensor import Tensor
from graphpar.ops.primitive import Primitive

Strategy = tuple[tuple[int, ...], ...]


class MegatronMLP(nn.Cell):
    """``matmul2(activation(matmul1(x, w1)), w2)``, x (batch, d), w1 (d, hidden), w2 (hidden, d).

    ``matmul1`` is column parallel ``((dp, 1), (1, mp))``, ``matmul2`` row parallel ``((dp, mp), (mp, 1))``: one
    AllReduce of the output per block in the forward pass. ``activation`` is the op between them (default an
    unhinted ``ops.GeLU()``; pass e.g. ``ops.ReLU().shard(((dp, mp),))`` to hint it); its instance name is its kind
    in lower case (``gelu``, ``relu``). The parameters are named ``w1`` and ``w2``.
    """

    def __init__(self, w1: np.ndarray, w2: np.ndarray, dp: int = 1, mp: int = 8, activation: Primitive | None = None):
        super().__init__()
        self.w1 = Parameter(Tensor(w1), "w1")
        self.w2 = Parameter(Tensor(w2), "w2")
        self.matmul1 = ops.MatMul().shard(((dp, 1), (1, mp)))
        self.activation = activation if activation is not None else ops.GeLU()
        self.activation.set_prim_instance_name(self.activation.name.lower())
        self.matmul2 = ops.MatMul().shard(((dp, mp), (mp, 1)))

    def construct(self, x):
        return self.matmul2(self.activation(self.matmul1(x, self.w1)), self.w2)


class Megatron(nn.Cell):
    """The ``MegatronMLP`` blocks one after the other (CellList ``blocks``)."""

    def __init__(self, blocks: Sequence[MegatronMLP]):
        super().__init__()
        self.blocks = nn.CellList(list(blocks))

    def construct(self, x):
        for block in self.blocks:
            x = block(x)
        return x


class QuickstartNet(nn.Cell):
    """The seed quickstart's network (examples/quickstart.py): ``matmul2(relu(matmul(x, w)), w2)``, x (batch,
    in_dim), the first MatMul hinted with ``hint`` (``None``: no hint), the rest left to the plan.

    ``weight_init`` / ``weight2_init``: what ``initializer`` takes (a name such as ``"normal"``, drawn from the
    global seed, or an array of shape (in_dim, hidden_dim) / (hidden_dim, out_dim)). The parameters are named
    ``w`` and ``w2``.
    """

    def __init__(self, in_dim: int = 32, hidden_dim: int = 16, out_dim: int = 16,
                 hint: Strategy | None = ((2, 4), (4, 1)), weight_init: Any = "normal", weight2_init: Any = "normal"):
        super().__init__()
        self.weight = Parameter(initializer(weight_init, [in_dim, hidden_dim]), "w")
        self.weight2 = Parameter(initializer(weight2_init, [hidden_dim, out_dim]), "w2")
        self.matmul = ops.MatMul().shard(hint) if hint is not None else ops.MatMul()
        self.relu = ops.ReLU()
        self.matmul2 = ops.MatMul()

    def construct(self, x):
        return self.matmul2(self.relu(self.matmul(x, self.weight)), self.weight2)
