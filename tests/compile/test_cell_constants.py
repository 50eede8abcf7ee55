"""A Cell's Tensor attribute that is not a Parameter (``self.keep_prob = Tensor(0.9)``) is a constant of the compiled
graph, as in MindSpore's graph mode: Python control flow on it is decided while tracing, it is not state of the
step, rebinding it between calls compiles for the new value (never a stale program), and assigning it inside
``construct`` is refused by name (only a Parameter is mutable there)."""

import numpy as np
import pytest

import graphpar as ms
from graphpar import Parameter, Tensor, nn, ops
from graphpar.common import dtype as mstype
from graphpar.errors import CellError

W = np.arange(16, dtype=np.float32).reshape(4, 4) / 16
X = np.linspace(-1, 1, 32, dtype=np.float32).reshape(8, 4)


class Scaled(nn.Cell):
    """Scales its matmul by ``keep_prob`` when it is below 1, as MindSpore's FlashAttention samples branch on it."""

    def __init__(self, keep_prob=0.9):
        super().__init__()
        self.w = Parameter(Tensor(W), name="w")
        self.keep_prob = Tensor(keep_prob, mstype.float32)
        self.matmul = ops.MatMul()
        self.mul = ops.Mul()

    def construct(self, x):
        y = self.matmul(x, self.w)
        if self.keep_prob < 1.0:  # a Tensor attribute: decided while tracing
            y = self.mul(y, self.keep_prob)
        return y


def _train(net):
    return nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.Momentum(net.trainable_params(), 0.1, 0.9))


def _target():
    return Tensor(np.zeros((8, 4), np.float32))


@pytest.mark.parametrize("mode", ["stand_alone", "semi_auto_parallel"])
def test_an_if_on_a_tensor_attribute_is_decided_while_tracing(mode):
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_auto_parallel_context(parallel_mode=mode)
    net = Scaled(0.9)
    np.testing.assert_allclose(np.asarray(net(Tensor(X))), X @ W * 0.9, rtol=1e-6)
    net = Scaled(1.0)
    np.testing.assert_allclose(np.asarray(net(Tensor(X))), X @ W, rtol=1e-6)


def test_a_tensor_attribute_is_a_constant_not_state_of_the_train_step():
    ms.set_context(mode=ms.GRAPH_MODE)
    net = Scaled(0.9)
    keep_prob = net.keep_prob
    train = _train(net)
    for _ in range(2):
        train(Tensor(X), _target())
    state = train.program.state
    assert state.rest.names() == [] and state.param_names() == ["w"]
    assert [key[0] for key in state.structure.constants] == ["_backbone.keep_prob"]  # below the loss Cell
    assert net.keep_prob is keep_prob  # never written back (nor donated): the same array after training


def test_rebinding_a_tensor_attribute_compiles_for_the_new_value_once():
    ms.set_context(mode=ms.GRAPH_MODE)
    net = Scaled(0.9)
    train = _train(net)
    train(Tensor(X), _target())
    net.keep_prob = Tensor(0.5, mstype.float32)
    fresh = Scaled(0.5)
    fresh.w.set_data(Tensor(net.w.asnumpy()))
    # the step after the rebinding computes with 0.5, as a network built with 0.5 does
    np.testing.assert_allclose(float(train(Tensor(X), _target())), float(_train(fresh)(Tensor(X), _target())),
                               rtol=1e-6)
    assert train.program.counts.compiles == 2
    net.keep_prob = Tensor(0.5, mstype.float32)  # a new array, the same content: the same program
    train(Tensor(X), _target())
    net.keep_prob = Tensor(0.9, mstype.float32)  # back to the first value: found again, not rebuilt
    train(Tensor(X), _target())
    assert train.program.counts.compiles == 2
    net.keep_prob = Tensor(1.0, mstype.float32)  # the other branch
    train(Tensor(X), _target())
    assert train.program.counts.compiles == 3


class Inner(nn.Cell):
    def __init__(self):
        super().__init__()
        self.scale = Tensor(2.0, mstype.float32)
        self.steps = Parameter(Tensor(0, mstype.int32), name="steps", requires_grad=False)

    def construct(self, x):
        self.steps += 1  # a Parameter: state, assigned in construct
        self.scale = self.scale * 2  # not a Parameter: refused
        return x * self.scale


class Outer(nn.Cell):
    def __init__(self):
        super().__init__()
        self.block = Inner()

    def construct(self, x):
        return self.block(x)


def test_assigning_a_tensor_attribute_in_construct_is_refused_by_name():
    ms.set_context(mode=ms.GRAPH_MODE)
    with pytest.raises(CellError, match=r"Cell 'Inner' \(block\): construct assigned the Tensor attribute 'scale', "
                                        r"which is not a Parameter.*Parameter\(Tensor\(\.\.\.\), requires_grad=False\)"):
        Outer()(Tensor(X))


class Counting(Scaled):
    def __init__(self):
        super().__init__(0.9)
        self.steps = Parameter(Tensor(0, mstype.int32), name="steps", requires_grad=False)

    def construct(self, x):
        self.steps += 1
        return super().construct(x)


@pytest.mark.parametrize("mode", [ms.GRAPH_MODE, ms.PYNATIVE_MODE])
def test_a_parameter_beside_a_constant_stays_state(mode):
    ms.set_context(mode=mode)
    net = Counting()
    train = _train(net)
    for _ in range(3):
        train(Tensor(X), _target())
    assert int(net.steps.asnumpy()) == 3


class Recomputed(nn.Cell):
    def __init__(self):
        super().__init__()
        self.block = Scaled(0.5)
        self.block.recompute()
        self.grad = ops.GradOperation()

    def construct(self, x):
        return self.grad(self.block)(x)


def test_a_recomputed_cell_branches_on_its_constant_inside_a_gradient():
    ms.set_context(mode=ms.GRAPH_MODE)
    grad = np.asarray(Recomputed()(Tensor(X)))
    np.testing.assert_allclose(grad, np.ones((8, 4), np.float32) @ W.T * 0.5, rtol=1e-6)
