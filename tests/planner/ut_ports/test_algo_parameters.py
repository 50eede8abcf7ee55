"""``set_algo_parameters`` / ``get_algo_parameters`` / ``reset_algo_parameters`` (MindSpore's keys, defaults and
errors), each key changing the plan as it says, and ``set_op_strategy_config`` saving and loading op strategies."""

import json
import re

import numpy as np
import pytest

import graphpar as ms
from graphpar import Parameter, Tensor, context
from graphpar.common.api import _cell_graph_executor
from graphpar.nn import Cell, Momentum, TrainOneStepCell
from graphpar.ops import operations as P
from graphpar._context import AlgoParameters
from graphpar.parallel import get_algo_parameters, reset_algo_parameters, set_algo_parameters

from ..passes_helpers import QuickstartNet, traced, with_request


def setup_function():
    # as MindSpore's parallel test files do: the shapes given to _cell_graph_executor.compile are the whole batch
    # (without full_batch MindSpore reads them as one rank's slice, graphpar.compile.plans.global_batch)
    context.set_auto_parallel_context(dataset_strategy="full_batch")


def compile_net(net, *inputs, train=True):
    if train:
        net = TrainOneStepCell(net, Momentum(net.trainable_params(), learning_rate=0.1, momentum=0.9))
    net.set_train()
    _cell_graph_executor.compile(net, *inputs, phase="train")
    return _cell_graph_executor._get_shard_strategy(net)


def pick(strategies, kind):
    return [v for k, v in strategies.items() if re.search(f"/{kind}-op", k)]


def test_keys_defaults_and_errors():
    assert {k: get_algo_parameters(k) for k in ("fully_use_devices", "elementwise_op_strategy_follow",
                                                "enable_algo_approxi", "algo_approxi_epsilon",
                                                "tensor_slice_align_enable", "tensor_slice_align_size")} == {
        "fully_use_devices": False, "elementwise_op_strategy_follow": False, "enable_algo_approxi": False,
        "algo_approxi_epsilon": 0.1, "tensor_slice_align_enable": False, "tensor_slice_align_size": 16}
    set_algo_parameters(fully_use_devices=True, tensor_slice_align_size=8)
    assert ms.get_algo_parameters("fully_use_devices") and get_algo_parameters("tensor_slice_align_size") == 8
    reset_algo_parameters()
    assert get_algo_parameters("fully_use_devices") is False
    with pytest.raises(ValueError, match=r"unknown key 'fully_use'.*'fully_use_devices'"):
        set_algo_parameters(fully_use=True)
    with pytest.raises(ValueError, match=r"unknown key 'magic'"):
        get_algo_parameters("magic")
    with pytest.raises(TypeError, match=r"fully_use_devices must be a bool"):
        set_algo_parameters(fully_use_devices=1)
    with pytest.raises(ValueError, match=r"tensor_slice_align_size must be in \[1, 1024\]"):
        set_algo_parameters(tensor_slice_align_size=2048)


class ReluNet(Cell):
    def __init__(self, strategy=None):
        super().__init__()
        self.mul = P.Mul().shard(strategy)
        self.relu = P.ReLU()
        self.w = Parameter(Tensor(np.ones([64, 32]), dtype=ms.float32), "w")

    def construct(self, x, b):
        return self.relu(self.mul(x, self.w))


_x = Tensor(np.ones([64, 32]), dtype=ms.float32)


def test_fully_use_devices_refuses_a_strategy_using_some_devices():
    context.set_auto_parallel_context(parallel_mode="auto_parallel", device_num=8, global_rank=0,
                                      search_mode="sharding_propagation")
    assert pick(compile_net(ReluNet(((2, 2), (2, 2))), _x, _x), "ReLU") == [[[2, 2]]]
    set_algo_parameters(fully_use_devices=True)
    with pytest.raises(RuntimeError, match=r"fully_use_devices=True.*uses 4 of the 8 devices"):
        compile_net(ReluNet(((2, 2), (2, 2))), _x, _x)
    assert pick(compile_net(ReluNet(((1, 1), (1, 1))), _x, _x), "Mul") == [[[1, 1], [1, 1]]]  # all ones: valid


def test_fully_use_devices_restricts_the_candidates():
    graph, ctx = traced(QuickstartNet(), (16, 32), (16, 16), parallel_mode="auto_parallel",
                        search_mode="sharding_propagation")
    (relu,) = graph.find("relu")
    assert {c.devices_used for c in ctx.candidates(relu, graph)} == {1, 2, 4, 8}
    fully = with_request(ctx, algo=AlgoParameters(fully_use_devices=True))
    assert {c.devices_used for c in fully.candidates(relu, graph)} == {8}


