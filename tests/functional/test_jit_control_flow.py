"""MindSpore's mixed-precision step under ``@ms.jit``: ``is_finite = amp.all_finite(grads); if is_finite:
optimizer(grads)``. MindSpore's graph mode parses the source and compiles the ``if`` as control flow; graphpar traces
the step once for all data, so a Python ``if`` on a traced value cannot be compiled. The step is refused by name
(the step function, the file and line of the ``if``, what to write instead), not with JAX's concretization error."""

import inspect

import numpy as np
import pytest

import graphpar as ms
from graphpar import amp, nn
from graphpar.errors import JitError


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(4, 2)

    def construct(self, x):
        return self.fc(x)


def test_if_on_all_finite_in_a_jit_step_names_the_step_and_the_line():
    net, loss_fn = Net(), nn.MSELoss()
    optimizer = nn.SGD(net.trainable_params(), 0.1)
    loss_scaler = amp.DynamicLossScaler(scale_value=2**10, scale_factor=2, scale_window=50)

    def forward_fn(data, label):
        return loss_scaler.scale(loss_fn(net(data), label))

    grad_fn = ms.value_and_grad(forward_fn, None, optimizer.parameters)

    @ms.jit
    def train_step(data, label):
        loss, grads = grad_fn(data, label)
        loss, grads = loss_scaler.unscale(loss), loss_scaler.unscale(grads)
        is_finite = amp.all_finite(grads)
        if is_finite:
            optimizer(grads)
        loss_scaler.adjust(is_finite)
        return loss

    line = inspect.getsourcelines(train_step.__wrapped__)[1] + 5  # the `if is_finite:` (from the decorator)
    x, y = np.ones((8, 4), np.float32), np.zeros((8, 2), np.float32)
    before = [p.asnumpy().copy() for p in net.trainable_params()]
    with pytest.raises(JitError) as raised:
        train_step(ms.Tensor(x), ms.Tensor(y))
    message = str(raised.value)
    assert message.startswith("graphpar.jit(")
    assert "train_step): Python control flow on a traced value at " in message
    assert f"{__file__}:{line} (`if is_finite:`)" in message
    assert "loss_scale_manager=DynamicLossScaleManager()" in message and "optimizer(grads) unconditionally" in message
    for p, b in zip(net.trainable_params(), before):  # nothing was trained by the refused step
        np.testing.assert_array_equal(p.asnumpy(), b)
