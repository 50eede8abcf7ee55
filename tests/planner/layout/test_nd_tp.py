"""MindSpore's 2D/3D tensor-parallel MatMul: ``add_prim_attr("enable_nd_tp", True)`` with layout hints.

Each input keeps the layout its hint gives it (``x``'s contracted dimension may be split by more aliases than
``w``'s), the output takes the layout MindSpore infers (``planner.nd_tp``), so two such MatMuls chain with the
first one's output already in the second one's input layout. MindSpore's own tests:
test_batch_matmul_high_dimension.py. Each test checks the layouts, the numbers against one device and, for the
chain, that nothing is redistributed between the layers.
"""

import numpy as np
import pytest

import graphpar as ms
from graphpar import nn, ops
from graphpar.errors import StrategyError
from graphpar.parallel import Layout

from ..helpers import collectives, forward, rand, reference


class TwoMatMul(nn.Cell):
    """x @ w1 @ w2, both MatMuls 2D/3D tensor parallel (MindSpore's test Net)."""

    def __init__(self, w1, w2, strategy1, strategy2, transpose_b=False, batch=False):
        super().__init__()
        op = ops.BatchMatMul if batch else ops.MatMul
        self.mul1 = op(transpose_b=transpose_b).shard(in_strategy=strategy1).add_prim_attr("enable_nd_tp", True)
        self.mul2 = op(transpose_b=transpose_b).shard(in_strategy=strategy2).add_prim_attr("enable_nd_tp", True)
        self.w1 = ms.Parameter(ms.Tensor(w1), "w1")
        self.w2 = ms.Parameter(ms.Tensor(w2), "w2")

    def construct(self, x):
        return self.mul2(self.mul1(x, self.w1), self.w2)


def _check(net, x):
    out, hlo, graph = forward(net, x, full_batch=True)
    np.testing.assert_allclose(np.asarray(out), np.asarray(reference(net, x)), rtol=1e-4, atol=1e-4)
    return graph.find("mul1")[0].strategy, graph.find("mul2")[0].strategy, hlo


def test_2d_tp_output_is_split_y_then_x_and_feeds_the_next_layer_as_it_is():
    layout = Layout((2, 4), ("x", "y"))  # mesh axes m0 (x, 2) and m1, m2 (y, 4)
    net = TwoMatMul(rand(32, 64, seed=1), rand(64, 64, seed=2),
                    (layout("None", ("x", "y")), layout("x", "y")), (layout("None", ("y", "x")), layout("y", "x")))
    mul1, mul2, hlo = _check(net, rand(64, 32))
    x, y = ("m0",), ("m1", "m2")
    # x arrives with k split (x, y), w1 keeps (x, y); the product is a partial sum over x, scattered into n
    assert mul1.input_specs == (((), x + y), (x, y))
    assert mul1.output_specs == (((), y + x),)
    assert mul1.partial_axes == x
    assert mul2.input_specs[0] == mul1.output_specs[0]  # no redistribution between the layers
    assert mul2.output_specs == (((), x + y),)
    # XLA moves the pieces between the pinned layouts (all-gathers and all-to-alls here); no sum is all-reduced
    assert collectives(hlo).get("all-reduce", 0) == 0, collectives(hlo)


def test_3d_tp_batch_matmul_scatters_into_m_and_transposed_w_reads_alike():
    layout = Layout((2, 2, 2), ("z", "x", "y"))
    w1, w2 = rand(4, 32, 16, seed=1), rand(4, 16, 32, seed=2)
    plain = TwoMatMul(w1, w2, (layout("None", ("z", "x"), "y"), layout("None", ("y", "z"), "x")),
                      (layout("None", ("z", "y"), "x"), layout("None", ("x", "z"), "y")), batch=True)
    mul1, mul2, _ = _check(plain, rand(4, 16, 32))
    z, x, y = ("m0",), ("m1",), ("m2",)
    assert mul1.output_specs == (((), z + y, x),)  # m loses x (gathered), gains y (the scattered partial sum)
    assert mul2.input_specs[0] == mul1.output_specs[0]
    transposed = TwoMatMul(np.swapaxes(w1, 1, 2), np.swapaxes(w2, 1, 2),
                           (layout("None", ("z", "x"), "y"), layout("None", "x", ("y", "z"))),
                           (layout("None", ("z", "y"), "x"), layout("None", "y", ("x", "z"))), True, batch=True)
    t1, _, _ = _check(transposed, rand(4, 16, 32))
    assert t1.output_specs == mul1.output_specs


@pytest.mark.parametrize("matrix, x_layout, w_layout, words", [
    # 2D: x's k must end with w's n alias (here it ends with w's k alias)
    (((2, 4), ("x", "y")), ("None", ("y", "x")), ("x", "y"), "2D MatMul's last two dimensions"),
    # 3D: x's k must be w's first k alias
    (((2, 2, 2), ("z", "x", "y")), (("z", "x"), "y"), (("x", "z"), "y"), "3D MatMul's last two dimensions"),
])
def test_layouts_mindspore_refuses_are_refused_by_name(matrix, x_layout, w_layout, words):
    layout = Layout(*matrix)
    net = TwoMatMul(rand(32, 64, seed=1), rand(64, 64, seed=2), (layout(*x_layout), layout(*w_layout)),
                    (layout(*x_layout), layout(*w_layout)))
    with pytest.raises(StrategyError, match=f"mul1.*{words}"):
        forward(net, rand(64, 32), full_batch=True)


def test_without_the_attribute_the_same_layouts_are_an_ordinary_matmul_and_refused():
    layout = Layout((2, 4), ("x", "y"))
    net = TwoMatMul(rand(32, 64, seed=1), rand(64, 64, seed=2),
                    (layout("None", ("x", "y")), layout("x", "y")), (layout("None", ("y", "x")), layout("y", "x")))
    net.mul1.attrs.pop("enable_nd_tp")
    with pytest.raises(StrategyError, match="needs these dimensions split alike"):
        forward(net, rand(64, 32), full_batch=True)