class AddRelu(Cell):
    """MindSpore's documented case: Add's output feeds ReLU (here ReLU follows the second MatMul)."""

    def __init__(self):
        super().__init__()
        self.matmul1 = P.MatMul().shard(((8, 1), (1, 1)))
        self.add = P.Add()
        self.relu = P.ReLU()
        self.matmul2 = P.MatMul().shard(((2, 4), (4, 1)))
        self.w1 = Parameter(Tensor(np.ones([32, 32]), dtype=ms.float32), "w1")
        self.w2 = Parameter(Tensor(np.ones([32, 32]), dtype=ms.float32), "w2")

    def construct(self, x, b):
        return self.matmul2(self.relu(self.add(self.matmul1(x, self.w1), b)), self.w2)


def test_elementwise_op_strategy_follow():
    context.set_auto_parallel_context(parallel_mode="auto_parallel", device_num=8, global_rank=0,
                                      search_mode="sharding_propagation")
    plain = compile_net(AddRelu(), _x, _x)
    assert pick(plain, "ReLU") == [[[2, 4]]] and pick(plain, "Add") == [[[8, 1], [8, 1]]]  # the cheaper edge
    set_algo_parameters(elementwise_op_strategy_follow=True)
    followed = compile_net(AddRelu(), _x, _x)
    assert pick(followed, "ReLU") == [[[2, 4]]] and pick(followed, "Add") == [[[2, 4], [2, 4]]]


class TwoMatMul(Cell):
    def __init__(self):
        super().__init__()
        self.matmul1 = P.MatMul()
        self.matmul2 = P.MatMul()
        self.w1 = Parameter(Tensor(np.ones([32, 40]), dtype=ms.float32), "w1")
        self.w2 = Parameter(Tensor(np.ones([40, 64]), dtype=ms.float32), "w2")

    def construct(self, x, b):
        return self.matmul2(self.matmul1(x, self.w1), self.w2)


def test_tensor_slice_align_drops_unaligned_matmul_slices():
    context.set_auto_parallel_context(parallel_mode="auto_parallel", device_num=8, global_rank=0,
                                      search_mode="dynamic_programming")
    set_algo_parameters(tensor_slice_align_enable=True, tensor_slice_align_size=8)
    x = Tensor(np.ones([64, 32]), dtype=ms.float32)
    graph = ms.parallel.plan_for_devices(TwoMatMul(), x, x, devices=8, purpose="forward").graph
    for n in graph.node_list():
        if n.kind == "MatMul":
            for i, (row, vid) in enumerate(zip(n.strategy.in_strategy(), n.inputs)):
                last = graph.values[vid].shape[-1]
                assert (last // row[-1]) % 8 == 0, (n.instance_name, row, last)


def test_algo_approximation_keeps_a_smaller_search():
    context.set_auto_parallel_context(parallel_mode="auto_parallel", device_num=8, global_rank=0,
                                      search_mode="dynamic_programming")
    x = Tensor(np.ones([64, 32]), dtype=ms.float32)
    exact = ms.parallel.plan_for_devices(TwoMatMul(), x, x, devices=8, purpose="forward")
    set_algo_parameters(enable_algo_approxi=True, algo_approxi_epsilon=0.5)  # at most 2 candidates per op
    approx = ms.parallel.plan_for_devices(TwoMatMul(), x, x, devices=8, purpose="forward")
    variables = approx.graph.plan.search.problem["variables"]
    assert approx.graph.plan.search.problem["choices"] <= 2 * variables
    assert exact.graph.plan.search.problem["choices"] > approx.graph.plan.search.problem["choices"]
    assert approx.graph.plan.search.objective_s >= exact.graph.plan.search.objective_s - 1e-12


def test_op_strategy_config_saves_and_loads(tmp_path):
    path = str(tmp_path / "ops.json")
    with pytest.raises(KeyError, match=r"'SAVE' or 'LOAD'"):
        ms.set_op_strategy_config(mode="KEEP", path=path)
    with pytest.raises(KeyError, match=r"\.json"):
        ms.set_op_strategy_config(mode="SAVE", path=str(tmp_path / "ops.txt"))
    with pytest.raises(KeyError, match=r"absolute"):
        ms.set_op_strategy_config(mode="SAVE", path="ops.json")
    context.set_auto_parallel_context(parallel_mode="auto_parallel", device_num=8, global_rank=0,
                                      search_mode="sharding_propagation")
    ms.set_op_strategy_config(mode="SAVE", path=path)
    saved = compile_net(ReluNet(((2, 4), (2, 4))), _x, _x)
    items = json.load(open(path))["parallel_strategy_item"]
    assert [v["parallel_strategy"] for k, v in items.items() if "/Mul-" in k] == [[[2, 4], [2, 4]]]
    # the same network without its shard(): LOAD gives back the saved strategies
    ms.set_op_strategy_config(mode="LOAD", path=path)
    context.set_auto_parallel_context(parallel_mode="auto_parallel", device_num=8, global_rank=0,
                                      search_mode="sharding_propagation")
    assert compile_net(ReluNet(), _x, _x) == saved
