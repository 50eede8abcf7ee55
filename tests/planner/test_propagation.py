"""Sharding propagation and SEMI_AUTO defaults: the plans MindSpore's documents show, and the errors for hints
that cannot hold."""

import numpy as np
import pytest

import graphpar as ms
from graphpar import Parameter, Tensor, nn, ops
from graphpar.errors import StrategyError

from .helpers import collectives, forward, megatron, quickstart_net, rand, reference, strategies


def _train_graph(net, x, y, **ctx):
    ms.reset_auto_parallel_context()
    ms.set_auto_parallel_context(**ctx)
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.Momentum(net.trainable_params(), 0.2, 0.1))
    return train, train.program.plan_graph([x, y])


def test_quickstart_plan_matches_seed_004():
    x, y = rand(16, 32), rand(16, 16, seed=3)
    _, graph = _train_graph(quickstart_net(), x, y, parallel_mode="auto_parallel", search_mode="sharding_propagation")
    by_name = {n.instance_name: n for n in graph.node_list()}
    assert by_name["matmul"].strategy.in_strategy() == ((2, 4), (4, 1))
    assert by_name["matmul"].provenance.kind == "user"
    assert by_name["relu"].strategy.in_strategy() == ((2, 4),)
    assert by_name["relu"].provenance.kind == "propagated" and by_name["relu"].provenance.source == \
        by_name["matmul"].id
    assert by_name["matmul2"].strategy.in_strategy() == ((2, 4), (4, 1))
    assert by_name["matmul2"].provenance.source == by_name["relu"].id
    assert by_name["matmul"].strategy.device_matrix() == (2, 4, 1)
    assert by_name["matmul"].scope == "Default/network-WithLossCell/_backbone-QuickstartNet"


def test_quickstart_loss_trajectory_equals_stand_alone():
    x, y = rand(16, 32), rand(16, 16, seed=3)
    losses = {}
    for mode in ("stand_alone", "auto_parallel", "semi_auto_parallel"):
        ms.reset_auto_parallel_context()
        ms.set_auto_parallel_context(parallel_mode=mode, search_mode="sharding_propagation")
        net = quickstart_net()
        train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()),
                                    nn.Momentum(net.trainable_params(), 0.2, 0.1))
        losses[mode] = [float(train(x, y)) for _ in range(10)]
    np.testing.assert_allclose(losses["auto_parallel"], losses["stand_alone"], rtol=1e-4)
    np.testing.assert_allclose(losses["semi_auto_parallel"], losses["stand_alone"], rtol=1e-4)
    assert losses["auto_parallel"][-1] < losses["auto_parallel"][0]


def test_partial_sum_groups_match_mindspore():
    x, y = rand(16, 32), rand(16, 16, seed=3)
    train, graph = _train_graph(quickstart_net(), x, y, parallel_mode="auto_parallel",
                                search_mode="sharding_propagation")
    from graphpar.dump.hlo import parse_collectives

    matmul = graph.find("matmul")[0]
    found = [c for c in parse_collectives(train.program.lower_step([x, y]).compile().as_text(), 8)
             if c.kind == "AllReduce" and not c.backward and matmul.id in c.nodes]
    assert found and found[0].group_of(0) == (0, 1, 2, 3) and found[0].group_of(4) == (4, 5, 6, 7)


def test_repeat_dimension_goes_right():
    # MatMul ((2, 2), (2, 1)) on 8 devices: device matrix [2, 2, 1, 2]; rank 0's partial-sum group is (0, 2)
    x, y = rand(16, 32), rand(16, 16, seed=3)
    train, graph = _train_graph(quickstart_net(((2, 2), (2, 1))), x, y, parallel_mode="semi_auto_parallel")
    node = graph.find("matmul")[0]
    assert node.strategy.device_matrix() == (2, 2, 1, 2)
    from graphpar.dump.hlo import parse_collectives

    found = [c for c in parse_collectives(train.program.lower_step([x, y]).compile().as_text(), 8)
             if c.kind == "AllReduce" and not c.backward and node.id in c.nodes]
    assert found[0].group_of(0) == (0, 2) and found[0].group_of(4) == (4, 6)


class FFN(nn.Cell):
    """MindSpore's sharding-propagation design example (a feed-forward block)."""

    def __init__(self):
        super().__init__()
        self.w1 = Parameter(Tensor(rand(64, 64, seed=1) * 0.1), "w1")
        self.b1 = Parameter(Tensor(np.zeros(64, np.float32)), "b1")
        self.w2 = Parameter(Tensor(rand(64, 64, seed=2) * 0.1), "w2")
        self.matmul = ops.MatMul().shard(((2, 1), (1, 4)))
        self.bias_add = ops.BiasAdd()
        self.relu = ops.ReLU()
        self.matmul2 = ops.MatMul()

    def construct(self, x):
        return self.matmul2(self.relu(self.bias_add(self.matmul(x, self.w1), self.b1)), self.w2)


