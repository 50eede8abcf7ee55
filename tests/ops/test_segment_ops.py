"""UnsortedSegmentSum/Prod/Min/Max: the math against numpy (empty segments, dropped ids), one sharded plan on 8
devices (a split of the segmented rows leaves partial reductions the output combines) and a refused strategy."""

import jax
import numpy as np
import pytest

from graphpar import nn
from graphpar.errors import StrategyError
from graphpar.ops import operations as P
from tests.planner.helpers import forward, rand, shard_shape, strategies


def _numpy(kind, x, ids, n):
    init = {"Sum": 0.0, "Prod": 1.0, "Min": np.finfo(np.float32).max, "Max": np.finfo(np.float32).min}[kind]
    fn = {"Sum": np.add, "Prod": np.multiply, "Min": np.minimum, "Max": np.maximum}[kind]
    out = np.full((n,) + x.shape[ids.ndim:], init, np.float32)
    for pos in np.ndindex(ids.shape):
        if 0 <= ids[pos] < n:
            out[ids[pos]] = fn(out[ids[pos]], x[pos])
    return out


@pytest.mark.parametrize("kind", ["Sum", "Prod", "Min", "Max"])
def test_matches_numpy_with_empty_segments_and_dropped_ids(kind):
    x = rand(6, 3)
    ids = np.array([0, 2, 2, -1, 0, 7], np.int32)  # segment 1 is empty (and 3); -1 and 7 are dropped
    out = getattr(P, f"UnsortedSegment{kind}")()(x, ids, 4)
    np.testing.assert_allclose(np.asarray(out), _numpy(kind, x, ids, 4), rtol=1e-6)


class SegmentNet(nn.Cell):
    def __init__(self, kind, hint):
        super().__init__()
        self.segment = getattr(P, f"UnsortedSegment{kind}")().shard(hint)

    def construct(self, x, ids):
        return self.segment(x, ids, 5)


@pytest.mark.parametrize("kind", ["Sum", "Max"])
def test_plan_splits_rows_and_features(kind):
    x = rand(16, 8)
    ids = np.random.default_rng(4).integers(0, 5, size=(16,)).astype(np.int32)
    out, _, graph = forward(SegmentNet(kind, ((4, 2), (4,))), x, ids)
    assert strategies(graph)["segment"] == ((4, 2), (4,))
    assert shard_shape(out)[1] == 4  # the feature split carries to the output; the segment dim is whole
    np.testing.assert_allclose(np.asarray(out), _numpy(kind, x, ids, 5), rtol=1e-5, atol=1e-6)


def test_ids_split_unlike_the_rows_is_refused():
    x, ids = rand(4, 4, 8), np.zeros((4, 4), np.int32)
    with pytest.raises(StrategyError, match="segment_ids dim 1 is split 4 but input_x dim 1 is split 2"):
        forward(SegmentNet("Sum", ((2, 2, 1), (2, 4))), x, ids)


def test_prod_gradient_with_repeated_ids_and_zeros():
    x = np.array([[2.0], [3.0], [0.0], [5.0], [0.0], [0.0], [7.0]], np.float32)
    ids = np.array([0, 0, 1, 1, 2, 2, 3], np.int32)  # segment 1 has one zero, segment 2 two, 3 is alone
    grad = jax.grad(lambda a: (P.UnsortedSegmentProd()(a, ids, 4) * np.arange(1, 5)[:, None]).sum())(x)
    np.testing.assert_allclose(np.asarray(grad)[:, 0], [3.0, 2.0, 5.0 * 2, 0.0, 0.0, 0.0, 4.0])
