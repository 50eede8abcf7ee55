"""Cdist, CheckValid, SplitV, TopK, ArgMinWithValue, ResizeBilinearV2 and ResizeNearestNeighbor: the math against
numpy, one sharded plan each on 8 devices (strategy and result), and the splits MindSpore's infos refuse."""

import jax
import numpy as np
import pytest

import graphpar as ms
from graphpar import nn
from graphpar.errors import StrategyError
from graphpar.ops import operations as P
from tests.planner.helpers import OneOp, forward, rand, shard_shape, strategies


def _cdist(x, y, p):
    return (np.abs(x[..., :, None, :] - y[..., None, :, :]) ** p).sum(-1) ** (1 / p)


def test_cdist_matches_numpy_and_splits_batch_and_rows():
    x, y = rand(2, 8, 5), rand(2, 4, 5, seed=1)
    np.testing.assert_allclose(np.asarray(P.Cdist()(x, y)), _cdist(x, y, 2), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(P.Cdist(p=1.0)(x, y)), _cdist(x, y, 1), rtol=1e-5)
    assert np.isfinite(np.asarray(jax.grad(lambda a: P.Cdist()(a, a).sum())(x))).all()  # zero distances
    out, _, graph = forward(OneOp(P.Cdist().shard(((2, 4, 1), (2, 1, 1)))), x, y)
    assert strategies(graph)["op"] == ((2, 4, 1), (2, 1, 1)) and shard_shape(out) == (1, 2, 4)
    np.testing.assert_allclose(np.asarray(out), _cdist(x, y, 2), rtol=1e-5)
    with pytest.raises(StrategyError, match="input_y dim 0 is split 1 but input_x dim 0 is split 2"):
        forward(OneOp(P.Cdist().shard(((2, 2, 1), (1, 2, 1)))), x, y)
    with pytest.raises(StrategyError, match="Cdist cannot split input_x dim 2"):
        forward(OneOp(P.Cdist().shard(((1, 1, 5), (1, 1, 1)))), x, y)


def test_check_valid_matches_mindspores_example_and_splits_boxes():
    boxes, meta = np.linspace(0, 6, 12).reshape(3, 4).astype(np.float32), np.array([2, 1, 3], np.float32)
    np.testing.assert_array_equal(np.asarray(P.CheckValid()(boxes, meta)), [True, False, False])
    many = np.abs(rand(16, 4)) * 3
    out, _, graph = forward(OneOp(P.CheckValid().shard(((8, 1), (1,)))), many, meta)
    assert strategies(graph)["op"] == ((8, 1), (1,)) and shard_shape(out) == (2,)
    want = (many[:, 0] >= 0) & (many[:, 1] >= 0) & (many[:, 2] <= 2) & (many[:, 3] <= 5)
    np.testing.assert_array_equal(np.asarray(out), want)
    with pytest.raises(StrategyError, match="CheckValid cannot split bboxes dim 1"):
        forward(OneOp(P.CheckValid().shard(((2, 2), (1,)))), many, meta)


class SplitVNet(nn.Cell):
    def __init__(self, hint):
        super().__init__()
        self.split_v = P.SplitV((3, -1, 2), 1, 3).shard(hint)

    def construct(self, x):
        a, b, c = self.split_v(x)
        return a.sum(1) + b.sum(1) * 2 + c.sum(1) * 3


def test_split_v_sizes_with_minus_one_and_plan():
    x = rand(8, 8, 4)
    parts = P.SplitV((3, -1, 2), 1, 3)(x)
    assert [p.shape[1] for p in parts] == [3, 3, 2]
    np.testing.assert_array_equal(np.asarray(parts[1]), x[:, 3:6])
    out, _, graph = forward(SplitVNet(((2, 1, 4),)), x)
    assert strategies(graph)["split_v"] == ((2, 1, 4),)
    want = x[:, :3].sum(1) + x[:, 3:6].sum(1) * 2 + x[:, 6:].sum(1) * 3
    np.testing.assert_allclose(np.asarray(out), want, rtol=1e-5)
    with pytest.raises(StrategyError, match="SplitV cannot split x dim 1"):
        forward(SplitVNet(((1, 2, 4),)), x)


