"""Sink mode over an epoch whose last batch is partial (``drop_remainder=False``): the step of the odd batch runs
as a device call of its own, and every step's loss is the loss non-sink mode reports for it."""

import numpy as np

import graphpar as ms
import graphpar.dataset as ds
from graphpar import nn
from graphpar.train import Callback, Model

from .helpers import ArraySource


class StepLosses(Callback):
    """The loss the callbacks see after each device call (one step in non-sink mode, a sink in sink mode)."""

    def __init__(self):
        self.losses = []

    def on_train_step_end(self, run_context):
        self.losses.append(float(np.asarray(run_context.original_args().net_outputs)))


def _model():
    weight = np.random.default_rng(1).normal(size=(3, 4)).astype(np.float32)
    net = nn.Dense(4, 3, weight_init=ms.Tensor(weight), bias_init="zeros")
    return Model(net, nn.MSELoss(), nn.Momentum(net.trainable_params(), 0.05, 0.9)), net


def _data():
    """10 rows in batches of 4: 4, 4 and a partial last batch of 2."""
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(10, 4)).astype(np.float32), rng.normal(size=(10, 3)).astype(np.float32)
    return ds.GeneratorDataset(ArraySource(x, y), ["x", "y"], shuffle=False).batch(4, drop_remainder=False)


def test_sink_mode_runs_a_partial_last_batch_with_the_losses_of_non_sink_mode():
    (ref, ref_net), per_step = _model(), StepLosses()
    ref.train(2, _data(), callbacks=[per_step])
    assert len(per_step.losses) == 6  # 3 steps an epoch, the third of 2 rows

    (sink, sink_net), per_sink = _model(), StepLosses()
    sink.train(2, _data(), callbacks=[per_sink], dataset_sink_mode=True)  # sink_size -1: the whole epoch
    # a sink reports its last step's loss: the partial batch's, equal to non-sink mode's
    np.testing.assert_allclose(per_sink.losses, [per_step.losses[2], per_step.losses[5]], rtol=1e-6)
    for a, b in zip(ref_net.trainable_params(), sink_net.trainable_params()):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)


def test_sink_size_crossing_an_epoch_end_splits_at_the_partial_batch():
    (ref, _), per_step = _model(), StepLosses()
    ref.train(2, _data(), callbacks=[per_step])
    (sink, _), per_sink = _model(), StepLosses()
    sink.train(3, _data(), callbacks=[per_sink], dataset_sink_mode=True, sink_size=2)  # 4, 4 | 2, 4 | 4, 2
    np.testing.assert_allclose(per_sink.losses, per_step.losses[1::2], rtol=1e-6)
