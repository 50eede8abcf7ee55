"""MindSpore's Ascend 910 communication-group rule (``IsFeasibleDeiveList``): with ``device_target="Ascend"`` a plan
whose collectives need a group HCCL cannot form on 8-device servers fails to compile with a ``RuntimeError``, as in
MindSpore's test_device_num_not_power_of_2 (24 devices); on any other target every group is fine."""

import numpy as np
import pytest

import graphpar as ms
from graphpar import Parameter, Tensor, nn, ops
from graphpar.common.api import _cell_graph_executor
from graphpar.compile.plans.ascend_groups import feasible
from graphpar.errors import CommunicationGroupError


def test_the_rule_on_rank_lists():
    assert feasible(tuple(range(8))) and feasible((0,)) and feasible((0, 8, 16))  # one local rank per server
    assert feasible((0, 1, 2, 3)) and feasible((4, 5, 6, 7)) and feasible((0, 2, 4, 6)) and feasible((1, 3, 5, 7))
    assert feasible((0, 4)) and feasible((0, 1)) and feasible((5, 6)) and not feasible((3, 4))
    assert not feasible((0, 1, 2))  # three devices of one server
    assert not feasible((2, 3, 4, 5))  # four in a row across the halves
    assert not feasible(tuple(range(0, 24, 3)))  # local ranks 0, 3, 6 then 1, 4, 7 then 2, 5: servers differ
    assert feasible(tuple(range(16)))  # two whole servers


class Net(nn.Cell):
    def __init__(self, mul, matmul):
        super().__init__()
        self.matmul = ops.MatMul().shard(matmul)
        self.mul = ops.Mul().shard(mul)
        self.w = Parameter(Tensor(np.ones((96, 96), np.float32)), "w")
        self.w1 = Parameter(Tensor(np.ones((192, 96), np.float32)), "w1")

    def construct(self, x):
        return self.mul(self.matmul(x, self.w), self.w1)


def _compile(target, mul, matmul):
    ms.set_context(device_target=target)
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=24, dataset_strategy="full_batch")
    net = Net(mul, matmul)
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.Momentum(net.trainable_params(), 0.1, 0.9))
    _cell_graph_executor.compile(train, Tensor(np.ones((192, 96), np.float32)), Tensor(np.ones((192, 96),
                                                                                                np.float32)))
    return _cell_graph_executor._get_shard_strategy(train)


def test_a_gradient_summed_over_every_third_rank_fails_on_ascend_only():
    # MatMul ((8, 1), (1, 3)): w is repeated over the 8 row blocks, ranks 0, 3, ..., 21 sum its gradient
    with pytest.raises(CommunicationGroupError, match=r"op 'matmul'.*gradient reduction of Parameter 'w'.*"
                                                      r"\[0, 3, 6, 9, 12, 15, 18, 21\]") as info:
        _compile("Ascend", ((8, 3), (8, 3)), ((8, 1), (1, 3)))
    assert isinstance(info.value, RuntimeError)  # MindSpore's compile failure
    ms.context.reset_context()
    assert any("MatMul" in k for k in _compile("CPU", ((8, 3), (8, 3)), ((8, 1), (1, 3))))


def test_groups_that_follow_the_servers_compile_on_ascend():
    # ((3, 8), (8, 1)): the sum runs over ranks 0-7 of one server, w's gradient over 0, 8, 16 (one per server)
    found = _compile("Ascend", ((3, 8), (3, 8)), ((3, 8), (8, 1)))
    assert [v for k, v in found.items() if "MatMul" in k] == [[[3, 8], [8, 1]]]
