"""Two things MindSpore's propagation tests rely on: a Python tuple passed to ``construct`` at compile time is a
constant (``compile(net, x, (-1, 32))`` reshapes with it), and a network differentiated inside ``construct`` may
hold ops whose forward value the backward never reads (JAX's partial evaluation drops it): they plan as usual."""

import re

import numpy as np

import graphpar as ms
from graphpar import Parameter, Tensor, context, nn
from graphpar.common.api import _cell_graph_executor
from graphpar.ops import composite as C
from graphpar.ops import operations as P


def setup_function():
    # as MindSpore's parallel test files do: the shapes given to _cell_graph_executor.compile are the whole batch
    # (without full_batch MindSpore reads them as one rank's slice, graphpar.compile.plans.global_batch)
    context.set_auto_parallel_context(dataset_strategy="full_batch")


def strategy_of(strategies, kind):
    found = [v for k, v in strategies.items() if re.search(f"{kind}-op", k)]
    assert len(found) == 1, strategies
    return found[0]


class ReshapeThenMatMul(nn.Cell):
    def __init__(self):
        super().__init__()
        self.reshape = P.Reshape()
        self.matmul = P.MatMul(transpose_b=True).shard(((4, 2), (1, 2)), ((8, 1),))
        self.relu = P.ReLU()
        self.w = Parameter(Tensor(np.ones([8, 32]), ms.float32), "w")

    def construct(self, x, new_shape):
        return self.relu(self.matmul(self.reshape(x, new_shape), self.w))


def test_a_tuple_passed_to_construct_is_a_constant():
    context.set_auto_parallel_context(parallel_mode="auto_parallel", device_num=8, global_rank=0,
                                      search_mode="sharding_propagation")
    net = ReshapeThenMatMul()
    net.set_train()
    _cell_graph_executor.compile(net, Tensor(np.ones([32, 64]), ms.float32), (-1, 32), phase="train")
    strategies = _cell_graph_executor._get_shard_strategy(net)
    assert strategy_of(strategies, "MatMul") == [[4, 2], [1, 2]]
    assert strategy_of(strategies, "ReLU") == [[8, 1]]  # from the MatMul's out_strategy
    context._reset_auto_parallel_context()  # MindSpore's private name, as its tests call it
    assert context.get_auto_parallel_context("parallel_mode") == "stand_alone"


class WideAndDeep(nn.Cell):
    def __init__(self):
        super().__init__()
        self.mul = P.Mul().shard(((8, 1, 1), (8, 1, 1)))
        self.reshape = P.Reshape()
        self.reduce_sum = P.ReduceSum()
        self.w = Parameter(Tensor(np.ones([8, 64, 4]), ms.float32), "w")

    def construct(self, x, y):
        mask = self.reshape(y, (8, 64, 1))
        wide = self.reshape(self.reduce_sum(self.mul(x, mask), 1), (-1, 1))  # only added: its value is not read
        deep = self.reshape(self.mul(x + self.w, mask), (-1, 64 * 4))
        return P.ReduceSum()(wide + deep)


class GradWrap(nn.Cell):
    def __init__(self, network):
        super().__init__()
        self.network = network

    def construct(self, x, y):
        return C.GradOperation(get_all=True)(self.network)(x, y)


def test_an_op_whose_value_the_backward_never_reads():
    context.set_auto_parallel_context(parallel_mode="auto_parallel", device_num=8, global_rank=0,
                                      search_mode="sharding_propagation")
    net = GradWrap(WideAndDeep())
    net.set_train()
    _cell_graph_executor.compile(net, Tensor(np.ones([8, 64, 1]), ms.float32), Tensor(np.ones([8, 64]), ms.float32))
    strategies = _cell_graph_executor._get_shard_strategy(net)
    assert all(v == [[8, 1, 1], [8, 1, 1]] for k, v in strategies.items() if re.search("Mul-op", k))
