"""nn.Conv2d against a numpy reference: pad modes, strides, dilation, groups, bias; MindSpore 2.x defaults; errors."""

import math

import numpy as np
import pytest

import graphpar as ms
from graphpar import nn


def np_conv(x, w, stride=(1, 1), pads=((0, 0), (0, 0)), dilation=(1, 1), group=1):
    """Direct cross-correlation over NCHW / OIHW with explicit zero padding."""
    x = np.pad(x, ((0, 0), (0, 0)) + tuple(pads))
    n, _, h, wd = x.shape
    o, cg, kh, kw = w.shape
    ekh, ekw = (kh - 1) * dilation[0] + 1, (kw - 1) * dilation[1] + 1
    ho, wo = (h - ekh) // stride[0] + 1, (wd - ekw) // stride[1] + 1
    out = np.zeros((n, o, ho, wo), np.float64)
    per_group = o // group
    for oc in range(o):
        xs = x[:, (oc // per_group) * cg:(oc // per_group + 1) * cg]
        for i in range(ho):
            for j in range(wo):
                r, c = i * stride[0], j * stride[1]
                patch = xs[:, :, r:r + ekh:dilation[0], c:c + ekw:dilation[1]]
                out[:, oc, i, j] = np.sum(patch * w[oc], axis=(1, 2, 3))
    return out


def same_pads(size, kernel, stride, dilation):
    """MindSpore's "same": out = ceil(in / stride), the odd padding row at the bottom/right."""
    eff = (kernel - 1) * dilation + 1
    out = -(-size // stride)
    need = max(0, (out - 1) * stride + eff - size)
    return need // 2, need - need // 2


def _x(shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


@pytest.mark.parametrize("kernel,stride,dilation", [(3, 1, 1), (3, 2, 1), (4, 3, 1), (3, 1, 2), ((2, 3), (2, 1), 1)])
def test_same_padding_matches_mindspore_formula(kernel, stride, dilation):
    conv = nn.Conv2d(3, 4, kernel, stride=stride, pad_mode="same", dilation=dilation)
    x = _x((2, 3, 9, 8))
    kh, kw = conv.kernel_size
    pads = (same_pads(9, kh, conv.stride[0], conv.dilation[0]), same_pads(8, kw, conv.stride[1], conv.dilation[1]))
    want = np_conv(x, conv.weight.asnumpy(), conv.stride, pads, conv.dilation)
    got = np.asarray(conv(ms.Tensor(x)))
    assert got.shape == (2, 4, math.ceil(9 / conv.stride[0]), math.ceil(8 / conv.stride[1]))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_valid_padding():
    conv = nn.Conv2d(3, 5, 3, stride=2, pad_mode="valid")
    x = _x((2, 3, 9, 10))
    got = np.asarray(conv(ms.Tensor(x)))
    assert got.shape == (2, 5, 4, 4)
    np.testing.assert_allclose(got, np_conv(x, conv.weight.asnumpy(), (2, 2)), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("padding,pads", [(1, ((1, 1), (1, 1))), ((0, 2, 1, 3), ((0, 2), (1, 3)))])
def test_pad_mode_with_int_and_four_tuple(padding, pads):
    conv = nn.Conv2d(2, 3, 3, pad_mode="pad", padding=padding, has_bias=True, bias_init="normal")
    x = _x((1, 2, 6, 5))
    want = np_conv(x, conv.weight.asnumpy(), (1, 1), pads) + conv.bias.asnumpy()[None, :, None, None]
    np.testing.assert_allclose(np.asarray(conv(ms.Tensor(x))), want, rtol=1e-4, atol=1e-5)


def test_groups_and_bias():
    conv = nn.Conv2d(4, 6, 3, group=2, has_bias=True, pad_mode="valid")
    assert conv.weight.shape == (6, 2, 3, 3)
    x = _x((2, 4, 5, 5))
    want = np_conv(x, conv.weight.asnumpy(), group=2) + conv.bias.asnumpy()[None, :, None, None]
    np.testing.assert_allclose(np.asarray(conv(ms.Tensor(x))), want, rtol=1e-4, atol=1e-5)
    depthwise = nn.Conv2d(4, 4, 3, group=4)
    assert depthwise.weight.shape == (4, 1, 3, 3)


def test_mindspore_2x_default_initializers():
    ms.set_seed(1)
    conv = nn.Conv2d(16, 64, 3, group=2, has_bias=True)
    fan_in = 8 * 3 * 3
    bound = 1 / math.sqrt(fan_in)  # HeUniform(sqrt(5)) and Uniform(1/sqrt(fan_in)) share the bound
    w, b = conv.weight.asnumpy(), conv.bias.asnumpy()
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.95 * bound
    assert np.abs(b).max() <= bound
    assert not conv.has_bias or conv.bias.name == "bias"
    assert nn.Conv2d(3, 4, 3).has_bias is False


def test_ops_are_named_and_shardable():
    conv = nn.Conv2d(3, 8, 3, has_bias=True)
    assert conv.conv2d.instance_name == "conv2d" and conv.bias_add.instance_name == "bias_add"
    conv.conv2d.shard(((8, 1, 1, 1), (1, 1, 1, 1)))
    assert conv.conv2d.in_strategy == ((8, 1, 1, 1), (1, 1, 1, 1))
    assert [p.name for p in conv.get_parameters()] == ["weight", "bias"]


@pytest.mark.parametrize("kwargs,words", [
    ({"pad_mode": "full"}, ["pad_mode", "same", "valid", "pad"]),
    ({"padding": 1}, ["padding=1", "pad_mode='pad'"]),
    ({"group": 3}, ["divisible", "group (3)"]),
    ({"kernel_size": 0}, ["kernel_size", "positive"]),
    ({"data_format": "NHWC"}, ["NHWC", "NCHW"]),
    ({"padding": (1, 2)}, ["tuple of 4"]),
])
def test_errors_name_the_argument(kwargs, words):
    args = {"in_channels": 4, "out_channels": 4, "kernel_size": 3, **kwargs}
    with pytest.raises(ValueError) as err:
        nn.Conv2d(**args)
    assert all(w in str(err.value) for w in words), str(err.value)


def test_wrong_input_channels_is_a_clear_error():
    with pytest.raises(ValueError, match=r"\(N, 3, H, W\)"):
        nn.Conv2d(3, 4, 3)(ms.Tensor(_x((1, 2, 5, 5))))
