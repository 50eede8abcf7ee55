"""MindSpore's op surface its parallel unit tests use: the ``TensorAdd`` alias, ``Conv2DTranspose`` and its
strategies, ``TensorToScalar``, ``Primitive.set_device``, ``nn.layer.activation.get_activation``, and the error
types MindSpore raises for bad strategies (a float split is a ``TypeError``)."""

import re

import jax
import numpy as np
import pytest
from jax import lax

import graphpar as ms
from graphpar import Parameter, Tensor, context
from graphpar.common.api import _cell_graph_executor
from graphpar.errors import StrategyError
from graphpar.nn import Cell, Momentum, TrainOneStepCell
from graphpar.nn.layer.activation import get_activation
from graphpar.ops import operations as P


def setup_function():
    # as MindSpore's parallel test files do: the shapes given to _cell_graph_executor.compile are the whole batch
    # (without full_batch MindSpore reads them as one rank's slice, graphpar.compile.plans.global_batch)
    context.set_auto_parallel_context(dataset_strategy="full_batch")


def compile_net(net, *inputs):
    train_net = TrainOneStepCell(net, Momentum(net.trainable_params(), learning_rate=0.1, momentum=0.9))
    train_net.set_train()
    _cell_graph_executor.compile(train_net, *inputs)
    return _cell_graph_executor._get_shard_strategy(train_net)


def pick(strategies, kind):
    return [v for k, v in strategies.items() if re.search(f"/{kind}-op", k)]


class ConvTransposeNet(Cell):
    def __init__(self, strategy1=None, strategy2=None, group=1, weight_shape=(8, 16, 2, 2), stride=1):
        super().__init__()
        self.conv2d_transpose = P.Conv2DTranspose(out_channel=8, kernel_size=weight_shape[2:], pad_mode="same",
                                                  stride=stride, group=group).shard(strategy1)
        self.neg = P.Neg().shard(strategy2)
        self.weight = Parameter(Tensor(np.ones(weight_shape), dtype=ms.float32), "w1")
        self.size = (32, 16, 8 * stride, 8 * stride)

    def construct(self, x, b):
        return self.neg(self.conv2d_transpose(x, self.weight, self.size))


_x = Tensor(np.ones([32, 8, 8, 8]), dtype=ms.float32)
_b = Tensor(np.ones([32, 16, 8, 8]), dtype=ms.float32)


def test_conv2d_transpose_is_the_transpose_of_conv2d():
    rng = np.random.default_rng(0)
    w = rng.normal(size=(8, 4, 3, 3)).astype(np.float32)
    dout = rng.normal(size=(2, 8, 4, 4)).astype(np.float32)
    op = P.Conv2DTranspose(out_channel=8, kernel_size=3, pad_mode="same", stride=2)
    got = np.asarray(op(dout, w, (2, 4, 8, 8)))

    def conv(x):
        return lax.conv_general_dilated(x, w, (2, 2), "SAME", dimension_numbers=("NCHW", "OIHW", "NCHW"))

    _, vjp = jax.vjp(conv, np.zeros((2, 4, 8, 8), np.float32))
    np.testing.assert_allclose(got, np.asarray(vjp(dout)[0]), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("strategy1,expected", [
    (((8, 1, 1, 1), (1, 1, 1, 1)), [[8, 1, 1, 1], [1, 1, 1, 1]]),  # data parallel
    (((2, 2, 1, 1), (2, 2, 1, 1)), [[2, 2, 1, 1], [2, 2, 1, 1]]),  # channels split: in (partial sums) and out
])
def test_conv2d_transpose_strategies(strategy1, expected):
    context.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8, global_rank=0)
    strategies = compile_net(ConvTransposeNet(strategy1, ((8, 1, 1, 1),)), _x, _b)
    assert pick(strategies, "Conv2DTranspose") == [expected]


def test_conv2d_transpose_channel_splits_must_agree():
    context.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8, global_rank=0)
    with pytest.raises(RuntimeError, match=r"conv2d_transpose"):
        compile_net(ConvTransposeNet(((2, 2, 1, 1), (4, 2, 1, 1))), _x, _b)


def test_conv2d_transpose_with_groups_splits_the_batch_only():
    context.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8, global_rank=0)
    with pytest.raises(StrategyError, match=r"cannot split"):
        compile_net(ConvTransposeNet(((2, 2, 1, 1), (2, 1, 1, 1)), group=2, weight_shape=(8, 8, 4, 4), stride=2),
                    _x, _b)


