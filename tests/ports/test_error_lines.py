"""A bad strategy or shape in a ported script ends its traceback with graphpar's one-line error, not a JAX note."""

import traceback

import numpy as np
import pytest

import graphpar as ms
from graphpar import nn, ops
from graphpar.common.parameter import Parameter
from graphpar.errors import GraphparError, StrategyError


class MulNet(nn.Cell):
    """Seed 003's SemiAutoParallelNet, shapes given as the user gave them."""

    def __init__(self, mul_size, strategy):
        super().__init__()
        self.mul_weight = Parameter(ms.Tensor(np.full(mul_size, 0.5, np.float32)), name="mul_weight")
        self.mul = ops.Mul().shard(strategy)

    def construct(self, inputs):
        return self.mul(inputs, self.mul_weight)


def _step_error(net):
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel")
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.Momentum(net.trainable_params(), 0.1, 0.9))
    with pytest.raises(GraphparError) as info:
        train(np.ones((16, 16), np.float32), np.zeros((16, 16), np.float32))
    return info.value


@pytest.mark.parametrize("mul_size, strategy, culprit", [
    ((16, 16), ((2, 4, 1), (2, 4)), "entry 0 (2, 4, 1) has 3 split(s)"),  # a strategy of the wrong rank
    ((8, 16), ((2, 4), (2, 4)), "incompatible shapes"),  # the tutorial's weight shape that does not broadcast
])
def test_last_line_is_the_graphpar_error(mul_size, strategy, culprit):
    err = _step_error(MulNet(mul_size, strategy))
    last = traceback.format_exception(err)[-1].strip()
    assert last.startswith(f"{type(err).__module__}.{type(err).__name__}: op 'mul'"), last
    assert culprit in last and "_backbone-MulNet" in last, last
    assert isinstance(err, StrategyError) == ("split" in culprit)
