"""ROIAlign against a loop-by-loop numpy transcription of MindSpore's kernel, and its sharding rule (features split
on N and C, rois on rois_n; H and W never): a (4, 1, 1, 1) x (2, 1) split gives the unsplit numbers."""

import math

import numpy as np
import pytest

import graphpar as ms
from graphpar import Tensor, nn
from graphpar.errors import StrategyError
from graphpar.ops import operations as P
from tests.planner.helpers import collectives, forward, kind_strategies


def _bilinear(img, y, x):
    h, w = img.shape
    if y < -1.0 or y > h or x < -1.0 or x > w:
        return 0.0
    y, x = max(y, 0.0), max(x, 0.0)
    yl, xl = int(math.floor(y)), int(math.floor(x))
    if yl >= h - 1:
        yh = yl = h - 1
        y = float(yl)
    else:
        yh = yl + 1
    if xl >= w - 1:
        xh = xl = w - 1
        x = float(xl)
    else:
        xh = xl + 1
    ly, lx = y - yl, x - xl
    return ((1 - ly) * (1 - lx) * img[yl, xl] + (1 - ly) * lx * img[yl, xh] + ly * (1 - lx) * img[yh, xl]
            + ly * lx * img[yh, xh])


def _reference(features, rois, ph, pw, scale, grid, end_mode):
    out = np.zeros((len(rois), features.shape[1], ph, pw), np.float64)
    for r, (b, x0, y0, x1, y1) in enumerate(rois):
        if abs(x0) < 0.001 and abs(x1) < 0.001:
            continue
        sx, sy = x0 * scale, y0 * scale
        rw, rh = (x1 + end_mode) * scale - sx, (y1 + end_mode) * scale - sy
        if end_mode == 0:
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        bh, bw = rh / ph, rw / pw
        for c in range(features.shape[1]):
            img = features[int(round(b)), c]
            for p in range(ph):
                for q in range(pw):
                    acc = sum(_bilinear(img, sy + p * bh + (iy + 0.5) * bh / grid, sx + q * bw + (ix + 0.5) * bw / grid)
                              for iy in range(grid) for ix in range(grid))
                    out[r, c, p, q] = acc / (grid * grid)
    return out


_FEATURES = np.random.default_rng(0).normal(size=(4, 2, 8, 10)).astype(np.float32)
_ROIS = np.array([[0, 1.0, 2.0, 12.0, 10.0], [3, -3.0, -1.0, 6.0, 25.0], [1, 0.0, 4.0, 0.0, 9.0],
                  [2, 18.0, 3.0, 30.0, 17.0], [1, 2.5, 0.5, 3.0, 1.0], [0, 5.0, 5.0, 40.0, 40.0],
                  [3, 0.4, 0.2, 7.7, 8.3], [2, 10.0, 10.0, 10.5, 10.5]], np.float32)


@pytest.mark.parametrize("end_mode", [1, 0])
def test_roi_align_matches_the_kernel(end_mode):
    out = P.ROIAlign(3, 2, 0.5, sample_num=2, roi_end_mode=end_mode)(Tensor(_FEATURES), Tensor(_ROIS))
    np.testing.assert_allclose(np.asarray(out), _reference(_FEATURES, _ROIS, 3, 2, 0.5, 2, end_mode), atol=1e-5)


def test_arguments_are_checked():
    with pytest.raises(TypeError, match="spatial_scale must be a float"):
        P.ROIAlign(2, 2, "0.5")
    with pytest.raises(ValueError, match="sample_num must be >= 1"):
        P.ROIAlign(2, 2, 0.5, sample_num=0)


class _Net(nn.Cell):
    def __init__(self, strategy=None):
        super().__init__()
        self.roi_align = P.ROIAlign(3, 2, 0.5).shard(strategy)

    def construct(self, features, rois):
        return self.roi_align(features, rois)


def test_split_batch_and_rois_gives_the_unsplit_numbers():
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8)
    x, rois = Tensor(_FEATURES), Tensor(_ROIS)
    assert kind_strategies(_Net(((4, 1, 1, 1), (2, 1))), x, rois, kind="ROIAlign") == [[[4, 1, 1, 1], [2, 1]]]
    split = np.asarray(_Net(((4, 1, 1, 1), (2, 1)))(x, rois))
    with pytest.raises(StrategyError, match="ROIAlign cannot split features dim 2"):
        ms.parallel.strategies(_Net(((2, 1, 2, 2), (1, 1))), x, rois)
    ms.reset_auto_parallel_context()
    np.testing.assert_allclose(split, np.asarray(_Net()(x, rois)), atol=1e-5)


def test_a_batch_split_completes_with_one_all_reduce():
    """MindSpore's ROIAlignInfo: each device pools the boxes of its own images, one AllReduce over the batch split
    sums them; a rois-only split moves nothing."""
    x, rois = Tensor(_FEATURES), Tensor(_ROIS)
    _, hlo, _ = forward(_Net(((4, 1, 1, 1), (2, 1))), x, rois, full_batch=True)
    assert collectives(hlo) == {"all-reduce": 1}
    _, hlo, _ = forward(_Net(((1, 1, 1, 1), (8, 1))), x, rois, full_batch=True)
    assert collectives(hlo) == {}
