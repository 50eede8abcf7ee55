"""``nn.PReLU(channel=1, w=0.25)``: MindSpore's argument checks, the Parameter ``'a'`` (one slope per channel), the
numbers, and training it under SEMI_AUTO_PARALLEL with a strategy on its op."""

import numpy as np
import pytest

import graphpar as ms
from graphpar import Tensor, nn
from tests.planner.helpers import kind_strategies


def test_prelu_slopes_and_parameter():
    cell = nn.PReLU(channel=3, w=[0.1, 0.2, 0.3])
    assert [(p.name, p.shape) for p in cell.trainable_params()] == [("a", (3,))]
    x = np.array([[-1.0, 2.0, -3.0], [4.0, -5.0, 6.0]], np.float32)
    np.testing.assert_allclose(np.asarray(cell(Tensor(x))), np.where(x > 0, x, x * [0.1, 0.2, 0.3]), rtol=1e-6)
    shared = nn.PReLU()(Tensor(np.full((2, 4, 3), -2.0, np.float32)))  # channel=1: one slope, 0.25
    np.testing.assert_allclose(np.asarray(shared), -0.5)


def test_prelu_arguments_are_checked():
    with pytest.raises(ValueError, match="channel must be a positive int"):
        nn.PReLU(channel=0)
    with pytest.raises(ValueError, match="must have channel=3 elements"):
        nn.PReLU(channel=3, w=[0.1])
    with pytest.raises(ValueError, match=r"must have shape \(2,\)"):
        nn.PReLU(channel=2, w=Tensor(np.ones(3, np.float32)))
    with pytest.raises(TypeError, match="w must be a float, a list or a Tensor"):
        nn.PReLU(w=1)


def test_prelu_trains_sharded():
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8)
    cell = nn.PReLU(channel=16)
    cell.prelu.shard(((8, 1), (1,)))
    x = Tensor(np.linspace(-1, 1, 32 * 16, dtype=np.float32).reshape(32, 16))
    assert kind_strategies(cell, x, kind="PReLU") == [[[8, 1], [1]]]
    step = nn.TrainOneStepCell(nn.WithLossCell(cell, nn.MSELoss()), nn.SGD(cell.trainable_params(), 1.0))
    step(x, Tensor(np.abs(np.asarray(x))))  # the target |x| asks for slope -1: the slopes move down
    assert (np.asarray(cell.w) < 0.25).all()
