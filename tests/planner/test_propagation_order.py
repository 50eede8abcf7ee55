"""The order of sharding propagation. graphpar's default (``propagation_order="hints_first"``): every shard() hint
at once, then the dataset. ``set_auto_parallel_context(propagation_order="mindspore")``: as MindSpore's
``CostGraph::StrategyPropagate`` walks, one walk per configured op, in the order of their operator names
(``"{Kind}Info{n}{n}"``, ``n`` counted from the output), the dataset last; consumers before producers; a consumer with
several input edges waits for them (``graphpar.planner.passes.propagation_order``)."""

import numpy as np
import pytest

import graphpar as ms
from graphpar import Parameter, Tensor, nn, ops
from graphpar.compile.runtime.forward import ForwardProgram
from graphpar.planner.passes.propagation_order import configured_order, creation_indices

from tests.planner.collective_bytes import measured_bytes
from tests.planner.helpers import collectives, forward, rand, reference, shard_shape, strategies

PROPAGATION = dict(mode="auto_parallel", search_mode="sharding_propagation", full_batch=True,
                   propagation_order="mindspore")  # graphpar's default is "hints_first"


class Chain(nn.Cell):
    """MindSpore's ``test_sharding_strategy_save_and_load1`` network: two configured MatMuls between three Adds."""

    def __init__(self, first=((4, 2), (1, 2)), second=((2, 4), (1, 4))):
        super().__init__()
        self.matmul1 = ops.MatMul(transpose_b=True).shard(first)
        self.matmul2 = ops.MatMul(transpose_b=True).shard(second)
        self.add1, self.add2, self.add3 = ops.Add(), ops.Add(), ops.Add()
        self.w1 = Parameter(Tensor(rand(8, 32, seed=1)), "w1")
        self.w2 = Parameter(Tensor(rand(16, 8, seed=2)), "w2")

    def construct(self, x, b1, b2, b3):
        out = self.matmul1(self.add1(x, b1), self.w1)
        return self.add3(self.matmul2(self.add2(out, b2), self.w2), b3)


def _chain_inputs():
    return [rand(64, 32), rand(64, 32, seed=3), rand(64, 8, seed=4), rand(64, 16, seed=5)]


def test_the_matmul_nearest_the_output_walks_first_and_its_producer_takes_its_input_layout():
    inputs = _chain_inputs()
    out, _, graph = forward(Chain(), *inputs, **PROPAGATION)
    s = strategies(graph)
    # matmul2 ("MatMulInfo11") walks before matmul1 ("MatMulInfo33"): add2, between them, is matmul2's producer and
    # takes matmul2's input layout; add1 is matmul1's
    assert s["add2"] == ((2, 4), (2, 4)) and graph.find("add2")[0].provenance.source == graph.find("matmul2")[0].id
    assert s["add1"] == ((4, 2), (4, 2))
    # add3 reads matmul2 and the network input b3: it waits for both edges, and when matmul2's walk runs dry it is
    # chosen from matmul2's alone: matmul2's partial sum over its 4-way contraction is sliced on matmul2's own
    # devices, (2, 4), the AllReduce becoming a ReduceScatter; b3's layout is priced only in the dataset's walk
    assert s["add3"] == ((2, 4), (2, 4))
    assert shard_shape(out) == (32, 4)
    np.testing.assert_allclose(np.asarray(out), np.asarray(reference(Chain(), *inputs)), rtol=1e-5, atol=1e-5)


def test_the_default_order_takes_every_hint_at_once_for_as_many_bytes():
    """Under graphpar's default the Add between the two MatMuls is reached from both hints in the same walk, and
    graph order gives it to matmul1's output side; MindSpore's order gives it matmul2's input layout. Both plans send
    3,968 B (docs/porting_from_mindspore.md, the sharding-propagation row)."""
    ms.reset_auto_parallel_context()
    assert ms.get_auto_parallel_context("propagation_order") == "hints_first"
    inputs = _chain_inputs()
    out, hlo, graph = forward(Chain(), *inputs, mode="auto_parallel", search_mode="sharding_propagation",
                              full_batch=True)
    s = strategies(graph)
    assert (s["add1"], s["add2"], s["add3"]) == (((4, 2), (4, 2)), ((4, 2), (4, 2)), ((2, 4), (2, 4)))
    _, ms_hlo, _ = forward(Chain(), *inputs, **PROPAGATION)
    assert measured_bytes(hlo, 8) == measured_bytes(ms_hlo, 8) == 3968
    np.testing.assert_allclose(np.asarray(out), np.asarray(reference(Chain(), *inputs)), rtol=1e-5, atol=1e-5)


