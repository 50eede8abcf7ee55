"""MindSpore's dynamic-shape inputs in parallel compiles: ``Tensor(shape=[None, 16], dtype=...)`` placeholders and
``Cell.set_inputs``. The signature is planned once (its dynamic dimensions traced as JAX symbols, planned at a
stand-in size every split divides); a compile-only call (``_cell_graph_executor.compile``) gives that plan, and a
call with concrete tensors runs it on their shape. A split of a dynamic dimension follows MindSpore's per-op rule
(``CheckStrategyForDynamicShape``): most ops may split it, Gather's table may not on its gathered axis."""

import numpy as np
import pytest

import graphpar as ms
from graphpar import Tensor, nn, ops
from graphpar.common.api import _cell_graph_executor
from graphpar.errors import DynamicShapeError, DynamicStrategyError, InputSignatureError, StrategyError


class Head(nn.Cell):
    """A two-layer head on a batch of any size: its first MatMul split on the (dynamic) batch."""

    def __init__(self, strategy=((8, 1), (1, 1))):
        super().__init__()
        self.w1 = ms.Parameter(Tensor(np.linspace(-1, 1, 16 * 32, dtype=np.float32).reshape(16, 32)), name="w1")
        self.w2 = ms.Parameter(Tensor(np.linspace(1, -1, 32 * 4, dtype=np.float32).reshape(32, 4)), name="w2")
        self.matmul1 = ops.MatMul().shard(strategy) if strategy else ops.MatMul()
        self.relu = ops.ReLU()
        self.matmul2 = ops.MatMul()
        self.mean = ops.ReduceMean()

    def construct(self, x):
        return self.mean(self.matmul2(self.relu(self.matmul1(x, self.w1)), self.w2) ** 2)


class Lookup(nn.Cell):
    def __init__(self, strategy):
        super().__init__()
        self.gather = ops.Gather().shard(strategy)

    def construct(self, table, indices):
        return self.gather(table, indices, 0)


def _batch(n):
    return Tensor(np.arange(n * 16, dtype=np.float32).reshape(n, 16) / (n * 16))


def test_a_placeholder_has_a_shape_and_a_dtype_but_no_data():
    x = Tensor(shape=[None, 64], dtype=ms.int32)
    assert x.shape == (-1, 64) and x.dtype == np.int32 and x.ndim == 2  # -1 marks the dynamic dim, as MindSpore's
    assert isinstance(x, Tensor)
    assert Tensor(shape=[-1, 64], dtype=ms.int32) == x
    with pytest.raises(DynamicShapeError, match="no data"):
        x.asnumpy()
    with pytest.raises(DynamicShapeError, match="initializer"):
        Tensor(shape=[None, 64], dtype=ms.float32, init="normal")


def test_set_inputs_plans_the_signature_once_and_each_call_runs_it():
    x16, x40 = _batch(16), _batch(40)
    ms.set_context(mode=ms.GRAPH_MODE)
    alone = Head()
    want16, want40 = float(alone(x16)), float(alone(x40))

    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8, full_batch=True)
    net = Head()
    net.set_inputs(Tensor(shape=[None, 16], dtype=ms.float32))
    assert net.get_inputs()[0].shape == (-1, 16)
    _cell_graph_executor.compile(net, Tensor(shape=[None, 16], dtype=ms.float32))
    table = _cell_graph_executor._get_shard_strategy(net)
    # the batch split 8 ways although its size is unknown; the unhinted ops follow it, as for a static batch
    assert table["Default/MatMul-op1"] == [[8, 1], [1, 1]]
    assert table["Default/MatMul-op0"] == [[8, 1], [1, 1]]
    np.testing.assert_allclose(float(net(x16)), want16, rtol=1e-5)
    np.testing.assert_allclose(float(net(x40)), want40, rtol=1e-5)


def test_a_call_whose_size_the_planned_split_does_not_divide_is_refused():
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8, full_batch=True)
    net = Head(strategy=None)
    net.set_inputs(Tensor(shape=[None, 16], dtype=ms.float32))
    net(_batch(16))
    # 12 rows: the signature's plan splits the batch 8 ways (default data parallel); a plan of 12 rows alone would
    # split them fewer ways, but every call runs the signature's plan, as MindSpore's one compile does
    with pytest.raises(StrategyError, match=r"the plan of Head.set_inputs\(\[-1, 16\]\).*12") as info:
        net(_batch(12))
    assert isinstance(info.value, RuntimeError)
    net = Head()  # a shard() hint splitting the dynamic batch says the same of its own split
    net.set_inputs(Tensor(shape=[None, 16], dtype=ms.float32))
    with pytest.raises(StrategyError, match="size 12, which the split 8 does not divide"):
        net(_batch(12))


def test_a_call_that_breaks_the_signature_is_refused():
    net = Head()
    net.set_inputs(Tensor(shape=[None, 16], dtype=ms.float32))
    with pytest.raises(InputSignatureError, match=r"input 0 has shape \[4, 8\].*\[-1, 16\]"):
        net(Tensor(np.ones((4, 8), np.float32)))
    with pytest.raises(InputSignatureError, match="dtype int32"):
        net(Tensor(np.ones((4, 16), np.int32)))
    with pytest.raises(InputSignatureError, match="2 inputs"):
        net(_batch(4), _batch(4))


