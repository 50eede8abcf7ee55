"""The training loop's in-flight limit (``compile/runtime/bound_step.py``): at most ``TrainProgram.MAX_IN_FLIGHT``
steps stay queued on the devices after a call (XLA's CPU backend deadlocks in its collective rendezvous with long
queues of multi-device programs); every older step has finished."""

import operator

import numpy as np

import graphpar as ms
from graphpar import nn
from graphpar.compile.runtime.program import TrainProgram


def test_train_steps_keep_at_most_max_in_flight_queued():
    """After every call of a train cell, every step but the last ``MAX_IN_FLIGHT`` has finished (its loss is
    ready), and the queue holds exactly those last steps, the newest last."""
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_auto_parallel_context(parallel_mode="data_parallel", gradients_mean=True)
    rng = np.random.default_rng(2)
    x, y = rng.normal(size=(16, 8)).astype(np.float32), rng.normal(size=(16, 4)).astype(np.float32)
    net = nn.Dense(8, 4)
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.Momentum(net.trainable_params(), 0.01, 0.9))
    placed = train.program.place_inputs([x, y])
    limit = TrainProgram.MAX_IN_FLIGHT
    losses = []
    for _ in range(3 * limit + 1):
        losses.append(train(*placed))
        queue = train.program._in_flight
        assert len(queue) == min(len(losses), limit)
        assert all(map(operator.is_, queue, losses[-limit:]))
        assert all(loss.is_ready() for loss in losses[:-limit])
    assert np.isfinite(float(losses[-1]))
