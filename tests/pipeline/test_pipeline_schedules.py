"""Interleaved 1F1B (virtual stages) and zero_bubble_v: the schedules, their idle fractions, and training with them.

MindSpore's settings: ``pipeline_config={"pipeline_interleave": True, "pipeline_scheduler": "1f1b" |
"zero_bubble_v"}`` and, on the network's Cells, ``pipeline_stage`` (the device group) and ``pipeline_segment``
(which of the group's virtual stages). A schedule is one plain list of actions per device group."""

import numpy as np
import pytest

import graphpar as ms
from graphpar import nn
from graphpar.compile.pipeline.schedule import Action, VirtualLayout, dispatch_order, peak_in_flight
from graphpar.compile.pipeline.schedule_cost import ScheduleCosts, schedule_timeline
from graphpar.compile.pipeline.schedule_virtual import schedule_orders
from graphpar.compile.pipeline.stage_split import PipelineError
from graphpar.dump.pipeline import read_schedule

from .helpers import mlp_data
from .models import TiedVMLP, mlp_virtual

INTERLEAVED = {"pipeline_interleave": True, "pipeline_scheduler": "1f1b"}
ZERO_BUBBLE_V = {"pipeline_interleave": True, "pipeline_scheduler": "zero_bubble_v"}


def test_virtual_layouts_place_chunks_as_mindspore_documents():
    interleaved, v = VirtualLayout(4, 2), VirtualLayout(4, 2, v_shape=True)
    # "stage 0 has layers 0 and 4, stage 1 has layers 1 and 5, ..."
    assert [interleaved.place(c) for c in range(8)] == [(s, g) for g in range(2) for s in range(4)]
    # zero_bubble_v: "stage 0 has layer 0 and 7, stage 1 has layer 1 and 6, ..."
    assert [v.place(c)[0] for c in range(8)] == [0, 1, 2, 3, 3, 2, 1, 0]
    assert all(v.chunk(*v.place(c)) == c for c in range(8))


def _orders(name, stages, micro):
    layout = {"1f1b": VirtualLayout(stages), "interleaved": VirtualLayout(stages, 2),
              "zero_bubble_v": VirtualLayout(stages, 2, v_shape=True)}[name]
    return schedule_orders("zero_bubble_v" if name == "zero_bubble_v" else "1f1b", layout, micro), layout


def test_idle_fraction_from_the_schedule_interleaved_below_1f1b_zero_bubble_v_below_both():
    """4 device groups, 8 micro-batches, costs F = B = W = 1 per stage (a backward that is not split: 2), a chunk
    of a group with 2 segments half of that."""
    idle = {}
    for name in ("1f1b", "interleaved", "zero_bubble_v"):
        orders, layout = _orders(name, 4, 8)
        timeline = schedule_timeline(orders, layout, ScheduleCosts(1, 1, 1))
        idle[name] = timeline.idle_total
        assert timeline.idle == pytest.approx([idle[name]] * 4)  # every group waits as long (uniform costs)
    print({k: round(v, 3) for k, v in idle.items()})
    assert idle["1f1b"] == pytest.approx(9 / 33)  # (S - 1) (F + B + W) of 33 units
    assert idle["interleaved"] == pytest.approx(4.5 / 28.5)  # the fill and drain halved
    assert idle["zero_bubble_v"] == pytest.approx(2 / 26)
    assert idle["zero_bubble_v"] < idle["interleaved"] < idle["1f1b"]


@pytest.mark.parametrize("name", ["1f1b", "interleaved", "zero_bubble_v"])
@pytest.mark.parametrize("stages,micro", [(2, 4), (4, 8), (4, 12), (3, 6)])
def test_schedules_run_every_action_once_and_never_deadlock(name, stages, micro):
    orders, layout = _orders(name, stages, micro)
    kinds = "FBW" if name == "zero_bubble_v" else "FB"
    for s, order in enumerate(orders):
        expected = {Action(s, k, m, g) for k in kinds for m in range(micro) for g in range(layout.segments)}
        assert len(order) == len(expected) and set(order) == expected
    ticks = dispatch_order(orders, layout)  # raises on a deadlock
    assert sum(map(len, ticks)) == sum(map(len, orders))
    if name == "zero_bubble_v":  # no more activations held than 1F1B: 2 S half-stage chunks
        assert max(peak_in_flight(o) for o in orders) <= 2 * stages


