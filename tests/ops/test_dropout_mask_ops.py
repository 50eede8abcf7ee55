"""DropoutGenMask / DropoutDoMask (MindSpore's deprecated two-op dropout): the mask is packed bits, little-endian
within a byte, rounded up to 128 elements; DoMask's strategy has one entry (input_x's), the mask stays whole, and a
split DoMask gives the numbers of an unsplit one."""

import numpy as np
import pytest

import graphpar as ms
from graphpar import Tensor, nn
from graphpar.ops import operations as P
from tests.planner.helpers import collectives, forward, kind_strategies


def test_gen_mask_is_packed_bits_rounded_to_128():
    mask = np.asarray(P.DropoutGenMask(Seed0=1, Seed1=2)((3, 50), 0.25))
    assert mask.dtype == np.uint8 and mask.shape == (32,)  # 150 elements -> 256 bits -> 32 bytes
    bits = np.unpackbits(mask, bitorder="little")
    assert 0.1 < bits.mean() < 0.4  # kept with probability keep_prob
    np.testing.assert_array_equal(np.asarray(P.DropoutGenMask(Seed0=1, Seed1=2)((3, 50), 0.25)), mask)
    with pytest.raises(ValueError, match="Seed0 must be an int >= 0"):
        P.DropoutGenMask(Seed0=-1)


def test_do_mask_matches_numpy_reference():
    x = np.arange(1, 151, dtype=np.float32).reshape(3, 50)
    mask = np.asarray(P.DropoutGenMask(Seed0=3)((3, 50), 0.5))
    out = np.asarray(P.DropoutDoMask()(Tensor(x), Tensor(mask), 0.5))
    kept = np.unpackbits(mask, bitorder="little")[:150].reshape(3, 50).astype(bool)
    np.testing.assert_allclose(out, np.where(kept, x / 0.5, 0.0))
    with pytest.raises(ValueError, match="mask must be a 1-D uint8 tensor of 16 bytes"):
        P.DropoutDoMask()(Tensor(x[:1, :8]), Tensor(mask), 0.5)


class _Net(nn.Cell):
    def __init__(self, strategy=None):
        super().__init__()
        self.gen = P.DropoutGenMask(Seed0=5, Seed1=6)
        self.do = P.DropoutDoMask().shard(strategy)
        self.keep_prob = Tensor(0.75)

    def construct(self, x):
        keep = P.Cast()(self.keep_prob, P.DType()(x))
        return self.do(x, self.gen(P.Shape()(x), keep), keep)


def test_split_do_mask_follows_input_x_and_draws_the_unsplit_numbers():
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8)
    x = Tensor(np.random.default_rng(0).normal(size=(16, 64)).astype(np.float32))
    assert kind_strategies(_Net(((4, 2),)), x, kind="DropoutDoMask") == [[[4, 2], [1], []]]
    split = np.asarray(_Net(((4, 2),))(x))
    ms.reset_auto_parallel_context()
    np.testing.assert_allclose(split, np.asarray(_Net()(x)), rtol=1e-6)


def test_split_do_mask_moves_nothing():
    """The mask is whole on every device: a split DropoutDoMask reads its own block's bits locally."""
    x = Tensor(np.random.default_rng(0).normal(size=(16, 64)).astype(np.float32))
    _, hlo, _ = forward(_Net(((4, 2),)), x, full_batch=True)
    assert collectives(hlo) == {}
