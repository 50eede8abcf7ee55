"""GatherNd, GatherD, TensorScatterUpdate and BroadcastTo: the math against numpy, one sharded plan each on 8
devices (strategy and result), and the strategies MindSpore's infos refuse."""

import numpy as np
import pytest

from graphpar import Tensor, nn, ops
from graphpar.errors import StrategyError
from graphpar.ops import operations as P
from tests.planner.helpers import OneOp, forward, rand, shard_shape, strategies


def test_gather_nd_matches_numpy():
    x = rand(4, 5, 6)
    idx = np.array([[[0, 1], [3, 4]], [[2, 2], [1, 0]]], np.int32)  # (2, 2, 2): pairs into x's first two dims
    out = np.asarray(P.GatherNd()(x, idx))
    assert out.shape == (2, 2, 6)
    np.testing.assert_array_equal(out, x[idx[..., 0], idx[..., 1]])


def test_gather_nd_index_deeper_than_rank_is_refused():
    with pytest.raises(ValueError, match=r"indices.shape\[-1\] \(3\) must be <= the rank of input_x \(2\)"):
        P.GatherNd()(rand(4, 4), np.zeros((2, 3), np.int32))


def test_gather_nd_plan_splits_the_indices_only():
    x = rand(8, 16)
    idx = np.random.default_rng(1).integers(0, 8, size=(16, 4, 1)).astype(np.int32)
    out, _, graph = forward(OneOp(P.GatherNd().shard(((1, 1), (4, 2, 1)))), x, idx)
    assert strategies(graph)["op"] == ((1, 1), (4, 2, 1))
    assert shard_shape(out) == (4, 2, 16)
    np.testing.assert_array_equal(np.asarray(out), x[idx[..., 0]])


@pytest.mark.parametrize("hint, where", [(((2, 1), (4, 1, 1)), "input_x dim 0"),
                                         (((1, 1), (1, 1, 2)), "indices dim 2")])
def test_gather_nd_refuses_a_split_table_or_index_tuple(hint, where):
    with pytest.raises(StrategyError, match=f"GatherNd cannot split {where}"):
        forward(OneOp(P.GatherNd().shard(hint)), rand(8, 16), np.zeros((16, 4, 2), np.int32))


class GatherDNet(nn.Cell):
    def __init__(self, hint):
        super().__init__()
        self.gather_d = P.GatherD().shard(hint)

    def construct(self, x, index):
        return self.gather_d(x, 1, index)


def test_gather_d_matches_numpy_and_keeps_dim_whole():
    x = rand(8, 6)
    idx = np.random.default_rng(2).integers(0, 6, size=(8, 4)).astype(np.int32)
    np.testing.assert_array_equal(np.asarray(P.GatherD()(x, 1, idx)), np.take_along_axis(x, idx, 1))
    out, _, graph = forward(GatherDNet(((8, 1), (8, 1))), x, idx)
    assert strategies(graph)["gather_d"] == ((8, 1), (8, 1)) and shard_shape(out) == (1, 4)
    np.testing.assert_array_equal(np.asarray(out), np.take_along_axis(x, idx, 1))
    # x's gathered dimension may split (each device answers the indices in its slice); index's may not
    out, _, graph = forward(GatherDNet(((4, 2), (4, 1))), x, idx)
    assert strategies(graph)["gather_d"] == ((4, 2), (4, 1)) and shard_shape(out) == (2, 4)
    np.testing.assert_array_equal(np.asarray(out), np.take_along_axis(x, idx, 1))
    with pytest.raises(StrategyError, match="GatherD cannot split index dim 1"):
        forward(GatherDNet(((4, 2), (4, 2))), x, idx)


def test_tensor_scatter_update_matches_numpy():
    x = rand(6, 4)
    idx = np.array([[1], [4]], np.int32)
    upd = rand(2, 4, seed=3)
    want = x.copy()
    want[[1, 4]] = upd
    np.testing.assert_array_equal(np.asarray(P.TensorScatterUpdate()(x, idx, upd)), want)


