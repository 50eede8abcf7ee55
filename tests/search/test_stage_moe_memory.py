"""The stage memory model on an MoE stage, against the compiled stage programs (issue 25).

A small MoE GPT (``bench.stage_moe``: MindSpore's ``MoE`` layer with GShard's dense dispatch, top-4 of 16 experts,
router groups of one sequence via ``MoEConfig(expert_group_size=...)``) is searched for 8 devices with
``auto_pipeline=True``, its stage plan is run from the strategy file, and each stage's residuals (what its forward
keeps per micro-batch in flight: ``compile.plans.stage_residuals``) are compared with what the compiled stage
programs keep (``program.stats.peak_residual_bytes``). The model says what an MoE layer keeps: the routing's
one-hot slot masks, one per routing round, the combine weights and the dispatch mask cast to float32 in the layout
each reader reads them (the dispatch BatchMatMul's and the combine BatchMatMul's), but not the comparison that
makes the dispatch mask (no gradient flows through it). The network runs the MoE as built (expert parallel 1), so
the shape the model prices is the searched one with ``ep=1``.

The whole stage (arguments + residuals + the larger program's temporaries) is checked too, on the safe side: the
backward program's temporaries are one layer's cotangents (and, recomputed, its replayed activations) as they live
along its backward, walked on the layer's plan (``compile.plans.stage_residuals.backward_peak``: the routing's
one-hot masks are made just before they are read), or the gradients made, or the dp-reduced gradients twice,
whichever is largest (``planner.stages.model.backward_pieces``). Predicted / compiled whole stage: 1.033 and 1.080
with recompute, 1.009 and 1.030 without (1.39 / 1.41 and 1.08 / 1.13 when every cotangent was counted at once with
the gradients).
"""

from __future__ import annotations

import dataclasses

import jax
import pytest

import graphpar as ms
from bench.stage_moe import loss_network
from graphpar import nn
from graphpar.compile.lowering.graph_trace import trace_network
from graphpar.compile.lowering.network_state import NetworkState
from graphpar.compile.plans.stage_profile import edge_costs, layer_costs
from graphpar.models.gpt import gpt_data
from graphpar.parallel import load_pipeline_plan, plan_for_devices
from graphpar.planner.stages.model import edge_activation, in_flight, kept, stage_memory
from graphpar.planner.stages.schedules import edge_in_flight

MOE = dict(vocab=256, seq=64, hidden=32, heads=4, layers=4, experts=16, top_k=4, expert_hidden=32, expert_group=64)


def _train(plan, data):
    ms.reset_auto_parallel_context()
    loss_net = loss_network(**MOE)
    ms.set_auto_parallel_context(parallel_mode="auto_parallel", **plan.apply(loss_net))
    cell = nn.TrainOneStepCell(nn.PipelineCell(loss_net, plan.micro_batches),
                               nn.Momentum(loss_net.trainable_params(), 0.01, 0.9))
    losses = [float(cell(*data)) for _ in range(2)]
    return losses, cell


@pytest.mark.slow
@pytest.mark.parametrize("budget", [
    # pp 2 x dp 4 (interleaved 1F1B, 2 chunks of one layer per stage), recompute on both stages: each layer keeps
    # its input and its causal mask (a Tensor attribute: an input of the layer's checkpoint) per micro-batch;
    # residuals 0.992 and 1.036 of the compiled
    "0.004GB",
    # pp 2 x dp 4 (interleaved, 2 chunks) without recompute: each layer keeps its routing masks (4 one-hot slots,
    # the combine weights, the dispatch and combine masks cast to float32 in their readers' layouts) (at 0.006GB
    # the search shards the optimizer state, which pipelined training refuses)
    "0.007GB",
])
def test_an_moe_stage_keeps_the_residuals_the_model_predicts(tmp_path, budget):
    data = gpt_data(16, MOE["seq"], MOE["vocab"])
    path = tmp_path / "moe.json"
    ms.set_auto_parallel_context(parallel_mode="auto_parallel", auto_pipeline=True,
                                 strategy_ckpt_config={"save_file": str(path)})
    ms.set_context(max_device_memory=budget)  # the conftest puts the context back
    net = loss_network(**MOE)
    report = plan_for_devices(net, *data, devices=8, platform="cpu",
                              optimizer=nn.Momentum(net.trainable_params(), 0.01, 0.9)).stages
    ms.set_context(max_device_memory="1024GB")
    best = report.search.best
    assert best.shape.stages > 1
    shape = dataclasses.replace(best.shape, ep=1)  # the MoE runs as built
    layer = layer_costs(report.layers, report.global_batch, [shape.tp], [shape.micro], report.cluster, 1.0)[
        (shape.tp, shape.micro)]
    avals = [jax.ShapeDtypeStruct(d.shape, d.dtype) for d in data]
    graph, _ = trace_network(NetworkState(net, net.trainable_params()), avals, "train")
    head, tail = edge_costs(graph, report.layers, report.global_batch)
    losses, cell = _train(load_pipeline_plan(str(path)), data)
    assert all(loss == loss for loss in losses)  # finite
    program = cell.program
    built = next(iter(program._built.values()))
    last = shape.stages - 1
    arguments, temps = [0] * shape.stages, [0] * shape.stages
    for chunk, st in enumerate(built.stages):  # one per chunk; a stage holds several with interleaved 1F1B
        g = built.virtual.place(chunk)[0]
        analysis = {kind: c.executable.memory_analysis() for kind, c in st.compiled.items()}
        arguments[g] += analysis["update"].argument_size_in_bytes
        temps[g] = max([temps[g]] + [analysis[k].temp_size_in_bytes for k in ("forward", "backward")])
    for i in range(shape.stages):
        n, recompute = best.layers[i], best.recompute[i]
        edges = sum(edge_activation(edge, shape) * edge_in_flight(shape.schedule, shape.stages, shape.chunks,
                                                                   shape.micro_batches, first)
                    for edge, here, first in ((head, i == 0, True), (tail, i == last, False)) if here)
        predicted = in_flight(shape, i) * n * kept(layer, shape, recompute) + edges
        compiled = program.stats.peak_residual_bytes[i]
        whole = arguments[i] + compiled + temps[i]
        whole_predicted = stage_memory(shape, i, n, layer, head, tail, 1.0, recompute)
        print(f"stage {i} ({n} layers, recompute {recompute}, {shape.chunks} chunks): residuals predicted "
              f"{predicted:.0f} B, compiled {compiled} B ({predicted / compiled:.3f}); whole stage "
              f"{whole_predicted:.0f} / {whole} B ({whole_predicted / whole:.3f})")
        assert 0.9 * compiled <= predicted <= 1.1 * compiled
        assert whole <= whole_predicted <= 1.1 * whole  # a plan said to fit must fit
