"""AUTO_PARALLEL's search (recursive_programming / dynamic_programming): plans with no hints that train like
STAND_ALONE, beat the hand plans on measured collective bytes, fit a memory budget, take any device count, are
deterministic, round-trip through the strategy file, explain themselves, and can be made for 1,024 devices."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import graphpar as ms
from graphpar import _context, nn
from graphpar.errors import ConfigError
from graphpar.models.mlp import HAND_PLANS, mlp_data, search_mlp
from graphpar.planner.search.settings import MemoryBudgetError

from .helpers import compiled_memory, losses, measured_bytes, mlp_train

REPO = Path(__file__).resolve().parents[2]


SEARCH_MODES = ("recursive_programming", "dynamic_programming")


def _quality(layers, width, batch, search_mode):
    """(searched bytes, {hand plan: bytes}, searched losses, stand-alone losses) of the MLP, from compiled HLO."""
    x, y = mlp_data(batch, width)
    hand = {name: measured_bytes(mlp_train(name, layers, width), (x, y)) for name in HAND_PLANS}
    train = mlp_train(None, layers, width, search_mode=search_mode)
    searched = measured_bytes(train, (x, y))
    got = losses(train, (x, y))
    want = losses(mlp_train(None, layers, width, mode="stand_alone"), (x, y))
    return searched, hand, got, want


def _check_quality(searched, hand, got, want):
    print(f"searched {searched:.0f} B; hand plans {hand}")
    assert searched <= 1.05 * min(hand.values()), (searched, hand)
    assert searched <= hand["data_parallel"]
    np.testing.assert_allclose(got, want, rtol=1e-4)


@pytest.mark.parametrize("search_mode", SEARCH_MODES)
def test_mlp_search_beats_the_hand_plans_and_trains_like_stand_alone(search_mode):
    _check_quality(*_quality(layers=2, width=256, batch=16, search_mode=search_mode))


@pytest.mark.slow
@pytest.mark.parametrize("search_mode", SEARCH_MODES)
@pytest.mark.parametrize("batch", [64, 4096])
def test_mlp_1024_quality(batch, search_mode):
    _check_quality(*_quality(layers=8, width=1024, batch=batch, search_mode=search_mode))


def _budget_case(layers, width, batch, fraction=0.9):
    """Data parallel's compiled per-device need, a budget of ``fraction`` of it, and the searched plan under it:
    (dp bytes, budget bytes, searched train cell, planned graph, its compiled bytes)."""
    x, y = mlp_data(batch, width)
    dp = compiled_memory(mlp_train("data_parallel", layers, width), (x, y))
    budget_gb = f"{fraction * dp / 1024 ** 3:.6f}GB"
    budget = float(budget_gb[:-2]) * 1024 ** 3
    ms.set_context(max_device_memory=budget_gb)
    train = mlp_train(None, layers, width, search_mode="dynamic_programming")
    planned = train.program.plan_graph([x, y])
    compiled = compiled_memory(train, (x, y))
    print(f"data parallel compiles to {dp} B per device; budget {budget_gb}; the searched plan predicts "
          f"{planned.plan.search.memory_bytes:.0f} B and compiles to {compiled} B")
    return dp, budget, train, planned, compiled


def _check_budget(layers, width, batch):
    from graphpar.planner.cost import predicted_peak

    dp, budget, train, planned, compiled = _budget_case(layers, width, batch)
    assert planned.plan.search.memory_bytes <= budget
    # the search's figure is the cost model's prediction of the plan it made
    np.testing.assert_allclose(planned.plan.search.memory_bytes, predicted_peak(planned, planned.plan.mesh),
                               rtol=1e-9)
    assert compiled <= budget < dp
    assert any(n.strategy.in_strategy()[1] != (1, 1) for n in planned.node_list() if n.kind == "MatMul")
    x, y = mlp_data(batch, width)
    got = losses(train, (x, y))
    _context.reset_context()
    want = losses(mlp_train(None, layers, width, mode="stand_alone"), (x, y))
    np.testing.assert_allclose(got, want, rtol=1e-4)


def test_memory_budget_below_data_parallel_is_met_by_the_compiled_program():
    """The budget is 0.9 x what data parallel's compiled program needs (memory_analysis), not its prediction."""
    _check_budget(layers=8, width=256, batch=1024)


