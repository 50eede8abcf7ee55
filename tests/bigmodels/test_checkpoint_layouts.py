"""Checkpoints and strategy files carry the parallel optimizer's sharding; such a checkpoint loads anywhere."""

import json

import numpy as np
import pytest

import graphpar as ms
from graphpar import nn
from graphpar.checkpoint import load_checkpoint, load_param_into_net, save_checkpoint
from graphpar.checkpoint.store import read_manifest
from graphpar.planner import strategy_file
from tests.bigmodels.nets import data, params, wide_mlp


def _train(mode, steps, **ctx):
    ms.reset_auto_parallel_context()
    ms.set_auto_parallel_context(parallel_mode=mode, gradients_mean=True, **ctx)
    net = wide_mlp(16, 256, 8)
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.Momentum(net.trainable_params(), 0.05, 0.9))
    x, y = data(32, 16, 8)
    losses = [float(train(x, y)) for _ in range(steps)]
    return net, train, losses


@pytest.mark.slow
def test_parallel_optimizer_checkpoint_and_strategy_file_load_into_1_device_and_data_parallel(tmp_path):
    strategy = str(tmp_path / "strategy.json")
    net, train, _ = _train("data_parallel", 2, enable_parallel_optimizer=True,
                           parallel_optimizer_config={"parallel_optimizer_threshold": 4},
                           strategy_ckpt_config={"save_file": strategy})
    trained = params(net)
    save_checkpoint(train, str(tmp_path / "opt"))
    # the manifest records the sharded storage of the weight and of its momentum
    records = {r["name"]: r for r in read_manifest(str(tmp_path / "opt.ckpt"))["entries"]}
    assert records["fc1.weight"]["sharding"]["spec"][0] is not None
    assert any(r["group"] == "optimizer" and n.endswith("fc1.weight") and r["sharding"]["spec"][0] is not None
               for n, r in records.items())
    # the strategy file: MindSpore's opt_weight_shard_size/step, graphpar's optimizer_spec; small biases stay whole
    layouts = strategy_file.read(strategy).layouts
    assert layouts["fc1.weight"].opt_weight_shard_size == 8 and layouts["fc1.weight"].optimizer_spec
    assert layouts["fc2.bias"].opt_weight_shard_size == 0
    note = json.load(open(strategy))["graphpar"]["layouts"]["fc2.bias"]["optimizer_note"]
    assert "threshold" in note
    # into one device, and into plain DATA_PARALLEL: same values, and training continues the same way
    loaded = load_checkpoint(str(tmp_path / "opt.ckpt"))
    for mode in ("stand_alone", "data_parallel"):
        ms.reset_auto_parallel_context()
        ms.set_auto_parallel_context(parallel_mode=mode, gradients_mean=True)
        fresh = wide_mlp(16, 256, 8, seed=5)
        not_loaded, _ = load_param_into_net(fresh, loaded)
        assert not not_loaded
        for name, value in params(fresh).items():
            np.testing.assert_array_equal(value, trained[name])
