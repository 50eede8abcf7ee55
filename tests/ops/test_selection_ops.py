"""TopK/TopkExt, InplaceAdd/Sub/Update and SplitWithSize/SplitTensor: each against numpy, and the dims MindSpore's
OperatorInfo keeps whole (TopK's selected dim, the Inplace ops' dim 0, the split dim)."""

import numpy as np
import pytest

import graphpar as ms
from graphpar import Tensor, nn
from graphpar.errors import StrategyError
from graphpar.ops import auto_generate as A
from graphpar.ops import operations as P

X = np.random.default_rng(0).standard_normal((8, 6, 4)).astype(np.float32)


def test_top_k_values_and_int32_indices():
    values, indices = P.TopK()(Tensor(X), 3)
    want = -np.sort(-X, axis=-1)[..., :3]
    np.testing.assert_allclose(np.asarray(values), want)
    assert np.asarray(indices).dtype == np.int32
    np.testing.assert_allclose(np.take_along_axis(X, np.asarray(indices), -1), want)


def test_topk_ext_along_a_dim_smallest_first():
    values, indices = A.TopkExt()(Tensor(X), 2, 1, False)
    np.testing.assert_allclose(np.asarray(values), np.sort(X, axis=1)[:, :2])
    np.testing.assert_allclose(np.take_along_axis(X, np.asarray(indices), 1), np.sort(X, axis=1)[:, :2])
    with pytest.raises(ValueError, match=r"TopkExt: k must be an int in \[0, 6\]"):
        A.TopkExt()(Tensor(X), 7, 1)


@pytest.mark.parametrize("op, fn", [(P.InplaceAdd, np.add), (P.InplaceSub, np.subtract),
                                    (P.InplaceUpdate, lambda a, b: b)])
def test_inplace_ops_update_the_indexed_rows(op, fn):
    v = np.ones((2, 6, 4), np.float32)
    want = X.copy()
    want[[1, 5]] = fn(X[[1, 5]], v)
    np.testing.assert_allclose(np.asarray(op((1, 5))(Tensor(X), Tensor(v))), want)
    with pytest.raises(ValueError, match="one row per index"):
        op((1, 5, 6))(Tensor(X), Tensor(v))


def test_split_with_size_and_split_tensor():
    parts = A.SplitWithSize()(Tensor(X), [1, 5], 1)
    assert [p.shape for p in parts] == [(8, 1, 4), (8, 5, 4)]
    np.testing.assert_allclose(np.asarray(parts[1]), X[:, 1:])
    parts = A.SplitTensor()(Tensor(X), 4, 1)  # 6 = 4 + 2: the last part is shorter
    assert [p.shape for p in parts] == [(8, 4, 4), (8, 2, 4)]
    with pytest.raises(ValueError, match="summing to dim 1's size 6"):
        A.SplitWithSize()(Tensor(X), [1, 4], 1)


class _Net(nn.Cell):
    def __init__(self, op, strategy, *args):
        super().__init__()
        self.op = op.shard(strategy)
        self.args = args

    def construct(self, *xs):
        return self.op(*xs, *self.args)


def _strategy(net, *xs, kind):
    table = ms.parallel.strategies(net, *xs)
    return [v for k, v in table.items() if f"/{kind}-op" in k]


def test_topk_splits_the_batch_on_8_devices_and_the_values_are_unchanged():
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8)
    net = _Net(P.TopK(), ((4, 2, 1),), 2)
    assert _strategy(net, Tensor(X), kind="TopK") == [[[4, 2, 1]]]
    np.testing.assert_allclose(np.asarray(net(Tensor(X))[0]), -np.sort(-X, axis=-1)[..., :2])
    with pytest.raises(StrategyError, match="TopK cannot split input_x dim 2"):
        _strategy(_Net(P.TopK(), ((1, 2, 4),), 2), Tensor(X), kind="TopK")


def test_inplace_add_splits_alike_but_not_dim_0():
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8)
    v = np.ones((2, 6, 4), np.float32)
    net = _Net(P.InplaceAdd((0, 3)), ((1, 2, 4), (1, 2, 4)))
    assert _strategy(net, Tensor(X), Tensor(v), kind="InplaceAdd") == [[[1, 2, 4], [1, 2, 4]]]
    want = X.copy()
    want[[0, 3]] += v
    np.testing.assert_allclose(np.asarray(net(Tensor(X), Tensor(v))), want)
    with pytest.raises(StrategyError, match="split alike"):
        _strategy(_Net(P.InplaceAdd((0, 3)), ((1, 2, 4), (1, 2, 2))), Tensor(X), Tensor(v), kind="InplaceAdd")
    with pytest.raises(StrategyError, match="InplaceAdd cannot split x dim 0"):
        _strategy(_Net(P.InplaceAdd((0, 3)), ((2, 2, 2), (2, 2, 2))), Tensor(X), Tensor(v), kind="InplaceAdd")