def test_top_k_and_arg_min_with_value():
    x = rand(8, 16)
    values, idx = P.TopK()(x, 3)
    np.testing.assert_allclose(np.asarray(values), -np.sort(-x, axis=1)[:, :3])
    np.testing.assert_array_equal(np.asarray(idx), np.argsort(-x, axis=1)[:, :3])
    out, _, graph = forward(OneOp(P.TopK().shard(((8, 1),)), 3), x)
    assert strategies(graph)["op"] == ((8, 1),) and shard_shape(out[0]) == (1, 3)
    np.testing.assert_allclose(np.asarray(out[0]), -np.sort(-x, axis=1)[:, :3])
    with pytest.raises(StrategyError, match="TopK cannot split x dim 1"):
        forward(OneOp(P.TopK().shard(((1, 8),)), 3), x)
    index, value = P.ArgMinWithValue(axis=1)(x)
    np.testing.assert_array_equal(np.asarray(index), x.argmin(1))
    np.testing.assert_allclose(np.asarray(value), x.min(1))
    out, _, graph = forward(OneOp(P.ArgMinWithValue(axis=1).shard(((8, 1),))), x)
    assert strategies(graph)["op"] == ((8, 1),)
    np.testing.assert_allclose(np.asarray(out[1]), x.min(1))


def test_resize_bilinear_conventions():
    x = np.arange(4, dtype=np.float32).reshape(1, 1, 1, 4)
    legacy = P.ResizeBilinearV2()(x, (1, 8))  # source = i * 4 / 8
    np.testing.assert_allclose(np.asarray(legacy)[0, 0, 0], [0, 0.5, 1, 1.5, 2, 2.5, 3, 3])
    corners = P.ResizeBilinearV2(align_corners=True)(x, (1, 7))  # source = i * 3 / 6
    np.testing.assert_allclose(np.asarray(corners)[0, 0, 0], [0, 0.5, 1, 1.5, 2, 2.5, 3])
    half = P.ResizeBilinearV2(half_pixel_centers=True)(x, (1, 8))  # source = (i + .5) / 2 - .5, clamped at 0
    np.testing.assert_allclose(np.asarray(half)[0, 0, 0], [0, 0.25, 0.75, 1.25, 1.75, 2.25, 2.75, 3])
    with pytest.raises(ValueError, match="cannot both be True"):
        P.ResizeBilinearV2(True, True)


def test_resize_nearest_and_plans():
    x = rand(4, 2, 4, 4)
    near = P.ResizeNearestNeighbor((8, 8))(x)
    np.testing.assert_array_equal(np.asarray(near), x.repeat(2, 2).repeat(2, 3))
    out, _, graph = forward(OneOp(P.ResizeNearestNeighbor((8, 8)).shard(((2, 1, 2, 2),))), x)
    assert strategies(graph)["op"] == ((2, 1, 2, 2),) and shard_shape(out) == (2, 2, 4, 4)
    np.testing.assert_array_equal(np.asarray(out), x.repeat(2, 2).repeat(2, 3))
    with pytest.raises(StrategyError, match="ResizeNearestNeighbor cannot split x dim 2"):
        forward(OneOp(P.ResizeNearestNeighbor((8, 8), align_corners=True).shard(((2, 1, 2, 2),))), x)
    out, _, graph = forward(OneOp(P.ResizeBilinearV2().shard(((2, 2, 1, 2),)), (8, 8)), x)
    assert strategies(graph)["op"] == ((2, 2, 1, 2),) and shard_shape(out) == (2, 1, 8, 4)
    np.testing.assert_allclose(np.asarray(out), np.asarray(P.ResizeBilinearV2()(x, (8, 8))), rtol=1e-6)
    with pytest.raises(StrategyError, match="ResizeBilinearV2 cannot split x dim 2"):
        forward(OneOp(P.ResizeBilinearV2().shard(((1, 1, 2, 1),)), (8, 8)), x)


def test_virtual_dataset_is_the_identity():
    from graphpar.ops.operations.comm_ops import _VirtualDataset
    x, y = rand(2, 2), rand(3)
    a, b = _VirtualDataset()(x, y)
    assert a is x and b is y and _VirtualDataset()(x) is x


def _crop_numpy(x, boxes, box_index, size, fill=0.0):
    n_h, n_w = size
    _, height, width, _ = x.shape
    out = np.full((len(boxes), n_h, n_w, x.shape[3]), fill, np.float32)
    for b, (y1, x1, y2, x2) in enumerate(boxes):
        for i in range(n_h):
            y = y1 * (height - 1) + i * (y2 - y1) * (height - 1) / (n_h - 1)
            for j in range(n_w):
                xx = x1 * (width - 1) + j * (x2 - x1) * (width - 1) / (n_w - 1)
                if not (0 <= y <= height - 1 and 0 <= xx <= width - 1):
                    continue
                y0, x0 = int(np.floor(y)), int(np.floor(xx))
                y1_, x1_ = min(y0 + 1, height - 1), min(x0 + 1, width - 1)
                dy, dx = y - y0, xx - x0
                img = x[box_index[b]]
                top = img[y0, x0] * (1 - dx) + img[y0, x1_] * dx
                bottom = img[y1_, x0] * (1 - dx) + img[y1_, x1_] * dx
                out[b, i, j] = top * (1 - dy) + bottom * dy
    return out


