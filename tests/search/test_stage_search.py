"""The stage search (AUTO_PARALLEL with ``auto_pipeline=True``): pipeline stages, layer assignment, micro-batches,
schedule, tensor x data parallel, recompute and optimizer sharding under the memory budget, priced by one model.

Read as the API: ``set_auto_parallel_context(parallel_mode=AUTO_PARALLEL, auto_pipeline=True)`` and
``set_context(max_device_memory=...)``, then ``plan_for_devices(net, *inputs, devices=N)`` (or ``graphpar plan
SCRIPT --devices N``): ``summary.stages`` holds the chosen plan and the runners-up."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

import graphpar as ms
from bench.stage_gpt import loss_network
from graphpar.compile.lowering.graph_trace import trace_network
from graphpar.compile.lowering.network_state import NetworkState
from graphpar.compile.plans.stage_profile import edge_costs, find_layers, layer_costs, search_pipeline
from graphpar.nn.utils import no_init_parameters
from graphpar.parallel import plan_for_devices
from graphpar.planner.stages import Cluster, EdgeCost, LayerCost, Shape, assign, best_fixed

SMALL = dict(vocab=512, seq=64, hidden=256, heads=8, layers=8)
BATCH, DEVICES = 64, 64


def _layer(**kw) -> LayerCost:
    base = dict(tp=1, micro=1, flops=1e12, comm_bytes=0.0, messages=0, weight_bytes=1e9, activation_bytes=1e9,
                boundary_bytes=1e8)
    return LayerCost(**{**base, **kw})


def test_the_bubble_is_p_minus_1_over_m_plus_p_minus_1_and_the_step_counts_it():
    cluster = Cluster(devices=4, memory=None)
    plan = assign(Shape(4, 1, 1, 12, 1), 8, _layer(boundary_bytes=0.0), EdgeCost(), EdgeCost(), cluster, slots=2.0)
    assert plan.layers == (2, 2, 2, 2)  # nothing sent between stages: an even split
    # sends between stages cost time: the first and last stages (one neighbour each) take more layers
    sending = assign(Shape(4, 1, 1, 12, 1), 8, _layer(), EdgeCost(), EdgeCost(), cluster, slots=2.0)
    assert sending.layers[0] > sending.layers[1] and sending.layers[-1] > sending.layers[-2]
    assert plan.bubble == pytest.approx(3 / 15)
    assert plan.step_time == pytest.approx(15 * max(plan.stage_time) + plan.sync_time)


def test_memory_pushes_recompute_and_fewer_layers_onto_the_first_stages_which_hold_more_micro_batches():
    # 1F1B: stage i holds min(p - i, m) micro-batches' activations, so the first stage is the tightest
    layer = _layer()
    cluster = Cluster(devices=4, memory=30e9)
    plan = assign(Shape(4, 1, 1, 8, 1), 16, layer, EdgeCost(), EdgeCost(), cluster, slots=2.0)
    assert plan is not None and sum(plan.layers) == 16
    assert all(m <= 30e9 for m in plan.stage_memory)
    assert plan.recompute[0] and not plan.recompute[-1]
    # the same shape without a budget: no recompute, an even split
    free = assign(Shape(4, 1, 1, 8, 1), 16, layer, EdgeCost(), EdgeCost(), Cluster(devices=4), slots=2.0)
    assert not any(free.recompute)
    assert free.step_time < plan.step_time


def test_gpipe_holds_every_micro_batch_and_optimizer_sharding_divides_the_state():
    layer = _layer()
    one = assign(Shape(2, 1, 4, 8, 1), 4, layer, EdgeCost(), EdgeCost(), Cluster(devices=8), slots=2.0)
    gpipe = assign(Shape(2, 1, 4, 8, 1, "gpipe"), 4, layer, EdgeCost(), EdgeCost(), Cluster(devices=8), slots=2.0)
    sharded = assign(Shape(2, 1, 4, 8, 1, "1f1b", True), 4, layer, EdgeCost(), EdgeCost(), Cluster(devices=8),
                     slots=2.0)
    assert gpipe.stage_memory[1] - one.stage_memory[1] == pytest.approx(2 * (8 - 1) * 1e9)
    # per weight byte: weights + gradients + Adam's 2 slots = 4, sharded over dp 4: 2 + (1 + 2) / 4
    assert one.stage_memory[0] - sharded.stage_memory[0] == pytest.approx(one.layers[0] * 1e9 * (4 - 2.75))


def _small(batch=BATCH, mp=None):
    with no_init_parameters():
        net = loss_network(**SMALL, mp=mp)
    avals = [jax.ShapeDtypeStruct((batch, SMALL["seq"]), np.int32),
             jax.ShapeDtypeStruct((batch * SMALL["seq"],), np.int32)]
    graph, _ = trace_network(NetworkState(net, net.trainable_params()), avals, "train")
    return net, graph


def test_the_searched_plan_is_no_slower_than_the_best_megatron_configuration_under_the_same_model():
    budget = 0.25 * 2 ** 30
    ms.set_auto_parallel_context(parallel_mode="auto_parallel", auto_pipeline=True)
    net, graph = _small()
    report = search_pipeline(net, graph, DEVICES, "gpu", budget)
    best = report.search.best
    assert best is not None and max(best.stage_memory) <= budget
    assert sum(best.layers) == SMALL["layers"] and report.n_layers == SMALL["layers"]
    # Megatron: the layer with its tensor-parallel hints on 8 devices, pipeline p, data 64 / 8p
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel")
    mnet, mgraph = _small(mp=8)
    layers = find_layers(mnet, mgraph)
    costs = layer_costs(layers, BATCH, [8], (1, 2, 4, 8), report.cluster, 2.0, mode="semi_auto_parallel")
    head, tail = edge_costs(mgraph, layers, BATCH)
    mega = best_fixed(costs, SMALL["layers"], head, tail, report.cluster, BATCH, 2.0, 8, (1, 2, 4, 8))
    assert mega is not None
    assert best.step_time <= mega.step_time
    # deterministic: the same search gives the same plan
    again = search_pipeline(net, graph, DEVICES, "gpu", budget).search.best
    assert again == best


def test_plan_for_devices_with_auto_pipeline_reports_the_stage_table_and_runners_up(tmp_path):
    ms.set_auto_parallel_context(parallel_mode="auto_parallel", auto_pipeline=True,
                                 strategy_ckpt_config={"save_file": str(tmp_path / "plan.json")})
    assert ms.get_auto_parallel_context("auto_pipeline") is True
    with no_init_parameters():
        net = loss_network(**SMALL)
    ids = jax.ShapeDtypeStruct((BATCH, SMALL["seq"]), np.int32)
    labels = jax.ShapeDtypeStruct((BATCH * SMALL["seq"],), np.int32)
    ms.set_context(max_device_memory="0.25GB")  # the conftest puts the context back
    summary = plan_for_devices(net, ids, labels, devices=DEVICES)
    text = summary.text()
    assert "pipeline search: 8 copies of 0-Block, global batch 64, 64 devices" in text
    assert "  stage  layers  recompute  ms/micro-batch  (dp reduce)  memory" in text
    assert "runner-up 1:" in text and "vs chosen:" in text
    data = json.loads(summary.to_json())["pipeline"]
    chosen = data["chosen"]
    assert sum(chosen["layers_per_stage"]) == 8
    assert chosen["pipeline_stages"] * chosen["tensor_parallel"] * chosen["data_parallel"] == DEVICES
    assert chosen["bubble"] == pytest.approx((chosen["pipeline_stages"] - 1)
                                             / (chosen["micro_batches"] + chosen["pipeline_stages"] - 1))
    assert max(chosen["stage_memory_bytes"]) <= 0.25 * 2 ** 30
    assert data["alternatives"] and all(a["step_time_s"] >= chosen["step_time_s"] for a in data["alternatives"])
    # the strategy file: MindSpore's per-op "stage", and the pipeline section with each layer Cell's stage
    saved = json.loads((tmp_path / "plan.json").read_text())
    pipeline = saved["graphpar"]["pipeline"]
    assert pipeline["pipeline_stages"] == chosen["pipeline_stages"]
    assert pipeline["micro_batches"] == chosen["micro_batches"]
    cells = pipeline["cell_stages"]
    assert len(cells) == 8 and sorted(cells.values()) == list(cells.values())
    assert [list(cells.values()).count(k) for k in range(chosen["pipeline_stages"])] == chosen["layers_per_stage"]
    stages = {item["stage"] for item in saved["parallel_strategy_item"].values()}
    assert stages == set(range(chosen["pipeline_stages"]))


def test_without_auto_pipeline_no_stage_search_runs():
    ms.set_auto_parallel_context(parallel_mode="auto_parallel")
    with no_init_parameters():
        net = loss_network(**{**SMALL, "layers": 2})
    summary = plan_for_devices(net, jax.ShapeDtypeStruct((8, SMALL["seq"]), np.int32),
                               jax.ShapeDtypeStruct((8 * SMALL["seq"],), np.int32), devices=8)
    assert summary.stages is None and json.loads(summary.to_json())["pipeline"] is None


SCRIPT = '''
import numpy as np
import graphpar as ms
from graphpar import nn
from graphpar.nn.utils import no_init_parameters
from bench.stage_gpt import GPT

ms.set_context(mode=ms.GRAPH_MODE, max_device_memory="0.25GB")
ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.AUTO_PARALLEL, auto_pipeline=True)
with no_init_parameters():
    net = GPT(512, 64, 256, 8, 8)
loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
train = nn.TrainOneStepCell(nn.WithLossCell(net, loss), nn.Adam(net.trainable_params(), 1e-4))
train(np.zeros((8, 64), np.int32), np.zeros((8 * 64,), np.int32))  # one sequence per device, 8 devices
'''


def test_graphpar_plan_json_has_the_pipeline(tmp_path, capsys):
    """``graphpar plan SCRIPT --devices 64 --json`` on a script with auto_pipeline=True (the table: the test above)."""
    from graphpar.cli.main import main

    script = tmp_path / "gpt_script.py"
    script.write_text(SCRIPT)
    assert main(["plan", str(script), "--devices", "64", "--json"]) == 0
    pipeline = json.loads(capsys.readouterr().out)["pipeline"]
    assert pipeline["layers"] == 8 and pipeline["global_batch"] == 64 and pipeline["devices"] == 64
    chosen = pipeline["chosen"]
    assert sum(chosen["layers_per_stage"]) == 8 and max(chosen["stage_memory_bytes"]) <= 0.25 * 2 ** 30


def test_the_searched_pipeline_applied_trains_with_the_losses_of_stand_alone():
    """``summary.stages.apply(loss_net)`` sets each layer Cell's ``pipeline_stage`` and returns the settings; the
    pipelined program (2 stages of 4 devices, the stages' intra-op plans searched) trains as STAND_ALONE does.
    ``pipeline_stages=2`` set with ``auto_pipeline``: the user's stage count is kept, the rest searched."""
    from graphpar import nn
    from graphpar.models.mlp import mlp_data, search_mlp

    x, y = mlp_data(32, 64)
    ms.set_auto_parallel_context(parallel_mode="auto_parallel", auto_pipeline=True, pipeline_stages=2)
    net = nn.WithLossCell(search_mlp(8, 64), nn.MSELoss())
    summary = plan_for_devices(net, x, y, devices=8, platform="cpu",
                               optimizer=nn.Momentum(net.trainable_params(), 0.01, 0.9))
    best = summary.stages.search.best
    assert best.shape.stages == 2 and sum(best.layers) == 7  # the first Dense reads the batch: not a copy

    def train(pipelined):
        ms.reset_auto_parallel_context()
        loss_net = nn.WithLossCell(search_mlp(8, 64), nn.MSELoss())
        if pipelined:
            ms.set_auto_parallel_context(parallel_mode="auto_parallel", **summary.stages.apply(loss_net))
        cell = nn.TrainOneStepCell(nn.PipelineCell(loss_net, best.shape.micro_batches),
                                   nn.Momentum(loss_net.trainable_params(), 0.01, 0.9))
        losses = [float(cell(x, y)) for _ in range(3)]
        return losses, cell.program.stats.transfers_last_step if pipelined else None, loss_net

    got, transfers, loss_net = train(True)
    stages = [loss_net._backbone.layers[i].pipeline_stage for i in range(1, 8)]
    assert stages == [0] * best.layers[0] + [1] * best.layers[1]
    assert transfers == 2 * best.shape.micro_batches  # one activation and its gradient per micro-batch
    want, _, _ = train(False)
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_ir_explain_pipeline_shows_the_runners_up_and_what_separates_them(tmp_path, capsys):
    """``graphpar plan SCRIPT --devices 64 --dump DIR`` writes the stage search beside the begin dump;
    ``graphpar ir explain DIR pipeline`` (and ``summary.explain("pipeline")``) prints the chosen plan and each
    runner-up side by side (step time, slowest stage, bubble, gradient sync, peak memory, recompute) and what
    separates each from the chosen one."""
    from graphpar.cli.main import main

    script = tmp_path / "gpt_script.py"
    script.write_text(SCRIPT)
    assert main(["plan", str(script), "--devices", "64", "--dump", str(tmp_path / "dumps")]) == 0
    capsys.readouterr()
    assert main(["ir", "explain", str(tmp_path / "dumps"), "pipeline"]) == 0
    text = capsys.readouterr().out
    assert "pipeline search: 8 x 0-Block, global batch 64, 64 devices" in text
    rows = [line for line in text.splitlines() if line.startswith("  chosen ") or line.startswith("  runner-up ")]
    assert rows[0].startswith("  chosen ") and len(rows) >= 3
    assert "runner-up 1 vs chosen: " in text and "step time" in text
    assert main(["ir", "explain", str(tmp_path / "dumps"), "pipeline", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    steps = [data["chosen"]["step_time_s"]] + [a["step_time_s"] for a in data["alternatives"]]
    assert steps == sorted(steps)  # the runners-up are no faster than the chosen plan
    # a dump directory without a stage search: one line naming what writes it
    assert main(["ir", "explain", str(tmp_path), "pipeline"]) == 2
    assert "pipeline_search.json" in capsys.readouterr().err