def test_mindspore_design_example_propagates():
    out, _, graph = forward(FFN(), rand(64, 64), mode="auto_parallel", search_mode="sharding_propagation")
    s = strategies(graph)
    assert s["matmul"] == ((2, 1), (1, 4))
    assert s["bias_add"] == ((2, 4), (4,))
    assert graph.find("bias_add")[0].strategy.in_strategy_text() == "((2, 4), (4))"
    assert s["relu"] == ((2, 4),)
    assert s["matmul2"] == ((2, 4), (4, 1))
    np.testing.assert_allclose(np.asarray(out), np.asarray(reference(FFN(), rand(64, 64))), rtol=1e-5, atol=1e-6)


def test_megatron_mlp_has_one_all_reduce_per_block():
    x = rand(32, 64)
    out, hlo, graph = forward(megatron(blocks=2), x, mode="auto_parallel", search_mode="sharding_propagation",
                              full_batch=True)
    assert strategies(graph)["gelu"] == ((1, 8),)
    counts = collectives(hlo)
    assert counts.get("all-reduce", 0) == 2, counts
    assert sum(v for k, v in counts.items() if k != "all-reduce") == 0, counts
    np.testing.assert_allclose(np.asarray(out), np.asarray(reference(megatron(blocks=2), x)), rtol=1e-5, atol=1e-5)


def test_megatron_loss_layer_keeps_the_replicated_layout_and_adds_no_all_gather():
    """The MSE loss after a row-parallel MatMul: its input arrives replicated (the MatMul's AllReduce). Splitting
    the loss's Sub would trade a few elementwise FLOPs for an AllGather of the cotangent in the backward pass (and a
    scalar AllReduce of the mean); the loss layer follows its input's layout instead, and the compiled step has
    only the Megatron AllReduces: one forward per block, one backward for each block's input but the first."""
    x, y = rand(16, 64), rand(16, 64, seed=3)
    _, graph = _train_graph(megatron(blocks=2), x, y, parallel_mode="auto_parallel",
                            search_mode="sharding_propagation", full_batch=True)
    matmul2 = [n for n in graph.node_list() if n.instance_name == "matmul2"][-1]
    loss_nodes = [n for n in graph.node_list() if "_loss_fn-MSELoss" in n.scope]
    assert {n.kind for n in loss_nodes} >= {"Sub", "Square", "ReduceMean"}, [n.kind for n in loss_nodes]
    replicated = matmul2.strategy.output_spec(0)
    assert replicated == ((), ())
    sub = next(n for n in loss_nodes if n.kind == "Sub")
    assert sub.strategy.input_spec(0) == replicated and sub.strategy.output_spec(0) == replicated, sub.strategy
    assert all(not any(n.strategy.input_spec(0)) for n in loss_nodes), [n.strategy.input_specs for n in loss_nodes]

    losses, hlo = {}, ""
    for mode in ("stand_alone", "auto_parallel"):
        ms.reset_auto_parallel_context()
        ms.set_auto_parallel_context(parallel_mode=mode, search_mode="sharding_propagation", full_batch=True)
        net = megatron(blocks=2)
        train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.Momentum(net.trainable_params(), 0.1, 0.9))
        losses[mode] = [float(train(x, y)) for _ in range(4)]
        if mode == "auto_parallel":
            hlo = train.program.lower_step([x, y]).compile().as_text()
    counts = collectives(hlo)
    assert counts.get("all-gather", 0) == 0 and counts.get("all-reduce", 0) == 3, counts
    np.testing.assert_allclose(losses["auto_parallel"], losses["stand_alone"], rtol=1e-4)
    assert losses["auto_parallel"][-1] < losses["auto_parallel"][0]


def test_semi_auto_unhinted_ops_are_data_parallel():
    _, _, graph = forward(quickstart_net(), rand(16, 32))
    s = strategies(graph)
    assert s["matmul"] == ((2, 4), (4, 1)) and s["relu"] == ((8, 1),) and s["matmul2"] == ((8, 1), (1, 1))
    assert graph.find("relu")[0].provenance.kind == "default"


