"""The training loop's in-flight limit (``compile/runtime/bound_step.py``): at most ``TrainProgram.MAX_IN_FLIGHT``
steps stay queued on the devices after a call (XLA's CPU backend deadlocks in its collective rendezvous with long
queues of multi-device programs), reached by draining the queue down to the newest step once it is full."""

import collections

import numpy as np

import graphpar as ms
from graphpar import nn
from graphpar.compile.runtime.bound_step import drain
from graphpar.compile.runtime.program import TrainProgram


class _Step:
    """A stand-in for a step's loss that records when the loop waits for it."""

    def __init__(self, index: int, waits: list[int]):
        self.index, self.waits = index, waits

    def block_until_ready(self) -> "_Step":
        self.waits.append(self.index)
        return self


def test_drain_waits_for_the_step_before_the_newest_first_and_keeps_the_newest():
    """The step before the newest is waited for first (in a chain of steps the older ones are then done, so
    their checks do not sleep), then every older one, oldest first; the newest stays queued, not waited for."""
    waits: list[int] = []
    queue = collections.deque(_Step(i, waits) for i in range(4))
    drain(queue)
    assert waits == [2, 0, 1]
    assert [s.index for s in queue] == [3]


def test_train_steps_keep_at_most_max_in_flight_queued():
    """After every call of a train cell, every step but the last ``MAX_IN_FLIGHT`` has finished (its loss is ready)
    and the queue holds at most that many; the queue drains to the newest step once per ``MAX_IN_FLIGHT`` steps."""
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_auto_parallel_context(parallel_mode="data_parallel", gradients_mean=True)
    rng = np.random.default_rng(2)
    x, y = rng.normal(size=(16, 8)).astype(np.float32), rng.normal(size=(16, 4)).astype(np.float32)
    net = nn.Dense(8, 4)
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.Momentum(net.trainable_params(), 0.01, 0.9))
    placed = train.program.place_inputs([x, y])
    limit = TrainProgram.MAX_IN_FLIGHT
    losses, lengths = [], []
    for _ in range(3 * limit + 1):
        losses.append(train(*placed))
        queue = train.program._in_flight
        lengths.append(len(queue))
        assert len(queue) <= limit and queue[-1] is losses[-1]
        assert all(loss.is_ready() for loss in losses[:-limit])
    assert lengths[limit:] == ([1] + list(range(2, limit + 1))) * 2 + [1]
    assert np.isfinite(float(losses[-1]))
