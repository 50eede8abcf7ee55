"""MindSpore's pipeline-parallel sample (scripts/pipeline_port.py), imports changed only, checked for the
tutorial's claims: the loss falls; the network is cut where ``pipeline_stage`` says, each stage's graph planned and
compiled on its own half of the 8 devices; the micro-batches' activations are sent forward and their gradients back
between the stages (the schedule dump)."""

import graphpar as ms
from graphpar.dump.pipeline import read_schedule
from tests.ports.scripts.pipeline_port import main


def _dump(ir, rank, prefix):
    name = next(p.name for p in (ir / f"rank_{rank}").iterdir() if p.name.startswith(prefix))
    return ir / f"rank_{rank}" / name


def test_pipeline_sample_trains_in_two_stages_of_four_devices(tmp_path):
    ir = tmp_path / "ir"
    ms.set_context(save_graphs=True, save_graphs_path=str(ir))
    losses, net = main()
    ms.set_context(save_graphs=False)
    assert len(losses) == 16 and sum(losses[-4:]) < sum(losses[:4])
    devices = {p.name: sorted(d.id for d in p.get_raw_value().sharding.device_set) for p in net.trainable_params()}
    assert devices["layer1.param"] == devices["layer2.weight"] == [0, 1, 2, 3]
    assert devices["layer3.weight"] == devices["layer3.bias"] == [4, 5, 6, 7]
    for rank, stage in ((0, 0), (7, 1)):
        begin = _dump(ir, rank, "step_parallel_begin_").read_text()
        assert f"# note: pipeline stage {stage} of 2 on ranks {4 * stage}-{4 * stage + 3}" in begin
        # each stage's graph holds its own layers only
        assert ("layer3" in begin) == (stage == 1) and ("layer1" in begin) == (stage == 0)
        schedule = read_schedule(_dump(ir, rank, "pipeline_schedule_"))
        assert schedule["stages"] == 2 and schedule["micro_size"] == 4
        forward, backward = ("sends", "receives") if stage == 0 else ("receives", "sends")
        assert sorted(t["micro"] for t in schedule[forward] if t["pass"] == "forward") == [0, 1, 2, 3]
        assert sorted(t["micro"] for t in schedule[backward] if t["pass"] == "backward") == [0, 1, 2, 3]