class AddNet(Cell):
    def __init__(self):
        super().__init__()
        self.add = P.TensorAdd().shard(((2, 4), (2, 4)))
        self.gather = P.Gather().set_device("CPU")
        self.table = Parameter(Tensor(np.ones([16, 32]), dtype=ms.float32), "table")

    def construct(self, x, idx):
        return self.add(x, self.gather(self.table, idx, 0))


def test_tensor_add_is_add_and_set_device_is_recorded():
    assert P.TensorAdd is P.Add
    assert P.Gather().set_device("CPU").primitive_target == "CPU"
    assert P.Gather().set_device("CPU").set_device("").primitive_target is None  # MindSpore's tests pass ""
    # "Device": the accelerator, as MindSpore's EmbeddingLookup tests and nn.EmbeddingLookup's target name it
    assert P.EmbeddingLookup().set_device("Device").primitive_target == "Device"
    with pytest.raises(ValueError, match=r"'NPU'.*'CPU', 'GPU', 'Ascend', 'Device'"):
        P.Gather().set_device("NPU")
    context.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8, global_rank=0)
    net = AddNet()
    strategies = compile_net(net, Tensor(np.ones([8, 32]), ms.float32), Tensor(np.arange(8), ms.int32))
    assert pick(strategies, "Add") == [[[2, 4], [2, 4]]]
    graph = ms.parallel.plan_for_devices(net, Tensor(np.ones([8, 32]), ms.float32),
                                         Tensor(np.arange(8), ms.int32), devices=8, purpose="forward").graph
    assert [n.attrs.get("primitive_target") for n in graph.node_list() if n.kind == "Gather"] == ["CPU"]


def test_tensor_to_scalar():
    assert P.TensorToScalar()(np.array(3.5, np.float32)) == 3.5
    assert jax.jit(lambda x: P.TensorToScalar()(x))(np.array([2.0], np.float32)).shape == ()


def test_get_activation_from_mindspores_module_path():
    assert type(get_activation("relu")).__name__ == "ReLU"
    with pytest.raises(ValueError, match=r"For 'Dense', the activation 'swishy' is unknown"):
        get_activation("swishy", prim_name="Dense")


def test_sequence_ops_module_path():
    """``P._sequence_ops.TensorToScalar`` (MindSpore's module for it) is the one TensorToScalar."""
    assert P._sequence_ops.TensorToScalar is P.TensorToScalar
    assert P._sequence_ops.TensorToScalar()(Tensor(np.array([3.0], np.float32))) == 3.0


def test_fast_gelu_activation_is_mindspores_formula():
    """``get_activation("fast_gelu")`` (Pangu-alpha's FeedForward): x / (1 + exp(-1.702|x|)) * exp(0.851 (x - |x|))."""
    x = np.linspace(-6, 6, 25).astype(np.float32)
    got = np.asarray(get_activation("fast_gelu")(Tensor(x)))
    want = x / (1 + np.exp(-1.702 * np.abs(x))) * np.exp(0.851 * (x - np.abs(x)))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert type(ms.nn.FastGelu()).__name__ == "FastGelu"


def test_add_pipeline_stage_is_recorded_and_checked(notices):
    """MindSpore's ``Parameter.add_pipeline_stage(stage)`` (a tied embedding's stages): recorded, said once, and a
    stage that is not an int >= 0 is a TypeError as in MindSpore."""
    table = Parameter(Tensor(np.ones((4, 2), np.float32)), "embedding_table")
    table.add_pipeline_stage(0)
    table.add_pipeline_stage(3)
    table.add_pipeline_stage(3)
    assert table.pipeline_stages == (0, 3)
    assert sum("add_pipeline_stage" in r.getMessage() for r in notices.records) == 1
    for bad in (-1, 1.0, True):
        with pytest.raises(TypeError, match="must be a positive number of int type"):
            table.add_pipeline_stage(bad)


@pytest.mark.parametrize("strategy,error", [
    (((2.0, 1), (1, 1)), TypeError),   # MindSpore: TypeError (a split must be an int)
    ([(2, 1), (1, 1)], TypeError),     # a list is not a tuple
    (((2, 1), [1, 1]), TypeError),
    (((0, 1), (1, 1)), ValueError),    # a bad value
])
def test_strategy_error_types(strategy, error):
    with pytest.raises(error) as info:
        P.MatMul().shard(strategy)
    assert isinstance(info.value, StrategyError)