def test_auto_without_any_hint_propagates_from_the_dataset():
    # MindSpore's _VirtualDataset is a configured op under sharding propagation (its data-parallel strategy), so a
    # network without any shard() is planned from the batch's layout: the Dense layer's MatMul splits the batch
    class Plain(nn.Cell):
        def __init__(self):
            super().__init__()
            self.fc = nn.Dense(32, 16)

        def construct(self, x):
            return self.fc(x)

    x, net = rand(16, 32), Plain()
    out, _, graph = forward(net, x, mode="auto_parallel", search_mode="sharding_propagation")
    (matmul,) = [n for n in graph.node_list() if n.kind == "MatMul"]
    assert matmul.strategy.in_strategy() == ((8, 1), (1, 1)) and matmul.provenance.kind == "propagated"
    np.testing.assert_allclose(np.asarray(out), np.asarray(reference(net, x)), rtol=1e-5, atol=1e-6)


def test_auto_with_a_search_mode_searches_the_unhinted_ops():
    _, _, graph = forward(quickstart_net(), rand(16, 32), mode="auto_parallel", search_mode="dynamic_programming")
    assert graph.find("matmul")[0].provenance.kind == "user"  # a hint is a constraint of the search
    assert graph.find("relu")[0].provenance.kind == "searched"


def _error_for(hint, x_shape=(16, 32), mode="semi_auto_parallel"):
    with pytest.raises(StrategyError) as err:
        forward(quickstart_net(hint), rand(*x_shape), mode=mode)
    return str(err.value)


def test_split_that_does_not_divide_its_dimension():
    text = _error_for(((4, 2), (2, 1)), x_shape=(6, 32))
    assert "'matmul'" in text and "scope Default/network-QuickstartNet" in text
    assert "size 6" in text and "((4, 2), (2, 1))" in text and "(6, 32)" in text and "e.g. ((2, 2), (2, 1))" in text


def test_product_above_device_count():
    text = _error_for(((4, 4), (4, 1)))
    assert "16 devices" in text and "8" in text and "'matmul'" in text and "(16, 32)" in text


def test_matmul_contracted_splits_disagree():
    text = _error_for(((2, 4), (2, 1)))
    assert "split 2" in text and "split 4" in text and "same factor" in text and "(32, 16)" in text


def test_shared_parameter_with_conflicting_hints():
    class Shared(nn.Cell):
        def __init__(self):
            super().__init__()
            self.w = Parameter(Tensor(rand(16, 16) * 0.1), "w")
            self.mm1 = ops.MatMul().shard(((8, 1), (1, 1)))
            self.mm2 = ops.MatMul().shard(((1, 2), (2, 4)))

        def construct(self, x):
            return self.mm2(self.mm1(x, self.w), self.w)

    with pytest.raises(StrategyError) as err:
        forward(Shared(), rand(16, 16))
    text = str(err.value)
    assert "'w'" in text and "mm1" in text and "mm2" in text and "same split" in text


def test_shared_parameter_resolved_by_cost_when_one_side_is_not_hinted():
    class Shared(nn.Cell):
        def __init__(self):
            super().__init__()
            self.w = Parameter(Tensor(rand(16, 16) * 0.1), "w")
            self.mm1 = ops.MatMul().shard(((1, 8), (8, 1)))
            self.mm2 = ops.MatMul()

        def construct(self, x):
            return self.mm2(self.mm1(x, self.w), self.w)

    out, _, graph = forward(Shared(), rand(16, 16))
    conflicts = graph.plan.param_conflicts
    assert conflicts and conflicts[0]["parameter"] == "w"
    np.testing.assert_allclose(np.asarray(out), np.asarray(reference(Shared(), rand(16, 16))), rtol=1e-5, atol=1e-6)


def test_out_strategy_splits_the_reduced_output():
    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.w = Parameter(Tensor(rand(32, 16) * 0.1), "w")
            self.matmul = ops.MatMul().shard(((2, 4), (4, 1)), out_strategy=((8, 1),))

        def construct(self, x):
            return self.matmul(x, self.w)

    out, hlo, graph = forward(Net(), rand(16, 32), full_batch=True)
    assert graph.find("matmul")[0].strategy.output_spec(0) == (("m0", "m1", "m2"), ())
    assert out.sharding.shard_shape(out.shape) == (2, 16)
    # XLA's CPU backend lowers the reduction as all-reduce + local slice; a GPU backend emits a reduce-scatter.
    assert sum(collectives(hlo).values()) == 1 and "all-gather" not in collectives(hlo)
    np.testing.assert_allclose(np.asarray(out), np.asarray(reference(Net(), rand(16, 32))), rtol=1e-5, atol=1e-6)