def test_tensor_scatter_update_plan_splits_the_trailing_dims():
    x, idx, upd = rand(6, 8), np.array([[1], [4]], np.int32), rand(2, 8, seed=3)
    out, _, graph = forward(OneOp(P.TensorScatterUpdate().shard(((1, 8), (1, 1), (1, 8)))), x, idx, upd)
    assert strategies(graph)["op"] == ((1, 8), (1, 1), (1, 8)) and shard_shape(out) == (6, 1)
    want = x.copy()
    want[[1, 4]] = upd
    np.testing.assert_array_equal(np.asarray(out), want)
    with pytest.raises(StrategyError, match="TensorScatterUpdate cannot split input_x dim 0"):
        forward(OneOp(P.TensorScatterUpdate().shard(((2, 4), (1, 1), (1, 4)))), x, idx, upd)


def test_broadcast_to_matches_numpy_with_minus_one():
    x = rand(1, 3)
    out = P.BroadcastTo((2, 4, -1))(x)
    np.testing.assert_array_equal(np.asarray(out), np.broadcast_to(x, (2, 4, 3)))
    with pytest.raises(ValueError, match="each entry must be a positive int or -1"):
        P.BroadcastTo((2, 0))


def test_broadcast_to_plan_follows_the_kept_dims():
    x = rand(1, 16, 8)
    out, _, graph = forward(OneOp(P.BroadcastTo((4, 16, 8)).shard(((1, 4, 2),))), x)
    assert strategies(graph)["op"] == ((1, 4, 2),) and shard_shape(out) == (4, 4, 4)
    np.testing.assert_array_equal(np.asarray(out), np.broadcast_to(x, (4, 16, 8)))


def test_operations_is_a_package_with_mindspore_submodules():
    from graphpar.ops.operations import _inner_ops, array_ops, comm_ops, math_ops, nn_ops
    assert comm_ops.AllReduce is P.AllReduce and nn_ops.RmsNorm is P.RmsNorm and array_ops.GatherNd is ops.GatherNd
    assert math_ops.Lerp is ops.Lerp and _inner_ops.SiLU is P.SiLU


def test_sparse_gather_v2_is_gather_and_plans_as_gather():
    table, idx = rand(16, 8), np.array([[1, 3], [15, 0]], np.int32)
    out, _, graph = forward(OneOp(P.SparseGatherV2().shard(((1, 8), (1, 1))), 0), table, idx)
    assert strategies(graph)["op"] == ((1, 8), (1, 1)) and shard_shape(out) == (2, 2, 1)
    np.testing.assert_array_equal(np.asarray(out), table[idx])


@pytest.mark.parametrize("paddings, contiguous, widths", [((1, 2), True, ((0, 0), (0, 0), (1, 2))),
                                                          ((0, 0, 1, 2), True, ((0, 0), (1, 2), (0, 0))),
                                                          ((1, 0, 2, 3), False, ((0, 0), (0, 3), (1, 2)))])
def test_pad_v3_pads_the_last_dimensions_first(paddings, contiguous, widths):
    x = rand(2, 3, 4)
    out = P.PadV3(paddings_contiguous=contiguous)(x, paddings, 0.5)
    np.testing.assert_array_equal(np.asarray(out), np.pad(x, widths, constant_values=0.5))


def test_pad_v3_modes_and_cropping():
    x = rand(3, 4)
    np.testing.assert_array_equal(np.asarray(P.PadV3("reflect")(x, (1, 1))), np.pad(x, ((0, 0), (1, 1)), "reflect"))
    np.testing.assert_array_equal(np.asarray(P.PadV3("circular")(x, (2, 1))), np.pad(x, ((0, 0), (2, 1)), "wrap"))
    np.testing.assert_array_equal(np.asarray(P.PadV3()(x, (-1, 0))), x[:, 1:])  # a negative width crops


