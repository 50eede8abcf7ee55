"""Bad pipeline configurations are refused with one clear line naming the culprit."""

import numpy as np
import pytest

import graphpar as ms
from graphpar import nn
from graphpar.compile.pipeline.schedule import dispatch_order, peak_in_flight, stage_orders
from graphpar.errors import ConfigError
from graphpar.compile.pipeline.stage_split import PipelineError

from .models import mlp4


def _train(net, micro=4, stages=2, batch=8, **ctx):
    ms.reset_auto_parallel_context()
    ms.set_auto_parallel_context(parallel_mode=ctx.pop("parallel_mode", "semi_auto_parallel"),
                                 pipeline_stages=stages, **ctx)
    cell = nn.TrainOneStepCell(nn.PipelineCell(nn.WithLossCell(net, nn.MSELoss()), micro),
                               nn.SGD(net.trainable_params(), 0.1))
    x = np.ones((batch, 16), np.float32)
    y = np.ones((batch, 8), np.float32)
    return cell(x, y)


def test_context_settings():
    ms.set_auto_parallel_context(pipeline_stages=4, pipeline_config={"pipeline_scheduler": "gpipe"})
    assert ms.get_auto_parallel_context("pipeline_stages") == 4
    assert ms.get_auto_parallel_context("pipeline_config") == {"pipeline_interleave": False,
                                                              "pipeline_scheduler": "gpipe"}
    ms.set_auto_parallel_context(pipeline_config={"pipeline_interleave": True})  # interleaved 1F1B
    assert ms.get_auto_parallel_context("pipeline_config") == {"pipeline_interleave": True,
                                                              "pipeline_scheduler": "1f1b"}
    with pytest.raises(ConfigError, match="interleaved .* runs the 1f1b or zero_bubble_v schedule"):
        ms.set_auto_parallel_context(pipeline_config={"pipeline_interleave": True, "pipeline_scheduler": "gpipe"})
    with pytest.raises(ConfigError, match="zero_bubble_v places two segments .* needs pipeline_interleave=True"):
        ms.set_auto_parallel_context(pipeline_config={"pipeline_scheduler": "zero_bubble_v"})
    for name in ("seqpipe", "seqvpp", "seqsmartvpp"):
        with pytest.raises(ConfigError, match=f"'{name}' .*sequence dimension.* is not built"):
            ms.set_auto_parallel_context(pipeline_config={"pipeline_scheduler": name})
    with pytest.raises(ConfigError, match="'zbv' is not a schedule; valid choices: .*'zero_bubble_v'"):
        ms.set_auto_parallel_context(pipeline_config={"pipeline_scheduler": "zbv"})
    with pytest.raises(ConfigError, match="keys pipeline_interleave, pipeline_scheduler"):
        ms.set_auto_parallel_context(pipeline_config={"scheduler": "1f1b"})
    with pytest.raises(ConfigError, match="pipeline_stages must be an int >= 1"):
        ms.set_auto_parallel_context(pipeline_stages=0)
    ms.reset_auto_parallel_context()
    assert ms.get_auto_parallel_context("pipeline_stages") == 1


def test_cell_pipeline_stage_values():
    dense = nn.Dense(2, 2)
    assert dense.pipeline_stage is None
    dense.pipeline_stage = 1
    assert dense.pipeline_stage == 1
    with pytest.raises(TypeError, match="'pipeline_stage' must be int"):
        dense.pipeline_stage = True
    with pytest.raises(ValueError, match="can not be less than 0"):
        dense.pipeline_stage = -1
    with pytest.raises(KeyError, match=r"\['nope'\]"):
        nn.PipelineCell(mlp4(), 2, stage_config={"nope": 0})
    net = mlp4(stages=1)
    nn.PipelineCell(net, 2, stage_config={"layers.3": 1})
    assert net.layers[3].pipeline_stage == 1


def test_schedules():
    assert [a.text for a in stage_orders("1f1b", 4, 8)[0]] == (
        "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7".split())
    for s, order in enumerate(stage_orders("1f1b", 4, 8)):
        assert peak_in_flight(order) == 4 - s
    assert all(peak_in_flight(o) == 8 for o in stage_orders("gpipe", 4, 8))
    ticks = dispatch_order(stage_orders("gpipe", 2, 2))
    assert [[f"{a.stage}:{a.text}" for a in t] for t in ticks] == [
        ["0:F0"], ["0:F1", "1:F0"], ["1:F1"], ["1:B0"], ["0:B0", "1:B1"], ["0:B1"]]


def test_stage_out_of_range():
    net = mlp4(stages=2)
    net.layers[3].pipeline_stage = 2
    with pytest.raises(PipelineError, match=r"Cell '_backbone.layers.3' \(Dense\): pipeline_stage=2 but .*pipeline_stages=2\)"
                                            r".*valid stages are 0..1"):
        _train(net)


def test_stage_without_cells():
    with pytest.raises(PipelineError, match=r"stage 2: no Cell runs in stage 2 of 3"):
        _train(mlp4(stages=2), micro=4, stages=3, device_num=6)


def test_device_num_not_divisible():
    with pytest.raises(PipelineError, match=r"device_num=6: is not divisible by pipeline_stages=4"):
        _train(mlp4(stages=4), stages=4, device_num=6)


def test_micro_size_not_dividing_batch():
    with pytest.raises(PipelineError, match=r"input 0 of PipelineCell \(shape \(10, 16\)\): its batch dimension is "
                                            r"not divisible by micro_size=4"):
        _train(mlp4(stages=2), batch=10)


def test_micro_size_below_stages():
    with pytest.raises(PipelineError, match=r"micro_size=2: is smaller than pipeline_stages=4"):
        _train(mlp4(stages=4), micro=2, stages=4)


def test_network_not_a_pipeline_cell():
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", pipeline_stages=2)
    net = mlp4(stages=2)
    cell = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), 0.1))
    with pytest.raises(PipelineError, match=r"WithLossCell: pipeline_stages=2 needs .*nn.PipelineCell"):
        cell(np.ones((8, 16), np.float32), np.ones((8, 8), np.float32))


def test_data_parallel_refused():
    with pytest.raises(PipelineError, match=r"parallel_mode='data_parallel': pipeline_stages=2 runs in SEMI_AUTO"):
        _train(mlp4(stages=2), parallel_mode="data_parallel")


def test_stages_flowing_backwards():
    net = mlp4(stages=2)
    net.layers[0].pipeline_stage = 1
    net.layers[3].pipeline_stage = 0
    with pytest.raises(PipelineError, match=r"op 'matmul' in .*/1-Dense \(stage 0\): its input comes from op 'relu' "
                                            r"in .*/0-Dense/activation-ReLU, which runs in the later stage 1"):
        _train(net)
