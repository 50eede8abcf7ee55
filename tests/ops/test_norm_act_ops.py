"""RmsNorm, PReLU, Lerp, L2Loss, SigmoidCrossEntropyWithLogits and Swiglu: the math against numpy, gradients, one
sharded plan each on 8 devices (strategy and result) and the strategies MindSpore's infos refuse."""

import jax
import numpy as np
import pytest

from graphpar import nn, ops
from graphpar.errors import StrategyError
from graphpar.ops import operations as P
from tests.planner.helpers import OneOp, forward, rand, shard_shape, strategies


def _rms(x, g, eps=1e-6):
    rstd = 1 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return x * rstd * g, rstd


def test_rms_norm_matches_numpy_and_has_a_gradient():
    x, g = rand(4, 8), rand(8, seed=1)
    y, rstd = P.RmsNorm()(x, g)
    want_y, want_rstd = _rms(x, g)
    np.testing.assert_allclose(np.asarray(y), want_y, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(rstd), want_rstd, rtol=1e-5)
    assert rstd.shape == (4, 1)
    grad = jax.grad(lambda g: P.RmsNorm()(x, g)[0].sum())(g)
    np.testing.assert_allclose(np.asarray(grad), (x * want_rstd).sum(0), rtol=1e-5)


class RmsNet(nn.Cell):
    def __init__(self, hint):
        super().__init__()
        self.rms_norm = P.RmsNorm().shard(hint)

    def construct(self, x, g):
        return self.rms_norm(x, g)[0]


def test_rms_norm_plan_may_split_the_normalised_axis():
    x, g = rand(16, 64), rand(64, seed=1)
    out, _, graph = forward(RmsNet(((2, 4), (4,))), x, g)
    assert strategies(graph)["rms_norm"] == ((2, 4), (4,)) and shard_shape(out) == (8, 16)
    np.testing.assert_allclose(np.asarray(out), _rms(x, g)[0], rtol=1e-5, atol=1e-6)
    with pytest.raises(StrategyError, match="gamma dim 0 is split 2 but x dim 1 is split 4"):
        forward(RmsNet(((2, 4), (2,))), x, g)


def test_prelu_matches_numpy_and_splits_channels_with_the_weight():
    x, w = rand(8, 4, 2), np.array([0.1, 0.2, 0.3, 0.4], np.float32)
    want = np.where(x > 0, x, w[None, :, None] * x)
    np.testing.assert_allclose(np.asarray(P.PReLU()(x, w)), want, rtol=1e-6)
    out, _, graph = forward(OneOp(P.PReLU().shard(((2, 4, 1), (4,)))), x, w)
    assert strategies(graph)["op"] == ((2, 4, 1), (4,)) and shard_shape(out) == (4, 1, 2)
    np.testing.assert_allclose(np.asarray(out), want, rtol=1e-6)
    with pytest.raises(StrategyError, match="weight dim 0 is split 2 but x dim 1 is split 4"):
        forward(OneOp(P.PReLU().shard(((2, 4, 1), (2,)))), x, w)


def test_lerp_with_tensor_and_float_weight():
    start, end, weight = rand(8, 8, 8), rand(8, seed=1), rand(8, 8, seed=2)
    np.testing.assert_allclose(np.asarray(ops.Lerp()(start, end, weight)), start + weight * (end - start), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(ops.lerp(start, end, 0.5)), start + 0.5 * (end - start), rtol=1e-6)
    out, _, graph = forward(OneOp(ops.Lerp().shard(((2, 2, 2), (2,), ())), 0.5), start, end)
    assert strategies(graph)["op"] == ((2, 2, 2), (2,)) and shard_shape(out) == (4, 4, 4)
    np.testing.assert_allclose(np.asarray(out), start + 0.5 * (end - start), rtol=1e-6)
    with pytest.raises(StrategyError, match="end dim 0 is split 1 but start dim 2 is split 2"):
        forward(OneOp(ops.Lerp().shard(((4, 1, 2), (1,), ())), 0.5), start, end)


def test_l2_loss_and_sigmoid_cross_entropy():
    x, y = rand(8, 4), (rand(8, 4, seed=1) > 0).astype(np.float32)
    np.testing.assert_allclose(float(P.L2Loss()(x)), (x * x).sum() / 2, rtol=1e-5)
    p = 1 / (1 + np.exp(-x))
    want = -(y * np.log(p) + (1 - y) * np.log(1 - p))
    np.testing.assert_allclose(np.asarray(P.SigmoidCrossEntropyWithLogits()(x, y)), want, rtol=1e-5, atol=1e-6)
    out, _, graph = forward(OneOp(P.L2Loss().shard(((8, 1),))), x)
    assert strategies(graph)["op"] == ((8, 1),)
    np.testing.assert_allclose(float(out), (x * x).sum() / 2, rtol=1e-5)


def test_functional_abs():
    np.testing.assert_array_equal(np.asarray(ops.abs(np.array([-1.5, 2.0], np.float32))), [1.5, 2.0])


def test_rms_norm_refuses_an_out_strategy():
    with pytest.raises(StrategyError, match="RmsNorm's output layouts follow its input's"):
        forward(_RmsOut(), rand(16, 64), rand(64))


class _RmsOut(nn.Cell):
    def __init__(self):
        super().__init__()
        self.rms_norm = P.RmsNorm().shard(((2, 1), (1,)), ((2, 1), (2, 1)))

    def construct(self, x, g):
        return self.rms_norm(x, g)[0]


def test_swiglu_halves_along_dim_and_keeps_that_dim_whole():
    # MindSpore's generated primitive, reached as its tests reach it; the SwigluInfo rule is Softmax's: dim unsplit
    from graphpar.ops.auto_generate import gen_ops_prim

    x = rand(8, 16)
    a, b = x[:, :8], x[:, 8:]
    want = a / (1 + np.exp(-a)) * b
    np.testing.assert_allclose(np.asarray(gen_ops_prim.Swiglu()(x)), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(gen_ops_prim.Swiglu()(x.T, 0)), want.T, rtol=1e-5, atol=1e-6)
    out, _, graph = forward(OneOp(gen_ops_prim.Swiglu().shard(((8, 1),)), -1), x)
    assert strategies(graph)["op"] == ((8, 1),) and shard_shape(out) == (1, 8)
    np.testing.assert_allclose(np.asarray(out), want, rtol=1e-5, atol=1e-6)
    with pytest.raises(StrategyError, match="cannot split"):
        forward(OneOp(gen_ops_prim.Swiglu().shard(((2, 4),)), -1), x)
    with pytest.raises(ValueError, match="even size"):
        gen_ops_prim.Swiglu()(rand(8, 15))