@pytest.mark.slow
def test_memory_budget_below_data_parallel_mlp_1024():
    """Issue 10's case: the 8-layer 1024-wide MLP at batch 4,096."""
    _check_budget(layers=8, width=1024, batch=4096)


def test_a_budget_no_plan_fits_names_the_smallest_need():
    ms.set_context(max_device_memory="0.0001GB")
    x, y = mlp_data(64, 256)
    with pytest.raises(MemoryBudgetError) as err:
        mlp_train(None, 2, 256, search_mode="dynamic_programming").program.plan_graph([x, y])
    assert err.value.need > 0.0001 * 1024 ** 3 and "smallest per-device need found" in str(err.value)
    assert "Dense" in str(err.value)  # the ops that dominate it are named
    # the need named is the smallest: a budget just above it is met, by a plan predicted within it
    _context.reset_context()
    ms.set_context(max_device_memory=f"{err.value.need * 1.001 / 1024 ** 3:.6f}GB")
    graph = mlp_train(None, 2, 256, search_mode="dynamic_programming").program.plan_graph([x, y])
    assert graph.plan.search.memory_bytes <= err.value.need * 1.001


def test_max_device_memory_format_is_mindspores():
    with pytest.raises(ConfigError, match="xxGB"):
        ms.set_context(max_device_memory="512MB")
    ms.set_context(max_device_memory="1.5GB")
    assert ms.get_context("max_device_memory") == "1.5GB"


def test_six_devices_train_like_stand_alone():
    _device_count_case(6)


def _device_count_case(devices):
    x, y = mlp_data(48, 96)
    train = mlp_train(None, 2, 96, search_mode="dynamic_programming", device_num=devices)
    graph = train.program.plan_graph([x, y])
    assert graph.plan.mesh.sizes == {6: (2, 3), 12: (2, 2, 3), 24: (2, 2, 2, 3)}[devices]
    got = losses(train, (x, y))
    ms.reset_auto_parallel_context()
    want = losses(mlp_train(None, 2, 96, mode="stand_alone"), (x, y))
    np.testing.assert_allclose(got, want, rtol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("devices", [12, 24])
def test_12_and_24_devices_in_a_process_that_has_them(devices):
    code = ("import sys; sys.path.insert(0, %r)\n" % str(REPO)
            + "from tests.search import test_search\n"
            f"test_search._device_count_case({devices})\nprint('ok')\n")
    env = {**__import__("os").environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env,
                         timeout=600)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-3000:]


class _GPTCase:
    """The 2-layer GPT-style model of issue 9 (graphpar/models/gpt.py)."""

    @staticmethod
    def bytes_and_losses(dp, mp, hints, mode, steps=3, batch=8, search_mode="recursive_programming", **ctx):
        from graphpar.models.gpt import GPT, gpt_data, gpt_train_cell

        ms.reset_auto_parallel_context()
        ms.set_auto_parallel_context(parallel_mode=mode, search_mode=search_mode, **ctx)
        train = gpt_train_cell(GPT(dp=dp, mp=mp, hints=hints))
        ids, labels = gpt_data(batch=batch)
        measured = measured_bytes(train, (ids, labels)) if mode != "stand_alone" else 0.0
        return measured, losses(train, (ids, labels), steps)


