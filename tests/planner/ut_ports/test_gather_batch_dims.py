"""MindSpore's ``Gather(batch_dims)``: the leading ``batch_dims`` dimensions of the table and the indices are batch
dimensions, each batch element gathering from its own slice; the planner may split them on all three tensors."""

import numpy as np
import pytest

import graphpar as ms
from graphpar import Parameter, Tensor, context
from graphpar.common.api import _cell_graph_executor
from graphpar.nn import Cell, Momentum, TrainOneStepCell
from graphpar.ops import operations as P


def setup_function():
    # as MindSpore's parallel test files do: the shapes given to _cell_graph_executor.compile are the whole batch
    # (without full_batch MindSpore reads them as one rank's slice, graphpar.compile.plans.global_batch)
    context.set_auto_parallel_context(dataset_strategy="full_batch")


def test_batch_dims_gathers_per_batch_element():
    rng = np.random.default_rng(0)
    params = rng.normal(size=(2, 3, 5, 4)).astype(np.float32)
    indices = rng.integers(0, 5, size=(2, 3, 6))
    out = np.asarray(P.Gather(batch_dims=2)(params, indices, 2))
    expected = np.stack([np.stack([params[i, j][indices[i, j]] for j in range(3)]) for i in range(2)])
    np.testing.assert_array_equal(out, expected)
    assert out.shape == (2, 3, 6, 4)
    np.testing.assert_array_equal(np.asarray(P.Gather(batch_dims=-1)(params[0], indices[0], 1)), expected[0])
    np.testing.assert_array_equal(np.asarray(P.Gather()(params, indices[0, 0], 2)), np.take(params, indices[0, 0], 2))
    with pytest.raises(ValueError, match="axis 1 must be >= batch_dims 2"):
        P.Gather(batch_dims=2)(params, indices, 1)
    with pytest.raises(TypeError, match=r"Gather\(batch_dims=...\) takes an int"):
        P.Gather(batch_dims=1.0)


class MulGatherMul(Cell):
    def __init__(self):
        super().__init__()
        self.table = Parameter(Tensor(np.full((64, 32, 128), 0.5, np.float32)), "table")
        self.mul1 = P.Mul()
        self.gather = P.Gather(2).shard(((2, 4, 1), (2, 4, 1)))
        self.mul2 = P.Mul()
        self.scale = Tensor(np.full((64, 32, 32), 0.2, np.float32))

    def construct(self, inputs, label):
        x = self.mul1(inputs, Tensor(np.ones((64, 32, 32), np.int32)))
        return self.mul2(self.gather(self.table, x, 2), self.scale)


def test_batch_dims_split_by_a_strategy():
    context.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8, global_rank=0)
    net = MulGatherMul()
    train = TrainOneStepCell(net, Momentum(net.trainable_params(), learning_rate=0.1, momentum=0.9))
    train.set_train()
    _cell_graph_executor.compile(train, Tensor(np.ones([64, 32, 32]), ms.int32), Tensor(np.ones([1, 1]), ms.int32))
    strategies = _cell_graph_executor._get_shard_strategy(train)
    assert [v for k, v in strategies.items() if "Gather-op" in k] == [[[2, 4, 1], [2, 4, 1]]]
    # the batch dims are split alike on both inputs: a different split is refused
    with pytest.raises(ValueError, match="Gather"):
        context.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8, global_rank=0)
        net.gather.shard(((2, 4, 1), (4, 2, 1)))
        _cell_graph_executor.compile(train, Tensor(np.ones([64, 32, 32]), ms.int32), Tensor(np.ones([1, 1]), ms.int32))
