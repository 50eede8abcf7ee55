"""GridSampler2D against hand-computed samples, and its sharding: the batch of both inputs alike."""

import numpy as np
import pytest

import graphpar as ms
from graphpar import Tensor, nn
from graphpar.errors import StrategyError
from graphpar.ops import operations as P

def _grids():
    x = np.arange(2 * 1 * 3 * 4, dtype=np.float32).reshape(2, 1, 3, 4)
    gy, gx = np.meshgrid(np.linspace(-1, 1, 3), np.linspace(-1, 1, 4), indexing="ij")
    return x, np.broadcast_to(np.stack([gx, gy], -1), (2, 3, 4, 2)).astype(np.float32)


def test_grid_sampler_2d_identity_shift_and_padding():
    x = np.arange(2 * 1 * 3 * 4, dtype=np.float32).reshape(2, 1, 3, 4)
    gy, gx = np.meshgrid(np.linspace(-1, 1, 3), np.linspace(-1, 1, 4), indexing="ij")
    identity = np.broadcast_to(np.stack([gx, gy], -1), (2, 3, 4, 2)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(P.GridSampler2D(align_corners=True)(Tensor(x), Tensor(identity))), x,
                               atol=1e-5)
    shifted = identity.copy()
    shifted[..., 0] += 2 / 3  # one pixel to the right: the last column reads past the edge
    got = np.asarray(P.GridSampler2D("bilinear", "zeros", True)(Tensor(x), Tensor(shifted)))
    np.testing.assert_allclose(got[..., :3], x[..., 1:], atol=1e-5)
    np.testing.assert_allclose(got[..., 3], 0, atol=1e-5)
    border = np.asarray(P.GridSampler2D("bilinear", "border", True)(Tensor(x), Tensor(shifted)))
    np.testing.assert_allclose(border[..., 3], x[..., 3], atol=1e-5)
    reflected = np.asarray(P.GridSampler2D("nearest", "reflection", True)(Tensor(x), Tensor(shifted)))
    np.testing.assert_allclose(reflected[..., 3], x[..., 2], atol=1e-5)  # mirrored about the last pixel
    with pytest.raises(ValueError, match="'bicubic' is not supported"):
        P.GridSampler2D("bicubic")




class _Sampler(nn.Cell):
    def __init__(self, strategy):
        super().__init__()
        self.sample = P.GridSampler2D(align_corners=True).shard(strategy)

    def construct(self, x, grid):
        return self.sample(x, grid)


def test_grid_sampler_2d_splits_the_batch_alike():
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8)
    x, identity = _grids()
    net = _Sampler(((2, 1, 1, 1), (2, 1, 1, 1)))
    table = ms.parallel.strategies(net, Tensor(x), Tensor(identity))
    assert [v for k, v in table.items() if "/GridSampler2D-op" in k] == [[[2, 1, 1, 1], [2, 1, 1, 1]]]
    np.testing.assert_allclose(np.asarray(net(Tensor(x), Tensor(identity))), x, atol=1e-5)
    with pytest.raises(StrategyError, match="GridSampler2D cannot split input_x dim 3"):
        ms.parallel.strategies(_Sampler(((1, 1, 1, 2), (1, 1, 1, 1))), Tensor(x), Tensor(identity))
