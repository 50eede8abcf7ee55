"""MindSpore 2.x's layout constraints: ``reshard(tensor, layout)`` in ``construct``, the functional
``shard(cell_or_fn, in_strategy, out_strategy, parameter_plan)`` / ``Cell.shard``, and layouts in strategy files.

Each constraint is a ``Reshard`` node of the graph with the user's layout; the planner propagates from it, the
lowering pins it (with_sharding_constraint), XLA inserts the collective that moves the value into it.
"""

import json

import numpy as np
import pytest

import graphpar as ms
from graphpar import nn, ops
from graphpar.errors import StrategyError
from graphpar.parallel import Layout, shard
from graphpar.parallel.function import reshard

from ..helpers import collectives, forward, rand, reference

LAYOUT = Layout((2, 4), ("dp", "mp"))
PROPAGATION = {"mode": "auto_parallel", "search_mode": "sharding_propagation", "full_batch": True}


class Block(nn.Cell):
    """x @ w then ReLU, no strategy of its own."""

    def __init__(self):
        super().__init__()
        self.w = ms.Parameter(ms.Tensor(rand(32, 16, seed=1)), "w")
        self.matmul = ops.MatMul()
        self.relu = ops.ReLU()

    def construct(self, x):
        return self.relu(self.matmul(x, self.w))


class Outer(nn.Cell):
    def __init__(self, block):
        super().__init__()
        self.block = block

    def construct(self, x):
        return self.block(x)


def test_reshard_pins_an_intermediate_value_and_xla_moves_it():
    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.w = ms.Parameter(ms.Tensor(rand(32, 16, seed=1)), "w")
            self.matmul = ops.MatMul().shard(((2, 1), (1, 4)))  # output: rows over dp, columns over mp
            self.relu = ops.ReLU()

        def construct(self, x):
            y = reshard(self.matmul(x, self.w), LAYOUT("dp", "None"))  # columns gathered
            return self.relu(y)

    x = rand(16, 32)
    out, hlo, graph = forward(Net(), x, **PROPAGATION)
    pin, relu = graph.find("reshard")[0], graph.find("relu")[0]
    assert pin.kind == "Reshard" and pin.provenance.kind == "user"
    assert pin.strategy.input_specs == ((("m0",), ()),)
    assert relu.strategy.input_specs == ((("m0",), ()),)  # propagated from the constraint
    assert collectives(hlo) == {"all-gather": 1}  # the columns, gathered over mp
    np.testing.assert_allclose(np.asarray(out), np.asarray(reference(Net(), x)), rtol=1e-5, atol=1e-5)


def test_reshard_refuses_what_is_not_a_layout():
    with pytest.raises(TypeError, match="layout must be a Layout"):
        reshard(np.ones(4), "dp")


def test_functional_shard_sets_input_and_parameter_layouts_and_propagates_inside():
    block = shard(Block(), in_strategy=(LAYOUT("dp", "None"),), parameter_plan={"w": LAYOUT("None", "mp")})
    x = rand(16, 32)
    out, hlo, graph = forward(Outer(block), x, **PROPAGATION)
    matmul = graph.find("matmul")[0]
    # rows over dp from the input layout, columns over mp from the parameter's: no contracted split, no collective
    assert matmul.strategy.in_strategy() == ((2, 1), (1, 4)) and matmul.provenance.kind == "propagated"
    assert {graph.values[v].name: s for v, s in graph.plan.value_specs.items()}["block.w"] == ((), ("m1", "m2"))
    assert collectives(hlo) == {}
    np.testing.assert_allclose(np.asarray(out), np.asarray(reference(Outer(Block()), x)), rtol=1e-5, atol=1e-5)


def test_cell_shard_out_strategy_pins_the_output():
    block = Block().shard(in_strategy=(LAYOUT("dp", "mp"),), out_strategy=(LAYOUT("dp", "None"),))
    out, hlo, graph = forward(Outer(block), rand(16, 32), **PROPAGATION)
    pins = [n for n in graph.node_list() if n.kind == "Reshard"]
    assert [p.strategy.input_specs for p in pins] == [((("m0",), ("m1", "m2")),), ((("m0",), ()),)]
    # x arrives split over mp along the contracted dimension: the MatMul reduces its partial sums
    assert graph.find("matmul")[0].strategy.in_strategy() == ((2, 4), (4, 1))
    assert collectives(hlo).get("all-reduce") == 1


def test_shard_refuses_bad_arguments_by_name():
    with pytest.raises(TypeError, match="in_strategy must be a tuple"):
        shard(Block(), in_strategy=[LAYOUT("dp", "None")])
    with pytest.raises(StrategyError, match="parameter_plan names 'v', which is not a Parameter"):
        shard(Block(), in_strategy=(LAYOUT("dp", "None"),), parameter_plan={"v": LAYOUT("None", "mp")})
    with pytest.raises(TypeError, match="parameter_plan names Parameters of a Cell"):
        shard(lambda x: x, in_strategy=(LAYOUT("dp", "None"),), parameter_plan={"w": LAYOUT("None", "mp")})
    with pytest.raises(ValueError, match="level 1 is not built"):
        shard(Block(), in_strategy=(LAYOUT("dp", "None"),), level=1)


