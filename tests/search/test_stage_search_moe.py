"""The stage search on Mixture-of-Experts layers: expert parallel (ep, dividing the data-parallel replicas as
MindSpore's ``expert_parallel`` divides ``data_parallel``, and the expert count) is enumerated with the other
settings; it divides the routed experts' weights, gradients and optimizer state ep ways, reduces the experts'
gradients over dp / ep replicas, and pays four AlltoAlls per layer and micro-batch (dispatch and combine, forward
and backward) of the dispatched tokens, measured on the profiled layer."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import graphpar as ms
from bench.stage_moe import loss_network
from graphpar.compile.lowering.graph_trace import trace_network
from graphpar.compile.lowering.network_state import NetworkState
from graphpar.compile.plans.stage_profile import edge_costs, find_layers, layer_costs, search_pipeline
from graphpar.nn.transformer import MoEParallelConfig
from graphpar.nn.utils import no_init_parameters
from graphpar.planner.stages import Cluster, EdgeCost, LayerCost, Shape, assign, best_fixed
from graphpar.planner.stages.search import search_stages, shapes
from graphpar.planner.wire import wire_bytes

SMALL_MOE = dict(vocab=512, seq=64, hidden=128, heads=4, layers=8, experts=16, top_k=2, expert_hidden=64)
BATCH, DEVICES = 64, 64


def _moe_layer(**kw) -> LayerCost:
    base = dict(tp=1, micro=1, flops=1e12, comm_bytes=0.0, messages=0, weight_bytes=9e9, activation_bytes=1e9,
                boundary_bytes=1e8, experts=16, expert_weight_bytes=8e9, dispatch_bytes=5e8)
    return LayerCost(**{**base, **kw})


def test_expert_parallel_divides_the_experts_state_and_pays_four_alltoalls_of_the_dispatched_tokens():
    cluster = Cluster(devices=8)  # one node: the ep group inside it
    layer = _moe_layer()
    one = assign(Shape(1, 1, 8, 1, 1), 2, layer, EdgeCost(), EdgeCost(), cluster, slots=2.0)
    ep8 = assign(Shape(1, 1, 8, 1, 1, ep=8), 2, layer, EdgeCost(), EdgeCost(), cluster, slots=2.0)
    # per expert weight byte: weights + gradients + Adam's 2 slots = 4, on 1/8 of the experts; and without ep
    # each micro-batch's expert gradients are reduced over the 8 replicas (2 buffers), with ep 8 over none
    assert one.stage_memory[0] - ep8.stage_memory[0] == pytest.approx(2 * 8e9 * (1 - 1 / 8) * 4 + 2 * 2 * 8e9)
    alltoall = cluster.hw.alpha + cluster.hw.beta * wire_bytes("AlltoAll", 5e8, 8)
    # (each stage's time per micro-batch includes its dp gradient reduction, reduce_time)
    assert (ep8.stage_time[0] - ep8.reduce_time[0]) - (one.stage_time[0] - one.reduce_time[0]) == pytest.approx(
        2 * 4 * alltoall)
    # the experts' gradients are reduced over dp / ep = 1 replica: only the other 1e9 bytes per layer travel
    reduce = cluster.hw.alpha + cluster.hw.beta * wire_bytes("AllReduce", 2 * 1e9, 8)
    assert ep8.reduce_time[0] == pytest.approx(reduce)
    assert one.reduce_time[0] == pytest.approx(reduce + cluster.hw.alpha + cluster.hw.beta * wire_bytes(
        "AllReduce", 2 * 8e9, 8))
    # with optimizer sharding, an expert's state is sharded over the dp / ep replicas holding it
    sharded = assign(Shape(1, 1, 8, 1, 1, "1f1b", True, 2), 2, layer, EdgeCost(), EdgeCost(), cluster, slots=2.0)
    dense = 1e9 * (2 + 3 / 8)
    experts = 8e9 / 2 * (2 + 3 / 4)
    reduced = 2 * (1e9 + 8e9 / 2)  # a micro-batch's dense and expert gradients, reduced over 8 and 4 replicas
    assert sharded.stage_memory[0] == pytest.approx(2 * (dense + experts + 1e9 + reduced))


def test_expert_parallel_is_enumerated_where_it_divides_the_replicas_and_the_experts():
    found = {(s.dp, s.ep) for s in shapes(Cluster(devices=48), 4, 48, [1], [1], experts=8)}
    assert (48, 8) in found and (12, 4) in found and (24, 8) in found
    assert all(dp % ep == 0 and 8 % ep == 0 for dp, ep in found)
    assert {s.ep for s in shapes(Cluster(devices=48), 4, 48, [1], [1])} == {1}  # no experts: no ep


def _traced(parallel=None, layers=SMALL_MOE["layers"]):
    with no_init_parameters():
        net = loss_network(**{**SMALL_MOE, "layers": layers}, parallel=parallel)
    avals = [jax.ShapeDtypeStruct((BATCH, SMALL_MOE["seq"]), np.int32),
             jax.ShapeDtypeStruct((BATCH * SMALL_MOE["seq"],), np.int32)]
    graph, _ = trace_network(NetworkState(net, net.trainable_params()), avals, "train")
    return net, graph


def test_the_searched_moe_plan_is_no_slower_than_a_hand_set_expert_parallel_configuration():
    """The same check as ``python -m bench.stage_deepseek`` (DeepSeek-V3-like, 1,024 devices), at test size: the
    search against dp 16 x mp 2 x pp 2 x ep 4 with 4 micro-batches, priced by the same cost model."""
    budget = 0.25 * 2 ** 30
    ms.set_auto_parallel_context(parallel_mode="auto_parallel", auto_pipeline=True)
    net, graph = _traced()
    report = search_pipeline(net, graph, DEVICES, "gpu", budget)
    best = report.search.best
    assert best is not None and max(best.stage_memory) <= budget and sum(best.layers) == SMALL_MOE["layers"]
    # by hand: MindSpore's MoE strategies for model_parallel 2 (the experts' inner dimension split), ep 4
    hnet, hgraph = _traced(MoEParallelConfig(1, 2, 1), layers=2)
    hcosts = layer_costs(find_layers(hnet, hgraph), BATCH, [2], [1], report.cluster, 2.0)
    # the profiled layer knows its experts: their weights and the dispatched tokens
    one = hcosts[(2, 1)]
    assert one.experts == 16 and 0 < one.expert_weight_bytes < one.weight_bytes and one.dispatch_bytes > 0
    head, tail = edge_costs(graph, find_layers(net, graph), BATCH)
    hand = best_fixed(hcosts, SMALL_MOE["layers"], head, tail, report.cluster, BATCH, 2.0, 2, (2,), ep=4,
                      micro_batches=4)
    assert hand is not None and hand.shape.ep == 4 and hand.shape.dp == 16 and hand.shape.micro_batches == 4
    assert best.step_time <= hand.step_time
    # deterministic: the same costs give the same plan and runners-up (ep enumerated among them)
    first = search_stages(hcosts, SMALL_MOE["layers"], head, tail, report.cluster, BATCH, 2.0)
    assert search_stages(hcosts, SMALL_MOE["layers"], head, tail, report.cluster, BATCH, 2.0) == first
