"""The stage search's weight-bounded layer plans (``compile.plans.stage_weights``): the repeated layer re-solved by
the intra-op ILP under a per-device memory bound that takes away its weights' excess over a full split over the
tensor group, each plan priced as the searched one and offered to the stage search beside it."""

from __future__ import annotations

import dataclasses

import pytest

import graphpar as ms
from graphpar import nn
from graphpar.compile.lowering.graph_trace import trace_network
from graphpar.compile.lowering.network_state import NetworkState
from graphpar.compile.plans.stage_profile import StagePlanError, edge_costs, find_layers, layer_plans, planned_layer
from graphpar.models.gpt import GPT, NONE, gpt_data
from graphpar.planner.stages import Cluster
from graphpar.planner.stages.search import search_stages, shapes

SEQ, HIDDEN, BATCH = 32, 128, 8
KEY = (8, 4)  # a tensor group of 8 devices, 4 sequences per micro-batch


@pytest.fixture(scope="module")
def profiled():
    """The unhinted GPT layer (AUTO_PARALLEL) profiled on 8 devices for 4 sequences: its searched plan, the
    sequence-parallel flip and the weight-bounded plans."""
    ms.reset_auto_parallel_context()
    ms.set_auto_parallel_context(parallel_mode="auto_parallel")
    net = nn.WithLossCell(GPT(1, 1, NONE, seq=SEQ, hidden=HIDDEN, heads=4, vocab=512, layers=2),
                          nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"))
    ids, labels = gpt_data(BATCH, SEQ, 512)
    graph, _ = trace_network(NetworkState(net, net.trainable_params()), [ids, labels], "train")
    layers = find_layers(net, graph)
    cluster = Cluster.for_platform(8, "cpu", None)
    plain, sequence, bounded = layer_plans(layers, BATCH, [KEY[0]], [KEY[1]], cluster, 1.0)
    yield layers, graph, cluster, plain, sequence, bounded
    ms.reset_auto_parallel_context()


def test_the_layer_gets_weight_bounded_plans_each_keeping_less_weight_than_the_searched_one(profiled):
    _, _, _, plain, sequence, bounded = profiled
    ladder = bounded[KEY]
    rungs = [c.weight_bound for c in ladder]
    assert ladder and rungs[0] == 1 and rungs == sorted(rungs)
    # per rung, its plan and the flips re-solved under its bound, one per sequence-parallel kind, none twice
    assert len({(c.weight_bound, c.seq_parallel) for c in ladder}) == len(ladder)
    assert len({dataclasses.replace(c, weight_bound=0) for c in ladder}) == len(ladder)
    # the searched plan (and its sequence flip) keep the weights partly replicated on the 8 devices; each rung
    # keeps less, the last one the weight matrices split over the whole group
    searched = min(plain[KEY].weight_bytes, sequence[KEY].weight_bytes)
    least = [min(c.weight_bytes for c in ladder if c.weight_bound == k) for k in sorted(set(rungs))]
    assert least[0] < searched and least == sorted(least, reverse=True) and len(set(least)) == len(least)
    params = [v for v in planned_layer(*_args(profiled)).values.values() if v.kind == "param" and v.name != "stage_probe"]
    matrices = sum(v.nbytes for v in params if len(v.shape) >= 2)
    vectors = sum(v.nbytes for v in params if len(v.shape) < 2)
    assert matrices / KEY[0] < least[-1] <= matrices / KEY[0] + vectors


def _args(profiled):
    layers, _, cluster, *_ = profiled
    return layers, BATCH, KEY[0], KEY[1], cluster


def test_each_weight_bounded_plan_is_priced_from_its_own_plan_which_the_strategy_file_re_solves(profiled):
    for cost in profiled[5][KEY]:
        planned = planned_layer(*_args(profiled), seq_parallel=cost.seq_parallel, weight_bound=cost.weight_bound)
        text = ", ".join(f"{n.instance_name} {n.strategy.in_strategy_text()}" for n in planned.node_list()
                         if n.kind in ("MatMul", "BatchMatMul"))
        assert text == cost.plan  # the plan priced is the plan the strategy file records
    # the rungs' own plans are solved under their bound
    for k in sorted({c.weight_bound for c in profiled[5][KEY]}):
        search = planned_layer(*_args(profiled), seq_parallel=True, weight_bound=k).plan.search
        assert search.budget is not None and search.memory_bytes <= search.budget
    with pytest.raises(StagePlanError, match=r"weight-bounded layer plan 9 \(sequence parallel False\) on tp 8"):
        planned_layer(*_args(profiled), weight_bound=9)


def test_the_stage_search_prices_every_weight_bounded_plan_as_a_shape_of_its_own(profiled):
    layers, graph, _, plain, sequence, bounded = profiled
    head, tail = edge_costs(graph, layers, BATCH)
    cluster = Cluster.for_platform(16, "cpu", None)
    without = search_stages(plain, 4, head, tail, cluster, 16, 1.0, sequence=sequence)
    found = search_stages(plain, 4, head, tail, cluster, 16, 1.0, sequence=sequence, bounded=bounded)
    with_key = sum(1 for s in shapes(cluster, 4, 16, [KEY[1]], [KEY[0]]) if (s.tp, s.micro) == KEY)
    assert found.priced - without.priced == with_key * len(bounded[KEY])
    # the best plan is never slower with more layer plans to choose from
    assert found.best.step_time <= without.best.step_time
