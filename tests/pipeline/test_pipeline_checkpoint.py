"""A checkpoint saved by a 2-stage x 4-device pipelined run records each parameter's stage and loads whole into
one device and into DATA_PARALLEL; the optimizer state goes back together from the stages' states."""

import numpy as np
import pytest

import graphpar as ms
from graphpar import nn
from graphpar.checkpoint import load_checkpoint, load_param_into_net, save_checkpoint
from graphpar.checkpoint.store import read_manifest

from .helpers import mlp_data, params, train_pipelined
from .models import mlp4


def _loaded(path, mode):
    ms.reset_auto_parallel_context()
    ms.set_auto_parallel_context(parallel_mode=mode, gradients_mean=True)
    net = mlp4(stages=2, seed=7)  # other initial values: everything must come from the checkpoint
    opt = nn.Momentum(net.trainable_params(), 0.05, 0.9)
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), opt)
    missing = load_param_into_net(train, load_checkpoint(path))
    return net, train, missing


@pytest.mark.slow
def test_saved_with_two_stages_loads_into_one_device_and_data_parallel(tmp_path):
    x, y = mlp_data()
    _, net, train = train_pipelined("mlp", 2, 4, "1f1b", x, y, 2)
    path = str(tmp_path / "pipe.ckpt")
    save_checkpoint(train, path)
    manifest = read_manifest(path)
    stages = {e["name"]: e.get("pipeline_stage") for e in manifest["entries"] if e["group"] == "network"}
    assert stages == {"layers.0.weight": 0, "layers.0.bias": 0, "layers.1.weight": 0, "layers.1.bias": 0,
                      "layers.2.weight": 1, "layers.2.bias": 1, "layers.3.weight": 1, "layers.3.bias": 1}
    saved = params(net)
    moments = {e["name"] for e in manifest["entries"] if e["group"] == "optimizer"}
    assert any("layers.3.weight" in m for m in moments) and any("layers.0.weight" in m for m in moments)
    after = {}
    for mode in ("stand_alone", "data_parallel"):
        loaded, cell, missing = _loaded(path, mode)
        assert missing == ([], [])  # every parameter and optimizer entry found a home
        for name, value in params(loaded).items():
            np.testing.assert_array_equal(value, saved[name], err_msg=f"{mode}: {name}")
        cell(x, y)  # training continues from the loaded values and momentum
        after[mode] = params(loaded)
    for name in saved:
        np.testing.assert_allclose(after["data_parallel"][name], after["stand_alone"][name], rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_model_train_pipelined(capsys):
    """``Model(PipelineCell(WithLossCell(...)), optimizer=...).train`` with LossMonitor: the process draws one batch
    per device of a stage, and the losses are the unpipelined PipelineCell's on the same global batches."""
    from graphpar.train import LossMonitor

    from tests.train.helpers import array_dataset

    x, y = mlp_data(batch=64)
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", pipeline_stages=2)
    net = mlp4(stages=2)
    model = ms.Model(nn.PipelineCell(nn.WithLossCell(net, nn.MSELoss()), 4),
                     optimizer=nn.Momentum(net.trainable_params(), 0.05, 0.9))
    model.train(1, array_dataset(x, y, batch_size=8), callbacks=[LossMonitor()])
    printed = [float(line.rsplit(" ", 1)[1]) for line in capsys.readouterr().out.splitlines() if "loss is" in line]
    ms.reset_auto_parallel_context()
    ref_net = mlp4(stages=2)
    ref = nn.TrainOneStepCell(nn.PipelineCell(nn.WithLossCell(ref_net, nn.MSELoss()), 4),
                              nn.Momentum(ref_net.trainable_params(), 0.05, 0.9))
    # an unsharded dataset: each of a stage's 4 devices reads the same 8-row batch (as every MindSpore process)
    want = [float(ref(np.tile(x[i:i + 8], (4, 1)), np.tile(y[i:i + 8], (4, 1)))) for i in range(0, 64, 8)]
    np.testing.assert_allclose(printed, want, rtol=1e-5)
