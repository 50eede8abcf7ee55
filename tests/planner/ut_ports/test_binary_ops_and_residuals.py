"""MindSpore's elementwise ops its arithmetic tests shard (``Mod``, ``TruncateDiv``, ``Xlogy``, ``DivNoNan``,
``BitwiseAnd``, ``Atan2``, ``MaskedFill``, ``ops.div``), and ``out_strategy`` on an op differentiated inside
``construct`` (a ``GradWrap``), whose traced call also returns the residuals its backward reads."""

import re

import numpy as np
import pytest

import graphpar as ms
from graphpar import Tensor, context, nn, ops
from graphpar.common.api import _cell_graph_executor
from graphpar.ops import composite as C
from graphpar.ops import operations as P


def setup_function():
    # as MindSpore's parallel test files do: the shapes given to _cell_graph_executor.compile are the whole batch
    # (without full_batch MindSpore reads them as one rank's slice, graphpar.compile.plans.global_batch)
    context.set_auto_parallel_context(dataset_strategy="full_batch")

grad_all = C.GradOperation(get_all=True)


class GradWrap(nn.Cell):
    def __init__(self, network):
        super().__init__()
        self.network = network

    def construct(self, *inputs):
        return grad_all(self.network)(*inputs)


def compile_net(net, *inputs):
    net.set_train()
    _cell_graph_executor.compile(net, *inputs)
    return _cell_graph_executor._get_shard_strategy(net)


def pick(strategies, kind):
    return [v for k, v in strategies.items() if re.search(f"/{kind}-op", k)]


_x = np.array([[7.0, -7.0, 5.5, -0.0], [3.0, -3.0, 1.0, 0.0]], np.float32)
_y = np.array([[2.0, 2.0, -2.0, 3.0], [0.0, 2.0, 4.0, 0.0]], np.float32)


@pytest.mark.parametrize("op,expected", [
    (P.Mod(), np.fmod(_x, np.where(_y == 0, 1, _y))),
    (P.TruncateDiv(), np.trunc(_x / np.where(_y == 0, 1, _y))),
    (P.TruncateMod(), np.fmod(_x, np.where(_y == 0, 1, _y))),
    (P.DivNoNan(), np.where(_y == 0, 0, _x / np.where(_y == 0, 1, _y))),
    (P.Xdivy(), np.where(_x == 0, 0, _x / np.where(_y == 0, 1, _y))),
    (P.MulNoNan(), np.where(_y == 0, 0, _x * _y)),
    (P.Atan2(), np.arctan2(_x, _y)),
])
def test_binary_ops_compute_mindspores_definitions(op, expected):
    y = np.where(_y == 0, 1, _y) if type(op).__name__ in ("Mod", "TruncateDiv", "TruncateMod", "Xdivy") else _y
    np.testing.assert_allclose(np.asarray(op(_x, y)), expected, rtol=1e-6)


def test_xlogy_bitwise_and_integer_truncation():
    np.testing.assert_allclose(np.asarray(P.Xlogy()(np.array([0.0, 2.0]), np.array([0.0, np.e]))), [0.0, 2.0])
    a, b = np.array([12, 10], np.int32), np.array([10, 6], np.int32)
    assert np.asarray(P.BitwiseAnd()(a, b)).tolist() == [8, 2]
    assert np.asarray(P.BitwiseOr()(a, b)).tolist() == [14, 14]
    assert np.asarray(P.BitwiseXor()(a, b)).tolist() == [6, 12]
    assert np.asarray(P.TruncateDiv()(np.array([-7], np.int32), np.array([2], np.int32))).tolist() == [-3]
    assert np.asarray(ops.div(np.array([-7.0]), np.array([2.0]), rounding_mode="trunc")).tolist() == [-3.0]
    assert np.asarray(ops.div(np.array([-7.0]), np.array([2.0]), rounding_mode="floor")).tolist() == [-4.0]
    assert np.asarray(ops.div(np.array([-7.0]), np.array([2.0]))).tolist() == [-3.5]
    with pytest.raises(ValueError, match="rounding_mode must be None, 'floor' or 'trunc'"):
        ops.div(np.array([1.0]), np.array([2.0]), rounding_mode="round")


