"""Vision and generic transforms against hand-computed values."""

import numpy as np
import pytest

import graphpar
import graphpar.dataset.transforms.c_transforms as C
import graphpar.dataset.vision.c_transforms as vision
import graphpar.dataset.vision.py_transforms as py_vision
from graphpar.dataset import transforms
from graphpar.errors import DatasetError


def _img(h=6, w=8, c=3, dtype=np.uint8):
    return (np.arange(h * w * c) % 251).reshape(h, w, c).astype(dtype)


def test_module_aliases_are_the_same_classes():
    assert vision.RandomCrop is graphpar.dataset.vision.RandomCrop is py_vision.RandomCrop
    assert C.TypeCast is transforms.TypeCast is transforms.py_transforms.TypeCast


def test_random_crop_pads_then_crops_at_a_drawn_position():
    img = _img()
    op = vision.RandomCrop((6, 8), (1, 2, 3, 4), fill_value=(7, 8, 9))
    out = op.apply(img, np.random.default_rng(3))
    padded = np.empty((6 + 2 + 4, 8 + 1 + 3, 3), np.uint8)
    padded[...] = (7, 8, 9)
    padded[2:8, 1:9] = img
    rng = np.random.default_rng(3)
    top, left = int(rng.random() * (12 - 6 + 1)), int(rng.random() * (12 - 8 + 1))  # uniform offsets, one double each
    np.testing.assert_array_equal(out, padded[top:top + 6, left:left + 8])
    assert vision.RandomCrop(4, padding=(1, 2)).padding == (1, 2, 1, 2)  # (left/right, top/bottom)
    edge = vision.RandomCrop((8, 10), 1, padding_mode=vision.Border.EDGE).apply(img, np.random.default_rng(0))
    np.testing.assert_array_equal(edge, np.pad(img, ((1, 1), (1, 1), (0, 0)), mode="edge"))
    with pytest.raises(DatasetError, match="exceeds"):
        vision.RandomCrop(10).apply(img, np.random.default_rng(0))
    assert vision.RandomCrop(10, pad_if_needed=True).apply(img, np.random.default_rng(0)).shape == (10, 10, 3)


def test_flips_follow_prob():
    img = _img()
    rng = np.random.default_rng(0)
    np.testing.assert_array_equal(vision.RandomHorizontalFlip(1.0).apply(img, rng), img[:, ::-1])
    np.testing.assert_array_equal(vision.RandomVerticalFlip(1.0).apply(img, rng), img[::-1])
    np.testing.assert_array_equal(vision.RandomHorizontalFlip(0.0).apply(img, rng), img)


def test_resize_bilinear_matches_opencv_half_pixel_values():
    row = np.array([[[0], [255]]], np.uint8)  # 1 x 2 x 1
    out = vision.Resize((1, 4)).apply(row, None)
    assert out[0, :, 0].tolist() == [0, 64, 191, 255] and out.dtype == np.uint8
    assert vision.Resize((1, 4), vision.Inter.NEAREST).apply(row, None)[0, :, 0].tolist() == [0, 0, 255, 255]
    flat = np.full((5, 7, 3), 0.25, np.float32)
    for mode in vision.Inter:
        np.testing.assert_allclose(vision.Resize((9, 4), mode).apply(flat, None), 0.25, rtol=1e-6)
    shrink = vision.Resize((2, 2), vision.Inter.AREA).apply(np.arange(16, dtype=np.float32).reshape(4, 4, 1), None)
    np.testing.assert_allclose(shrink[..., 0], [[2.5, 4.5], [10.5, 12.5]])
    assert vision.Resize(4).apply(_img(6, 12), None).shape == (4, 8, 3)  # shorter side to 4, aspect kept
    assert vision.Resize(224).apply(_img(32, 32), None).shape == (224, 224, 3)


def test_rescale_normalize_and_layout():
    img = _img(2, 2)
    np.testing.assert_allclose(vision.Rescale(1 / 255, -0.5).apply(img, None), img / 255 - 0.5, rtol=1e-6)
    mean, std = (0.4465, 0.4822, 0.4914), (0.2010, 0.1994, 0.2023)
    scaled = img.astype(np.float32) / 255
    out = vision.Normalize(mean, std).apply(scaled, None)
    np.testing.assert_allclose(out, (scaled - np.array(mean)) / np.array(std), rtol=1e-5)
    assert out.dtype == np.float32
    on_uint8 = vision.Normalize((100, 110, 120), (2, 4, 8)).apply(img, None)
    np.testing.assert_allclose(on_uint8, (img - np.array([100, 110, 120])) / np.array([2, 4, 8]), rtol=1e-6)
    chw = vision.HWC2CHW().apply(img, None)
    assert chw.shape == (3, 2, 2) and chw.flags.c_contiguous
    np.testing.assert_allclose(py_vision.Normalize(mean, std).apply(chw / 255, None),
                               vision.HWC2CHW().apply(out, None), rtol=1e-5)
    with pytest.raises(DatasetError, match="is_hwc"):
        vision.Normalize(mean, std).apply(chw, None)
    tensor = vision.ToTensor().apply(img, None)
    np.testing.assert_allclose(tensor, chw / 255, rtol=1e-6)


def test_center_crop_pad_and_random_resized_crop():
    img = _img(6, 8)
    np.testing.assert_array_equal(vision.CenterCrop((2, 4)).apply(img, None), img[2:4, 2:6])
    padded = vision.CenterCrop(10).apply(img, None)
    assert padded.shape == (10, 10, 3) and padded[0].sum() == 0
    np.testing.assert_array_equal(padded[2:8, 1:9], img)
    np.testing.assert_array_equal(vision.Pad((1, 2)).apply(img, None)[2:8, 1:9], img)
    out = vision.RandomResizedCrop(5).apply(_img(20, 30), np.random.default_rng(1))
    assert out.shape == (5, 5, 3) and out.dtype == np.uint8


def test_generic_transforms():
    label = np.array(3, np.uint32)
    cast = C.TypeCast(graphpar.int32)(label)
    assert isinstance(cast, np.ndarray) and cast.dtype == np.int32 and cast == 3
    assert C.TypeCast("float16")(label).dtype == np.float16
    np.testing.assert_array_equal(C.OneHot(4)(np.array([1, 3])), [[0, 1, 0, 0], [0, 0, 0, 1]])
    np.testing.assert_allclose(C.OneHot(4, 0.2)(np.array(0)), [0.85, 0.05, 0.05, 0.05])
    compose = C.Compose([vision.Rescale(2.0, 0.0), vision.HWC2CHW()])
    assert compose(_img(2, 3)).shape == (3, 2, 3) and not compose.is_random
    assert C.Compose([vision.RandomHorizontalFlip(), vision.HWC2CHW()]).is_random
    a, b = C.Duplicate()(np.arange(3))
    assert a.tolist() == b.tolist() == [0, 1, 2]
    np.testing.assert_array_equal(C.RandomApply([vision.RandomHorizontalFlip(1.0)], prob=1.0)(_img()),
                                  _img()[:, ::-1])
    with pytest.raises(DatasetError, match="not a dtype"):
        C.TypeCast("nonsense")


def test_eager_random_transforms_follow_the_dataset_seed():
    from graphpar.dataset import config

    img = _img(16, 16)
    config.set_seed(7)
    first = [vision.RandomCrop(8)(img) for _ in range(3)]
    config.set_seed(7)
    again = [vision.RandomCrop(8)(img) for _ in range(3)]
    for x, y in zip(first, again):
        np.testing.assert_array_equal(x, y)
