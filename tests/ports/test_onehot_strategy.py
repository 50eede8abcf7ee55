"""OneHot takes MindSpore's strategy form: the first entry shaped like the *output* (``OneHotInfo::CheckStrategy``
checks it against the output shape), as in ``OneHot().shard(((dp, 1), (), ()))`` of MindSpore's cross-entropy
losses. graphpar refused it ("entry 0 (8, 1) has 2 split(s) but indices has rank 1")."""

import jax.numpy as jnp
import numpy as np
import pytest

from graphpar import nn, ops
from graphpar.errors import StrategyError
from tests.planner.helpers import forward


class OneHotCell(nn.Cell):
    def __init__(self, op):
        super().__init__()
        self.one_hot = op

    def construct(self, idx):
        return self.one_hot(idx, 8, jnp.asarray(1.0), jnp.asarray(0.0))


IDX = np.arange(16, dtype=np.int32) % 8


@pytest.mark.parametrize("strategy, axis, shard_shape", [
    (((8, 1), (), ()), -1, (2, 8)),   # MindSpore's data-parallel one-hot
    (((8,), (), ()), -1, (2, 8)),     # graphpar's per-input form still works
    (((2, 4), (), ()), -1, (8, 2)),   # the depth split too: the output is split both ways
    (((1, 8), (), ()), 0, (8, 2)),    # axis 0: the depth is the output's first dimension
])
def test_output_shaped_strategy(strategy, axis, shard_shape):
    out, _, graph = forward(OneHotCell(ops.OneHot(axis=axis).shard(strategy)), IDX, full_batch=True)
    expected = np.eye(8, dtype=np.float32)[IDX]
    np.testing.assert_array_equal(np.asarray(out), expected if axis == -1 else expected.T)
    assert out.sharding.shard_shape(out.shape) == shard_shape


def test_depth_split_twice_is_refused_by_name():
    op = ops.OneHot().shard(((2, 4), (), ()), out_strategy=((2, 4),))
    with pytest.raises(StrategyError, match="'one_hot'.*depth dimension is split 4"):
        forward(OneHotCell(op), IDX, full_batch=True)