@pytest.mark.slow
@pytest.mark.parametrize("search_mode", SEARCH_MODES)
def test_gpt_search_with_no_hints_beats_the_hand_plans(search_mode):
    from graphpar.models.gpt import ALL, NONE

    hand = {name: _GPTCase.bytes_and_losses(dp, mp, ALL, "semi_auto_parallel")[0]
            for name, dp, mp in (("data_parallel", 8, 1), ("megatron", 2, 4), ("hybrid_4x2", 4, 2))}
    searched, got = _GPTCase.bytes_and_losses(1, 1, NONE, "auto_parallel", search_mode=search_mode)
    _, want = _GPTCase.bytes_and_losses(1, 1, NONE, "stand_alone")
    if search_mode == "recursive_programming":
        # SAPP fixes the embedding Gather's strategy from its own shapes (MindSpore's rule, planner/search/sapp.py):
        # 523,015 B against the exact search's 472,263 B (docs/porting_from_mindspore.md), 1.063 x Megatron's plan
        print(f"searched {searched:.0f} B; hand plans {hand}")
        assert searched <= 1.08 * min(hand.values()) and searched <= hand["data_parallel"], (searched, hand)
        np.testing.assert_allclose(got, want, rtol=1e-4)
        return
    _check_quality(searched, hand, got, want)


@pytest.mark.slow
def test_gpt_on_six_devices_trains_like_stand_alone():
    from graphpar.models.gpt import NONE

    measured, got = _GPTCase.bytes_and_losses(1, 1, NONE, "auto_parallel", batch=12, device_num=6)
    _, want = _GPTCase.bytes_and_losses(1, 1, NONE, "stand_alone", batch=12)
    print(f"6 devices: {measured:.0f} collective bytes per step")
    np.testing.assert_allclose(got, want, rtol=1e-4)


def _resnet_runs(width):
    from graphpar.models import resnet18

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(32, 3, 32, 32)).astype(np.float32), rng.integers(0, 10, 32).astype(np.int32)
    results = {}
    for mode in ("auto_parallel", "semi_auto_parallel", "stand_alone"):  # semi-auto with no hints: data parallel
        ms.reset_auto_parallel_context()
        ms.set_auto_parallel_context(parallel_mode=mode, search_mode="recursive_programming")
        ms.set_seed(0)
        net = resnet18(class_num=10, width=width)
        loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
        train = nn.TrainOneStepCell(nn.WithLossCell(net, loss), nn.Momentum(net.trainable_params(), 0.01, 0.9))
        measured = measured_bytes(train, (x, y)) if mode != "stand_alone" else 0.0
        results[mode] = (measured, np.asarray(losses(train, (x, y))))
    print({k: (v[0], v[1].tolist()) for k, v in results.items()})
    return results


@pytest.mark.slow
def test_resnet18_search_beats_data_parallel():
    """Full width: the searched plan sends fewer bytes than data parallel, and its losses stay within data parallel's
    own distance from one device (float32 reassociation at full width already moves plain data parallel's step-3
    loss by ~2e-4, so rtol 1e-4 is asked of the narrow network below)."""
    results = _resnet_runs(width=1.0)
    assert results["auto_parallel"][0] <= results["semi_auto_parallel"][0]
    one = results["stand_alone"][1]
    noise = np.max(np.abs(results["semi_auto_parallel"][1] - one) / np.abs(one))
    assert np.max(np.abs(results["auto_parallel"][1] - one) / np.abs(one)) <= max(1e-4, 1.5 * noise)


@pytest.mark.slow
def test_narrow_resnet18_searched_losses_equal_stand_alone():
    results = _resnet_runs(width=0.25)
    assert results["auto_parallel"][0] <= results["semi_auto_parallel"][0]
    np.testing.assert_allclose(results["auto_parallel"][1], results["stand_alone"][1], rtol=1e-4)


def _plan_strategies(train, inputs):
    graph = train.program.plan_graph(list(inputs))
    return {n.id: (n.instance_name, n.strategy.in_strategy()) for n in graph.node_list()}, graph


def test_deterministic_saved_and_reloaded_without_searching(tmp_path):
    x, y = mlp_data(32, 128)
    path = str(tmp_path / "strategy.json")
    first, _ = _plan_strategies(mlp_train(None, 3, 128, search_mode="recursive_programming",
                                          strategy_ckpt_config={"save_file": path}), (x, y))
    again, _ = _plan_strategies(mlp_train(None, 3, 128, search_mode="recursive_programming"), (x, y))
    assert first == again
    saved = json.loads(Path(path).read_text())["graphpar"]["strategies"]
    assert {s["provenance"] for s in saved.values()} == {"searched"}
    loaded, graph = _plan_strategies(mlp_train(None, 3, 128, search_mode="recursive_programming",
                                               strategy_ckpt_config={"load_file": path}), (x, y))
    assert loaded == first
    assert {n.provenance.kind for n in graph.node_list()} == {"user"}  # every op from the file
    assert graph.plan.search.problem["choices"] == graph.plan.search.problem["variables"]  # no choice