class MatMulThen(nn.Cell):
    def __init__(self, op, strategy2):
        super().__init__()
        self.matmul = P.MatMul().shard(((2, 2), (2, 2)))
        self.op = op.shard(strategy2)

    def construct(self, x, y, b):
        return self.op(self.matmul(x, y), b)


@pytest.mark.parametrize("name", ["Mod", "TruncateDiv", "TruncateMod", "Xlogy", "Xdivy", "MulNoNan", "DivNoNan",
                                  "Atan2"])
def test_binary_ops_take_an_elementwise_strategy(name):
    context.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8, global_rank=0)
    net = GradWrap(MatMulThen(getattr(P, name)(), ((4, 2), (4, 2))))
    strategies = compile_net(net, Tensor(np.ones([64, 32]), ms.float32), Tensor(np.ones([32, 64]), ms.float32),
                             Tensor(np.ones([64, 64]), ms.float32))
    assert pick(strategies, name) == [[[4, 2], [4, 2]]]


class MaskedFillNet(nn.Cell):
    def __init__(self, strategy, value):
        super().__init__()
        self.matmul = P.MatMul().shard(((2, 4), (4, 1)))
        self.masked_fill = P.MaskedFill().shard(strategy)
        self.value = value

    def construct(self, x, y, mask):
        return self.masked_fill(self.matmul(x, y), mask, self.value)


@pytest.mark.parametrize("strategy,value", [
    (((4, 1), (1, 2)), 1.0),                            # a number value has no strategy entry
    (((4, 1), (1, 2), ()), Tensor(1.0, ms.float32)),    # a 0-d tensor value takes ()
])
def test_masked_fill_strategy_with_a_number_or_a_tensor_value(strategy, value):
    context.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8, global_rank=0)
    x, y = Tensor(np.ones([64, 32]), ms.float32), Tensor(np.ones([32, 1]), ms.float32)
    mask = Tensor(np.arange(64).reshape(1, 64) % 2 == 0)
    strategies = compile_net(MaskedFillNet(strategy, value), x, y, mask)
    assert pick(strategies, "MaskedFill") == [[list(e) for e in strategy]]
    out = np.asarray(MaskedFillNet(strategy, value)(x, y, mask))
    assert out[0, 0] == 1.0 and out[0, 1] == 32.0


def test_masked_fill_strategy_needs_input_and_mask():
    with pytest.raises(ValueError, match=r"MaskedFill takes 3 tensor input\(s\).*1 entry"):
        P.MaskedFill().shard(((4, 1),))


class GatherNet(nn.Cell):
    def __init__(self, out_strategy):
        super().__init__()
        self.gatherv2 = P.Gather().shard(((8, 1), (1, 1)), out_strategy)
        self.mul = P.Mul().shard(((2, 4, 1), (2, 4, 1)))
        self.index = Tensor(np.ones([64, 64]), dtype=ms.int32)

    def construct(self, x, y):
        return self.mul(self.gatherv2(x, self.index, 0), y)


@pytest.mark.parametrize("out_strategy,first_dim_axes", [
    (((1, 1, 1),), ()),                     # the table's row split summed back: an AllReduce
    (((8, 1, 1),), ("m0", "m1", "m2")),     # or scattered over the output's first dimension: a ReduceScatter
])
def test_out_strategy_of_an_op_differentiated_in_construct(out_strategy, first_dim_axes):
    """Under GradWrap the Gather's traced call also returns residuals for its backward; ``out_strategy`` names the
    op's own output only, as in MindSpore."""
    context.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8, global_rank=0)
    net = GradWrap(GatherNet(out_strategy))
    x, y = Tensor(np.ones([64, 64]), ms.float32), Tensor(np.ones([64, 64, 64]), ms.float32)
    assert pick(compile_net(net, x, y), "Gather") == [[[8, 1], [1, 1]]]
    graph = ms.parallel.plan_for_devices(net, x, y, devices=8, purpose="forward").graph
    (gather,) = [n for n in graph.node_list() if n.kind == "Gather"]
    assert gather.strategy.dims.residuals >= 1
    assert gather.strategy.output_specs[0] == (first_dim_axes, (), ())
    with pytest.raises(ValueError, match="out_strategy has 2 entries for 1 output"):
        compile_net(GradWrap(GatherNet(((8, 1, 1), (1, 1, 1)))), x, y)
