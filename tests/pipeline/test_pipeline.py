"""Pipeline parallel on 8 devices: numbers against the unpipelined run, stages on disjoint devices with their own
strategies, transfers counted by the runtime and shown in the dumps, live residuals bounded by the schedule."""

import functools
import json

import numpy as np

import graphpar as ms
from graphpar import nn
from graphpar.compile.staging.cache import CompileCounts
from graphpar.dump.pipeline import read_schedule

from .helpers import mlp_data, params, train_pipelined, train_unpipelined


@functools.cache
def _reference(steps):
    """The unpipelined run (one device, the PipelineCell as written) both tests compare against."""
    x, y = mlp_data()
    losses, net = train_unpipelined("mlp", 2, 4, x, y, steps)
    return losses, params(net)


def test_mlp_two_stages_1f1b_equals_unpipelined():
    """(The full matrix of models, stage counts, micro sizes and schedules is in test_pipeline_matrix.py.)"""
    x, y = mlp_data()
    stages, micro, steps, scheduler = 2, 4, 5, "1f1b"
    ref, want = _reference(steps)
    got, net, train = train_pipelined("mlp", stages, micro, scheduler, x, y, steps)
    np.testing.assert_allclose(got, ref, rtol=1e-5)
    for name, value in params(net).items():
        np.testing.assert_allclose(value, want[name], rtol=1e-5, atol=1e-6, err_msg=name)
    stats = train.program.stats
    assert stats.transfers_last_step == 2 * (stages - 1) * micro
    assert stats.transfers_total == steps * 2 * (stages - 1) * micro
    assert max(stats.peak_live_micro_batches) <= stages
    assert stats.peak_live_micro_batches == [2, 1]
    # planned once; each stage's forward, backward, zeros and update lowered and compiled once, for all 5 steps
    assert train.program.counts == CompileCounts(traces=1, plans=1, lowerings=8, compiles=8)
    assert train.program.plan.draws == 4 and train.program.plan.n == 8
    # each stage's parameters live on its own group of 4 devices
    groups = {p.name: sorted(d.id for d in p.get_raw_value().sharding.device_set) for p in net.trainable_params()}
    assert groups["layers.0.weight"] == groups["layers.1.weight"] == [0, 1, 2, 3]
    assert groups["layers.2.weight"] == groups["layers.3.weight"] == [4, 5, 6, 7]


def test_stage_strategies_dumps_and_strategy_file(tmp_path, capsys):
    """GPipe with tensor parallel inside each stage (strategies relative to a stage's 4 devices), the per-stage
    dumps, the schedule dump with every micro-batch's Send/Receive, the summary CLI and the strategy file's
    stages."""
    micro, steps = 4, 5
    # the reference first: it resets the parallel context, and `train.program` is the program of the context set
    ref, want = _reference(steps)
    ir = tmp_path / "ir"
    ms.set_context(save_graphs=True, save_graphs_path=str(ir))
    x, y = mlp_data()
    strategy = tmp_path / "strategy.json"
    got, net, train = train_pipelined("mlp", 2, micro, "gpipe", x, y, steps, strategies=True,
                                      strategy_ckpt_config={"save_file": str(strategy)})
    ms.set_context(save_graphs=False)
    np.testing.assert_allclose(got, ref, rtol=1e-5)
    for name, value in params(net).items():
        np.testing.assert_allclose(value, want[name], rtol=1e-5, atol=1e-6, err_msg=name)
    assert train.program.stats.peak_live_micro_batches == [micro, micro]  # GPipe holds every micro-batch
    assert train.program.stats.transfers_last_step == 2 * micro
    shards = {p.name: p.get_raw_value().addressable_shards[0].data.shape for p in net.trainable_params()}
    assert shards["layers.0.weight"] == (16, 16)  # (32, 16) split 2 on its output rows
    assert shards["layers.1.weight"] == (32, 16)  # (32, 32) split 2 on its input columns
    assert shards["layers.2.weight"] == (16, 32)
    assert shards["layers.3.weight"] == (8, 16)
    # each stage's graph is dumped under its own ranks only, its collectives inside its group
    for rank, stage in ((0, 0), (3, 0), (4, 1), (7, 1)):
        files = sorted(p.name for p in (ir / f"rank_{rank}").iterdir())
        begin = next(f for f in files if f.startswith("step_parallel_begin_"))
        text = (ir / f"rank_{rank}" / begin).read_text()
        assert f"# note: pipeline stage {stage} of 2 on ranks {4 * stage}-{4 * stage + 3}" in text
        execute = next(f for f in files if f.startswith("18_execute_"))
        lines = [ln for ln in (ir / f"rank_{rank}" / execute).read_text().splitlines() if ln.startswith("%c")]
        assert lines, "a tensor-parallel stage compiles collectives"
        for ln in lines:
            ranks = json.loads(ln.split("rank_list: ")[1].split(", bytes")[0].replace("(", "[").replace(")", "]"))
            assert all(4 * stage <= r < 4 * stage + 4 for r in ranks), ln
        schedule = read_schedule(ir / f"rank_{rank}" / execute.replace("18_execute_", "pipeline_schedule_"))
        assert schedule["stages"] == 2 and schedule["micro_size"] == micro and schedule["scheduler"] == "gpipe"
        assert schedule["transfers_per_step"] == 2 * micro
        sent = [(t["pass"], t["micro"]) for t in schedule["sends"]]
        received = [(t["pass"], t["micro"]) for t in schedule["receives"]]
        mine, theirs = ("forward", "backward") if stage == 0 else ("backward", "forward")
        assert sorted(sent) == [(mine, k) for k in range(micro)]
        assert sorted(received) == [(theirs, k) for k in range(micro)]
        assert schedule["orders"][stage]["peak_live"] == micro and schedule["peak_live"] == {0: micro, 1: micro}
        # wire bytes, the unit of every collective figure: each device sends one destination shard per transfer
        for kind, key in (("Send", "sends"), ("Receive", "receives")):
            assert all(t["wire_bytes"] == t["device_bytes"] > 0 for t in schedule[key])
            assert schedule["totals"][kind] == {"bytes": sum(t["device_bytes"] for t in schedule[key]),
                                                "wire_bytes": sum(t["wire_bytes"] for t in schedule[key])}
    assert "layers.2" not in (ir / "rank_0" / begin0(ir, 0)).read_text()  # stage 0 does not hold stage 1's layers
    from graphpar.cli.main import main

    main(["ir", "summary", str(ir), "--rank", "4"])
    out = capsys.readouterr().out
    assert "pipeline: 2 stages, micro_size 4, scheduler gpipe; 8 activation transfers per step" in out
    assert "F0 F1 F2 F3 B0 B1 B2 B3" in out
    assert "Send bytes per step per device (rank's stage): raw" in out and "wire bytes" in out
    data = json.loads(strategy.read_text())
    stages = {k.split("/")[-2]: v["stage"] for k, v in data["parallel_strategy_item"].items() if "MatMul" in k}
    assert stages == {"0-Dense": 0, "1-Dense": 0, "2-Dense": 1, "3-Dense": 1}
    assert data["parallel_layout_item"]["layers.3.weight"]["pipeline_stage"] == 1
    assert data["parallel_layout_item"]["layers.0.weight"]["dev_matrix"] == [2, 2]  # within a stage's 4 devices
    assert data["graphpar"]["stage_ranks"] == [[0, 1, 2, 3], [4, 5, 6, 7]]


