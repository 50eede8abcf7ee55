"""Conv3D, MaxPool3D and AvgPool3D on NCDHW: the math against numpy loops, gradients, one sharded plan each on 8
devices (strategy and result), and the depth/height/width splits MindSpore's MaxPool3DInfo/Conv3DInfo refuse."""

import itertools

import jax
import numpy as np
import pytest

from graphpar.errors import StrategyError
from graphpar.ops import operations as P
from tests.planner.helpers import OneOp, forward, rand, shard_shape, strategies


def _windows(x, k, s, pads, fill):
    """Every output position's window of ``x`` (N, C, D, H, W) padded with ``fill``: an array (..., kd*kh*kw)."""
    xp = np.pad(x, ((0, 0), (0, 0)) + tuple(pads), constant_values=fill)
    out = [(xp.shape[2 + i] - k[i]) // s[i] + 1 for i in range(3)]
    res = np.empty(x.shape[:2] + tuple(out) + (int(np.prod(k)),), x.dtype)
    for d, h, w in itertools.product(*map(range, out)):
        win = xp[:, :, d * s[0]:d * s[0] + k[0], h * s[1]:h * s[1] + k[1], w * s[2]:w * s[2] + k[2]]
        res[:, :, d, h, w] = win.reshape(x.shape[:2] + (-1,))
    return res


def test_max_pool3d_pad_mode_matches_numpy():
    x = rand(2, 3, 5, 6, 4)
    out = P.MaxPool3D(kernel_size=3, strides=2, pad_mode="pad", pad_list=1)(x)
    want = _windows(x, (3, 3, 3), (2, 2, 2), ((1, 1),) * 3, -np.inf).max(-1)
    np.testing.assert_allclose(np.asarray(out), want)


def test_avg_pool3d_same_mode_and_count_include_pad():
    x = rand(1, 2, 4, 4, 4)
    out = P.AvgPool3D(kernel_size=2, strides=2, pad_mode="same")(x)
    np.testing.assert_allclose(np.asarray(out), _windows(x, (2,) * 3, (2,) * 3, ((0, 0),) * 3, 0).mean(-1), rtol=1e-6)
    padded = P.AvgPool3D(kernel_size=3, strides=1, pad_mode="pad", pad=1, count_include_pad=False)(x)
    sums = _windows(x, (3,) * 3, (1,) * 3, ((1, 1),) * 3, 0).sum(-1)
    counts = _windows(np.ones_like(x), (3,) * 3, (1,) * 3, ((1, 1),) * 3, 0).sum(-1)
    np.testing.assert_allclose(np.asarray(padded), sums / counts, rtol=1e-5)


def test_conv3d_matches_numpy_and_has_a_gradient():
    x, w = rand(2, 3, 4, 4, 4), rand(5, 3, 2, 2, 2, seed=1)
    out = P.Conv3D(out_channel=5, kernel_size=2, pad_mode="pad", pad=1, stride=2)(x, w)
    win = _windows(x.transpose(0, 1, 2, 3, 4), (2,) * 3, (2,) * 3, ((1, 1),) * 3, 0)  # (N, C, D, H, W, 8)
    want = np.einsum("ncdhwk,ock->nodhw", win, w.reshape(5, 3, 8))
    np.testing.assert_allclose(np.asarray(out), want, rtol=1e-4, atol=1e-5)
    grad = jax.grad(lambda w: P.Conv3D(5, 2)(x, w).sum())(w)
    assert grad.shape == w.shape and np.isfinite(np.asarray(grad)).all()


def test_max_pool3d_plan_splits_depth_and_height_with_halos():
    x = rand(2, 2, 16, 16, 4)
    op = P.MaxPool3D(kernel_size=3, strides=1, pad_mode="pad", pad_list=1).shard(((1, 1, 2, 4, 1),))
    out, _, graph = forward(OneOp(op), x)
    assert strategies(graph)["op"] == ((1, 1, 2, 4, 1),) and shard_shape(out) == (2, 2, 8, 4, 4)
    want = _windows(x, (3,) * 3, (1,) * 3, ((1, 1),) * 3, -np.inf).max(-1)
    np.testing.assert_allclose(np.asarray(out), want)


@pytest.mark.parametrize("kwargs, hint, where", [
    ({"kernel_size": 3, "pad_mode": "pad", "pad_list": 1}, ((1, 1, 1, 4, 2),), "x dim 4"),  # width never splits
    ({"kernel_size": 4, "strides": 5, "pad_mode": "pad", "pad_list": (3, 0, 3, 0, 3, 0)}, ((1, 1, 4, 4, 1),),
     "x dim 2"),  # kernel <= stride with padding
    ({"kernel_size": 2, "strides": 4}, ((1, 1, 1, 8, 1),), "x dim 3")])  # valid mode: output 4 not divisible by 8
def test_max_pool3d_refuses_mindspores_invalid_splits(kwargs, hint, where):
    with pytest.raises(StrategyError, match=f"MaxPool3D cannot split {where}"):
        forward(OneOp(P.MaxPool3D(**kwargs).shard(hint)), rand(2, 2, 16, 16, 16))


def test_conv3d_plan_splits_batch_and_out_channels():
    x, w = rand(8, 4, 4, 4, 4), rand(8, 4, 2, 2, 2, seed=1)
    op = P.Conv3D(out_channel=8, kernel_size=2, pad_mode="same").shard(((2, 1, 1, 1, 1), (4, 1, 1, 1, 1)))
    out, _, graph = forward(OneOp(op), x, w)
    assert strategies(graph)["op"] == ((2, 1, 1, 1, 1), (4, 1, 1, 1, 1)) and shard_shape(out) == (4, 2, 4, 4, 4)
    np.testing.assert_allclose(np.asarray(out), np.asarray(P.Conv3D(8, 2, pad_mode="same")(x, w)), rtol=1e-5,
                               atol=1e-5)
    with pytest.raises(StrategyError, match="Conv3D cannot split weight dim 2"):
        forward(OneOp(P.Conv3D(8, 2).shard(((1, 1, 1, 1, 1), (1, 1, 2, 1, 1)))), x, w)
