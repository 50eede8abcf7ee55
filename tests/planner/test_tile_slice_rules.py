"""Tile and StridedSlice strategies as MindSpore's TileInfo/StridedSliceInfo read them, on 8 devices. Tile: one
split per element of ``multiples`` (the output's rank); a tiled dim's split divides its multiple (each device tiles
its whole input dim fewer times), an untiled dim's split divides the input dim. StridedSlice: every mask, and splits
of the dims fetched whole. Accepted strategies match one device; the others raise StrategyError."""

import numpy as np
import pytest

from graphpar import Layout, nn, ops
from graphpar.errors import StrategyError

from .helpers import forward, reference, rand, shard_shape, strategies


class TileCell(nn.Cell):
    def __init__(self, multiples, strategy, out_strategy=None):
        super().__init__()
        self.tile = ops.Tile().shard(strategy, out_strategy)
        self.multiples = multiples

    def construct(self, x):
        return self.tile(x, self.multiples)


def test_tile_splits_the_multiples_and_the_untiled_dims():
    # x (8, 4, 6), multiples (2, 1, 4, 1): output (2, 8, 16, 6); dim 0 (prepended) and dim 2 are tiled
    make = lambda: TileCell((2, 1, 4, 1), ((2, 2, 2, 1),))
    x = rand(8, 4, 6)
    out, _, graph = forward(make(), x, full_batch=True)
    np.testing.assert_allclose(np.asarray(out), np.asarray(reference(make(), x)))
    np.testing.assert_allclose(np.asarray(out), np.tile(x, (2, 1, 4, 1)))
    assert shard_shape(out) == (1, 4, 8, 6)
    assert strategies(graph)["tile"] == ((2, 2, 2, 1),)  # reported as MindSpore writes it


def test_tile_split_must_divide_the_multiple():
    with pytest.raises(StrategyError, match="op 'tile'.*dim 2 has size 4, which the split 8 does not divide"):
        forward(TileCell((2, 1, 4, 1), ((1, 1, 8, 1),)), rand(8, 4, 6), full_batch=True)


def test_tile_layout_out_split_must_divide_the_multiple():
    layout = Layout((1, 4, 2), ("dp", "cp", "mp"))
    cell = TileCell((2, 2, 2), (layout("None", "None", "None"),), (layout("dp", "cp", "mp"),))
    with pytest.raises(StrategyError, match="Tile cannot split output dim 1 4 ways: its multiple 2"):
        forward(cell, rand(8, 4, 6), full_batch=True)


class SliceCell(nn.Cell):
    def __init__(self, begin, end, strides, strategy=None, **masks):
        super().__init__()
        self.slice = ops.StridedSlice(**masks).shard(strategy)
        self.args = (begin, end, strides)

    def construct(self, x):
        return self.slice(x, *self.args)


def test_strided_slice_masks_as_tensorflow():
    # MindSpore's masks follow TensorFlow's: a new axis wins over a shrink on the same bit, bits past begin ignored
    x = rand(4, 6, 8)
    cases = [
        (((0, 0, 0, 0), (4, 6, 8, 1), (1, 1, 1, 1), {"new_axis_mask": 5}), x[None, 0:6, None, 0:1]),
        (((1, 0, 0), (2, 6, 8), (1, 2, 1), {"shrink_axis_mask": 1, "end_mask": 4}), x[1, 0:6:2, 0:]),
        (((0, 0, 0), (2, 3, 0), (1, 1, 1), {"ellipsis_mask": 4}), x[0:2, 0:3, ...]),
        (((0, 0), (2, 4), (1, 1), {"new_axis_mask": 1, "shrink_axis_mask": 1}), x[None, 0:4]),
    ]
    for (begin, end, strides, masks), want in cases:
        np.testing.assert_array_equal(np.asarray(SliceCell(begin, end, strides, **masks)(x)), want)


def test_strided_slice_splits_the_dims_fetched_whole():
    # x (8, 4, 16): dim 0 is dropped (shrink), dim 1 is sliced, dim 2 fetched whole behind two new axes
    make = lambda: SliceCell((0, 0, 0, 1, 0), (1, 1, 1, 3, 16), (1, 1, 1, 1, 1), ((1, 1, 8),),
                             new_axis_mask=6, shrink_axis_mask=1)
    x = rand(8, 4, 16)
    out, _, _ = forward(make(), x, full_batch=True)
    np.testing.assert_array_equal(np.asarray(out), x[0, None, None, 1:3, :])
    assert shard_shape(out) == (1, 1, 2, 2)


def test_strided_slice_cannot_split_a_sliced_dim_or_take_an_ellipsis():
    with pytest.raises(StrategyError, match="StridedSlice cannot split x dim 1"):
        forward(SliceCell((0, 1, 0), (8, 3, 16), (1, 1, 1), ((1, 2, 1),)), rand(8, 4, 16), full_batch=True)
    with pytest.raises(StrategyError, match="does not take ellipsis_mask"):
        forward(SliceCell((0, 0, 0), (8, 4, 0), (1, 1, 1), ((8, 1, 1),), ellipsis_mask=4), rand(8, 4, 16),
                full_batch=True)