def test_gather_may_split_dynamic_indices_but_not_a_dynamic_table_axis():
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8, full_batch=True)
    table, indices = Tensor(np.ones((64, 8), np.float32)), Tensor(shape=[None, 4], dtype=ms.int32)
    net = Lookup(((8, 1), (1, 1)))  # the table split on its gathered axis, which is static: allowed
    _cell_graph_executor.compile(net, table, indices)
    assert _cell_graph_executor._get_shard_strategy(net)["Default/Gather-op0"] == [[8, 1], [1, 1]]
    net = Lookup(((1, 1), (8, 1)))  # the dynamic indices split 8 ways: allowed
    _cell_graph_executor.compile(net, table, indices)

    net = Lookup(((8, 1), (1, 1)))
    with pytest.raises(DynamicStrategyError, match="dynamic gathered axis cannot be split") as info:
        _cell_graph_executor.compile(net, Tensor(shape=[None, 8], dtype=ms.float32),
                                     Tensor(np.ones((4, 2), np.int32)))
    assert isinstance(info.value, RuntimeError)  # as MindSpore's compile failure


class BranchesOnSize(nn.Cell):
    def construct(self, x):
        if x.shape[0] > 8:  # Python code on a dynamic size: no one plan holds every size
            return x * 2
        return x


def test_a_construct_that_needs_the_dynamic_size_as_a_number_is_named():
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8, full_batch=True)
    with pytest.raises(DynamicShapeError, match="BranchesOnSize.construct cannot be traced for every size"):
        _cell_graph_executor.compile(BranchesOnSize(), Tensor(shape=[None, 16], dtype=ms.float32))


def test_a_train_step_whose_loss_needs_two_dynamic_batches_equal_is_planned():
    # the data's and the label's batches are independent placeholders (-1 each, as in MindSpore); the loss subtracts
    # one from the other, so the trace takes them as one size
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8, full_batch=True)
    net = nn.Dense(16, 4)
    net.matmul.shard(((8, 1), (1, 1)))
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.Momentum(net.trainable_params(), 0.01, 0.9))
    _cell_graph_executor.compile(train, Tensor(shape=[None, 16], dtype=ms.float32),
                                 Tensor(shape=[None, 4], dtype=ms.float32))
    table = _cell_graph_executor._get_shard_strategy(train)
    assert table["Default/network-WithLossCell/_loss_fn-MSELoss/Sub-op0"] == [[8, 1], [8, 1]]


class Conv(nn.Cell):
    def __init__(self, strategy):
        super().__init__()
        self.w = ms.Parameter(Tensor(np.ones((8, 4, 3, 3), np.float32)), name="w")
        self.conv = ops.Conv2D(out_channel=8, kernel_size=3, pad_mode="same").shard(strategy)

    def construct(self, x):
        return self.conv(x, self.w)


def test_a_convolution_on_a_dynamic_batch_may_not_split_rows_that_need_a_halo():
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8, full_batch=True)
    x = Tensor(shape=[None, 4, 16, 16], dtype=ms.float32)
    _cell_graph_executor.compile(Conv(((8, 1, 1, 1), (1, 1, 1, 1))), x)  # the dynamic batch itself: allowed
    with pytest.raises(DynamicStrategyError, match="halo exchange"):
        _cell_graph_executor.compile(Conv(((2, 1, 4, 1), (1, 1, 1, 1))), x)  # rows: a 3x3 window needs neighbours'


def test_a_signature_of_concrete_tensors_plans_their_shapes():
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8, full_batch=True)
    net = nn.Dense(16, 4)
    net.set_inputs(Tensor(np.ones((8, 16), np.float32)))  # no dynamic dimension: the signature keeps shape and dtype
    assert net.get_inputs()[0].shape == (8, 16)
    _cell_graph_executor.compile(net, _batch(8))
    assert _cell_graph_executor._get_shard_strategy(net)["Default/MatMul-op0"] == [[8, 1], [1, 1]]
    with pytest.raises(InputSignatureError, match=r"\[16, 16\]"):
        _cell_graph_executor.compile(net, _batch(16))


class GatherD(nn.Cell):
    def __init__(self, strategy):
        super().__init__()
        self.gatherd = ops.GatherD().shard(strategy)

    def construct(self, x, index):
        return self.gatherd(x, 0, index)


def test_gatherd_may_not_split_a_dynamic_gathered_dim():
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8, full_batch=True)
    x, index = Tensor(shape=[None, 32], dtype=ms.float32), Tensor(np.zeros((16, 32), np.int32))
    _cell_graph_executor.compile(GatherD(((1, 8), (1, 8))), x, index)  # the static dimension: allowed
    with pytest.raises(DynamicStrategyError, match="gathered dim cannot be split"):
        _cell_graph_executor.compile(GatherD(((2, 4), (1, 4))), x, index)
