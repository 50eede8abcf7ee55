"""MindSpore 2.x's functional loss scaling: ``amp.DynamicLossScaler``, ``amp.StaticLossScaler``, ``amp.all_finite``
in a ``value_and_grad`` loop, with MindSpore's adjustment rule step by step."""

import numpy as np
import pytest

import graphpar as ms
from graphpar import Tensor, amp, nn


def test_documented_example():
    # MindSpore's docstring example: an inf gradient halves 1024 to 512
    scaler = amp.DynamicLossScaler(scale_value=2**10, scale_factor=2, scale_window=1)
    grads = (Tensor(np.array([np.inf, 1.0]), ms.float16),
             Tensor(np.array([0.2]), ms.float16))
    unscaled = scaler.unscale(grads)
    assert unscaled[1].dtype == ms.float16
    np.testing.assert_allclose(unscaled[1].asnumpy(), np.float16(0.2) / np.float16(1024), rtol=1e-3)
    finite = amp.all_finite(unscaled)
    assert not bool(finite)
    assert scaler.adjust(finite) is True
    assert scaler.scale_value.asnumpy() == 512.0


def test_dynamic_rule_grows_after_a_window_of_finite_steps_and_shrinks_on_overflow():
    scaler = amp.DynamicLossScaler(scale_value=8, scale_factor=2, scale_window=3)
    seen = []
    for finite in [True, True, True, True, False, True, False, False, False, False]:
        scaler.adjust(Tensor(finite))
        seen.append((float(scaler.scale_value.asnumpy()), int(scaler.counter.asnumpy())))
    # counter counts finite steps modulo the window; the third finite step in a row doubles the scale; an
    # overflow halves it (never below 1) and resets the counter
    assert seen == [(8, 1), (8, 2), (16, 0), (16, 1), (8, 0), (8, 1), (4, 0), (2, 0), (1, 0), (1, 0)]


def test_static_scaler_scales_and_never_adjusts():
    scaler = amp.StaticLossScaler(scale_value=4)
    assert float(scaler.scale(Tensor(np.float32(1.5)))) == 6.0
    out = scaler.unscale({"w": Tensor(np.array([8.0], np.float32))})
    assert float(out["w"][0]) == 2.0
    assert scaler.adjust(Tensor(False)) is None
    assert scaler.scale_value.asnumpy() == 4.0
    with pytest.raises(ValueError, match="scale_value must be a number > 0"):
        amp.StaticLossScaler(0)
    with pytest.raises(ValueError, match="scale_window must be an int >= 1"):
        amp.DynamicLossScaler(2.0, 2, 0)


def test_value_and_grad_loop_with_loss_scaling_equals_the_unscaled_loop():
    """The mixed-precision tutorial's loop: scale in forward_fn, unscale the gradients, update when finite."""
    def run(scaler):
        ms.set_seed(3)
        net = nn.Dense(4, 2)
        opt = nn.SGD(net.trainable_params(), 0.1)
        loss_fn = nn.MSELoss()
        x, y = Tensor(np.ones((8, 4), np.float32)), Tensor(np.zeros((8, 2), np.float32))

        def forward_fn(data, label):
            loss = loss_fn(net(data), label)
            return loss if scaler is None else scaler.scale(loss)

        grad_fn = ms.value_and_grad(forward_fn, None, opt.parameters)
        losses = []
        for _ in range(3):
            loss, grads = grad_fn(x, y)
            if scaler is not None:
                loss, grads = scaler.unscale(loss), scaler.unscale(grads)
                finite = amp.all_finite(grads)
                if finite:
                    opt(grads)
                scaler.adjust(finite)
            else:
                opt(grads)
            losses.append(float(loss))
        return losses

    plain = run(None)
    scaled = run(amp.DynamicLossScaler(2**10, 2, 2))
    np.testing.assert_allclose(scaled, plain, rtol=1e-6)
    assert plain[2] < plain[0]
