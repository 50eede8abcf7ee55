"""TopkExt and SplitWithSize/SplitTensor: each against numpy, and the dims MindSpore's OperatorInfo keeps whole
(the selected dim, the split dim)."""

import numpy as np
import pytest

import graphpar as ms
from graphpar import Tensor
from graphpar.errors import StrategyError
from graphpar.ops import auto_generate as A
from tests.planner.helpers import kind_strategies, sharded

X = np.random.default_rng(0).standard_normal((8, 6, 4)).astype(np.float32)


def test_topk_ext_along_a_dim_smallest_first():
    values, indices = A.TopkExt()(Tensor(X), 2, 1, False)
    np.testing.assert_allclose(np.asarray(values), np.sort(X, axis=1)[:, :2])
    np.testing.assert_allclose(np.take_along_axis(X, np.asarray(indices), 1), np.sort(X, axis=1)[:, :2])
    with pytest.raises(ValueError, match=r"TopkExt: k must be an int in \[0, 6\]"):
        A.TopkExt()(Tensor(X), 7, 1)


def test_split_with_size_and_split_tensor():
    parts = A.SplitWithSize()(Tensor(X), [1, 5], 1)
    assert [p.shape for p in parts] == [(8, 1, 4), (8, 5, 4)]
    np.testing.assert_allclose(np.asarray(parts[1]), X[:, 1:])
    parts = A.SplitTensor()(Tensor(X), 4, 1)  # 6 = 4 + 2: the last part is shorter
    assert [p.shape for p in parts] == [(8, 4, 4), (8, 2, 4)]
    with pytest.raises(ValueError, match="summing to dim 1's size 6"):
        A.SplitWithSize()(Tensor(X), [1, 4], 1)


def test_topk_ext_splits_all_but_its_dim_on_8_devices_and_the_values_are_unchanged():
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8)
    net = sharded(A.TopkExt(), ((4, 1, 2),), 2, 1)
    assert kind_strategies(net, Tensor(X), kind="TopkExt") == [[[4, 1, 2]]]
    np.testing.assert_allclose(np.asarray(net(Tensor(X))[0]), -np.sort(-X, axis=1)[:, :2])
    with pytest.raises(StrategyError, match="TopkExt cannot split input dim 1"):
        kind_strategies(sharded(A.TopkExt(), ((1, 2, 4),), 2, 1), Tensor(X), kind="TopkExt")


def test_split_with_size_keeps_the_split_dim_whole():
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8)
    net = sharded(A.SplitWithSize(), ((2, 1, 4),), [2, 4], 1)
    assert kind_strategies(net, Tensor(X), kind="SplitWithSize") == [[[2, 1, 4]]]
    np.testing.assert_allclose(np.asarray(net(Tensor(X))[1]), X[:, 2:])
    with pytest.raises(StrategyError, match="SplitWithSize cannot split input dim 1"):
        kind_strategies(sharded(A.SplitWithSize(), ((1, 2, 4),), [2, 4], 1), Tensor(X), kind="SplitWithSize")