def _propagated(train, inputs, reuse):
    """(per node: strategy and provenance text, op_cost calls) of the propagate pass on ``train``'s traced graph."""
    from graphpar.planner.passes import propagate as pass_module
    from graphpar.planner.passes.hints import apply_hints, read_hints
    from graphpar.planner.passes.context import PlanContext
    from graphpar.planner.passes.mesh_choice import choose_mesh, dataset_layouts
    from graphpar.planner.planning import plan_graph

    program = train.program
    traced = program.planned(inputs).traced.graph
    request = program.plan.request(traced, "train")
    traced = plan_graph(traced, request, (("read_hints", read_hints), ("choose_mesh", choose_mesh),
                                          ("dataset_layouts", dataset_layouts)))
    ctx = PlanContext.of(request, traced.plan)
    calls = []
    real = pass_module.op_cost

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    pass_module.op_cost = counted
    try:
        graph = pass_module.propagate(apply_hints(traced, ctx), ctx, reuse_choices=reuse)
    finally:
        pass_module.op_cost = real
    return {n.id: (n.strategy, n.provenance and n.provenance.text(graph)) for n in graph.node_list()}, len(calls)


class Branches(nn.Cell):
    """Ops of equal kind and shapes in different neighbourhoods: inputs in different layouts (two hints), and
    consumers that can or cannot split the last axis (Softmax). A last MatMul keeps the branches out of the loss
    tail (``propagate.loss_tail``), where fewer collectives would decide first."""

    def __init__(self):
        super().__init__()
        self.w1 = Parameter(Tensor(rand(16, 16, seed=1) * 0.1), "w1")
        self.w2 = Parameter(Tensor(rand(16, 16, seed=2) * 0.1), "w2")
        self.w3 = Parameter(Tensor(rand(16, 16, seed=3) * 0.1), "w3")
        self.m3 = ops.MatMul()
        self.m1 = ops.MatMul().shard(((2, 4), (4, 1)))
        self.m2 = ops.MatMul().shard(((8, 1), (1, 1)))
        self.r1, self.r2, self.r3 = ops.ReLU(), ops.ReLU(), ops.ReLU()
        self.softmax = ops.Softmax()
        self.neg = ops.Neg()
        self.add1, self.add2 = ops.Add(), ops.Add()

    def construct(self, x):
        a = self.m1(x, self.w1)
        b = self.r3(self.m2(x, self.w2))
        return self.m3(self.add2(self.add1(self.softmax(self.r1(a)), self.neg(self.r2(a))), b), self.w3)


@pytest.mark.parametrize("model", ["gpt_qkv", "deep_mlp", "branches"])
def test_reused_choices_equal_pricing_every_node_afresh(model):
    """Propagation prices a node's candidates once per distinct neighbourhood (the layers of a deep network) and
    reuses the choice: the plan, provenance and cost breakdown must equal pricing every node on its own."""
    if model == "gpt_qkv":
        from graphpar.models.gpt import GPT, QKV, gpt_data, gpt_train_cell

        ms.set_auto_parallel_context(parallel_mode="auto_parallel", search_mode="sharding_propagation")
        train, inputs = gpt_train_cell(GPT(hints=QKV, layers=2)), list(gpt_data())
    elif model == "branches":
        ms.set_auto_parallel_context(parallel_mode="auto_parallel", search_mode="sharding_propagation")
        net = Branches()
        train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.Momentum(net.trainable_params(), 0.1, 0.9))
        inputs = [rand(16, 16), rand(16, 16, seed=2)]
    else:
        ms.set_auto_parallel_context(parallel_mode="auto_parallel", search_mode="sharding_propagation")
        cells = [nn.Dense(16, 16, activation="relu") for _ in range(8)]
        cells[0].matmul.shard(((2, 1), (4, 1)))
        net = nn.SequentialCell(cells)
        train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.Momentum(net.trainable_params(), 0.1, 0.9))
        inputs = [rand(16, 16), rand(16, 16, seed=2)]
    reused, priced_reused = _propagated(train, inputs, True)
    fresh, priced_fresh = _propagated(train, inputs, False)
    assert reused == fresh
    if model != "branches":
        assert sum(p is not None and "propagated" in p for _, p in fresh.values()) > 10
        assert priced_reused < 0.75 * priced_fresh, (priced_reused, priced_fresh)  # the repeated layers reused
    else:  # equal ops, different choices: what the reuse must tell apart
        graph = train.program.plan_graph(inputs)
        relus = {n.instance_name: n.strategy.input_specs for n in graph.node_list() if n.kind == "ReLU"}
        # r1 feeds a Softmax (its last axis whole), r2 a Neg: same input layout, different choices; r3's input
        # comes from the other hint
        assert relus["r1"] != relus["r2"] and relus["r3"] != relus["r2"], relus
