"""``graphpar.parallel.strategies`` and MindSpore's ``_cell_graph_executor``: each op's strategy keyed as
MindSpore's tests and strategy files key it (``Default/network-Net/MatMul-op0``), so a test's assertions port."""

import re

import numpy as np
import pytest

import graphpar as ms
from graphpar import Parameter, Tensor, context, nn
from graphpar.common.api import NotCompiledError, _cell_graph_executor, _executor
from graphpar.ops import operations as P
from graphpar.parallel import strategies
from graphpar.parallel._utils import _reset_op_id


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.matmul = P.MatMul().shard(((2, 4), (4, 1)))
        self.relu = P.ReLU()
        self.reshape = P.Reshape()
        self.w = Parameter(Tensor(np.ones([32, 16]), dtype=ms.float32), "w")

    def construct(self, x, b):
        return self.reshape(self.relu(self.matmul(x, self.w)), (-1,))


_x = Tensor(np.ones([64, 32]), dtype=ms.float32)
_b = Tensor(np.ones([64, 16]), dtype=ms.float32)


def test_keys_values_and_old_names():
    context.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=16, global_rank=0)
    net = Net()
    _reset_op_id()
    _cell_graph_executor.compile(net, _x, _b, phase="train")
    found = _cell_graph_executor._get_shard_strategy(net)
    assert found == {"Default/MatMul-op0": [[2, 4], [4, 1]], "Default/ReLU-op1": [[16, 1]],
                     "Default/Reshape-op2": []}  # an op whose layout follows its input has no strategy of its own
    assert _executor is _cell_graph_executor and _cell_graph_executor._get_strategy(net) == found
    assert strategies(net, _x, _b) == found


def test_train_cell_keys_name_the_network_attribute():
    context.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8, global_rank=0)
    net = Net()
    train = nn.TrainOneStepCell(net, nn.Momentum(net.trainable_params(), 0.1, 0.9))
    _cell_graph_executor.compile(train, _x, _b)
    found = _cell_graph_executor._get_shard_strategy(train)
    for k, v in found.items():
        if re.search("MatMul-op0", k):
            assert k == "Default/network-Net/MatMul-op0" and v == [[2, 4], [4, 1]]
    assert any(k.endswith("MatMul-op0") for k in found)


class OneInput(nn.Cell):
    def __init__(self):
        super().__init__()
        self.matmul = P.MatMul().shard(((2, 4), (4, 1)))
        self.w = Parameter(Tensor(np.ones([32, 16]), dtype=ms.float32), "w")

    def construct(self, x):
        return self.matmul(x, self.w)


def test_after_model_train_the_trained_step_is_read():
    context.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8)
    net = OneInput()
    model = ms.Model(nn.WithLossCell(net, nn.MSELoss()), optimizer=nn.Momentum(net.trainable_params(), 0.1, 0.9))
    x, y = np.ones((16, 32), np.float32), np.ones((16, 16), np.float32)
    with pytest.raises(ms.parallel.plan_api.PlanError, match="example inputs are needed"):
        strategies(model)
    model.train_network(x, y)
    found = _cell_graph_executor._get_shard_strategy(model.train_network)
    assert [v for k, v in found.items() if "/MatMul-op" in k] == [[[2, 4], [4, 1]]]
    assert strategies(model) == found


def test_not_compiled_and_planless_modes():
    with pytest.raises(NotCompiledError, match=r"_get_shard_strategy\(Net\): this Cell was not compiled"):
        _cell_graph_executor._get_shard_strategy(Net())
    net = Net()
    _cell_graph_executor.compile(net, _x, _b)  # STAND_ALONE plans no op
    assert _cell_graph_executor._get_shard_strategy(net) == {}
    with pytest.raises(TypeError, match="unexpected keyword"):
        _cell_graph_executor.compile(net, _x, _b, auto_parallel_mode=True)


def test_a_plan_summary_and_a_graph():
    context.set_auto_parallel_context(parallel_mode="semi_auto_parallel")
    summary = ms.parallel.plan_for_devices(Net(), _x, _b, devices=32, purpose="forward")
    assert strategies(summary)["Default/network-Net/MatMul-op0"] == [[2, 4], [4, 1]]  # graphpar's own scopes
    assert strategies(summary.graph) == strategies(summary)


class NetWithLoss(nn.Cell):
    def __init__(self, network):
        super().__init__()
        self.network = network
        self.loss = P.ReduceSum()

    def construct(self, x, b):
        return self.loss(self.network(x, b))


class GradWrap(nn.Cell):
    """MindSpore's parallel tests differentiate inside construct: the backward ops are JAX's transposes, not calls
    of the forward ops (they carry no strategy of their own)."""

    def __init__(self, network):
        super().__init__()
        self.network = network

    def construct(self, x, b):
        return ms.ops.GradOperation(get_all=True)(self.network)(x, b)


def test_grad_wrap_keys_and_backward_ops():
    context.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8, global_rank=0)
    net = GradWrap(NetWithLoss(Net()))
    net.set_train()
    _cell_graph_executor.compile(net, _x, _b, phase="train")
    found = _cell_graph_executor._get_shard_strategy(net)
    assert found["Default/network-NetWithLoss/network-Net/MatMul-op0"] == [[2, 4], [4, 1]]
    assert [k for k in found if "MatMul" in k] == ["Default/network-NetWithLoss/network-Net/MatMul-op0"]


class GatherNet(nn.Cell):
    """MindSpore's Gather tests: a constant index (so the op is staged, not inlined) under GradWrap."""

    def __init__(self, strategy1=None, strategy2=None, target=""):
        super().__init__()
        self.gatherv2 = P.Gather().shard(strategy1).set_device(target)
        self.mul = P.Mul().shard(strategy2)
        self.index = Tensor(np.random.default_rng(0).integers(0, 32, size=(64, 64)), dtype=ms.int32)

    def construct(self, x, y):
        return self.mul(self.gatherv2(x, self.index, 1), y)


def test_a_staged_op_under_grad_wrap_keeps_its_strategy_and_numbers():
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(64, 32)).astype(np.float32), rng.normal(size=(64, 64, 64)).astype(np.float32)
    net = GradWrap(NetWithLoss(GatherNet(((2, 4), (1, 1)), ((4, 2, 1), (4, 2, 1)))))
    ms.set_context(mode=ms.PYNATIVE_MODE)
    expected = net(x, y)
    ms.set_context(mode=ms.GRAPH_MODE)
    context.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8, global_rank=0)
    _cell_graph_executor.compile(net, x, y)
    found = _cell_graph_executor._get_shard_strategy(net)
    assert [v for k, v in found.items() if "/Gather-op" in k] == [[[2, 4], [1, 1]]]
    for got, want in zip(net(x, y), expected):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)
