"""``MicroBatchInterleaved(network, interleave_num)`` (MindSpore's multi-copy parallel): the sum of the network's
outputs on the interleaved copies of the batch, as MindSpore's ``construct`` adds them; the same losses in every
parallel mode."""

import numpy as np
import pytest

import graphpar as ms
from graphpar import Tensor, nn
from graphpar.errors import CellError

X = np.random.default_rng(0).normal(size=(32, 8)).astype(np.float32)
Y = np.random.default_rng(1).normal(size=(32, 4)).astype(np.float32)


def _loss_net():
    ms.set_seed(3)
    return nn.WithLossCell(nn.SequentialCell(nn.Dense(8, 16), nn.ReLU(), nn.Dense(16, 4)), nn.MSELoss())


def test_output_is_the_sum_over_the_copies():
    net = _loss_net()
    wrapped = ms.parallel.nn.MicroBatchInterleaved(net, 2)
    halves = [float(net(Tensor(X[i * 16:(i + 1) * 16]), Tensor(Y[i * 16:(i + 1) * 16]))) for i in range(2)]
    np.testing.assert_allclose(float(wrapped(Tensor(X), Tensor(Y))), sum(halves), rtol=1e-6)
    # a loss that is a batch mean: interleave_num times the unwrapped loss (as the tutorial's printed losses)
    np.testing.assert_allclose(float(wrapped(Tensor(X), Tensor(Y))), 2 * float(net(Tensor(X), Tensor(Y))), rtol=1e-5)
    assert nn.MicroBatchInterleaved is ms.parallel.nn.MicroBatchInterleaved


def _train(mode):
    ms.reset_auto_parallel_context()
    ms.set_auto_parallel_context(parallel_mode=mode, gradients_mean=True)  # mean: STAND_ALONE's gradient
    net = nn.MicroBatchInterleaved(_loss_net(), 2)
    step = nn.TrainOneStepCell(net, nn.SGD(net.trainable_params(), 0.05))
    return [float(step(Tensor(X), Tensor(Y))) for _ in range(2)]


def test_training_gives_the_same_losses_in_every_mode():
    reference = _train("stand_alone")
    assert reference[1] < reference[0]
    for mode in ("data_parallel", "semi_auto_parallel"):
        np.testing.assert_allclose(_train(mode), reference, rtol=1e-6)


def test_refusals():
    with pytest.raises(ValueError, match="interleave_num must be an int > 0"):
        nn.MicroBatchInterleaved(_loss_net(), 0)
    net = nn.MicroBatchInterleaved(_loss_net(), 3)
    with pytest.raises(CellError, match=r"input 0 has 32 rows.*3 copies do not divide"):
        net(Tensor(X), Tensor(Y))
