"""``Cell.recompute()`` in a network that takes its gradient inside ``construct`` (``GradOperation`` called by a
Cell that is run as a forward program): JAX traces that gradient into the program as explicit backward ops that
read the forward activations, so there is nothing left to recompute; graphpar says so once, naming the Cell, and
what makes it apply (the gradient taken by a compiled training step)."""

import numpy as np

import graphpar as ms
from graphpar import nn, ops


class Block(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(8, 8)
        self.act = nn.ReLU()

    def construct(self, x):
        return self.act(self.fc(x))


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.block = Block()
        self.block.recompute()
        self.head = nn.Dense(8, 1)

    def construct(self, x):
        return self.head(self.block(x)).sum()


class InputGrad(nn.Cell):
    """The gradient of ``net`` with respect to its input, taken in ``construct`` (MindSpore 1.x style)."""

    def __init__(self, net):
        super().__init__()
        self.net = net
        self.grad = ops.GradOperation()

    def construct(self, x):
        return self.grad(self.net)(x)


def test_recompute_under_a_gradient_taken_in_construct_is_said_not_applied(notices):
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.SEMI_AUTO_PARALLEL)
    grads = InputGrad(Net())(ms.Tensor(np.ones((8, 8), np.float32)))
    assert np.shape(grads) == (8, 8)
    said = [r.getMessage() for r in notices.records if "recompute() (scope" in r.getMessage()]
    assert len(said) == 1
    assert said[0].startswith("block-Block.recompute() (scope Default/network-InputGrad/net-Net/block-Block) is "
                              "not applied: InputGrad takes the gradient inside its construct")


def test_a_forward_of_a_recomputed_network_says_nothing(notices):
    """Without a gradient in construct there is no backward pass in the program: nothing to say."""
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.SEMI_AUTO_PARALLEL)
    Net()(ms.Tensor(np.ones((8, 8), np.float32)))
    assert not [r for r in notices.records if "recompute() (scope" in r.getMessage()]
