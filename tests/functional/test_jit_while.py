"""A ``while`` on a Tensor in a ``@ms.jit`` step and in a Cell's ``construct``, compiled as MindSpore's graph mode
compiles it: one loop in the program carrying the names its body assigns and the state it writes (Parameters and
the optimizer's state an ``optimizer(grads)`` in the body updates). Under SEMI_AUTO on 8 devices each equals the same
code run eagerly on one device; a loop that a gradient would run through backwards is refused at its line."""

import inspect

import numpy as np
import pytest

import graphpar as ms
from graphpar import nn, ops
from graphpar.errors import TracedControlFlowError

RNG = np.random.default_rng(3)
X = RNG.normal(size=(16, 16)).astype(np.float32)
Y = RNG.normal(size=(16, 8)).astype(np.float32)


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Dense(16, 32)
        self.relu = nn.ReLU()
        self.fc2 = nn.Dense(32, 8)
        self.fc1.matmul.shard(((2, 1), (4, 1)))

    def construct(self, x):
        return self.fc2(self.relu(self.fc1(x)))


def _train(step_body, compiled):
    """Three steps of ``step_body(grad_fn, optimizer)``'s step, eagerly on one device (STAND_ALONE, not compiled)
    or ``@ms.jit`` under SEMI_AUTO on 8 devices: what each step returned, and the Parameters after."""
    mode = ms.ParallelMode.SEMI_AUTO_PARALLEL if compiled else ms.ParallelMode.STAND_ALONE
    ms.set_auto_parallel_context(parallel_mode=mode)
    ms.set_seed(5)
    net, loss_fn = Net(), nn.MSELoss()
    optimizer = nn.Momentum(net.trainable_params(), 0.05, 0.9)
    grad_fn = ms.value_and_grad(lambda x, y: loss_fn(net(x), y), None, optimizer.parameters)
    step = step_body(grad_fn, optimizer)
    step = ms.jit(step) if compiled else step
    seen = [tuple(float(v) for v in step(ms.Tensor(X * s), ms.Tensor(Y))) for s in (1.0, 3.0, 0.5)]
    return seen, [p.asnumpy() for p in net.trainable_params()]


def clipped(grad_fn, optimizer):
    def train_step(data, label):
        loss, grads = grad_fn(data, label)
        norm = ops.Sqrt()(sum((g * g).sum() for g in grads))
        halvings = 0
        while norm > 0.5:  # halve the gradients until their global norm is at most 0.5
            grads = tuple(g * 0.5 for g in grads)
            norm = norm * 0.5
            halvings += 1
        optimizer(grads)
        return loss, halvings

    return train_step


def repeated(grad_fn, optimizer):
    def train_step(data, label):
        loss, grads = grad_fn(data, label)
        updates = 0
        while updates < loss * 2:  # more updates with the same gradients while the loss is large
            optimizer(grads)
            updates += 1
        return loss, updates

    return train_step


@pytest.mark.parametrize("step_body", [clipped, repeated])
def test_a_loop_in_a_jit_step_under_semi_auto_equals_the_eager_step(step_body):
    """``clipped`` carries the gradients (sharded as the plan lays them out); ``repeated`` updates the Parameters
    and Momentum's accumulators inside the loop, a number of times the loss decides."""
    eager, eager_params = _train(step_body, compiled=False)
    semi, semi_params = _train(step_body, compiled=True)
    np.testing.assert_allclose(semi, eager, rtol=1e-5)
    assert len({s[1] for s in eager}) > 1  # the trip count depends on the data
    for a, b in zip(semi_params, eager_params):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


class Normalized(Net):
    """Halves its input until its largest magnitude is at most 1: a loop on the data only."""

    def __init__(self):
        super().__init__()
        self.max, self.abs = ops.ReduceMax(), ops.Abs()

    def construct(self, x):
        while self.max(self.abs(x)) > 1.0:
            x = x * 0.5
        return self.fc2(self.relu(self.fc1(x)))


class Damped(Normalized):
    """Halves the hidden activations until their largest value is at most 1: a loop on a value of the weights."""

    def construct(self, x):
        h = self.relu(self.fc1(x))
        while self.max(h) > 1.0:
            h = h * 0.5
        return self.fc2(h)