def test_pad_v3_plan_keeps_padded_dims_whole():
    x = rand(8, 16, 8)
    net = OneOp(P.PadV3().shard(((2, 4, 1), (1,), ())), (1, 2), np.float32(0.5))
    out, _, graph = forward(net, x)
    assert strategies(graph)["op"] == ((2, 4, 1), ()) and shard_shape(out) == (4, 4, 11)  # x and value
    np.testing.assert_array_equal(np.asarray(out), np.pad(x, ((0, 0), (0, 0), (1, 2)), constant_values=0.5))
    with pytest.raises(StrategyError, match="PadV3 cannot split x dim 2"):
        forward(OneOp(P.PadV3().shard(((2, 2, 2), (1,), ())), (1, 2), np.float32(0.5)), x)
    with pytest.raises(StrategyError, match=r"paddings' entry \(2,\) must be all 1"):
        P.PadV3().shard(((2, 2, 2), (2,), ()))


class EmbeddingNet(nn.Cell):
    def __init__(self, hint, offset):
        super().__init__()
        self.lookup = P.EmbeddingLookup().shard(hint)
        self.offset = offset

    def construct(self, table, idx):
        return self.lookup(table, idx, self.offset)


def test_embedding_lookup_offset_zero_fills_and_row_split():
    table = rand(8, 4)
    idx = np.array([[2, 9], [5, 1]], np.int32)  # with offset 1: rows 1, 8 (outside: zeros), 4, 0
    want = np.stack([table[i - 1] if 0 <= i - 1 < 8 else np.zeros(4, np.float32) for i in idx.ravel()]).reshape(
        2, 2, 4)
    np.testing.assert_array_equal(np.asarray(P.EmbeddingLookup()(table, idx, 1)), want)
    out, _, graph = forward(EmbeddingNet(((8, 1), (1, 1)), 1), table, idx)
    assert strategies(graph)["lookup"] == ((8, 1), (1, 1))
    np.testing.assert_array_equal(np.asarray(out), want)


@pytest.mark.parametrize("kind, combine", [("InplaceAdd", lambda a, b: a + b), ("InplaceSub", lambda a, b: a - b),
                                           ("InplaceUpdate", lambda a, b: b)])
def test_inplace_ops_match_numpy_and_keep_rows_whole(kind, combine):
    x, v = rand(6, 4, 8), rand(2, 4, 8, seed=1)
    want = x.copy()
    want[[1, 4]] = combine(x[[1, 4]], v)
    np.testing.assert_allclose(np.asarray(getattr(P, kind)((1, 4))(x, v)), want, rtol=1e-6)
    out, _, graph = forward(OneOp(getattr(P, kind)((1, 4)).shard(((1, 4, 2), (1, 4, 2)))), x, v)
    assert strategies(graph)["op"] == ((1, 4, 2), (1, 4, 2)) and shard_shape(out) == (6, 1, 4)
    np.testing.assert_allclose(np.asarray(out), want, rtol=1e-6)
    with pytest.raises(StrategyError, match=f"{kind} cannot split x dim 0"):
        forward(OneOp(getattr(P, kind)((1, 4)).shard(((2, 4, 1), (2, 4, 1)))), x, v)


def test_pad_v3_takes_constant_paddings_and_refuses_traced_ones():
    class Held(nn.Cell):
        def __init__(self):
            super().__init__()
            self.pad = P.PadV3()
            self.paddings = Tensor(np.array([1, 2]))  # a Tensor attribute: a constant of the graph, as in MindSpore

        def construct(self, x):
            return self.pad(x, self.paddings)

    class Given(nn.Cell):
        def __init__(self):
            super().__init__()
            self.pad = P.PadV3()

        def construct(self, x, paddings):
            return self.pad(x, paddings)  # an input of the network: traced

    x = rand(8, 4)
    out, _, _ = forward(Held(), x)
    np.testing.assert_allclose(np.asarray(out), np.asarray(P.PadV3()(x, Tensor(np.array([1, 2])))))
    assert np.shape(out) == (8, 7)
    with pytest.raises(ValueError, match="paddings must be known when the network is compiled"):
        forward(Given(), x, Tensor(np.array([1, 2])))
