"""Per-batch execution of map tails (dataset/_batched.py) and device prefetch (train/feeding.py)."""

import threading
import time

import numpy as np
import pytest
from dsfiles import cifar10_dir

import graphpar.dataset as ds
import graphpar.dataset.transforms.c_transforms as C
import graphpar.dataset.vision.c_transforms as vision
from graphpar import dtype as mstype
from graphpar.dataset.transforms._base import Transform
from graphpar.dataset.vision import Inter
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


def _moved(data):
    return [type(op).__name__ for m in data.deferral().ops for op in m.ops]


@pytest.mark.parametrize("size", [32, 40])
def test_batched_tail_gives_the_per_sample_values_and_draws(cifar, size):
    fast = _seeds_pipeline(cifar, size)
    plan = fast.deferral()
    assert _moved(fast) == ["TypeCast", "RandomCrop", "RandomHorizontalFlip", "Resize", "Rescale", "Normalize",
                            "HWC2CHW"]
    assert sorted(plan.keep.values()) == [0, 0]  # both maps move whole: nothing per sample but the reads
    slow = _seeds_pipeline(cifar, size, keep_per_sample=True).deferral()
    assert [type(op).__name__ for m in slow.ops for op in m.ops] == ["TypeCast"]  # the image map stays whole
    ref = list(_seeds_pipeline(cifar, size, keep_per_sample=True).iter_epoch(1))
    got = list(fast.iter_epoch(1))
    assert len(got) == len(ref) == 6
    for (gx, gy), (rx, ry) in zip(got, ref):
        assert gx.dtype == rx.dtype == np.float32 and gx.shape == rx.shape == (8, 3, size, size)
        assert gy.dtype == ry.dtype == np.int32
        np.testing.assert_array_equal(gy, ry)
        np.testing.assert_allclose(gx, rx, rtol=1e-5, atol=1e-5)  # Rescale+Normalize fused: float rounding


class _Images:
    """A random-access source of uint8 images: HWC (``channels`` 3 or 1) or HW, of one size or of varied sizes."""

    def __init__(self, n=20, shape=(12, 10, 3), varied=False):
        rng = np.random.default_rng(7)
        self.images = [rng.integers(0, 256, (shape[0] + (i % 3 if varied else 0), shape[1] + (i % 2 if varied else 0))
                                    + tuple(shape[2:]), dtype=np.uint8) for i in range(n)]

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        return self.images[i], np.int64(i)


_CASES = {
    "crop-constant": ([vision.RandomCrop((8, 8), (2, 3, 1, 4), fill_value=(9, 8, 7))], (12, 10, 3)),
    "crop-reflect-pad-if-needed": ([vision.RandomCrop((16, 14), 1, pad_if_needed=True,
                                                      padding_mode=vision.Border.REFLECT)], (12, 10, 3)),
    "crop-edge-gray": ([vision.RandomCrop(6, 2, padding_mode=vision.Border.EDGE)], (12, 10)),
    "flips-then-crop": ([vision.RandomVerticalFlip(0.5), vision.RandomHorizontalFlip(0.7),
                         vision.RandomCrop((10, 9), (0, 1))], (12, 10, 3)),
    "resize-linear-uint8": ([vision.RandomCrop(10, 2), vision.Resize((17, 13))], (12, 10, 3)),
    "resize-cubic-float": ([vision.Rescale(1 / 255, 0.0), vision.RandomHorizontalFlip(), vision.Resize(7, Inter.CUBIC),
                            vision.HWC2CHW()], (12, 10, 3)),
    "resize-nearest-gray": ([vision.RandomCrop(8, 1), vision.Resize((5, 16), Inter.NEAREST)], (12, 10)),
    "resize-area-large": ([vision.Resize((300, 240), Inter.AREA), vision.RandomHorizontalFlip()], (12, 10, 3)),
}


@pytest.mark.parametrize("case", sorted(_CASES))
def test_random_ops_moved_to_the_batch_are_bitwise_the_per_sample_path(case):
    ops, shape = _CASES[case]

    def pipeline(per_sample):
        data = ds.GeneratorDataset(_Images(shape=shape), ["image", "label"], shuffle=True)
        data = data.map(list(ops) + ([lambda x: x] if per_sample else []), input_columns="image")
        return data.shuffle(4).batch(6, drop_remainder=False)

    fast = pipeline(False)
    assert _moved(fast) == [type(op).__name__ for op in ops]
    assert pipeline(True).deferral() is None
    for epoch in (0, 1):
        got, ref = list(fast.iter_epoch(epoch)), list(pipeline(True).iter_epoch(epoch))
        assert len(got) == len(ref) == 4
        for (gx, gy), (rx, ry) in zip(got, ref):
            np.testing.assert_array_equal(gy, ry)
            assert gx.dtype == rx.dtype and gx.shape == rx.shape
            np.testing.assert_array_equal(gx, rx)


def test_rows_of_different_shapes_run_the_moved_ops_row_by_row_with_the_same_draws():
    def pipeline(per_sample):
        data = ds.GeneratorDataset(_Images(varied=True), ["image", "label"], shuffle=True)
        ops = [vision.RandomCrop(8), vision.RandomHorizontalFlip()] + ([lambda x: x] if per_sample else [])
        return data.map(ops, input_columns="image").batch(5)

    assert _moved(pipeline(False)) == ["RandomCrop", "RandomHorizontalFlip"]
    for (gx, _), (rx, _) in zip(pipeline(False).iter_epoch(0), pipeline(True).iter_epoch(0), strict=True):
        np.testing.assert_array_equal(gx, rx)
    unequal = ds.GeneratorDataset(_Images(varied=True), ["image", "label"]).map(vision.RandomHorizontalFlip(),
                                                                                 "image").batch(5)
    with pytest.raises(DatasetError, match=r"column 'image' has rows of different shapes"):
        next(unequal.iter_epoch(0))


