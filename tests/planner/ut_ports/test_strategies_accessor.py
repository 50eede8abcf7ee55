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
    assert found == {"Default/MatMul-op0": [[2, 4], [4, 1]], "Default/ReLU-op0": [[16, 1]],
                     "Default/Reshape-op0": []}  # an op whose layout follows its input has no strategy of its own
    assert _executor is _cell_graph_executor and _cell_graph_executor._get_strategy(net) == found
    assert strategies(net, _x, _b) == found


def test_under_auto_parallel_a_reshape_has_the_split_of_the_layout_reaching_it():
    # MindSpore's ReshapeInfo: the cost model selects a strategy for it like any op's, the split of its input layout
    # (SEMI_AUTO above gives it none)
    context.set_auto_parallel_context(parallel_mode="auto_parallel", device_num=16, global_rank=0,
                                      search_mode="sharding_propagation")
    net = Net()
    _cell_graph_executor.compile(net, _x, _b, phase="train")
    found = _cell_graph_executor._get_shard_strategy(net)
    # ReLU slices the MatMul's partial sum on the MatMul's own devices (its AllReduce becomes a ReduceScatter),
    # (2, 4); flattening that layout to 1-D is no block split, so the Reshape's input is gathered on its columns
    # first: the layout reaching it is (2, 1)
    assert found["Default/ReLU-op0"] == [[2, 4]] and found["Default/Reshape-op0"] == [[2, 1]]


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


def test_under_grad_wrap_a_parameter_is_stored_as_its_hinted_op_reads_it():
    # the MatMul's backward (JAX's transpose, a raw equation with a data-parallel default) reads w too; the op
    # decides w's layout, as MindSpore lays Parameters out before it derives the backward: w (32, 16) split (4, 1)
    rng = np.random.default_rng(2)
    x, b = rng.normal(size=(64, 32)).astype(np.float32), rng.normal(size=(64, 16)).astype(np.float32)
    net = GradWrap(NetWithLoss(Net()))
    ms.set_context(mode=ms.PYNATIVE_MODE)
    expected = net(x, b)
    ms.set_context(mode=ms.GRAPH_MODE)
    context.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8, global_rank=0)
    _cell_graph_executor.compile(net, _x, _b)
    name = next(k for k in net.parameter_layout_dict if k.endswith("w"))
    assert net.parameter_layout_dict[name][2] == [8, 16]  # the slice each device stores, not the whole (32, 16)
    for got, want in zip(net(x, b), expected):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)


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


class ChainNet(nn.Cell):
    """MindSpore's ``test_sharding_strategy_save_and_load``: Add -> MatMul -> Add -> MatMul -> Add."""

    def __init__(self):
        super().__init__()
        self.matmul1 = P.MatMul(transpose_b=True).shard(((4, 2), (1, 2)))
        self.matmul2 = P.MatMul(transpose_b=True).shard(((2, 4), (1, 4)))
        self.add1, self.add2, self.add3 = P.Add(), P.Add(), P.Add()
        self.w1 = Parameter(Tensor(np.ones([8, 32]), dtype=ms.float32), "w1")
        self.w2 = Parameter(Tensor(np.ones([16, 8]), dtype=ms.float32), "w2")

    def construct(self, x, b1, b2, b3):
        out = self.matmul1(self.add1(x, b1), self.w1)
        return self.add3(self.matmul2(self.add2(out, b2), self.w2), b3)


def test_op_numbers_count_each_kind_from_the_output_back():
    """MindSpore numbers a CNode ``-op{n}`` with one counter per scope and kind, in the order its parallel pass
    walks the graph from the output (the last input first): the last Add is ``Add-op0``, the first ``Add-op2``."""
    context.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8, global_rank=0)
    x, b1, b2, b3 = (Tensor(np.ones(s), dtype=ms.float32) for s in ([64, 32], [64, 32], [64, 8], [64, 16]))
    found = strategies(ChainNet(), x, b1, b2, b3)
    assert list(found) == ["Default/Add-op0", "Default/MatMul-op0", "Default/Add-op1", "Default/MatMul-op1",
                           "Default/Add-op2"]  # listed in the walk's order too (MindSpore's GetCNodeStrategy)
    assert found["Default/MatMul-op1"] == [[4, 2], [1, 2]] and found["Default/MatMul-op0"] == [[2, 4], [1, 4]]


class TwoBranches(nn.Cell):
    def __init__(self):
        super().__init__()
        self.left, self.right = P.MatMul().shard(((8, 1), (1, 1))), P.MatMul().shard(((1, 1), (1, 8)))
        self.add = P.Add()
        self.w1 = Parameter(Tensor(np.ones([32, 16]), dtype=ms.float32), "w1")
        self.w2 = Parameter(Tensor(np.ones([32, 16]), dtype=ms.float32), "w2")

    def construct(self, x, y):
        left = self.left(x, self.w1)
        right = self.right(y, self.w2)
        return self.add(right, left)


def test_op_numbers_walk_the_last_input_first():
    """``add(right, left)`` with ``left`` computed first: MindSpore's walk (``DeepScopedGraphSearch``) enters an
    op's inputs last first, so ``left`` is named first, ``MatMul-op0``; the graph's order reversed would name
    ``right`` first."""
    context.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8, global_rank=0)
    found = strategies(TwoBranches(), _x, _x)
    assert found["Default/MatMul-op0"] == [[8, 1], [1, 1]]  # left
    assert found["Default/MatMul-op1"] == [[1, 1], [1, 8]]  # right


class Block(nn.Cell):
    def __init__(self, name):
        super().__init__()
        self.matmul = P.MatMul()
        self.w = Parameter(Tensor(np.ones([32, 32]), dtype=ms.float32), name)

    def construct(self, x):
        return self.matmul(x, self.w)


class TwoBlocks(nn.Cell):
    def __init__(self):
        super().__init__()
        self.block1, self.block2 = Block("w1"), Block("w2")

    def construct(self, x):
        return self.block2(self.block1(x))


def test_op_numbers_count_each_scope_apart():
    """The counter is per ``"{scope}/{Kind}"``: the MatMul of each Cell is its scope's ``MatMul-op0``."""
    context.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8, global_rank=0)
    found = strategies(TwoBlocks(), Tensor(np.ones([64, 32]), dtype=ms.float32))
    assert list(found) == ["Default/block2-Block/MatMul-op0", "Default/block1-Block/MatMul-op0"]  # from the output
