"""Per-batch execution of deterministic map tails (dataset/_batched.py) and device prefetch (train/feeding.py)."""

import threading
import time

import numpy as np
import pytest
from dsfiles import cifar10_dir

import graphpar.dataset as ds
import graphpar.dataset.transforms.c_transforms as C
import graphpar.dataset.vision.c_transforms as vision
from graphpar import dtype as mstype
from graphpar.dataset import _batched
from graphpar.errors import ConfigError, DatasetError
from graphpar.train.feeding import DevicePrefetch, prefetched

MEAN, STD = (0.4465, 0.4822, 0.4914), (0.2010, 0.1994, 0.2023)


def _seeds_pipeline(path, size, keep_per_sample=False, workers=None):
    """The seeds' create_dataset; ``keep_per_sample`` ends the image map with a plain function, which keeps the
    whole map per sample (the reference the batched form must reproduce)."""
    data = ds.Cifar10Dataset(path, usage="train", num_parallel_workers=workers)
    ops = [vision.RandomCrop((32, 32), (4, 4, 4, 4)), vision.RandomHorizontalFlip(), vision.Resize((size, size)),
           vision.Rescale(1.0 / 255.0, 0.0), vision.Normalize(MEAN, STD), vision.HWC2CHW()]
    if keep_per_sample:
        ops.append(lambda x: x)
    data = data.map(operations=C.TypeCast(mstype.int32), input_columns="label")
    data = data.map(operations=ops, input_columns="image")
    return data.shuffle(buffer_size=10).batch(8, drop_remainder=True)


@pytest.fixture
def cifar(tmp_path):
    return str(cifar10_dir(tmp_path, n_train=48, n_test=8, per_file=12))


@pytest.mark.parametrize("size", [32, 40])
def test_batched_tail_gives_the_per_sample_values_and_draws(cifar, size):
    fast = _seeds_pipeline(cifar, size)
    plan = _batched.plan(fast)
    assert [type(op).__name__ for _, ops in plan.ops for op in ops] == ["TypeCast", "Rescale", "Normalize",
                                                                        "HWC2CHW"]
    assert sorted(plan.keep.values()) == [0, 3]  # TypeCast moves whole; crop, flip, resize stay per sample
    slow = _batched.plan(_seeds_pipeline(cifar, size, keep_per_sample=True))
    assert [type(op).__name__ for _, ops in slow.ops for op in ops] == ["TypeCast"]  # the image map stays whole
    ref = list(_seeds_pipeline(cifar, size, keep_per_sample=True).iter_epoch(1))
    got = list(fast.iter_epoch(1))
    assert len(got) == len(ref) == 6
    for (gx, gy), (rx, ry) in zip(got, ref):
        assert gx.dtype == rx.dtype == np.float32 and gx.shape == rx.shape == (8, 3, size, size)
        assert gy.dtype == ry.dtype == np.int32
        np.testing.assert_array_equal(gy, ry)
        np.testing.assert_allclose(gx, rx, rtol=1e-5, atol=1e-5)


def test_a_map_below_per_sample_work_on_its_column_is_not_moved(cifar):
    data = ds.Cifar10Dataset(cifar, usage="train")
    data = data.map(vision.Rescale(1.0 / 255.0, 0.0), input_columns="image")
    data = data.map([vision.RandomHorizontalFlip()], input_columns="image").batch(4)
    assert _batched.plan(data) is None


def test_a_batched_error_names_the_operation(cifar):
    data = ds.Cifar10Dataset(cifar, usage="train").map(vision.Normalize((0.5, 0.5), (0.2, 0.2)),
                                                       input_columns="image").batch(4)
    with pytest.raises(DatasetError, match=r"Normalize.*2 mean values.*3 channels"):
        next(data.iter_epoch(0))


def test_device_prefetch_keeps_order_runs_ahead_and_forwards_errors():
    placed_by: list[str] = []

    def place(batch):
        placed_by.append(threading.current_thread().name)
        return ("placed", batch)

    pairs = list(prefetched(iter([(i,) for i in range(6)]), place, depth=2))
    assert pairs == [((i,), ("placed", (i,))) for i in range(6)]
    assert placed_by[0] == threading.current_thread().name  # the first placement plans: on the caller's thread
    assert set(placed_by[1:]) == {"graphpar-device-prefetch"}

    placed = []
    ahead = DevicePrefetch(iter([(i,) for i in range(10)]), lambda b: placed.append(b) or b, depth=2)
    next(ahead)
    deadline = time.monotonic() + 10
    while len(placed) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(placed) >= 3  # placed ahead of the consumer, bounded by the depth
    ahead.close()

    def broken():
        yield (0,)
        raise DatasetError("bad row 1")

    with pytest.raises(DatasetError, match="bad row 1"):
        list(prefetched(broken(), lambda b: b, depth=2))
    assert list(prefetched(iter([(1,)]), None, depth=2)) == [((1,), (1,))]


def test_device_prefetch_size_setting(monkeypatch):
    monkeypatch.setattr(ds.config, "_device_prefetch", None)
    monkeypatch.delenv(ds.config.DEVICE_PREFETCH_ENV, raising=False)
    assert ds.config.get_device_prefetch_size() == 2
    monkeypatch.setenv(ds.config.DEVICE_PREFETCH_ENV, "0")
    assert ds.config.get_device_prefetch_size() == 0
    monkeypatch.setenv(ds.config.DEVICE_PREFETCH_ENV, "many")
    with pytest.raises(ConfigError, match="GRAPHPAR_DEVICE_PREFETCH"):
        ds.config.get_device_prefetch_size()
    ds.config.set_device_prefetch_size(3)
    assert ds.config.get_device_prefetch_size() == 3
    with pytest.raises(ConfigError):
        ds.config.set_device_prefetch_size(-1)
