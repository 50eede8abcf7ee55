"""MaxPool2d, AvgPool2d and AdaptiveAvgPool2d against numpy references."""

import numpy as np
import pytest

import graphpar as ms
from graphpar import nn, ops


def _x(shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


def np_pool(x, k, s, same, reduce):
    """Pooling with MindSpore's "same" (TF-style padding, padded cells ignored) or "valid"."""
    n, c, h, w = x.shape
    if same:
        oh, ow = -(-h // s), -(-w // s)
        ph, pw = max(0, (oh - 1) * s + k - h), max(0, (ow - 1) * s + k - w)
        top, left = ph // 2, pw // 2
    else:
        oh, ow, top, left = (h - k) // s + 1, (w - k) // s + 1, 0, 0
    out = np.zeros((n, c, oh, ow), np.float32)
    for i in range(oh):
        for j in range(ow):
            r0, c0 = i * s - top, j * s - left
            win = x[:, :, max(r0, 0):min(r0 + k, h), max(c0, 0):min(c0 + k, w)]
            out[:, :, i, j] = reduce(win, axis=(2, 3))
    return out


@pytest.mark.parametrize("mode", ["same", "valid"])
@pytest.mark.parametrize("k,s", [(3, 2), (2, 2), (3, 1)])
def test_max_and_avg_pool(mode, k, s):
    x = _x((2, 3, 7, 8))
    np.testing.assert_allclose(np.asarray(nn.MaxPool2d(k, s, mode)(ms.Tensor(x))),
                               np_pool(x, k, s, mode == "same", np.max), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(nn.AvgPool2d(k, s, mode)(ms.Tensor(x))),
                               np_pool(x, k, s, mode == "same", np.mean), rtol=1e-5, atol=1e-6)


def test_pool_defaults_and_names():
    pool = nn.MaxPool2d()
    assert pool.kernel_size == (1, 1) and pool.stride == (1, 1) and pool.pad_mode == "valid"
    assert pool.max_pool.instance_name == "max_pool" and nn.AvgPool2d().avg_pool.instance_name == "avg_pool"


def np_adaptive(x, oh, ow):
    h, w = x.shape[-2:]
    out = np.zeros(x.shape[:-2] + (oh, ow), np.float32)
    for i in range(oh):
        for j in range(ow):
            r0, r1 = (i * h) // oh, -((-(i + 1) * h) // oh)
            c0, c1 = (j * w) // ow, -((-(j + 1) * w) // ow)
            out[..., i, j] = x[..., r0:r1, c0:c1].mean(axis=(-2, -1))
    return out


@pytest.mark.parametrize("size,want", [(1, (1, 1)), (3, (3, 3)), ((2, 4), (2, 4)), ((None, 3), (7, 3)),
                                       ((5, 6), (5, 6))])
def test_adaptive_avg_pool(size, want):
    x = _x((2, 3, 7, 6))
    got = np.asarray(nn.AdaptiveAvgPool2d(size)(ms.Tensor(x)))
    assert got.shape == (2, 3) + want
    np.testing.assert_allclose(got, np_adaptive(x, *want), rtol=1e-5, atol=1e-6)
    three_d = np.asarray(ops.AdaptiveAvgPool2D(size)(ms.Tensor(x[0])))
    np.testing.assert_allclose(three_d, got[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("make,words", [
    (lambda: nn.MaxPool2d(2, 2, "pad"), ["pad_mode='pad'", "same", "valid"]),
    (lambda: nn.AvgPool2d(2, 2, "full"), ["pad_mode", "same", "valid"]),
    (lambda: nn.MaxPool2d(0), ["kernel_size"]),
    (lambda: nn.MaxPool2d(2, ceil_mode=True), ["ceil_mode=True"]),
    (lambda: nn.AdaptiveAvgPool2d(0), ["output_size"]),
])
def test_errors_name_the_argument(make, words):
    with pytest.raises(ValueError) as err:
        make()
    assert all(w in str(err.value) for w in words), str(err.value)
