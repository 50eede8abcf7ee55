"""Optimizers follow MindSpore's update rules (checked against the formulas in numpy), with MindSpore's argument
names: weight decay (skipping beta/gamma), loss_scale, per-step learning-rate lists, schedules, parameter groups."""

import numpy as np
import pytest

from graphpar import Parameter, Tensor, nn


def _params():
    w = Parameter(Tensor(np.array([[1.0, -2.0], [0.5, 3.0]], np.float32)), "fc.weight")
    g = Parameter(Tensor(np.array([1.0, 2.0], np.float32)), "bn.gamma")
    return w, g


GRADS = [np.array([[0.1, -0.2], [0.3, 0.4]], np.float32), np.array([0.5, -0.5], np.float32)]


def _steps(opt, n=3):
    for _ in range(n):
        opt([Tensor(g) for g in GRADS[:len(opt.parameters)]])
    return [p.asnumpy() for p in opt.parameters]


def test_momentum_matches_mindspore_apply_momentum():
    w, g = _params()
    w0, g0 = w.asnumpy(), g.asnumpy()
    got = _steps(nn.Momentum([w, g], learning_rate=0.1, momentum=0.9, weight_decay=0.01, loss_scale=2.0))
    for p0, grad, out, decay in ((w0, GRADS[0], got[0], True), (g0, GRADS[1], got[1], False)):
        p, v = p0.copy(), np.zeros_like(p0)
        for _ in range(3):
            d = grad + (0.01 * p if decay else 0)  # weight decay first (not on gamma/beta) ...
            d = d / 2.0                             # ... then the loss scale
            v = 0.9 * v + d
            p = p - 0.1 * v
        np.testing.assert_allclose(out, p, rtol=1e-6)


def test_sgd_with_dampening_and_nesterov():
    w, _ = _params()
    w0 = w.asnumpy()
    got = _steps(nn.SGD([w], learning_rate=0.1, momentum=0.9, dampening=0.5))[0]
    p, v = w0.copy(), None
    for _ in range(3):
        v = GRADS[0].copy() if v is None else 0.9 * v + 0.5 * GRADS[0]
        p = p - 0.1 * v
    np.testing.assert_allclose(got, p, rtol=1e-6)
    w2, _ = _params()
    got = _steps(nn.SGD([w2], learning_rate=0.1, momentum=0.9, nesterov=True))[0]
    p, v = w0.copy(), np.zeros_like(w0)
    for _ in range(3):
        v = 0.9 * v + GRADS[0]
        p = p - 0.1 * (GRADS[0] + 0.9 * v)
    np.testing.assert_allclose(got, p, rtol=1e-6)
    with pytest.raises(ValueError, match="nesterov"):
        nn.SGD([w2], momentum=0.0, nesterov=True)


def test_adam_weight_decay_has_no_bias_correction():
    w, g = _params()
    w0 = w.asnumpy()
    got = _steps(nn.AdamWeightDecay([w, g], learning_rate=0.01, weight_decay=0.1))[0]
    p, m, v = w0.copy(), np.zeros_like(w0), np.zeros_like(w0)
    for _ in range(3):
        m = 0.9 * m + 0.1 * GRADS[0]
        v = 0.999 * v + 0.001 * GRADS[0] ** 2
        p = p - 0.01 * (m / (np.sqrt(v) + 1e-6) + 0.1 * p)
    np.testing.assert_allclose(got, p, rtol=1e-5)


def test_adam_is_bias_corrected():
    w, _ = _params()
    w0 = w.asnumpy()
    got = _steps(nn.Adam([w], learning_rate=0.01))[0]
    p, m, v = w0.copy(), np.zeros_like(w0), np.zeros_like(w0)
    for t in range(1, 4):
        m = 0.9 * m + 0.1 * GRADS[0]
        v = 0.999 * v + 0.001 * GRADS[0] ** 2
        p = p - 0.01 * (m / (1 - 0.9 ** t)) / (np.sqrt(v / (1 - 0.999 ** t)) + 1e-8)
    np.testing.assert_allclose(got, p, rtol=1e-5)


def test_learning_rate_list_and_schedule():
    w, _ = _params()
    w0 = w.asnumpy()
    got = _steps(nn.SGD([w], learning_rate=[0.1, 0.2, 0.3]), n=4)[0]
    np.testing.assert_allclose(got, w0 - (0.1 + 0.2 + 0.3 + 0.3) * GRADS[0], rtol=1e-6)
    w2, _ = _params()
    got = _steps(nn.SGD([w2], learning_rate=nn.ExponentialDecayLR(0.1, 0.5, 1)), n=3)[0]
    np.testing.assert_allclose(got, w0 - (0.1 + 0.05 + 0.025) * GRADS[0], rtol=1e-6)
    assert nn.piecewise_constant_lr([2, 5], [0.1, 0.05]) == [0.1, 0.1, 0.05, 0.05, 0.05]