def test_begin_dump_and_explain_show_the_choice_and_two_alternatives(tmp_path, capsys):
    from graphpar.cli.main import main

    ms.set_context(save_graphs=True, save_graphs_path=str(tmp_path))
    x, y = mlp_data(32, 128)
    train = mlp_train(None, 2, 128, search_mode="dynamic_programming")
    graph = train.program.plan_graph([x, y])
    node = graph.find("matmul")[0]
    record = graph.plan.search.records[node.id]
    assert len(record.alternatives) == 2 and all(a.time >= record.chosen.time for a in record.alternatives)
    capsys.readouterr()
    assert main(["ir", "explain", str(tmp_path), f"node:{node.id}", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["chain"][0]["provenance"]["kind"] == "searched"
    shown = data["search"]
    assert tuple(map(tuple, shown["chosen"]["strategy"])) == node.strategy.in_strategy()
    assert len(shown["alternatives"]) == 2
    np.testing.assert_allclose(shown["chosen"]["cost"]["comm_bytes"], record.chosen.cost.comm_bytes, rtol=1e-5)
    assert main(["ir", "explain", str(tmp_path), f"node:{node.id}"]) == 0
    text = capsys.readouterr().out
    assert "alternative 2" in text and "collective B" in text


def test_plan_for_1024_devices_without_them():
    from graphpar.parallel import plan_for_devices

    ms.set_auto_parallel_context(parallel_mode="auto_parallel", search_mode="recursive_programming")
    net = nn.WithLossCell(search_mlp(4, 1024), nn.MSELoss())
    x, y = mlp_data(8192, 1024)
    summary = plan_for_devices(net, x, y, devices=1024)
    assert summary.mesh.size == 1024 and summary.graph.plan.mesh.n_devices == 1024
    assert all(n.provenance.kind == "searched" for n in summary.graph.node_list())
    assert summary.memory_bytes > 0 and summary.comm_bytes > 0
    assert "predicted per device" in summary.text()
    eight = plan_for_devices(net, x, y, devices=8)
    assert summary.memory_bytes < eight.memory_bytes  # 128x the devices: less per device


@pytest.mark.slow
def test_graphpar_plan_cli(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        "import sys\nsys.path.insert(0, %r)\n" % str(REPO)
        + "import graphpar as ms\nfrom graphpar.models.mlp import mlp_data\nfrom tests.search.helpers import mlp_train\n"
        "train = mlp_train(None, 4, 512, search_mode='recursive_programming')\n"
        "x, y = mlp_data(64, 512)\nprint('loss', train(x, y))\nraise SystemExit('the step ran')\n")
    out = subprocess.run([sys.executable, "-m", "graphpar.cli.main", "plan", str(script), "--devices", "1024"],
                         capture_output=True, text=True, cwd=REPO, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "plan for 1024 devices" in out.stdout and "predicted per device" in out.stdout
    assert "the step ran" not in out.stdout + out.stderr


@pytest.mark.slow
def test_same_plan_in_another_process(tmp_path):
    code = ("import sys, json; sys.path.insert(0, %r)\n" % str(REPO)
            + "from graphpar.models.mlp import mlp_data\nfrom tests.search.helpers import mlp_train\n"
            "x, y = mlp_data(32, 128)\n"
            "g = mlp_train(None, 3, 128, search_mode='recursive_programming').program.plan_graph([x, y])\n"
            "print(json.dumps([[n.instance_name, n.strategy.in_strategy()] for n in g.node_list()]))\n")
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=600)
            for _ in range(2)]
    assert all(r.returncode == 0 for r in runs), runs[0].stderr[-2000:]
    assert runs[0].stdout == runs[1].stdout
