"""``auto_mixed_precision`` / ``Cell.to_float`` followed by ``value_and_grad`` (MindSpore 2.x's mixed-precision
tutorial): the low-precision Cells compute in their type, the gradients come back float32 for the float32 master
weights, and the Parameters hold their own values again after the call (issue 22: this ended in flax's
TraceContextError)."""

import jax
import numpy as np

import graphpar as ms
from graphpar import Tensor, amp, nn


def _net():
    ms.set_seed(7)
    return nn.SequentialCell(nn.Dense(4, 8), nn.ReLU(), nn.Dense(8, 2))


def _loop(net, steps=3):
    opt = nn.SGD(net.trainable_params(), 0.1)
    loss_fn = nn.MSELoss()
    x = Tensor(np.linspace(-1, 1, 32, dtype=np.float32).reshape(8, 4))
    y = Tensor(np.ones((8, 2), np.float32))

    def forward_fn(data, label):
        return loss_fn(net(data), label)

    grad_fn = ms.value_and_grad(forward_fn, None, opt.parameters)
    losses = []
    for _ in range(steps):
        loss, grads = grad_fn(x, y)
        assert all(g.dtype == ms.float32 for g in grads)
        opt(grads)
        losses.append(float(loss))
    return losses, opt


def test_auto_mixed_precision_then_value_and_grad():
    reference, _ = _loop(_net())
    losses, opt = _loop(amp.auto_mixed_precision(_net(), "O2"))
    np.testing.assert_allclose(losses, reference, rtol=3e-2)  # bfloat16 on CPU
    assert losses[-1] < losses[0]
    for p in opt.parameters:  # the master weights: float32 arrays again, no tracer left behind
        assert p.dtype == ms.float32 and not isinstance(p.get_raw_value(), jax.core.Tracer)


def test_to_float_then_value_and_grad():
    net = _net()
    net.to_float(ms.float16)
    losses, _ = _loop(net, steps=2)
    reference, _ = _loop(_net(), steps=2)
    np.testing.assert_allclose(losses, reference, rtol=1e-2)