def test_moved_draws_only_when_the_ops_left_per_sample_draw_nothing():
    data = ds.GeneratorDataset(_Images(), ["image", "label"])
    choice = C.RandomApply([vision.RandomVerticalFlip(1.0)], 0.5)  # random, no batch form: stays per sample
    drawn_first = data.map([choice, vision.RandomCrop(8), vision.Rescale(0.5, 0.0)], "image").batch(4)
    plan = drawn_first.deferral()
    assert _moved(drawn_first) == ["Rescale"] and list(plan.keep.values()) == [2]
    plain_first = data.map([lambda x: x + 1, vision.RandomCrop(8), vision.Rescale(0.5, 0.0)], "image").batch(4)
    assert _moved(plain_first) == ["RandomCrop", "Rescale"]
    ref = data.map([lambda x: x + 1, vision.RandomCrop(8), vision.Rescale(0.5, 0.0), lambda x: x], "image").batch(4)
    for (gx, _), (rx, _) in zip(plain_first.iter_epoch(2), ref.iter_epoch(2), strict=True):
        np.testing.assert_array_equal(gx, rx)


def test_a_map_below_per_sample_work_on_its_column_is_not_moved(cifar):
    data = ds.Cifar10Dataset(cifar, usage="train")
    data = data.map(vision.Rescale(1.0 / 255.0, 0.0), input_columns="image")
    data = data.map([C.RandomApply([vision.RandomHorizontalFlip()])], input_columns="image").batch(4)
    assert data.deferral() is None  # RandomApply has no batch form, so the Rescale below it stays too


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


@pytest.mark.parametrize("depth", [0, 2])
def test_later_batches_go_straight_to_the_first_batchs_shardings(depth):
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    sharding = NamedSharding(jax.make_mesh((len(jax.devices()),), ("d",)), PartitionSpec("d"))
    planned: list[tuple] = []

    def place(batch):  # the program's place_inputs: plans, then puts; later batches of the first's shapes skip it
        planned.append(tuple(np.shape(x) for x in batch))
        return [jax.device_put(x, sharding) for x in batch]

    rows = 2 * len(jax.devices())
    batches = [(np.full((rows, 3), i, np.float32), np.arange(rows, dtype=np.int32) + i) for i in range(4)]
    batches.append((np.zeros((rows // 2, 3), np.float32), np.zeros(rows // 2, np.int32)))  # a last, smaller batch
    pairs = list(prefetched(iter(batches), place, depth))
    assert planned == [((rows, 3), (rows,)), ((rows // 2, 3), (rows // 2,))]
    for (host, placed), batch in zip(pairs, batches, strict=True):
        assert host is batch
        for h, p in zip(host, placed):
            assert isinstance(p, jax.Array) and p.sharding == sharding
            np.testing.assert_array_equal(np.asarray(p), h)


def test_without_read_ahead_a_one_worker_pipeline_runs_on_the_iterating_thread():
    threads: set[str] = set()

    def note(x):
        threads.add(threading.current_thread().name)
        return x

    data = ds.GeneratorDataset(_Images(), ["image", "label"]).map([vision.RandomCrop(8), note], "image").batch(4)
    inline = list(data.iter_epoch(1, read_ahead=False))
    assert threads == {threading.current_thread().name}
    ahead = list(data.iter_epoch(1))
    assert threads - {threading.current_thread().name}  # the read-ahead thread computed these
    for (a, _), (b, _) in zip(inline, ahead, strict=True):
        np.testing.assert_array_equal(a, b)


def test_draws_stay_per_sample_behind_a_batch_form_that_does_not_tell_its_shape():
    class Double(C.TypeCast):  # a user's batchable transform without out_shape
        out_shape = Transform.out_shape

        def apply_batch(self, x):
            return super().apply_batch(x) * 2

        def apply(self, x, rng):
            return super().apply(x, rng) * 2

    data = ds.GeneratorDataset(_Images(), ["image", "label"])
    fast = data.map([Double(np.float32), vision.RandomHorizontalFlip(), vision.Rescale(0.5, 0.0)], "image").batch(4)
    assert _moved(fast) == ["Rescale"]
    ref = data.map([Double(np.float32), vision.RandomHorizontalFlip(), vision.Rescale(0.5, 0.0), lambda x: x],
                   "image").batch(4)
    for (gx, _), (rx, _) in zip(fast.iter_epoch(0), ref.iter_epoch(0), strict=True):
        np.testing.assert_array_equal(gx, rx)


def test_a_three_value_fill_is_refused_only_where_a_one_channel_image_gets_padded():
    one_channel = _Images(shape=(12, 10, 1))
    op = vision.RandomCrop(4, fill_value=(1, 2, 3), pad_if_needed=True)  # 12x10 is big enough: nothing padded
    (x, _), = ds.GeneratorDataset(one_channel, ["image", "label"]).take(4).map(op, "image").batch(4).iter_epoch(0)
    assert x.shape == (4, 4, 4, 1)
    grows = ds.GeneratorDataset(one_channel, ["image", "label"]).map(
        vision.RandomCrop(16, fill_value=(1, 2, 3), pad_if_needed=True), "image").batch(4)
    with pytest.raises(DatasetError, match=r"RandomCrop.*fill_value \(1, 2, 3\) has 3 values for 1 channels"):
        next(grows.iter_epoch(0))