def test_crop_and_resize_matches_numpy_and_splits_boxes():
    x = rand(4, 6, 5, 8)
    boxes = np.array([[0, 0, 1, 1], [0.2, 0.1, 0.9, 0.7], [-0.2, 0.3, 0.5, 1.2], [0.5, 0.5, 0.5, 0.5]], np.float32)
    box_index = np.array([0, 3, 1, 2], np.int32)
    want = _crop_numpy(x, boxes, box_index, (3, 4))
    np.testing.assert_allclose(np.asarray(P.CropAndResize()(x, boxes, box_index, (3, 4))), want, rtol=1e-5,
                               atol=1e-6)
    out, _, graph = forward(OneOp(P.CropAndResize().shard(((2, 1, 1, 2), (2, 1), (2,))), (3, 4)), x, boxes,
                            box_index)
    assert strategies(graph)["op"] == ((2, 1, 1, 2), (2, 1), (2,)) and shard_shape(out) == (2, 3, 4, 4)
    np.testing.assert_allclose(np.asarray(out), want, rtol=1e-5, atol=1e-6)
    with pytest.raises(StrategyError, match="box_index dim 0 is split 1 but boxes dim 0 is split 2"):
        forward(OneOp(P.CropAndResize().shard(((4, 1, 1, 1), (2, 1), (1,))), (3, 4)), x, boxes, box_index)


def _iou_numpy(anchors, gts, mode="iou"):
    out = np.zeros((len(gts), len(anchors)), np.float32)
    for m, g in enumerate(gts):
        for n, a in enumerate(anchors):
            w = max(0.0, min(a[2], g[2]) - max(a[0], g[0]) + 1)
            h = max(0.0, min(a[3], g[3]) - max(a[1], g[1]) + 1)
            area_a = (a[2] - a[0] + 1) * (a[3] - a[1] + 1)
            area_g = (g[2] - g[0] + 1) * (g[3] - g[1] + 1)
            out[m, n] = w * h / ((area_g if mode == "iof" else area_a + area_g - w * h) + 1e-10)
    return out


def test_iou_matches_mindspores_kernel_formula_and_splits_boxes():
    rng = np.random.default_rng(5)
    lo = rng.integers(0, 10, size=(16, 2)).astype(np.float32)
    anchors = np.concatenate([lo, lo + rng.integers(1, 8, size=(16, 2))], 1)
    lo = rng.integers(0, 10, size=(8, 2)).astype(np.float32)
    gts = np.concatenate([lo, lo + rng.integers(1, 8, size=(8, 2))], 1)
    np.testing.assert_allclose(np.asarray(P.IOU()(anchors, gts)), _iou_numpy(anchors, gts), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(P.IOU("iof")(anchors, gts)), _iou_numpy(anchors, gts, "iof"), rtol=1e-5)
    out, _, graph = forward(OneOp(P.IOU().shard(((2, 1), (4, 1)))), anchors, gts)
    assert strategies(graph)["op"] == ((2, 1), (4, 1)) and shard_shape(out) == (2, 8)
    np.testing.assert_allclose(np.asarray(out), _iou_numpy(anchors, gts), rtol=1e-5)
    with pytest.raises(StrategyError, match="IOU cannot split anchor_boxes dim 1"):
        forward(OneOp(P.IOU().shard(((2, 2), (2, 1)))), anchors, gts)


def test_get_next_is_refused_with_what_to_write_instead():
    """MindSpore's GetNext reads the dataset sink's device queue; graphpar has none and feeds the batch as the
    step's inputs, so building the op says to take the batch as construct's arguments."""
    from graphpar.errors import UnsupportedOpError

    with pytest.raises(UnsupportedOpError, match=r"GetNext: reads the device data queue 'q'.*construct\(self, data, "
                                                 r"label\).*shapes \[\[32, 64\], \[32\]\]"):
        P.GetNext([ms.float32, ms.int32], [[32, 64], [32]], 2, "q")
    assert issubclass(UnsupportedOpError, NotImplementedError)
