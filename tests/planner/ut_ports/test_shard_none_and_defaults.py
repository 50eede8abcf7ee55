"""MindSpore's planner semantics, written as its parallel unit tests are (tests/ut/python/parallel): compile a
small network with ``_cell_graph_executor``, read each op's strategy with ``_get_shard_strategy`` and assert it.

Here: ``shard(None)`` is "no strategy", and AUTO_PARALLEL with sharding propagation on a network without any
``shard()`` propagates from the dataset's layout (MindSpore's ``_VirtualDataset`` is a configured op there)."""

import re

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


class Net(Cell):
    def __init__(self, strategy1=None, strategy2=None, strategy3=None):
        super().__init__()
        self.mul = P.Mul().shard(strategy1)
        self.sigmoid = P.Sigmoid().shard(strategy2)
        self.relu = P.ReLU().shard(strategy3)
        self.mul_weight = Parameter(Tensor(np.ones([64, 32]), dtype=ms.float32), "w1")

    def construct(self, x, b):
        out = self.mul(x, self.mul_weight)
        out = self.sigmoid(out)
        return self.relu(out)


_x = Tensor(np.ones([64, 32]), dtype=ms.float32)
_b = Tensor(np.ones([64, 32]), dtype=ms.float32)


def compile_net(net, x=_x, b=_b):
    optimizer = Momentum(net.trainable_params(), learning_rate=0.1, momentum=0.9)
    train_net = TrainOneStepCell(net, optimizer)
    train_net.set_auto_parallel()
    train_net.set_train()
    _cell_graph_executor.compile(train_net, x, b)
    strategies = _cell_graph_executor._get_shard_strategy(train_net)
    context.reset_auto_parallel_context()
    return strategies


def strategy_of(strategies, kind):
    found = [v for k, v in strategies.items() if re.search(f"{kind}-op", k)]
    assert len(found) == 1, strategies
    return found[0]


def test_shard_none_is_no_strategy():
    mul = P.Mul().shard(((2, 4), (2, 4)))
    assert mul.shard(None) is mul and mul.in_strategy is None and mul.out_strategy is None
    context.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8, global_rank=0)
    strategies = compile_net(Net(((4, 2), (4, 2)), None, None))
    assert strategy_of(strategies, "Mul") == [[4, 2], [4, 2]]
    assert strategy_of(strategies, "Sigmoid") == [[8, 1]]  # SEMI_AUTO's default: data parallel
    assert all(k.startswith("Default/network-Net/") for k in strategies)


def test_shard_none_ops_are_propagated_to():
    context.set_auto_parallel_context(parallel_mode="auto_parallel", device_num=16, global_rank=0,
                                      search_mode="sharding_propagation")
    strategies = compile_net(Net(((4, 4), (4, 4)), None, None))
    assert strategy_of(strategies, "Sigmoid") == [[4, 4]]
    assert strategy_of(strategies, "ReLU") == [[4, 4]]


def test_out_strategy_needs_an_in_strategy():
    with pytest.raises(ValueError, match=r"an out_strategy needs an in_strategy"):
        P.MatMul().shard(None, ((8, 1),))


def test_propagation_without_any_shard_starts_from_the_dataset():
    context.set_auto_parallel_context(parallel_mode="auto_parallel", device_num=8, global_rank=0,
                                      search_mode="sharding_propagation", dataset_strategy="data_parallel")
    # data parallel: each rank's compile is given its 8 rows of the [64, 32] batch
    rows = Tensor(np.ones([8, 32]), dtype=ms.float32)
    strategies = compile_net(Net(), rows, rows)
    assert strategy_of(strategies, "Mul") == [[8, 1], [8, 1]]
    assert strategy_of(strategies, "Sigmoid") == [[8, 1]]
    assert strategy_of(strategies, "ReLU") == [[8, 1]]


def test_propagation_without_any_shard_under_full_batch_keeps_the_batch_whole():
    context.set_auto_parallel_context(parallel_mode="auto_parallel", device_num=8, global_rank=0,
                                      search_mode="sharding_propagation", dataset_strategy="full_batch")
    strategies = compile_net(Net())
    mul = strategy_of(strategies, "Mul")
    # every device holds the whole batch: slicing it is free, so the elementwise chain splits as one
    assert strategy_of(strategies, "Sigmoid") == [mul[0]] and strategy_of(strategies, "ReLU") == [mul[0]]


def test_a_strategy_that_cannot_hold_is_a_runtime_error_at_compile():
    context.set_auto_parallel_context(parallel_mode="auto_parallel", device_num=16, global_rank=0,
                                      search_mode="sharding_propagation")
    with pytest.raises(RuntimeError, match=r"'relu'.*\(\(3, 1\),\)"):
        compile_net(Net(((4, 4), (4, 4)), None, ((3, 1),)))
