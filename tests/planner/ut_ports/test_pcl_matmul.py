"""MindSpore's "PCL MatMul": a 2-D MatMul whose two inputs both take the strategy ``(a, b)`` with ``a * b`` the
device count (``test_two_matmul_both_a_b_strategy``). Each input arrives split (a, b); the k dimension is gathered
(x's over the b devices, w's over the a devices), so the product is split (a, b) with no reduction: the op runs
as ``((a, 1), (1, b))``."""

import numpy as np
import pytest

import graphpar as ms
from graphpar import Parameter, Tensor, context, nn
from graphpar.common.api import _cell_graph_executor
from graphpar.ops import operations as P


class TwoMatMul(nn.Cell):
    def __init__(self, strategy, transpose_b=False):
        super().__init__()
        self.matmul1 = P.MatMul(transpose_b=transpose_b).shard(strategy)
        self.relu = P.ReLU()
        w = np.arange(32 * 64, dtype=np.float32).reshape(32, 64) / 2048
        self.w = Parameter(Tensor(w.T if transpose_b else w), "w")

    def construct(self, x):
        return self.relu(self.matmul1(x, self.w))


def _matmul_node(net, x):
    graph = ms.parallel.plan_for_devices(net, x, devices=8, purpose="forward").graph
    (node,) = [n for n in graph.node_list() if n.kind == "MatMul"]
    return node


@pytest.mark.parametrize("a,b", [(4, 2), (8, 1), (2, 4)])
def test_equal_a_b_strategies_gather_the_contracted_dimension(a, b):
    context.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8, global_rank=0)
    x = Tensor(np.linspace(-1, 1, 128 * 32, dtype=np.float32).reshape(128, 32))
    net = TwoMatMul(((a, b), (a, b)))
    node = _matmul_node(net, x)
    assert [list(r) for r in node.strategy.in_strategy()] == [[a, 1], [1, b]]
    assert not node.strategy.partial_axes  # no reduction after the product
    _cell_graph_executor.compile(net, x)
    expected = np.maximum(np.asarray(x) @ np.asarray(net.w.get_value()), 0)
    np.testing.assert_allclose(np.asarray(net(x)), expected, rtol=1e-5, atol=1e-5)


def test_only_without_transposes_and_on_every_device():
    x = Tensor(np.ones((128, 32), np.float32))
    context.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=16, global_rank=0)
    with pytest.raises(ValueError, match="MatMul needs these dimensions split alike"):
        _cell_graph_executor.compile(TwoMatMul(((4, 2), (4, 2))), x)  # 8 of 16 devices: the ordinary rule
    context.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8, global_rank=0)
    with pytest.raises(ValueError, match="matmul1"):
        _cell_graph_executor.compile(TwoMatMul(((4, 2), (4, 2)), transpose_b=True), x)  # 4 x 2 x 4 devices
    net = TwoMatMul(((2, 2), (2, 2)))  # 4 of 8 devices: ordinary, k split 2 on both
    _cell_graph_executor.compile(net, x)
    assert [v for k, v in _cell_graph_executor._get_shard_strategy(net).items() if "MatMul" in k] == [
        [[2, 2], [2, 2]]]
