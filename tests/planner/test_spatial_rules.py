"""Strategies MindSpore's OperatorInfo accepts beyond one split per dimension, on 8 devices: Conv2D,
Conv2DTranspose and pooling split on H and W (XLA's SPMD partitioner exchanges the halo rows), LayerNorm's gamma
and beta split as the dims of x they line up with. Each accepted strategy compiles and matches one device; each
strategy MindSpore refuses raises graphpar's StrategyError naming the op and the reason."""

import numpy as np
import pytest

from graphpar import nn, ops
from graphpar.errors import StrategyError

from .helpers import OneOp, forward, rand, reference, shard_shape, strategies


class TransposeCell(nn.Cell):
    def __init__(self, op, size):
        super().__init__()
        self.op = op
        self.size = size

    def construct(self, dout, w):
        return self.op(dout, w, self.size)


ACCEPTED = [
    # id, cell factory, inputs, per-shard output shape
    ("conv_same_split_hw", lambda: OneOp(ops.Conv2D(8, 3, pad_mode="same").shard(((2, 1, 2, 2), (1, 1, 1, 1)))),
     [rand(4, 4, 8, 8), rand(8, 4, 3, 3, seed=1)], (2, 8, 4, 4)),
    ("conv_pad_split_w", lambda: OneOp(ops.Conv2D(8, 3, pad_mode="pad", pad=(3, 3, 3, 3)).shard(
        ((1, 1, 2, 4), (1, 1, 1, 1)))), [rand(2, 4, 16, 16), rand(8, 4, 3, 3, seed=1)], (2, 8, 10, 5)),
    ("conv_stride_equals_kernel",
     lambda: OneOp(ops.Conv2D(8, 2, pad_mode="same", stride=2).shard(((2, 2, 2, 1), (1, 2, 1, 1)))),
     [rand(4, 4, 8, 8), rand(8, 4, 2, 2, seed=1)], (2, 8, 2, 4)),
    ("conv_transpose_split_hw", lambda: TransposeCell(ops.Conv2DTranspose(4, 2, pad_mode="same", stride=2).shard(
        ((2, 1, 2, 2), (1, 1, 1, 1))), (4, 4, 16, 16)), [rand(4, 8, 8, 8), rand(8, 4, 2, 2, seed=1)], (2, 4, 8, 8)),
    ("max_pool_split_hw", lambda: OneOp(ops.MaxPool(kernel_size=2, strides=2).shard(((2, 1, 2, 2),))),
     [rand(4, 4, 8, 8)], (2, 4, 2, 2)),
    ("avg_pool_split_h", lambda: OneOp(ops.AvgPool(kernel_size=2, strides=2).shard(((1, 1, 8, 1),))),
     [rand(2, 4, 16, 8)], (2, 4, 1, 4)),
]


@pytest.mark.parametrize("name,make,inputs,local", ACCEPTED, ids=[c[0] for c in ACCEPTED])
def test_spatial_split_matches_one_device(name, make, inputs, local):
    out, _, graph = forward(make(), *inputs, full_batch=True)
    np.testing.assert_allclose(np.asarray(out), np.asarray(reference(make(), *inputs)), rtol=1e-4, atol=1e-5)
    assert shard_shape(out) == local


REFUSED = [
    # id, op, x shape, weight shape, strategy, words of the reason
    ("valid_kernel_over_stride", ops.Conv2D(8, 3, pad_mode="valid"), (32, 16, 8, 8), (8, 16, 3, 3),
     ((1, 1, 1, 2), (1, 1, 1, 1)), "pad_mode 'valid'"),
    ("output_not_divisible", ops.Conv2D(8, 2, pad_mode="same", stride=2), (32, 16, 8, 8), (8, 16, 2, 2),
     ((1, 1, 8, 1), (1, 1, 1, 1)), "not divisible by the split 8"),
    ("pad_with_kernel_le_stride", ops.Conv2D(8, 2, pad_mode="pad", pad=1, stride=2), (32, 16, 10, 10),
     (8, 16, 2, 2), ((1, 1, 2, 1), (1, 1, 1, 1)), "with padding"),
    ("slice_too_small", ops.Conv2D(8, 5, pad_mode="same"), (32, 16, 8, 8), (8, 16, 5, 5),
     ((1, 1, 1, 8), (1, 1, 1, 1)), "too small"),
    ("slice_not_divisible_by_stride", ops.Conv2D(8, 1, pad_mode="same", stride=3), (32, 16, 10, 10),
     (8, 16, 1, 1), ((1, 1, 1, 2), (1, 1, 1, 1)), "not divisible by the stride"),
    ("nc_stride", ops.Conv2D(8, 2, pad_mode="same", stride=(2, 2, 1, 1)), (32, 16, 8, 8), (8, 16, 2, 2),
     ((8, 1, 1, 1), (1, 1, 1, 1)), "first two elements of stride"),
]


