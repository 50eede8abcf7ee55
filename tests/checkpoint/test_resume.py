"""Resume: train N steps and M more, versus N steps, a fresh Model from the checkpoint with resume=True, and M more:
identical losses, callback numbering and parameters (bitwise), mid-epoch, with a shuffled dataset and Dropout."""

import numpy as np
import pytest

import graphpar as ms
from graphpar.train import CheckpointConfig, LossMonitor, ModelCheckpoint

from .helpers import Record, StopAt, dropout_mlp, momentum_model, params, shuffled_dataset


def _run(tmp_path, epochs, stop=None, resume=False, mode="data_parallel", sink=False, steps=4):
    ms.reset_auto_parallel_context()
    ms.set_auto_parallel_context(parallel_mode=mode, gradients_mean=True)
    ms.set_seed(3)
    net = dropout_mlp()
    model = momentum_model(net)
    record = Record()
    ckpt = ModelCheckpoint("net", str(tmp_path / "ckpt"), CheckpointConfig(save_checkpoint_steps=steps))
    callbacks = [ckpt, record] + ([StopAt(stop)] if stop else [])
    model.train(epochs, shuffled_dataset(), callbacks=callbacks, dataset_sink_mode=sink, resume=resume)
    return record, params(net)


@pytest.mark.parametrize("stop", [8, 20])  # 12 steps per epoch: 8 is mid-epoch 1, 20 mid-epoch 2
def test_resume_mid_epoch_is_bitwise_identical(tmp_path, stop):
    full, full_params = _run(tmp_path / "a", 3)
    first, _ = _run(tmp_path / "b", 3, stop=stop)
    rest, rest_params = _run(tmp_path / "b", 3, resume=True)
    assert first.where + rest.where == full.where
    assert first.losses + rest.losses == full.losses  # bitwise: float32 equality
    for name in full_params:
        np.testing.assert_array_equal(rest_params[name], full_params[name])


def test_resume_from_a_path_and_loss_monitor_numbering(tmp_path, capsys):
    _run(tmp_path, 2, stop=16)
    path = tmp_path / "ckpt" / "net-2_4.ckpt"
    assert path.is_dir()
    ms.set_seed(3)
    net = dropout_mlp()
    momentum_model(net).train(2, shuffled_dataset(), callbacks=[LossMonitor()], resume=str(path))
    lines = [l for l in capsys.readouterr().out.splitlines() if l.startswith("epoch:")]
    assert lines[0].startswith("epoch: 2 step: 5,") and lines[-1].startswith("epoch: 2 step: 12,")
    assert len(lines) == 8


def test_resume_without_a_checkpoint_starts_fresh_and_resume_true_needs_a_callback(tmp_path):
    record, _ = _run(tmp_path, 1, resume=True)
    assert record.where[0] == (1, 1)
    with pytest.raises(ValueError, match="ModelCheckpoint"):
        momentum_model(dropout_mlp()).train(1, shuffled_dataset(), resume=True)


def test_resume_from_an_incomplete_checkpoint_names_it(tmp_path):
    bad = tmp_path / "net-1_4.ckpt"
    bad.mkdir()
    from graphpar.checkpoint import CheckpointError

    with pytest.raises(CheckpointError, match="net-1_4.ckpt.*incomplete checkpoint"):
        momentum_model(dropout_mlp()).train(1, shuffled_dataset(), resume=str(bad))


def test_resume_in_sink_mode(tmp_path):
    full, full_params = _run(tmp_path / "a", 3, sink=True, steps=12)
    first, _ = _run(tmp_path / "b", 3, stop=12, sink=True, steps=12)
    rest, rest_params = _run(tmp_path / "b", 3, resume=True, sink=True, steps=12)
    assert first.where + rest.where == full.where
    np.testing.assert_array_equal(np.asarray(first.losses + rest.losses), np.asarray(full.losses))
    for name in full_params:
        np.testing.assert_array_equal(rest_params[name], full_params[name])


def test_resume_in_a_fresh_process(tmp_path):
    """Train 20 steps and stop; a new Python process resumes with resume=True: the printed losses (exact float32
    bits) and the final parameters equal those of one uninterrupted process."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parent / "scripts" / "resume_train.py"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRAPHPAR_", "MS_"))}

    def run(out, stop, resume):
        result = subprocess.run([sys.executable, str(script), str(out), str(stop), str(int(resume))], env=env,
                                capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]
        return [l for l in result.stdout.splitlines() if l.startswith("LOSS ")]

    full = run(tmp_path / "a", 0, False)
    first = run(tmp_path / "b", 20, False)
    rest = run(tmp_path / "b", 0, True)
    assert len(full) == 36 and first + rest == full
    a, b = np.load(tmp_path / "a" / "params_0_0.npz"), np.load(tmp_path / "b" / "params_0_1.npz")
    for name in a.files:
        np.testing.assert_array_equal(a[name], b[name])


@pytest.mark.parametrize("amp", ["O2", "dynamic"])
def test_resume_a_loss_scaled_run(tmp_path, amp):
    """amp_level="O2" (bfloat16, dynamic loss scaling) and a DynamicLossScaleManager whose scale grows every 3
    steps: the loss scale and its counters are optimizer state, so a resumed run continues the uninterrupted one
    exactly (losses, parameters and the scale)."""
    from graphpar import nn
    from graphpar.train import DynamicLossScaleManager

    def run(sub, stop=None, resume=False):
        ms.reset_auto_parallel_context()
        ms.set_auto_parallel_context(parallel_mode="data_parallel", gradients_mean=True)
        ms.set_seed(3)
        net = dropout_mlp()
        kwargs = ({"amp_level": "O2"} if amp == "O2" else
                  {"loss_scale_manager": DynamicLossScaleManager(2.0 ** 10, 2, 3)})
        model = ms.Model(net, nn.MSELoss(), nn.Momentum(net.trainable_params(), 0.05, 0.9), **kwargs)
        record = Record()
        ckpt = ModelCheckpoint("net", str(tmp_path / sub / "ckpt"), CheckpointConfig(save_checkpoint_steps=4))
        callbacks = [ckpt, record] + ([StopAt(stop)] if stop else [])
        model.train(2, shuffled_dataset(), callbacks=callbacks, resume=resume)
        return record, params(net), model.train_network.loss_scale

    full, full_params, full_scale = run("a")
    first, _, _ = run("b", stop=8)
    rest, rest_params, rest_scale = run("b", resume=True)
    assert first.where + rest.where == full.where
    assert first.losses + rest.losses == full.losses
    assert rest_scale == full_scale and (amp == "O2" or full_scale > 2.0 ** 10)
    for name in full_params:
        np.testing.assert_array_equal(rest_params[name], full_params[name])
