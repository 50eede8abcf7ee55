"""``nn.Lamb`` follows MindSpore's LAMB rule (checked against the formula in numpy): bias-corrected moments, decay
on names without beta/gamma, the layer-wise trust ratio ||w|| / ||update||; MindSpore's argument checks."""

import numpy as np
import pytest

from graphpar import Parameter, Tensor, nn

GRADS = [np.array([[0.1, -0.2], [0.3, 0.4]], np.float32), np.array([0.5, -0.5], np.float32)]


def _lamb_numpy(p, grad, steps, lr, wd, b1=0.9, b2=0.999, eps=1e-6):
    m, v = np.zeros_like(p), np.zeros_like(p)
    for t in range(1, steps + 1):
        m = b1 * m + (1 - b1) * grad
        v = b2 * v + (1 - b2) * grad ** 2
        u = (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps) + wd * p
        w_norm, u_norm = np.linalg.norm(p), np.linalg.norm(u)
        ratio = w_norm / u_norm if w_norm > 0 and u_norm > 0 else 1.0
        p = p - lr * ratio * u
    return p


def test_lamb_matches_mindspore_rule_and_skips_gamma_decay():
    w = Parameter(Tensor(np.array([[1.0, -2.0], [0.5, 3.0]], np.float32)), "fc.weight")
    g = Parameter(Tensor(np.array([1.0, 2.0], np.float32)), "bn.gamma")
    w0, g0 = w.asnumpy(), g.asnumpy()
    opt = nn.Lamb([w, g], learning_rate=0.01, weight_decay=0.1)
    for _ in range(3):
        opt([Tensor(x) for x in GRADS])
    np.testing.assert_allclose(w.asnumpy(), _lamb_numpy(w0, GRADS[0], 3, 0.01, 0.1), rtol=1e-5)
    np.testing.assert_allclose(g.asnumpy(), _lamb_numpy(g0, GRADS[1], 3, 0.01, 0.0), rtol=1e-5)


def test_lamb_zero_weight_takes_ratio_one():
    z = Parameter(Tensor(np.zeros((2, 2), np.float32)), "z")
    nn.Lamb([z], learning_rate=0.1)([Tensor(GRADS[0])])
    np.testing.assert_allclose(z.asnumpy(), _lamb_numpy(np.zeros((2, 2), np.float32), GRADS[0], 1, 0.1, 0.0),
                               rtol=1e-5)


@pytest.mark.parametrize("kwargs, error, text", [({"beta1": 1}, TypeError, "beta1 must be a float"),
                                                 ({"beta2": 1.0}, ValueError, r"beta2 must be in \(0.0, 1.0\)"),
                                                 ({"eps": 0.0}, ValueError, "eps must be > 0")])
def test_lamb_checks_its_arguments(kwargs, error, text):
    w = Parameter(Tensor(np.ones((2, 2), np.float32)), "w")
    with pytest.raises(error, match=text):
        nn.Lamb([w], learning_rate=0.1, **kwargs)