def test_the_order_is_refused_by_name_and_switching_it_recompiles():
    ms.reset_auto_parallel_context()
    with pytest.raises(ms.errors.ConfigError, match="propagation_order='bfs' is not valid.*'hints_first', 'mindspore'"):
        ms.set_auto_parallel_context(propagation_order="bfs")
    ms.set_auto_parallel_context(parallel_mode="auto_parallel", search_mode="sharding_propagation", full_batch=True)
    program, inputs = ForwardProgram(Chain()), _chain_inputs()
    program(*inputs)
    assert strategies(program.planned(*inputs).graph)["add2"] == ((4, 2), (4, 2))
    ms.set_auto_parallel_context(propagation_order="mindspore")  # the same program plans again on its next call
    program(*inputs)
    assert strategies(program.planned(*inputs).graph)["add2"] == ((2, 4), (2, 4))


def test_swapping_the_strategies_swaps_the_adds():
    _, _, graph = forward(Chain(((2, 4), (1, 4)), ((4, 2), (1, 2))), *_chain_inputs(), **PROPAGATION)
    s = strategies(graph)
    assert (s["add1"], s["add2"], s["add3"]) == (((2, 4), (2, 4)), ((4, 2), (4, 2)), ((4, 2), (4, 2)))


class AddAfterPartialSum(nn.Cell):
    """MindSpore's ``test_out_strategy_propagate1``: an Add and a ReLU after a MatMul whose output is a partial sum
    over its 2-way contraction."""

    def __init__(self):
        super().__init__()
        self.matmul = ops.MatMul(transpose_b=True).shard(((4, 2), (1, 2)))
        self.add, self.relu = ops.Add(), ops.ReLU()
        self.w = Parameter(Tensor(rand(8, 32, seed=1)), "w")

    def construct(self, x, b):
        return self.relu(self.add(self.matmul(x, self.w), b))


def test_an_add_after_a_partial_sum_slices_it_on_the_matmuls_devices():
    x, b = rand(64, 32), rand(64, 8, seed=2)
    out, hlo, graph = forward(AddAfterPartialSum(), x, b, **PROPAGATION)
    s = strategies(graph)
    assert s["add"] == ((4, 2), (4, 2)) and s["relu"] == ((4, 2),)
    assert graph.find("matmul")[0].strategy.partial_axes  # the MatMul's output is still a partial sum
    # one reduction of the partial sum and nothing else: no gather of b, no gather before the ReLU. (XLA's CPU
    # backend lowers the reduce-scatter as all-reduce + local slice; a GPU backend emits a reduce-scatter.)
    counts = collectives(hlo)
    assert sum(counts.values()) == 1 and ("all-reduce" in counts or "reduce-scatter" in counts), counts
    assert shard_shape(out) == (16, 4)
    np.testing.assert_allclose(np.asarray(out), np.asarray(reference(AddAfterPartialSum(), x, b)), rtol=1e-5,
                               atol=1e-5)


def test_configured_ops_are_taken_by_operator_name():
    """``OpsPtrCompare`` compares ``"{Kind}Info{n}{n}"`` as text: by kind first (``MatMul`` before ``ReLU``), then
    by the creation count from the output."""

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.relu = ops.ReLU().shard(((8, 1),))
            self.matmul1 = ops.MatMul().shard(((8, 1), (1, 1)))
            self.matmul2 = ops.MatMul().shard(((2, 4), (4, 1)))
            self.w1 = Parameter(Tensor(rand(32, 32, seed=1)), "w1")
            self.w2 = Parameter(Tensor(rand(32, 16, seed=2)), "w2")

        def construct(self, x):
            return self.matmul2(self.matmul1(self.relu(x), self.w1), self.w2)

    ms.reset_auto_parallel_context()
    ms.set_auto_parallel_context(parallel_mode="auto_parallel", search_mode="sharding_propagation", full_batch=True,
                                 propagation_order="mindspore")
    graph = ms.parallel.plan_for_devices(Net(), rand(16, 32), devices=8, purpose="forward").graph
    configured = [n for n in graph.node_list() if n.provenance is not None and n.provenance.kind == "user"]
    created = creation_indices(graph)
    assert [created[n.id] for n in configured] == [2, 1, 0]  # counted from the output
    assert [n.instance_name for n in configured_order(graph, configured, created)] == ["matmul2", "matmul1", "relu"]