def test_parameter_plan_is_checked_against_the_parameter_when_shard_is_called():
    # MindSpore's Cell.shard checks each parameter_plan entry at once: a tuple or a Layout, one split per dimension
    # of the Parameter, each dividing it (w is (32, 16))
    with pytest.raises(TypeError, match="must be str and tuple/Layout.*str and NoneType"):
        Block().shard(in_strategy=((2, 1),), parameter_plan={"w": None})
    with pytest.raises(StrategyError, match="the length of param_strategy: 3, is not equal to param_shape len: 2"):
        Block().shard(in_strategy=((2, 1),), parameter_plan={"w": (1, 1, 1)})
    with pytest.raises(StrategyError, match=r"param_shape\[1\]: 16 cannot be divisible by param_strategy\[1\]: 3"):
        Block().shard(in_strategy=((2, 1),), parameter_plan={"w": (1, 3)})
    with pytest.raises(StrategyError, match=r"param_shape\[0\]: 32 cannot be divisible by param_strategy\[0\]: 64"):
        Block().shard(in_strategy=((2, 1),), parameter_plan={"w": Layout((64, 1), ("dp", "mp"))("dp", "None")})
    assert Block().shard(in_strategy=((2, 1),), parameter_plan={"w": (2, 4)}) is not None


class Layered(nn.Cell):
    """A MatMul placed by a layout that skips the middle device-matrix axis (sp repeats)."""

    def __init__(self, hinted=True):
        super().__init__()
        layout = Layout((2, 2, 2), ("dp", "sp", "mp"))
        self.w = ms.Parameter(ms.Tensor(rand(32, 16, seed=1)), "w")
        self.matmul = ops.MatMul()
        if hinted:
            self.matmul.shard((layout("dp", "mp"), layout("mp", "None")))
        self.relu = ops.ReLU()

    def construct(self, x):
        return self.relu(self.matmul(x, self.w))


def _train_plan(net, **ctx):
    ms.reset_auto_parallel_context()
    ms.set_auto_parallel_context(parallel_mode="auto_parallel", search_mode="sharding_propagation", full_batch=True,
                                 **ctx)
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.Momentum(net.trainable_params(), 0.1, 0.9))
    return train.program.plan_graph([rand(16, 32), rand(16, 16, seed=3)])


def test_strategy_file_keeps_layouts_on_their_own_device_matrix_axes(tmp_path):
    path = tmp_path / "strategy.json"
    saved = _train_plan(Layered(), strategy_ckpt_config={"save_file": str(path)})
    entry = next(v for k, v in json.loads(path.read_text())["graphpar"]["strategies"].items()
                 if k.endswith("MatMul-matmul"))
    assert entry["in_layout"] == [{"dev_matrix": [2, 2, 2], "alias_name": ["dp", "sp", "mp"], "tensor_map": [2, 0]},
                                  {"dev_matrix": [2, 2, 2], "alias_name": ["dp", "sp", "mp"], "tensor_map": [0, -1]}]
    loaded = _train_plan(Layered(hinted=False), strategy_ckpt_config={"load_file": str(path)})
    matmul = loaded.find("matmul")[0]
    # the same axes, not only the same counts: ((2, 2), (2, 1)) as a tuple would put k on the middle mesh axis
    assert matmul.strategy.input_specs == saved.find("matmul")[0].strategy.input_specs == (
        (("m0",), ("m2",)), (("m2",), ()))
    assert "strategy file" in matmul.provenance.detail


def test_a_strategy_file_mindspore_wrote_is_read_by_its_op_names(tmp_path):
    # MindSpore keys an op by its primitive name and first Parameter input ("MatMul_w"), not by its scope
    path = tmp_path / "mindspore.json"
    path.write_text(json.dumps({
        "current_stage": 0,
        "parallel_strategy_item": {"MatMul_w": {"stage": 0, "parallel_strategy": [[4, 2], [2, 1]]}},
        "parallel_layout_item": {"w": {"dev_matrix": [4, 2], "tensor_map": [0, -1], "tensor_shape": [32, 16],
                                       "field": 0, "opt_weight_shard_step": 0, "opt_weight_shard_size": 0}}}))
    graph = _train_plan(Layered(hinted=False), strategy_ckpt_config={"load_file": str(path)})
    assert graph.find("matmul")[0].strategy.in_strategy() == ((4, 2), (2, 1))


def test_a_layout_hinted_network_trains_as_it_does_on_one_device():
    def losses(net, parallel):
        ms.reset_auto_parallel_context()
        if parallel:
            ms.set_auto_parallel_context(parallel_mode="auto_parallel", search_mode="sharding_propagation",
                                         full_batch=True)
        train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.Momentum(net.trainable_params(), 0.1, 0.9))
        x, y = rand(16, 32), rand(16, 16, seed=3)
        return [float(train(x, y)) for _ in range(3)]

    np.testing.assert_allclose(losses(Layered(), True), losses(Layered(hinted=False), False), rtol=1e-5)


def test_functional_shard_of_a_function_pins_its_inputs_inside_construct():
    matmul = ops.MatMul()
    sharded = shard(lambda a, b: matmul(a, b), in_strategy=(LAYOUT("dp", "None"), LAYOUT("None", "mp")))

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.w = ms.Parameter(ms.Tensor(rand(32, 16, seed=1)), "w")

        def construct(self, x):
            return sharded(x, self.w)

    x = rand(16, 32)
    out, hlo, graph = forward(Net(), x, **PROPAGATION)
    assert [n.strategy.input_specs for n in graph.node_list() if n.kind == "Reshard"] == [
        ((("m0",), ()),), (((), ("m1", "m2")),)]
    assert graph.find("mat_mul")[0].strategy.in_strategy() == ((2, 1), (1, 4))
    assert collectives(hlo) == {}
    np.testing.assert_allclose(np.asarray(out), x @ rand(32, 16, seed=1), rtol=1e-5, atol=1e-5)