def _train(config, net, micro=8, steps=3, stages=4):
    ms.reset_auto_parallel_context()
    if config is not None:
        ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", pipeline_stages=stages,
                                     pipeline_config=config)
    train = nn.TrainOneStepCell(nn.PipelineCell(nn.WithLossCell(net, nn.MSELoss()), micro),
                                nn.Momentum(net.trainable_params(), 0.01, 0.9))
    x, y = mlp_data(32)
    return [float(train(x, y)) for _ in range(steps)], train


@pytest.mark.parametrize("config,v_shape", [(INTERLEAVED, False), (ZERO_BUBBLE_V, True)])
def test_virtual_stage_schedules_train_as_unpipelined(config, v_shape):
    """4 Dense layers on 2 stages x 2 segments (4 devices per stage), 4 micro-batches: the losses of the
    unpipelined PipelineCell on one device, every parameter's stage recorded as its device group."""
    want, _ = _train(None, mlp_virtual(4, 2, v_shape=v_shape), micro=4)
    got, train = _train(config, net := mlp_virtual(4, 2, v_shape=v_shape), micro=4, stages=2)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    stats = train.program.stats
    # activations cross between groups at 3 chunk boundaries (ZB-V: 2; chunks 1 and 2 share stage 1)
    assert stats.transfers_last_step == 2 * 4 * (2 if v_shape else 3)
    assert stats.peak_live_micro_batches == ([4, 4] if v_shape else [5, 3])
    assert [p.pipeline_stage for p in net.trainable_params()][::2] == ([0, 1, 1, 0] if v_shape else [0, 1, 0, 1])


@pytest.mark.slow
@pytest.mark.parametrize("config,v_shape", [(INTERLEAVED, False), (ZERO_BUBBLE_V, True)])
def test_virtual_stage_schedules_train_as_unpipelined_on_four_stages(config, v_shape):
    """8 Dense layers on 4 stages x 2 segments (2 devices per stage), 8 micro-batches."""
    want, _ = _train(None, mlp_virtual(v_shape=v_shape))
    got, train = _train(config, mlp_virtual(v_shape=v_shape))
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert train.program.stats.transfers_last_step == 2 * 8 * (6 if v_shape else 7)


def test_trace_step_times_every_action(tmp_path):
    """A traced step runs the actions one at a time and records each; the measured idle fraction places those
    durations on the schedule (bench/pipeline_schedules.py prints it; no timing is asserted here)."""
    _, train = _train(ZERO_BUBBLE_V, mlp_virtual(4, 2, v_shape=True), micro=4, steps=1, stages=2)
    loss, trace = train.program.trace_step(list(mlp_data(32)))
    assert np.isfinite(float(loss))
    assert [t.action for t in sorted(trace.timings, key=lambda t: t.start)] == [
        a for tick in dispatch_order([list(o) for o in trace.orders], trace.layout) for a in tick]
    assert set(trace.kind_seconds()) == {"F", "B", "W"}
    timeline = trace.timeline()
    assert len(timeline.idle) == 2 and all(0 <= x < 1 for x in timeline.idle)


def test_schedule_dump_shows_virtual_stages(tmp_path, capsys):
    ms.set_context(save_graphs=True, save_graphs_path=str(tmp_path))
    try:
        _train(ZERO_BUBBLE_V, mlp_virtual(4, 2, v_shape=True), micro=4, steps=1, stages=2)
    finally:
        ms.set_context(save_graphs=False)
    dumps = sorted((tmp_path / "rank_0").glob("pipeline_schedule_*.ir"))
    assert len(dumps) == 2  # rank 0 (stage 0) runs virtual stages 0 and 3
    schedule = read_schedule(dumps[0])
    assert schedule["scheduler"] == "zero_bubble_v" and schedule["segments"] == 2
    assert schedule["chunks"] == [(0, 0), (1, 0), (1, 1), (0, 1)]
    actions = schedule["orders"][0]["actions"]
    assert actions[0] == "F0s0" and {"F3s1", "B3s1", "W3s1"} <= set(actions)
    assert schedule["idle"][0] == pytest.approx(0.5 / 12.5, abs=1e-3) and "F=1 B=1 W=1" in schedule["costs"]
    assert schedule["orders"][0]["peak_live"] <= 4
    from graphpar.cli.main import main

    main(["ir", "summary", str(tmp_path), "--rank", "0"])
    out = capsys.readouterr().out
    assert "virtual stages: 2 segments per stage; (stage, segment) of each in model order: 0=(0,0) 1=(1,0)" in out
    assert "idle (schedule)" in out and "0.040" in out


