"""CropAndResize and GridSampler2D against numpy references, and their sharding: CropAndResize splits boxes and the
image batch (crops from a split image summed across devices), GridSampler2D the batch of both inputs."""

import numpy as np
import pytest

import graphpar as ms
from graphpar import Tensor, nn
from graphpar.errors import StrategyError
from graphpar.ops import operations as P

RNG = np.random.default_rng(0)
IMAGE = RNG.standard_normal((4, 6, 5, 2)).astype(np.float32)
BOXES = np.array([[0, 0, 1, 1], [0.2, 0.1, 0.7, 0.9], [-0.2, 0.3, 0.5, 1.2], [0.5, 0.5, 0.5, 0.5]] * 2, np.float32)
INDEX = np.array([0, 1, 2, 3, 3, 2, 1, 0], np.int32)


def _crop_ref(image, boxes, index, size, fill=0.0):
    """TensorFlow's crop_and_resize (MindSpore's semantics), bilinear, one sample at a time."""
    _, h, w, c = image.shape
    out = np.zeros((len(boxes),) + size + (c,), np.float32)
    for n, ((y1, x1, y2, x2), b) in enumerate(zip(boxes, index)):
        for i in range(size[0]):
            y = y1 * (h - 1) + i * (y2 - y1) * (h - 1) / (size[0] - 1) if size[0] > 1 else 0.5 * (y1 + y2) * (h - 1)
            for j in range(size[1]):
                x = x1 * (w - 1) + j * (x2 - x1) * (w - 1) / (size[1] - 1) if size[1] > 1 else 0.5 * (x1 + x2) * (w - 1)
                if not (0 <= y <= h - 1 and 0 <= x <= w - 1):
                    out[n, i, j] = fill
                    continue
                y0, x0 = int(np.floor(y)), int(np.floor(x))
                ya, xa = min(y0 + 1, h - 1), min(x0 + 1, w - 1)
                dy, dx = y - y0, x - x0
                top = image[b, y0, x0] * (1 - dx) + image[b, y0, xa] * dx
                bottom = image[b, ya, x0] * (1 - dx) + image[b, ya, xa] * dx
                out[n, i, j] = top * (1 - dy) + bottom * dy
    return out


def test_crop_and_resize_matches_tensorflows_sampling():
    got = np.asarray(P.CropAndResize(extrapolation_value=-1.0)(Tensor(IMAGE), Tensor(BOXES), Tensor(INDEX), (3, 4)))
    np.testing.assert_allclose(got, _crop_ref(IMAGE, BOXES, INDEX, (3, 4), -1.0), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="'bilinear_v2' is not supported"):
        P.CropAndResize("bilinear_v2")


def test_grid_sampler_2d_identity_shift_and_padding():
    x = np.arange(2 * 1 * 3 * 4, dtype=np.float32).reshape(2, 1, 3, 4)
    gy, gx = np.meshgrid(np.linspace(-1, 1, 3), np.linspace(-1, 1, 4), indexing="ij")
    identity = np.broadcast_to(np.stack([gx, gy], -1), (2, 3, 4, 2)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(P.GridSampler2D(align_corners=True)(Tensor(x), Tensor(identity))), x,
                               atol=1e-5)
    shifted = identity.copy()
    shifted[..., 0] += 2 / 3  # one pixel to the right: the last column reads past the edge
    got = np.asarray(P.GridSampler2D("bilinear", "zeros", True)(Tensor(x), Tensor(shifted)))
    np.testing.assert_allclose(got[..., :3], x[..., 1:], atol=1e-5)
    np.testing.assert_allclose(got[..., 3], 0, atol=1e-5)
    border = np.asarray(P.GridSampler2D("bilinear", "border", True)(Tensor(x), Tensor(shifted)))
    np.testing.assert_allclose(border[..., 3], x[..., 3], atol=1e-5)
    reflected = np.asarray(P.GridSampler2D("nearest", "reflection", True)(Tensor(x), Tensor(shifted)))
    np.testing.assert_allclose(reflected[..., 3], x[..., 2], atol=1e-5)  # mirrored about the last pixel
    with pytest.raises(ValueError, match="'bicubic' is not supported"):
        P.GridSampler2D("bicubic")


class _Crop(nn.Cell):
    def __init__(self, strategy):
        super().__init__()
        self.crop = P.CropAndResize().shard(strategy)

    def construct(self, image, boxes, index):
        return self.crop(image, boxes, index, (3, 4))


def test_crop_and_resize_from_a_split_image_on_8_devices():
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=8)
    net = _Crop(((4, 1, 1, 1), (2, 1), (2,)))
    args = Tensor(IMAGE), Tensor(BOXES), Tensor(INDEX)
    table = ms.parallel.strategies(net, *args)
    assert [v for k, v in table.items() if "/CropAndResize-op" in k] == [[[4, 1, 1, 1], [2, 1], [2]]]
    np.testing.assert_allclose(np.asarray(net(*args)), _crop_ref(IMAGE, BOXES, INDEX, (3, 4)), rtol=1e-5, atol=1e-6)
    with pytest.raises(StrategyError, match="split alike"):
        ms.parallel.strategies(_Crop(((4, 1, 1, 1), (2, 1), (1,))), *args)
