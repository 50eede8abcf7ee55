"""One Tensor held by several Cells (a causal mask every block stores, as MindSpore's transformer samples do): a
constant of each Cell (``tests/compile/test_cell_constants.py``), never donated with the step's state, so training
computes what one unshared copy per Cell computes."""

import numpy as np
import pytest

import graphpar as ms
from graphpar import Tensor, nn, ops

MASK = np.tril(np.ones((8, 4), np.float32), k=1)


class Block(nn.Cell):
    def __init__(self, mask, seed):
        super().__init__()
        w = np.random.default_rng(seed).normal(size=(4, 4)).astype(np.float32) * 0.3
        self.w = ms.Parameter(Tensor(w), name=f"w{seed}")
        self.matmul = ops.MatMul()
        self.mul = ops.Mul()
        self.mask = mask

    def construct(self, x):
        return self.mul(self.matmul(x, self.w), self.mask)


class Net(nn.Cell):
    def __init__(self, shared):
        super().__init__()
        one = Tensor(MASK)
        self.b1 = Block(one if shared else Tensor(MASK), 1)
        self.b2 = Block(one if shared else Tensor(MASK), 2)

    def construct(self, x):
        return self.b2(self.b1(x))


def _losses(shared, steps=3):
    net = Net(shared)
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.Momentum(net.trainable_params(), 0.1, 0.9))
    x = Tensor(np.arange(32, dtype=np.float32).reshape(8, 4) / 32)
    y = Tensor(np.zeros((8, 4), np.float32))
    return [float(train(x, y)) for _ in range(steps)]


@pytest.mark.parametrize("mode", ["stand_alone", "semi_auto_parallel"])
def test_a_tensor_shared_by_two_cells_trains_as_two_copies(mode):
    ms.set_auto_parallel_context(parallel_mode=mode)
    shared = _losses(shared=True)
    np.testing.assert_allclose(shared, _losses(shared=False), rtol=1e-6)
    assert shared[-1] < shared[0]


def test_the_functional_step_with_a_shared_tensor():
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel")
    net = Net(shared=True)
    loss_fn = nn.MSELoss()
    optimizer = nn.Momentum(net.trainable_params(), 0.1, 0.9)
    grad_fn = ms.value_and_grad(lambda x, y: loss_fn(net(x), y), None, optimizer.parameters)

    @ms.jit
    def train_step(x, y):
        loss, grads = grad_fn(x, y)
        optimizer(grads)
        return loss

    x = np.arange(32, dtype=np.float32).reshape(8, 4) / 32
    y = np.zeros((8, 4), np.float32)
    losses = [float(train_step(x, y)) for _ in range(3)]
    np.testing.assert_allclose(losses, _losses(shared=False), rtol=1e-6)
