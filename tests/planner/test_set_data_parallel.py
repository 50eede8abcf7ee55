"""``Cell.set_data_parallel()``: in AUTO_PARALLEL the Cell's ops without a ``shard()`` get the batch split instead of
the searched / propagated strategy (MindSpore's ``strategy_gen_mode="data_parallel"``); a hinted op keeps its hint."""

import numpy as np
import pytest

import graphpar as ms
from graphpar import nn
from graphpar.ops import operations as P
from tests.planner.helpers import kind_strategies, rand


class _Net(nn.Cell):
    def __init__(self, strategy=None):
        super().__init__()
        self.matmul = P.MatMul().shard(strategy)
        self.relu = P.ReLU()

    def construct(self, x, w):
        return self.relu(self.matmul(x, w))


@pytest.mark.parametrize("search_mode", ["recursive_programming", "sharding_propagation"])
def test_set_data_parallel_splits_the_batch_of_every_unhinted_op(search_mode):
    ms.set_auto_parallel_context(parallel_mode="auto_parallel", search_mode=search_mode, device_num=8,
                                 full_batch=True)
    x, w = rand(8, 512), rand(512, 1024, seed=1)  # a small batch and a big weight: the search splits the weight
    searched = kind_strategies(_Net(), x, w, kind="MatMul")
    assert searched != [[[8, 1], [1, 1]]]
    net = _Net()
    assert net.set_data_parallel() is net and net.matmul.attrs["strategy_gen_mode"] == "data_parallel"
    assert kind_strategies(net, x, w, kind="MatMul") == [[[8, 1], [1, 1]]]
    assert kind_strategies(net, x, w, kind="ReLU") == [[[8, 1]]]
    hinted = _Net(((1, 8), (8, 1))).set_data_parallel()
    assert kind_strategies(hinted, x, w, kind="MatMul") == [[[1, 8], [8, 1]]]
    np.testing.assert_allclose(np.asarray(net(x, w)), np.maximum(np.asarray(x) @ np.asarray(w), 0), rtol=1e-4,
                               atol=1e-4)
