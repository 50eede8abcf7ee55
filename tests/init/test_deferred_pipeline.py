"""A pipelined network built under ``no_init_parameters()``: each stage draws its own parameters on its own
devices, and trains as the eagerly built network does."""

import numpy as np
import pytest

import graphpar as ms
from graphpar import nn
from graphpar.nn.utils import no_init_parameters


class TwoStages(nn.Cell):
    """Four default-initialized Dense layers (HeUniform weights, Uniform biases), two per pipeline stage."""

    def __init__(self):
        super().__init__()
        self.layers = nn.CellList([nn.Dense(16, 32, activation="relu"), nn.Dense(32, 32, activation="relu"),
                                   nn.Dense(32, 32, activation="relu"), nn.Dense(32, 8)])
        for i, layer in enumerate(self.layers):
            layer.pipeline_stage = i // 2

    def construct(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def _train(deferred: bool) -> tuple[list[float], TwoStages]:
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", pipeline_stages=2)
    ms.set_seed(4)
    if deferred:
        with no_init_parameters():
            net = TwoStages()
    else:
        net = TwoStages()
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(32, 16)).astype(np.float32), rng.normal(size=(32, 8)).astype(np.float32)
    train = nn.TrainOneStepCell(nn.PipelineCell(nn.WithLossCell(net, nn.MSELoss()), 4),
                                nn.Momentum(net.trainable_params(), 0.05, 0.9))
    return [float(train(x, y)) for _ in range(2)], net


@pytest.mark.slow  # two pipelined programs compiled: ~15 s on a loaded 2-core machine
def test_pipelined_deferred_parameters_train_as_eager_ones():
    eager_losses, eager = _train(deferred=False)
    lazy_losses, lazy = _train(deferred=True)
    assert lazy_losses == eager_losses
    first, last = lazy.layers[0].weight.get_value(), lazy.layers[3].weight.get_value()
    assert first.sharding.device_set.isdisjoint(last.sharding.device_set)  # stage 0's devices, stage 1's devices
    np.testing.assert_array_equal(lazy.layers[3].weight.asnumpy(), eager.layers[3].weight.asnumpy())
