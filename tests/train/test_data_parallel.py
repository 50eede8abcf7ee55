"""DATA_PARALLEL has MindSpore's semantics: per-device losses on slices of the global batch, gradients summed
(gradients_mean=False) or averaged (True) across devices."""

import numpy as np
import pytest

import graphpar as ms
from graphpar import nn
from graphpar.errors import DatasetError

from .helpers import MLP, regression_data, train_steps


def _close(a, b, rtol=1e-5, atol=1e-6):
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=rtol, atol=atol, err_msg=k)


def test_gradients_mean_true_equals_stand_alone():
    x, y = regression_data(64)
    dp, dp_losses = train_steps("data_parallel", x, y, 10, gradients_mean=True)
    sa, sa_losses = train_steps("stand_alone", x, y, 10)
    _close(dp, sa)
    np.testing.assert_allclose(dp_losses, sa_losses, rtol=1e-5)


def test_gradients_mean_false_sums_per_device_gradients():
    # MindSpore: each of the 8 devices computes the mean loss of its slice; the gradients are summed. For a mean
    # loss over equal slices that is 8x the gradient of the global mean: stand-alone with sensitivity 8.
    x, y = regression_data(64)
    dp, _ = train_steps("data_parallel", x, y, 10, gradients_mean=False, lr=0.005)
    ms.reset_auto_parallel_context()
    net = MLP()
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.Momentum(net.trainable_params(), 0.005, 0.9),
                                sens=8.0)
    for _ in range(10):
        train(x, y)
    _close(dp, {p.name: p.asnumpy() for p in net.get_parameters()})


def test_gradients_mean_false_with_a_sum_loss_equals_the_global_sum():
    # With reduction="sum", summing per-device sums is the global sum: no factor appears.
    x, y = regression_data(64)
    dp, _ = train_steps("data_parallel", x, y, 5, gradients_mean=False, lr=0.0005, loss=nn.MSELoss("sum"))
    sa, _ = train_steps("stand_alone", x, y, 5, lr=0.0005, loss=nn.MSELoss("sum"))
    _close(dp, sa)
    dp_mean, _ = train_steps("data_parallel", x, y, 5, gradients_mean=True, lr=0.0005, loss=nn.MSELoss("sum"))
    assert not np.allclose(dp_mean["fc1.weight"], sa["fc1.weight"], rtol=1e-4)


def test_batch_is_split_and_parameters_replicated():
    x, y = regression_data(64)
    ms.set_auto_parallel_context(parallel_mode="data_parallel")
    net = MLP()
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), 0.1))
    train(x, y)
    assert len(net.fc1.weight.get_value().sharding.device_set) == 8
    assert net.fc1.weight.get_value().sharding.is_fully_replicated
    placed = train.program.place_inputs([x, y])
    assert placed[0].sharding.shard_shape(placed[0].shape) == (8, 16)
    hlo = train.program.lower_step([x, y]).compile().as_text()
    assert hlo.count(" all-reduce(") + hlo.count(" all-reduce-start(") >= 1


def test_full_batch_not_divisible_is_a_clear_error():
    x, y = regression_data(10)
    ms.set_auto_parallel_context(parallel_mode="data_parallel")
    net = MLP()
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), 0.1))
    with pytest.raises(DatasetError) as err:
        train(x, y)
    assert "(10, 16)" in str(err.value) and "divisible" in str(err.value) and "8" in str(err.value)


def test_device_num_uses_the_first_devices():
    x, y = regression_data(16)
    dp4, _ = train_steps("data_parallel", x, y, 3, device_num=4)
    sa, _ = train_steps("stand_alone", x, y, 3)
    _close(dp4, sa)