def _losses(cls, mode, parallel_mode, steps=3):
    ms.set_context(mode=mode)
    ms.set_auto_parallel_context(parallel_mode=parallel_mode)
    ms.set_seed(0)
    net = cls()
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.Momentum(net.trainable_params(), 0.1, 0.9))
    return [float(train(ms.Tensor(X * 4), ms.Tensor(Y))) for _ in range(steps)]


def test_a_loop_in_construct_trains_in_semi_auto_as_eagerly():
    eager = _losses(Normalized, ms.PYNATIVE_MODE, ms.ParallelMode.STAND_ALONE)
    semi = _losses(Normalized, ms.GRAPH_MODE, ms.ParallelMode.SEMI_AUTO_PARALLEL)
    np.testing.assert_allclose(semi, eager, rtol=1e-5)
    assert semi[-1] < semi[0]


def test_a_loop_on_the_weights_runs_forward_and_its_gradient_is_refused_at_its_line():
    ms.set_seed(0)
    net = Damped()
    ms.set_context(mode=ms.PYNATIVE_MODE)
    eager = np.asarray(net(ms.Tensor(X * 4)))
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.SEMI_AUTO_PARALLEL)
    np.testing.assert_allclose(np.asarray(net(ms.Tensor(X * 4))), eager, rtol=1e-5, atol=1e-6)
    with pytest.raises(TracedControlFlowError) as raised:
        _losses(Damped, ms.GRAPH_MODE, ms.ParallelMode.SEMI_AUTO_PARALLEL, steps=1)
    lines, first = inspect.getsourcelines(Damped.construct)
    line = first + next(i for i, text in enumerate(lines) if "while" in text)
    message = str(raised.value)
    assert message.startswith(f"{__file__}:{line} (`while self.max(h) > 1.0:`): a `while` loop on a traced value is "
                              "differentiated in reverse mode here"), message
    assert "for i in range(n), with a Python int n" in message


class Counting(nn.Cell):
    """Doubles its input until its largest value reaches 10, counting the iterations in a Parameter."""

    def __init__(self):
        super().__init__()
        self.steps = ms.Parameter(ms.Tensor(np.zeros((), np.float32)), name="steps", requires_grad=False)
        self.max = ops.ReduceMax()

    def construct(self, x):
        while self.max(x) < 10.0:
            x = x * 2
            self.steps.set_value(self.steps.get_value() + 1)
        return x


def test_a_loop_in_construct_writes_a_parameter_once_per_iteration():
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.SEMI_AUTO_PARALLEL)
    net = Counting()
    np.testing.assert_array_equal(np.asarray(net(ms.Tensor(np.ones((8, 4), np.float32)))), np.full((8, 4), 16.0))
    assert float(net.steps.asnumpy()) == 4.0
    np.testing.assert_array_equal(np.asarray(net(ms.Tensor(np.full((8, 4), 3.0, np.float32)))), np.full((8, 4), 12.0))
    assert float(net.steps.asnumpy()) == 6.0


class Indexed(nn.Cell):
    """MindSpore's own parallel while test's network, forward: ``while self.index < 3`` on a Parameter the body
    increments with ``self.index += 1`` (an assignment of the Parameter in graph mode)."""

    def __init__(self):
        super().__init__()
        self.matmul = ops.MatMul().shard(((2, 4), (4, 1)))
        self.weight = ms.Parameter(ms.Tensor(np.full((8, 8), 0.5, np.float32)), name="weight")
        self.index = ms.Parameter(ms.Tensor(0, ms.int32), name="index", requires_grad=False)

    def construct(self, x):
        out = x
        while self.index < 3:
            out = self.matmul(out, self.weight)
            self.index += 1
        return out


def test_a_loop_on_a_parameter_the_body_increments():
    x = np.ones((8, 8), np.float32)
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.SEMI_AUTO_PARALLEL)
    net = Indexed()
    np.testing.assert_allclose(np.asarray(net(ms.Tensor(x))), x @ np.full((8, 8), 0.5) @ np.full((8, 8), 0.5)
                               @ np.full((8, 8), 0.5), rtol=1e-6)
    assert int(net.index.asnumpy()) == 3
    np.testing.assert_array_equal(np.asarray(net(ms.Tensor(x))), x)  # the index is 3: no iteration
