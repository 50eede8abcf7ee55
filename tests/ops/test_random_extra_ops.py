"""UniformReal, Gamma and RandomChoiceWithMask: each op carries its own key (from set_seed, or fixed by
seed/seed2) and advances it on every call; a split UniformReal draws the same numbers as an unsplit one."""

import numpy as np
import pytest

import graphpar as ms
from graphpar import Tensor, nn
from graphpar.errors import StrategyError
from graphpar.ops import operations as P


def test_uniform_real_advances_and_seeds_reproduce():
    op = P.UniformReal(seed=3, seed2=4)
    first, second = np.asarray(op((4, 5))), np.asarray(op((4, 5)))
    assert first.shape == (4, 5) and first.dtype == np.float32 and ((first >= 0) & (first < 1)).all()
    assert not np.array_equal(first, second)  # the key advanced
    np.testing.assert_array_equal(np.asarray(P.UniformReal(seed=3, seed2=4)((4, 5))), first)
    ms.set_seed(7)
    a = np.asarray(P.UniformReal()((3,)))
    ms.set_seed(7)
    np.testing.assert_array_equal(np.asarray(P.UniformReal()((3,))), a)


def test_gamma_broadcasts_shape_with_alpha_and_beta():
    out = np.asarray(P.Gamma(1, 1)((4000, 2), Tensor(np.array([2.0, 8.0], np.float32)),
                                   Tensor(np.array([2.0], np.float32))))
    assert out.shape == (4000, 2) and (out > 0).all()
    np.testing.assert_allclose(out.mean(0), [1.0, 4.0], rtol=0.1)  # mean alpha / beta


def test_random_choice_with_mask_picks_true_positions():
    x = np.zeros((4, 5), bool)
    x[[0, 2, 3], [1, 4, 0]] = True
    index, mask = P.RandomChoiceWithMask(count=5, seed=2)(Tensor(x))
    index, mask = np.asarray(index), np.asarray(mask)
    assert index.shape == (5, 2) and index.dtype == np.int32 and mask.tolist().count(True) == 3
    assert sorted(map(tuple, index[mask])) == [(0, 1), (2, 4), (3, 0)]
    assert (index[~mask] == 0).all()
    with pytest.raises(TypeError, match="must be a bool tensor"):
        P.RandomChoiceWithMask()(Tensor(np.ones((2, 2), np.float32)))


class _Sample(nn.Cell):
    def __init__(self, strategy=None):
        super().__init__()
        self.uniform = P.UniformReal(seed=5, seed2=6).shard(strategy)

    def construct(self, x):
        return x + self.uniform((8, 4))


def test_uniform_real_split_on_8_devices_draws_the_same_numbers():
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8)
    zeros = Tensor(np.zeros((8, 4), np.float32))
    split = _Sample(((4, 2),))
    table = ms.parallel.strategies(split, zeros)
    assert [v for k, v in table.items() if "/UniformReal-op" in k] == [[[1]]]  # the key whole; the output (4, 2)
    np.testing.assert_array_equal(np.asarray(split(zeros)), np.asarray(P.UniformReal(seed=5, seed2=6)((8, 4))))


def test_random_choice_with_mask_cannot_be_split():
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8)

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.choice = P.RandomChoiceWithMask(count=4).shard(((8, 1),))

        def construct(self, x):
            return self.choice(x)[1]

    with pytest.raises(StrategyError, match="RandomChoiceWithMask cannot split input_x dim 0"):
        ms.parallel.strategies(Net(), Tensor(np.ones((16, 4), bool)))
