"""Real IR dumps for the reader and ``graphpar ir`` tests: seed 004's network trained one step per parallel mode."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import graphpar as ms
import graphpar.dataset as ds
from graphpar import _context, ops
from graphpar.common.initializer import initializer
from graphpar.common.parameter import Parameter
from graphpar.nn import Cell, Dense, Momentum, MSELoss, SoftmaxCrossEntropyWithLogits
from graphpar.train import Model


class Net(Cell):
    """Seed 004's network: matmul is hinted ((2, 4), (4, 1)); relu and matmul2 get their strategies by the mode."""

    def __init__(self, in_dim: int = 32, hidden_dim: int = 16, out_dim: int = 16):
        super().__init__()
        self.weight = Parameter(initializer("normal", [in_dim, hidden_dim]), "w")
        self.weight2 = Parameter(initializer("normal", [hidden_dim, out_dim]), "w2")
        self.matmul = ops.MatMul().shard(((2, 4), (4, 1)))
        self.relu = ops.ReLU()
        self.matmul2 = ops.MatMul()

    def construct(self, x):
        return self.matmul2(self.relu(self.matmul(x, self.weight)), self.weight2)


class MixedNet(Cell):
    """More kinds of dump line: Dense layers, a raw ``jnp`` equation with a constant, a Parameter read in two
    layouts (a ``# parameter conflict`` line), a two-output op, and an eval graph after the train graph."""

    def __init__(self):
        super().__init__()
        self.dense = Dense(32, 16)
        self.w = Parameter(initializer("normal", [16, 16]), "w")
        self.matmul = ops.MatMul().shard(((2, 4), (4, 1)))
        self.matmul_b = ops.MatMul()
        self.relu = ops.ReLU()
        self.out = Dense(16, 10)

    def construct(self, x):
        h = self.relu(self.dense(x))
        return self.out(self.matmul(h, self.w) * 2.0 + self.matmul_b(h, self.w))


def train_and_dump(directory: Path, parallel_mode: str, mixed: bool = False) -> Path:
    """Train one step on 8 devices with ``save_graphs`` (and evaluate, for ``mixed``); returns ``directory``."""
    _context.reset_context()
    _context.reset_auto_parallel_context()
    try:
        ms.set_context(mode=ms.GRAPH_MODE, save_graphs=True, save_graphs_path=str(directory))
        ms.set_auto_parallel_context(parallel_mode=parallel_mode, search_mode="sharding_propagation",
                                     dataset_strategy="data_parallel")
        rng = np.random.default_rng(0)
        x = rng.random((2, 32), dtype=np.float32)
        y = rng.integers(0, 10, (2,), dtype=np.int32) if mixed else rng.random((2, 16), dtype=np.float32)
        data = ds.GeneratorDataset(lambda: iter([(x, y)]), ["input", "label"])
        net = MixedNet() if mixed else Net()
        loss = SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean") if mixed else MSELoss()
        model = Model(net, loss_fn=loss, optimizer=Momentum(net.trainable_params(), 0.1, 0.9),
                      metrics={"acc"} if mixed else None)
        model.train(1, data)
        if mixed:
            model.eval(data)
    finally:
        _context.reset_context()
        _context.reset_auto_parallel_context()
    return directory


@pytest.fixture(scope="session")
def ir_dumps(tmp_path_factory) -> dict[str, Path]:
    """``ir_dumps`` directories: ``semi``, ``auto``, ``data`` (seed 004's network in SEMI_AUTO / AUTO /
    DATA_PARALLEL), ``mixed``
    (:class:`MixedNet` in SEMI_AUTO, train and eval graphs)."""
    root = tmp_path_factory.mktemp("ir")
    return {"semi": train_and_dump(root / "semi", ms.ParallelMode.SEMI_AUTO_PARALLEL),
            "auto": train_and_dump(root / "auto", ms.ParallelMode.AUTO_PARALLEL),
            "data": train_and_dump(root / "data", ms.ParallelMode.DATA_PARALLEL),
            "mixed": train_and_dump(root / "mixed", ms.ParallelMode.SEMI_AUTO_PARALLEL, mixed=True)}
