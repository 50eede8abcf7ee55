"""MindSpore 2.x's ``Layout``: explicit device matrices and tensor maps as ``shard()`` strategies.

``Layout((2, 2, 2), ("dp", "sp", "mp"))`` names the axes of a device matrix (ranks fill it row-major);
``layout("dp", "mp")`` maps each tensor dimension onto them. The planner places each alias on the mesh axes it is
(``planner.layout_hint``), so the layout says exactly which ranks share a piece: a strategy tuple only says how
many pieces. Each test checks the per-op strategies, the layouts on the mesh, the collectives in the compiled HLO
and the numbers against one device.
"""

import numpy as np
import pytest

import graphpar as ms
from graphpar import nn, ops
from graphpar.dump.hlo import parse_collectives
from graphpar.dump.reader import parse_node
from graphpar.errors import LayoutError, StrategyError
from graphpar.parallel import Layout

from ..helpers import collectives, forward, rand, reference

LAYOUT = Layout((2, 2, 2), ("dp", "sp", "mp"))


class MatMulReLU(nn.Cell):
    """x @ w then ReLU, the MatMul given ``in_strategy`` (and ``out_strategy``)."""

    def __init__(self, in_strategy, out_strategy=None, k=32, n=16):
        super().__init__()
        self.w = ms.Parameter(ms.Tensor(rand(k, n, seed=1)), "w")
        self.matmul = ops.MatMul().shard(in_strategy, out_strategy)
        self.relu = ops.ReLU()

    def construct(self, x):
        return self.relu(self.matmul(x, self.w))


def _groups(hlo, kind):
    return [c.groups for c in parse_collectives(hlo, 8) if c.kind == kind]


def test_layout_prints_and_converts_as_mindspore():
    x_layout = LAYOUT("dp", "mp")
    assert x_layout.to_dict() == {"device_matrix": (2, 2, 2), "tensor_map": (2, 0), "interleaved_parallel": False,
                                  "alias_name": ("dp", "sp", "mp"), "rank_list": list(range(8))}
    assert LAYOUT(("dp", "sp"), "None").tensor_map == ((2, 1), -1)
    assert repr(LAYOUT("mp", "None")) == ("{'device_matrix': (2, 2, 2), 'tensor_map': (0, -1), "
                                          "'interleaved_parallel': false, 'alias_name': (dp, sp, mp)}")
    assert ms.Layout is Layout and ms.parallel.Layout is Layout


@pytest.mark.parametrize("args, error, words", [
    (([2, 4], ("dp", "mp")), TypeError, "device_matrix must be a tuple"),
    (((2, 4), ["dp", "mp"]), TypeError, "alias_name must be a tuple"),
    (((2, 4), ("dp",)), LayoutError, "2 axes but alias_name has 1"),
    (((2, 4), ("dp", "dp")), LayoutError, "appears twice"),
    (((2, 4), ("dp", "None")), LayoutError, "'None' cannot be an alias"),
    (((2, 2, 2), ("interleaved_parallel", "dp", "mp")), LayoutError, "must be the last alias"),
    (((2, 4), ("dp", "mp"), [1, 0, 2, 3, 4, 5, 6, 7]), LayoutError, "rank_list"),
])
def test_bad_layouts_are_refused_when_built(args, error, words):
    with pytest.raises(error, match=words):
        Layout(*args)


@pytest.mark.parametrize("tensor_map, words", [
    (("dp", "tp"), "names 'tp', which is not an alias"),
    ((("dp", "mp"), "dp"), "uses the alias 'dp' twice"),
])
def test_bad_tensor_maps_are_refused_when_called(tensor_map, words):
    with pytest.raises(LayoutError, match=words):
        LAYOUT(*tensor_map)