def begin0(ir, rank):
    return next(p.name for p in (ir / f"rank_{rank}").iterdir() if p.name.startswith("step_parallel_begin_"))


def test_parameter_shared_by_two_stages_equals_unpipelined(tmp_path):
    """A Parameter used by Cells of two stages (the first layer's weight read again by the head, as an output
    projection tied to the embedding): each stage keeps a copy, their gradients are summed before every update,
    so the losses are the unpipelined run's, the copies stay equal, and a checkpoint holds the weight once."""
    from graphpar.checkpoint import save_checkpoint
    from graphpar.checkpoint.store import read_manifest

    from .models import TiedMLP

    x, y = mlp_data()

    def train(stages):
        ms.reset_auto_parallel_context()
        if stages > 1:
            ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", pipeline_stages=stages)
        net = TiedMLP(stages=max(stages, 2))
        cell = nn.TrainOneStepCell(nn.PipelineCell(nn.WithLossCell(net, nn.MSELoss()), 4),
                                   nn.Momentum(net.trainable_params(), 0.05, 0.9))
        return [float(cell(x, y)) for _ in range(5)], net, cell

    want, ref, _ = train(1)
    got, net, cell = train(2)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert got[-1] < got[0]
    for name, value in params(net).items():
        np.testing.assert_allclose(value, params(ref)[name], rtol=1e-5, atol=1e-6, err_msg=name)
    stats = cell.program.stats
    assert stats.shared_sums_last_step == 1 and stats.transfers_last_step == 2 * 4
    built = next(iter(cell.program._built.values()))
    w = net.a.weight.name
    index = cell.program.state.param_names().index(w)
    assert built.split.shared == {index: [0, 1]}
    copies = cell.program._kept.take(built.stages, cell.program.state.params, lambda st: st.param_sh)
    first, second = copies[(0, index)], copies[(1, index)]  # one copy on each stage's devices, equal
    assert {d.id for d in first.sharding.device_set} == {0, 1, 2, 3}
    assert {d.id for d in second.sharding.device_set} == {4, 5, 6, 7}
    np.testing.assert_array_equal(np.asarray(first), np.asarray(second))
    save_checkpoint(cell, str(tmp_path / "tied.ckpt"))
    entries = [e for e in read_manifest(str(tmp_path / "tied.ckpt"))["entries"] if e["group"] == "network"]
    assert [e["pipeline_stage"] for e in entries if e["name"] == w] == [0]