@pytest.mark.parametrize("name,op,xs,ws,strategy,words", REFUSED, ids=[c[0] for c in REFUSED])
def test_spatial_split_mindspore_refuses(name, op, xs, ws, strategy, words):
    with pytest.raises(StrategyError, match="Conv2D cannot split|Conv2D needs") as err:
        forward(OneOp(op.shard(strategy)), rand(*xs), rand(*ws, seed=1), full_batch=True)
    assert words in str(err.value)
    assert "conv2d" in str(err.value).lower()


def test_pool_kernel_larger_than_stride_cannot_split_h():
    with pytest.raises(StrategyError, match="MaxPool cannot split H 2 ways: the kernel \\(3\\) is larger"):
        forward(OneOp(ops.MaxPool(kernel_size=3, strides=1).shard(((1, 1, 2, 1),))), rand(4, 4, 8, 8),
                full_batch=True)


class LayerNormCell(nn.Cell):
    def __init__(self, strategy, begin_norm_axis, begin_params_axis):
        super().__init__()
        self.ln = ops.LayerNorm(begin_norm_axis=begin_norm_axis, begin_params_axis=begin_params_axis).shard(
            strategy)

    def construct(self, x, gamma, beta):
        return self.ln(x, gamma, beta)[0]


def test_layer_norm_gamma_split_as_the_x_dims_it_lines_up_with():
    # begin_params_axis=1 < begin_norm_axis=2: gamma (8, 4, 16) lines up with x's dims 1..3; dim 1 is split by 4
    make = lambda: LayerNormCell(((2, 4, 1, 1), (4, 1, 1), (4, 1, 1)), 2, 1)
    inputs = [rand(4, 8, 4, 16), rand(8, 4, 16, seed=1), rand(8, 4, 16, seed=2)]
    out, _, _ = forward(make(), *inputs, full_batch=True)
    np.testing.assert_allclose(np.asarray(out), np.asarray(reference(make(), *inputs)), rtol=1e-4, atol=1e-5)
    assert shard_shape(out) == (2, 2, 4, 16)


def test_layer_norm_gamma_split_unlike_x_is_refused():
    with pytest.raises(StrategyError, match="split alike"):
        forward(LayerNormCell(((2, 4, 1, 1), (2, 1, 1), (4, 1, 1)), 2, 1), rand(4, 8, 4, 16),
                rand(8, 4, 16, seed=1), rand(8, 4, 16, seed=2), full_batch=True)


class ReluConv(nn.Cell):
    def __init__(self):
        super().__init__()
        self.relu = ops.ReLU().shard(((1, 1, 1, 8),))
        self.conv2d = ops.Conv2D(8, 3, pad_mode="same")

    def construct(self, x, w):
        return self.conv2d(self.relu(x), w)


def test_propagation_carries_a_neighbours_w_split_into_conv2d():
    # MindSpore's sharding propagation keeps the ReLU's W split through the Conv2D (its conditions hold); graphpar's
    # search never proposes an H/W split itself, but takes a decided neighbour's
    inputs = [rand(2, 4, 8, 16), rand(8, 4, 3, 3, seed=1)]
    out, _, graph = forward(ReluConv(), *inputs, mode="auto_parallel", search_mode="sharding_propagation",
                            full_batch=True)
    np.testing.assert_allclose(np.asarray(out), np.asarray(reference(ReluConv(), *inputs)), rtol=1e-4, atol=1e-5)
    assert strategies(graph)["conv2d"] == ((1, 1, 1, 8), (1, 1, 1, 1))


def test_layer_norm_refuses_an_out_strategy():
    # LayerNormInfo infers its three outputs' layouts from x's and refuses a user's
    cell = LayerNormCell(((2, 1, 1, 1), (1, 1, 1), (1, 1, 1)), 1, 1)
    cell.ln.shard(((2, 1, 1, 1), (1, 1, 1), (1, 1, 1)), ((2, 1, 1, 1), (2, 1, 1, 1), (2, 1, 1, 1)))
    with pytest.raises(StrategyError, match="LayerNorm takes no out_strategy"):
        forward(cell, rand(4, 8, 4, 16), rand(8, 4, 16, seed=1), rand(8, 4, 16, seed=2), full_batch=True)
