"""A checkpoint saved on 8 devices under the quickstart's propagated plan loads onto 4, 2 and 1 devices and into
DATA_PARALLEL with identical values, and training continues along the same losses as on 8 devices."""

import numpy as np
import pytest

import graphpar as ms
import graphpar.dataset as ds
from graphpar import nn
from graphpar.checkpoint import load_checkpoint, load_param_into_net, save_checkpoint
from graphpar.planner.strategy import to_partition_spec
from graphpar.train import CheckpointConfig, ModelCheckpoint

from .helpers import Arrays, Record, StopAt, params, quickstart_net, rand

HINTS = {8: ((2, 4), (4, 1)), 4: ((2, 2), (2, 1)), 2: ((1, 2), (2, 1)), 1: ((1, 1), (1, 1))}


def _dataset():
    x, y = rand(64, 32, seed=4), rand(64, 16, seed=5)
    return ds.GeneratorDataset(Arrays(x, y), ["x", "y"], shuffle=False).batch(16, drop_remainder=True)


def _train(devices, mode="auto_parallel", resume=False, stop=None, directory=None):
    ms.reset_auto_parallel_context()
    ms.set_auto_parallel_context(parallel_mode=mode, search_mode="sharding_propagation", device_num=devices,
                                 full_batch=mode != "data_parallel", gradients_mean=True)  # MindSpore refuses
    # full_batch outside SEMI_AUTO / AUTO; DATA_PARALLEL's devices each load their slice
    net = quickstart_net(HINTS[devices])
    model = ms.Model(net, nn.MSELoss(), nn.Momentum(net.trainable_params(), 0.2, 0.1))
    record = Record()
    callbacks = [record] + ([StopAt(stop)] if stop else [])
    if directory is not None:
        callbacks.insert(0, ModelCheckpoint("qs", directory, CheckpointConfig(save_checkpoint_steps=4)))
    model.train(3, _dataset(), callbacks=callbacks, resume=resume)
    return net, record


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """Train 4 steps on 8 devices (AUTO_PARALLEL, propagated plan), checkpoint; continue to 12 steps on 8."""
    root = tmp_path_factory.mktemp("qs")
    net, _ = _train(8, stop=4, directory=str(root))
    path = root / "qs-1_4.ckpt"
    values = params(net)
    assert net.weight.get_raw_value().sharding.spec == to_partition_spec((("m1", "m2"), ()))  # split 4 ways
    _, cont = _train(8, resume=str(path))
    yield path, values, cont.losses
    ms.reset_auto_parallel_context()


@pytest.mark.parametrize("devices,mode", [(4, "auto_parallel"), (2, "auto_parallel"), (1, "auto_parallel"),
                                          (8, "data_parallel")])
def test_load_onto_other_device_counts_and_modes(saved, devices, mode):
    path, values, losses8 = saved
    ms.reset_auto_parallel_context()
    ms.set_auto_parallel_context(parallel_mode=mode, search_mode="sharding_propagation", device_num=devices)
    net = quickstart_net(HINTS[devices])
    not_loaded, unused = load_param_into_net(net, load_checkpoint(str(path)))
    assert not_loaded == [] and all(u.startswith("optimizer.") for u in unused)
    for name, value in params(net).items():
        np.testing.assert_array_equal(value, values[name])
    net, record = _train(devices, mode=mode, resume=str(path))
    assert len(record.losses) == len(losses8) == 8
    np.testing.assert_allclose(record.losses, losses8, rtol=2e-5)


def test_save_checkpoint_of_a_network_and_load_into_a_fresh_one(tmp_path):
    ms.set_auto_parallel_context(parallel_mode="auto_parallel", search_mode="sharding_propagation")
    net = quickstart_net()
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.Momentum(net.trainable_params(), 0.2, 0.1))
    x, y = rand(16, 32), rand(16, 16, seed=3)
    for _ in range(2):
        train(x, y)
    for integrated in (True, False):
        save_checkpoint(net, str(tmp_path / f"net_{integrated}"), integrated_save=integrated,
                        append_dict={"epoch_num": 2, "note": "x", "lr": 0.2})
        loaded = load_checkpoint(str(tmp_path / f"net_{integrated}.ckpt"))
        assert loaded["note"] == "x" and int(loaded["epoch_num"].asnumpy()) == 2
        for name, value in params(net).items():
            np.testing.assert_array_equal(loaded[name].asnumpy(), value)