def test_parameter_groups_take_their_own_lr_and_weight_decay():
    w, g = _params()
    w0, g0 = w.asnumpy(), g.asnumpy()
    opt = nn.SGD([{"params": [w], "lr": 0.5}, {"params": [g], "weight_decay": 0.0}], learning_rate=0.1,
                 weight_decay=0.0)
    got = _steps(opt, n=1)
    np.testing.assert_allclose(got[0], w0 - 0.5 * GRADS[0], rtol=1e-6)
    np.testing.assert_allclose(got[1], g0 - 0.1 * GRADS[1], rtol=1e-6)


def test_grouped_weight_decay_applies_to_every_parameter_of_its_group():
    """MindSpore's grouped form (the model zoo's ``init_group_params``: decayed weights, the rest, and
    ``order_params``): a group decays all its Parameters when its weight_decay > 0 (no name filter), the others not."""
    w, g = _params()
    w0, g0 = w.asnumpy(), g.asnumpy()
    opt = nn.Momentum([{"params": [g], "weight_decay": 0.1}, {"params": [w]}, {"order_params": [w, g]}],
                      learning_rate=0.1, momentum=0.9)
    assert [p.name for p in opt.parameters] == ["fc.weight", "bn.gamma"]  # order_params sets the order
    got = _steps(opt, n=1)
    np.testing.assert_allclose(got[1], g0 - 0.1 * (GRADS[1] + 0.1 * g0), rtol=1e-6)  # gamma decays here
    np.testing.assert_allclose(got[0], w0 - 0.1 * GRADS[0], rtol=1e-6)
    w, g = _params()
    adamw = nn.AdamWeightDecay([{"params": [w]}, {"params": [g], "weight_decay": 0.5}], learning_rate=0.1)
    got = _steps(adamw, n=1)[1]
    m, v = 0.1 * GRADS[1], 0.001 * GRADS[1] ** 2
    np.testing.assert_allclose(got, g0 - 0.1 * (m / (np.sqrt(v) + 1e-6) + 0.5 * g0), rtol=1e-5)
    with pytest.raises(ValueError, match="order_params must list every grouped Parameter"):
        nn.Momentum([{"params": [g]}, {"params": [w]}, {"order_params": [w]}], 0.1, 0.9)


def test_grad_centralization_centralizes_the_gradients_of_its_group_as_mindspore():
    """MindSpore's ``grad_centralization`` group key: before the loss scale and the rule, each gradient of two or
    more dimensions whose second dimension is a multiple of 16 loses its mean over every axis but the first (a
    convolution's per-output-channel mean); a bias, a 3-channel input convolution and the other groups keep theirs."""
    rng = np.random.default_rng(0)
    conv = Parameter(Tensor(rng.normal(size=(8, 16, 3, 3)).astype(np.float32)), "conv.weight")
    stem = Parameter(Tensor(rng.normal(size=(8, 3, 3, 3)).astype(np.float32)), "stem.weight")
    bias = Parameter(Tensor(rng.normal(size=(8,)).astype(np.float32)), "conv.bias")
    other = Parameter(Tensor(rng.normal(size=(4, 16)).astype(np.float32)), "fc.weight")
    params = [conv, stem, bias, other]
    before = [p.asnumpy() for p in params]
    grads = [rng.normal(size=p.shape).astype(np.float32) + 1.0 for p in params]  # means far from 0
    opt = nn.Momentum([{"params": [conv, stem, bias], "grad_centralization": True}, {"params": [other]}],
                      learning_rate=0.1, momentum=0.9, loss_scale=2.0)
    opt(grads)
    centred = grads[0] - grads[0].mean(axis=(1, 2, 3), keepdims=True)
    np.testing.assert_allclose(conv.asnumpy(), before[0] - 0.1 * centred / 2.0, rtol=1e-5, atol=1e-6)
    for p, b, g in zip(params[1:], before[1:], grads[1:]):  # left as they were
        np.testing.assert_allclose(p.asnumpy(), b - 0.1 * g / 2.0, rtol=1e-5, atol=1e-6)
    with pytest.raises(TypeError, match="grad_centralization must be a bool"):
        nn.Momentum([{"params": [conv], "grad_centralization": 1}], 0.1, 0.9)


def test_bad_optimizer_arguments():
    w, _ = _params()
    with pytest.raises(ValueError, match="empty"):
        nn.Momentum([], 0.1, 0.9)
    with pytest.raises(ValueError, match="momentum must be >= 0"):
        nn.Momentum([w], 0.1, -1.0)
    with pytest.raises(TypeError, match="Parameters"):
        nn.SGD([np.ones(2)])
    with pytest.raises(ValueError, match="unknown keys"):
        nn.SGD([{"params": [w], "learningrate": 0.1}])