def test_3d_layout_with_a_multi_axis_entry_places_each_alias_on_its_mesh_axes():
    # x's rows over dp and sp (4 pieces, dp major), the contracted dim over mp: MatMul ((4, 2), (2, 1))
    net = MatMulReLU((LAYOUT(("dp", "sp"), "mp"), LAYOUT("mp", "None")))
    x = rand(16, 32)
    out, hlo, graph = forward(net, x, full_batch=True)
    matmul = graph.find("matmul")[0]
    assert matmul.strategy.in_strategy() == ((4, 2), (2, 1))
    assert matmul.strategy.input_specs == ((("m0", "m1"), ("m2",)), (("m2",), ()))
    assert matmul.provenance.kind == "user"
    # the partial sums over mp (the minor device-matrix axis) are reduced between neighbouring ranks
    assert collectives(hlo) == {"all-reduce": 1}
    assert _groups(hlo, "AllReduce") == [[[0, 1], [2, 3], [4, 5], [6, 7]]]
    np.testing.assert_allclose(np.asarray(out), np.asarray(reference(MatMulReLU((LAYOUT("dp", "mp"),
                                                                                 LAYOUT("mp", "None"))), x)),
                               rtol=1e-5, atol=1e-5)


def test_an_alias_left_out_repeats_the_op_wherever_it_sits():
    # sp, the middle axis, splits nothing: the ranks that differ in sp hold the same pieces; mp stays the minor axis,
    # so the partial-sum groups are still neighbours. The tuple ((2, 2), (2, 1)) would put k on sp's mesh axis.
    out, hlo, graph = forward(MatMulReLU((LAYOUT("dp", "mp"), LAYOUT("mp", "None"))), rand(16, 32), full_batch=True)
    matmul = graph.find("matmul")[0]
    assert matmul.strategy.in_strategy() == ((2, 2), (2, 1))
    assert matmul.strategy.input_specs == ((("m0",), ("m2",)), (("m2",), ()))
    assert matmul.strategy.repeat_axes == ("m1",)
    assert _groups(hlo, "AllReduce") == [[[0, 1], [2, 3], [4, 5], [6, 7]]]
    _, hlo_tuple, graph_tuple = forward(MatMulReLU(((2, 2), (2, 1))), rand(16, 32), full_batch=True)
    assert graph_tuple.find("matmul")[0].strategy.input_specs == ((("m0",), ("m1",)), (("m1",), ()))
    assert _groups(hlo_tuple, "AllReduce") == [[[0, 2], [1, 3], [4, 6], [5, 7]]]


def test_out_layout_adds_the_contracted_alias_to_an_output_dimension():
    net = MatMulReLU((LAYOUT("dp", "mp"), LAYOUT("mp", "sp")), (LAYOUT(("dp", "mp"), "sp"),))
    x = rand(16, 32)
    out, hlo, graph = forward(net, x, mode="auto_parallel", search_mode="sharding_propagation", full_batch=True)
    matmul, relu = graph.find("matmul")[0], graph.find("relu")[0]
    assert matmul.strategy.output_specs == ((("m0", "m2"), ("m1",)),)
    assert relu.strategy.input_specs == ((("m0", "m2"), ("m1",)),)  # propagated from the out layout
    assert sum(collectives(hlo).values()) == 1, collectives(hlo)  # the partial sum, reduced (and scattered) once
    np.testing.assert_allclose(np.asarray(out), np.asarray(reference(net, x)), rtol=1e-5, atol=1e-5)


def test_interleaved_parallel_last_in_its_entry_is_the_layout_without_it(caplog):
    inter = Layout((2, 2, 2, 2), ("dp", "sp", "mp", "interleaved_parallel"))
    assert inter(("dp", "interleaved_parallel"), "mp").to_dict()["interleaved_parallel"] is True
    _, _, graph = forward(MatMulReLU((inter(("dp", "interleaved_parallel"), "mp"), inter("mp", "None"))),
                          rand(16, 32), full_batch=True)
    assert graph.find("matmul")[0].strategy.input_specs == ((("m0",), ("m2",)), (("m2",), ()))
    assert "one piece per device" in caplog.text



