"""The stage search prices the data-parallel gradient reduction as the pipeline runtime compiles it (issue 25).

Each stage's backward program is SPMD over the stage's dp-sharded micro-batch, so XLA sums that micro-batch's
partial gradients over the dp replicas inside it: every step reduces each stage's gradients once per micro-batch
(``planner.stages.reductions_per_step``), each time the stage's parameter blocks on one device
(``StagePlan.reduced_bytes``). Read here from the compiled stage programs of a 2-stage, dp 2 x tp 2 pipeline that
runs the search's own stage assignment, whose per-stage memory (the dp-reduced gradients included) is checked too.
"""

from __future__ import annotations

import jax
import numpy as np

import graphpar as ms
from graphpar import nn
from graphpar.compile.lowering.graph_trace import trace_network
from graphpar.compile.lowering.network_state import NetworkState
from graphpar.compile.plans.stage_profile import StageReport, edge_costs, find_layers, layer_costs
from graphpar.dump.hlo import parse_collectives
from graphpar.models.mlp import DenseStack, mlp_data
from graphpar.planner.stages import Cluster, Shape, StageSearch, assign, reductions_per_step

from .test_stage_plan_e2e import stage_memory

WIDTH, LAYERS, BATCH, MICRO_BATCHES = 64, 4, 16, 4
SLOTS = 1.0  # Momentum


def _net(dp):
    """Column-parallel Dense layers on tp 2 (each weight's rows and its bias split), the batch over ``dp``: the
    search profiles the layer on its tensor group (dp 1) and a stage runs it with dp added on the batch (as the
    strategy file the search writes lifts it). Every layer's parameters are split alike, so the profiled layer
    prices each copy exactly."""
    rng = np.random.default_rng(0)
    weights = [(rng.normal(size=(WIDTH, WIDTH)) / np.sqrt(WIDTH)).astype(np.float32) for _ in range(LAYERS)]
    stack = DenseStack(weights, matmul_strategies=[((dp, 1), (2, 1))] * LAYERS,
                       bias_strategies=[((dp, 2), (2,))] * LAYERS, shared_relu=True)
    return nn.WithLossCell(stack, nn.MSELoss())


def _dp_groups(stage) -> set[tuple[int, ...]]:
    """The stage's dp replica groups, in the program's device numbering: devices that differ only in the mesh
    axis splitting the batch."""
    spec = stage.data_sh[0].spec[0]
    axis = stage.mesh.axis_names.index(spec if isinstance(spec, str) else spec[0])
    ids = np.arange(stage.mesh.devices.size).reshape(stage.mesh.devices.shape)
    return {tuple(sorted(g)) for g in np.moveaxis(ids, axis, -1).reshape(-1, ids.shape[axis]).tolist()}


def test_each_micro_batch_backward_reduces_the_stage_gradients_over_dp_as_the_search_prices():
    x, y = mlp_data(BATCH, WIDTH)
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel")
    profiled = _net(1)
    avals = [jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct(y.shape, y.dtype)]
    graph, _ = trace_network(NetworkState(profiled, profiled.trainable_params()), avals, "train")
    layers = find_layers(profiled, graph)
    cluster = Cluster.for_platform(8, "cpu", None)
    shape = Shape(2, 2, 2, MICRO_BATCHES, BATCH // 2 // MICRO_BATCHES)
    costs = layer_costs(layers, BATCH, [2], [shape.micro], cluster, SLOTS, mode="semi_auto_parallel")
    head, tail = edge_costs(graph, layers, BATCH)
    plan = assign(shape, layers.count, costs[(2, shape.micro)], head, tail, cluster, SLOTS)
    assert plan.reduce_time and all(t > 0 for t in plan.reduce_time)  # part of each stage's time per micro-batch

    # run the search's stage assignment pipelined
    report = StageReport(StageSearch(plan, (), 1, 1), layers, tuple(layers.cell_scopes(graph)), layers.scope,
                         layers.count, BATCH, cluster, 0.0, 0.0)
    loss_net = _net(2)
    settings = report.apply(loss_net)
    ms.set_auto_parallel_context(device_num=8, **settings)
    cell = nn.TrainOneStepCell(nn.PipelineCell(loss_net, MICRO_BATCHES), nn.Momentum(loss_net.trainable_params(),
                                                                                     0.01, 0.9))
    cell(x, y)
    built = next(iter(cell.program._built.values()))
    assert len(built.stages) == 2
    for st in built.stages:
        dp = _dp_groups(st)
        runs = {kind: sum(a.kind == kind for a in built.orders[st.sg.stage]) for kind in ("F", "B")}

        def over_dp(kind):
            return [c for c in parse_collectives(st.compiled[kind].as_text(), 4)
                    if c.kind == "AllReduce" and {tuple(sorted(g)) for g in c.groups} == dp]

        assert not over_dp("forward") and not over_dp("update")  # the update reduces nothing more
        reduced = over_dp("backward")
        assert reduced, "each micro-batch's backward reduces the stage's gradients over dp"
        # per step: every micro-batch's backward runs them, as many times as the search prices
        assert runs["B"] == reductions_per_step(shape) == MICRO_BATCHES
        # each time the stage's parameter blocks on one device, the bytes the search prices
        measured = sum(c.nbytes for c in reduced)
        print(f"stage {st.sg.stage}: {len(reduced)} dp all-reduce(s) x {runs['B']} backward runs per step, "
              f"{measured} B each run (search: {plan.reduced_bytes[st.sg.stage]:.0f} B)")
        assert measured == plan.reduced_bytes[st.sg.stage]
    # and the stage memory the search predicts for it (dp reduced gradients included) is the compiled one
    for s, (pred, comp) in enumerate(zip(plan.stage_memory, stage_memory(cell))):
        print(f"stage {s}: predicted {pred:.0f} B, compiled {comp} B ({pred / comp:.3f})")  # 0.992, 0.994
        assert 0.9 * comp <= pred <= 1.1 * comp