def test_virtual_stage_refusals():
    with pytest.raises(PipelineError, match=r"'zero_bubble_v'.*2 segments.*use 1"):
        _train(ZERO_BUBBLE_V, mlp_virtual(segments=1), steps=1)
    with pytest.raises(PipelineError, match=r"pipeline_segment=1 needs virtual stages.*pipeline_interleave=False"):
        _train({"pipeline_scheduler": "1f1b"}, mlp_virtual(), steps=1)
    with pytest.raises(PipelineError, match=r"micro_size=6.*rounds of pipeline_stages=4"):
        _train(INTERLEAVED, mlp_virtual(), micro=6, steps=1)
    with pytest.raises(PipelineError, match=r"no Cell runs in segment 1 of stage 3"):
        _train(INTERLEAVED, mlp_virtual(layers=7), steps=1)  # 7 layers on 8 virtual stages
    with pytest.raises(TypeError, match="'pipeline_segment' must be int"):
        mlp_virtual().layers[0].pipeline_segment = 1.0


def test_interleave_without_segments_is_plain_1f1b_said_once(notices):
    """pipeline_interleave=True on a network that sets no pipeline_segment: one segment per stage, so the
    interleaved schedule is 1F1B's, and graphpar says so."""
    _, train = _train(INTERLEAVED, mlp_virtual(4, 2, segments=1), micro=4, steps=1, stages=2)
    assert [a.text for a in train.program.trace_step(list(mlp_data(32)))[1].orders[0]] == [
        "F0", "F1", "B0", "F2", "B1", "F3", "B2", "B3"]
    assert "interleaved 1F1B is plain 1F1B" in notices.text


def test_zero_bubble_v_with_a_weight_tied_between_two_segments_of_one_stage():
    """A Parameter shared by the V's first and last virtual stages (an embedding and the head tied to it), both on
    stage 0's devices: each keeps its own copy (its own buffer: each segment's update donates it), their gradients
    are summed where they are, and the losses are the unpipelined run's."""
    x, y = mlp_data()

    def run(config):
        ms.reset_auto_parallel_context()
        if config is not None:
            ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", pipeline_stages=2,
                                         pipeline_config=config)
        net = TiedVMLP()
        cell = nn.TrainOneStepCell(nn.PipelineCell(nn.WithLossCell(net, nn.MSELoss()), 4),
                                   nn.Momentum(net.trainable_params(), 0.05, 0.9))
        return [float(cell(x, y)) for _ in range(4)], net, cell

    want, _, _ = run(None)
    got, net, cell = run(ZERO_BUBBLE_V)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    stats = cell.program.stats
    assert stats.shared_sums_last_step == 1 and stats.transfers_last_step == 2 * 2 * 4  # boundaries 0|1 and 2|3
    built = next(iter(cell.program._built.values()))
    index = cell.program.state.param_names().index(net.a.weight.name)
    assert built.split.shared == {index: [0, 3]}
    copies = cell.program._kept.take(built.stages, cell.program.state.params, lambda st: st.param_sh)
    first, last = copies[(0, index)], copies[(3, index)]
    assert first.sharding.device_set == last.sharding.device_set  # stage 0's devices
    assert first.addressable_shards[0].data.unsafe_buffer_pointer() != \
        last.addressable_shards[0].data.unsafe_buffer_pointer()
    np.testing.assert_array_equal(np.asarray(first), np.asarray(last))