def test_interleaved_parallel_before_another_alias_computes_the_contiguous_block(caplog):
    # MindSpore's test_sharding_strategy_save_and_load4 form: ("dp", "interleaved_parallel", "mp") gives each device
    # MindSpore's strided pieces (d, 0, m), (d, 1, m); graphpar computes the same values on the block (d, m)
    inter = Layout((2, 2, 2, 2), ("dp", "mp", "sp", "interleaved_parallel"))
    net = MatMulReLU((inter(("dp", "interleaved_parallel"), "mp"), inter("mp", "sp")),
                     (inter(("dp", "interleaved_parallel", "mp"), "sp"),), n=16)
    x = rand(16, 32)
    out, _, graph = forward(net, x, full_batch=True)
    assert graph.find("matmul")[0].strategy.output_specs == ((("m0", "m1"), ("m2",)),)
    assert "strided block" in caplog.text and "the same values" in caplog.text
    np.testing.assert_allclose(np.asarray(out), np.asarray(reference(net, x)), rtol=1e-5, atol=1e-5)
    with pytest.raises(StrategyError, match="store a strided, non-contiguous block of the Parameter"):
        forward(MatMulReLU((inter("dp", "mp"), inter(("interleaved_parallel", "mp"), "None"))), rand(16, 32),
                full_batch=True)


@pytest.mark.parametrize("strategy, words", [
    ((Layout((2, 2), ("dp", "mp"))("dp", "mp"), Layout((2, 2), ("dp", "mp"))("mp", "None")),
     r"device matrix \(2, 2\) with aliases \('dp', 'mp'\) holds 4 devices but the job has 8"),
    ((LAYOUT("dp", "mp"), LAYOUT("sp", "None")), "is split by .'sp',. but x dim 1 by .'mp',."),
    ((LAYOUT("dp", "mp"), LAYOUT("mp", "dp")), "the alias 'dp' splits two different dimensions"),
    ((LAYOUT("dp", "mp"), Layout((2, 4), ("dp", "mp"))("mp", "None")), "different device matrices"),
])
def test_layouts_that_cannot_hold_are_refused_by_name(strategy, words):
    with pytest.raises(StrategyError, match=words) as info:
        forward(MatMulReLU(strategy), rand(16, 32), full_batch=True)
    assert "op 'matmul'" in str(info.value)


def test_shard_refuses_layouts_mixed_with_tuples_or_without_a_tensor_map():
    with pytest.raises(StrategyError, match="mixes Layout objects and tuples"):
        ops.MatMul().shard((LAYOUT("dp", "mp"), (2, 1)))
    with pytest.raises(StrategyError, match="without its tensor map"):
        ops.MatMul().shard((LAYOUT, LAYOUT))
    with pytest.raises(StrategyError, match="both be written with layouts"):
        ops.MatMul().shard((LAYOUT("dp", "mp"), LAYOUT("mp", "None")), ((8, 1),))


def test_begin_dump_prints_the_layouts_as_mindspore(tmp_path):
    ms.set_context(save_graphs=True, save_graphs_path=str(tmp_path))
    try:
        forward(MatMulReLU((LAYOUT("dp", "mp"), LAYOUT("mp", "None"))), rand(16, 32), full_batch=True)
    finally:
        ms.set_context(save_graphs=False)
    text = next(tmp_path.glob("rank_0/step_parallel_begin_*.ir")).read_text()
    line = next(l for l in text.splitlines() if "instance name: matmul" in l)
    assert ("in_layout: ({'device_matrix': (2, 2, 2), 'tensor_map': (2, 0), 'interleaved_parallel': false, "
            "'alias_name': (dp, sp, mp)}, {'device_matrix': (2, 2, 2), 'tensor_map': (0, -1), "
            "'interleaved_parallel': false, 'alias_name': (dp, sp, mp)})") in line
    assert "{in_strategy: ((2, 2), (2, 1))}" in line
    node = parse_node(line, 1)  # graphpar ir reads it back: the strategy, and the layouts as MindSpore printed them
    assert node.in_strategy == ((2, 2), (2, 1))
    assert node.primitive_attrs["in_layout"].startswith("({'device_matrix': (2, 2, 2), 'tensor_map': (2, 0)")
