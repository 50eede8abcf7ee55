"""The Parameter-updating scatters (ScatterUpdate/Add/Sub/Mul/Div/Min/Max, ScatterNdUpdate/Add/Sub): results against
numpy, the Parameter written back in place (as MindSpore), and their sharding: indices whole, the trailing dims of
input_x and updates split alike, ScatterUpdate's indexed dim whole."""

import numpy as np
import pytest

import graphpar as ms
from graphpar import Parameter, Tensor, nn
from graphpar.errors import StrategyError
from graphpar.ops import operations as P

X = np.arange(24, dtype=np.float32).reshape(4, 6) + 1
IDX = np.array([[2, 0], [2, 3]], np.int32)
UPD = np.full((2, 2, 6), 2.0, np.float32)


@pytest.mark.parametrize("op, ufunc", [(P.ScatterAdd, np.add), (P.ScatterSub, np.subtract),
                                       (P.ScatterMul, np.multiply), (P.ScatterDiv, np.divide),
                                       (P.ScatterMin, np.minimum), (P.ScatterMax, np.maximum)])
def test_row_scatters_accumulate_repeated_indices(op, ufunc):
    want = X.copy()
    ufunc.at(want, IDX.reshape(-1), UPD.reshape(-1, 6))
    np.testing.assert_allclose(np.asarray(op()(Tensor(X), Tensor(IDX), Tensor(UPD))), want)


def test_update_and_nd_scatters():
    want = X.copy()
    want[[1, 3]] = -1
    got = P.ScatterUpdate()(Tensor(X), Tensor(np.array([1, 3], np.int32)), Tensor(np.full((2, 6), -1, np.float32)))
    np.testing.assert_allclose(np.asarray(got), want)
    nd = np.array([[0, 1], [3, 5], [0, 1]], np.int32)
    want = X.copy()
    np.add.at(want, (nd[:, 0], nd[:, 1]), 10)
    np.testing.assert_allclose(np.asarray(P.ScatterNdAdd()(Tensor(X), Tensor(nd), Tensor(np.full(3, 10.0)))), want)
    with pytest.raises(ValueError, match=r"updates of shape \(2, 2, 6\)"):
        P.ScatterAdd()(Tensor(X), Tensor(IDX), Tensor(np.ones((2, 6), np.float32)))


class _Net(nn.Cell):
    def __init__(self, op, strategy):
        super().__init__()
        self.table = Parameter(Tensor(X), "table")
        self.indices = Tensor(IDX)
        self.scatter = op.shard(strategy)

    def construct(self, updates):
        return self.scatter(self.table, self.indices, updates)


def test_the_parameter_is_updated_in_place_and_split_on_8_devices():
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8)
    net = _Net(P.ScatterAdd(), ((4, 2), (1, 1), (1, 1, 2)))
    table = ms.parallel.strategies(net, Tensor(UPD))
    assert [v for k, v in table.items() if "/ScatterAdd-op" in k] == [[[4, 2], [1, 1], [1, 1, 2]]]
    want = X.copy()
    np.add.at(want, IDX.reshape(-1), UPD.reshape(-1, 6))
    np.testing.assert_allclose(np.asarray(net(Tensor(UPD))), want)
    np.testing.assert_allclose(np.asarray(net.table.get_value()), want)  # written back, as MindSpore's in-place op


def test_scatter_update_keeps_its_rows_whole_and_updates_split_alike():
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8)
    with pytest.raises(StrategyError, match="ScatterUpdate cannot split input_x dim 0"):
        ms.parallel.strategies(_Net(P.ScatterUpdate(), ((2, 2), (1, 1), (1, 1, 2))), Tensor(UPD))
    with pytest.raises(StrategyError, match="split alike"):
        ms.parallel.strategies(_Net(P.ScatterUpdate(), ((1, 2), (1, 1), (1, 1, 1))), Tensor(UPD))
