"""The seeds' CIFAR pipeline, determinism, resume from iterator state, sharded copies and parallel workers."""

import json

import numpy as np
import pytest
from dsfiles import cifar10_dir

import graphpar
import graphpar.dataset as ds
import graphpar.dataset.transforms.c_transforms as C
import graphpar.dataset.vision.c_transforms as vision
from graphpar import dtype as mstype
from graphpar.dataset import config


def create_dataset(data_path, repeat_num=1, batch_size=32, rank_id=0, rank_size=1, size=224, workers=None):
    """The seeds' create_dataset (tutorials 000/001/003), with the image size and workers as parameters."""
    data_set = ds.Cifar10Dataset(data_path, num_shards=rank_size, shard_id=rank_id, num_parallel_workers=workers)
    random_crop_op = vision.RandomCrop((32, 32), (4, 4, 4, 4))
    random_horizontal_op = vision.RandomHorizontalFlip()
    resize_op = vision.Resize((size, size))
    rescale_op = vision.Rescale(1.0 / 255.0, 0.0)
    normalize_op = vision.Normalize((0.4465, 0.4822, 0.4914), (0.2010, 0.1994, 0.2023))
    changeswap_op = vision.HWC2CHW()
    type_cast_op = C.TypeCast(mstype.int32)
    c_trans = [random_crop_op, random_horizontal_op]
    c_trans += [resize_op, rescale_op, normalize_op, changeswap_op]
    data_set = data_set.map(operations=type_cast_op, input_columns="label")
    data_set = data_set.map(operations=c_trans, input_columns="image")
    data_set = data_set.shuffle(buffer_size=10)
    data_set = data_set.batch(batch_size=batch_size, drop_remainder=True)
    data_set = data_set.repeat(repeat_num)
    return data_set


@pytest.fixture
def cifar(tmp_path):
    return str(cifar10_dir(tmp_path, n_train=60, n_test=10, per_file=12))


def _batches(iterator):
    return [tuple(np.asarray(v) for v in b) for b in iterator]


def _same(a, b):
    return len(a) == len(b) and all(all(np.array_equal(x, y) for x, y in zip(p, q)) for p, q in zip(a, b))


@pytest.mark.parametrize("size", [224, 32])
def test_seed_create_dataset_yields_float_chw_batches_and_int32_labels(cifar, size):
    data = create_dataset(cifar, repeat_num=2, size=size)
    assert data.get_dataset_size() == 2 * (70 // 32)
    batches = list(data.create_tuple_iterator(num_epochs=1))
    assert len(batches) == 4
    image, label = batches[0]
    assert image.shape == (32, 3, size, size) and image.dtype == np.float32
    assert label.shape == (32,) and label.dtype == np.int32
    assert -2.5 < float(image.min()) < float(image.max()) < 2.8


def test_same_seed_same_batches_other_seed_other_batches(cifar):
    config.set_seed(11)
    first = _batches(create_dataset(cifar, size=32).iter_epoch(0))
    again = _batches(create_dataset(cifar, size=32).iter_epoch(0))
    assert _same(first, again)
    config.set_seed(12)
    other = _batches(create_dataset(cifar, size=32).iter_epoch(0))
    assert not _same(first, other)
    epoch1 = _batches(create_dataset(cifar, size=32).iter_epoch(1))
    assert not _same(other, epoch1)


def test_global_seed_is_the_default_dataset_seed(cifar):
    assert config.get_seed() == config.DEFAULT_SEED
    graphpar.set_seed(3)
    assert config.get_seed() == 3
    with_global = _batches(create_dataset(cifar, size=32).iter_epoch(0))
    config.set_seed(3)
    assert _same(with_global, _batches(create_dataset(cifar, size=32).iter_epoch(0)))
    config.set_seed(4)
    assert config.get_seed() == 4  # the dataset's own seed wins


def test_restored_iterator_continues_with_the_next_batch(cifar):
    data = create_dataset(cifar, repeat_num=2, batch_size=8, size=32)
    ref_it = data.create_tuple_iterator(num_epochs=2, output_numpy=True)
    reference = _batches(ref_it) + _batches(ref_it)  # each for-loop over the iterator is one epoch
    it = data.create_tuple_iterator(num_epochs=2, output_numpy=True)
    head = [next(it) for _ in range(5)]
    state = json.loads(json.dumps(it.get_state()))
    fresh = create_dataset(cifar, repeat_num=2, batch_size=8, size=32).create_tuple_iterator(num_epochs=2,
                                                                                             output_numpy=True)
    fresh.set_state(state)
    rest = _batches(fresh) + _batches(fresh)  # the rest of epoch 0, then epoch 1
    assert _same(_batches(head) + rest, reference)
    size = data.get_dataset_size()
    epoch = data.iter_epoch(1, start_batch=3)
    assert _same(_batches(epoch), reference[size + 3:])
    mid = data.iter_epoch(0)
    [next(mid) for _ in range(2)]
    again = data.iter_epoch(5)
    again.set_state(mid.get_state())
    assert _same(_batches(again), reference[2:size])


def test_with_shard_copies_the_pipeline_for_each_shard(cifar):
    data = create_dataset(cifar, batch_size=4, size=32, rank_size=2, rank_id=0)
    assert data.shard_info() == (2, 0)
    shard1 = data.with_shard(2, 1)
    assert shard1.shard_info() == (2, 1) and data.shard_info() == (2, 0)
    direct = create_dataset(cifar, batch_size=4, size=32, rank_size=2, rank_id=1)
    assert _same(_batches(shard1.iter_epoch(0)), _batches(direct.iter_epoch(0)))
    plain = ds.Cifar10Dataset(cifar, shuffle=False).map(C.TypeCast(mstype.int32), "label")
    ids = [{int(r[0][0, 0, 0]) for r in plain.with_shard(3, k).iter_epoch(0)} for k in range(3)]
    assert set().union(*ids) == {int(r[0][0, 0, 0]) for r in plain.iter_epoch(0)}


def test_model_batch_feeder_consumes_shards_in_lockstep(cifar):
    from graphpar.train.feeding import BatchFeeder

    data = create_dataset(cifar, batch_size=4, size=32, rank_size=4, rank_id=0)
    feeder = BatchFeeder(data, draws=4, first_rank=0, world=4)
    assert feeder.per_device_shards and feeder.steps_per_epoch() == -(-70 // 4) // 4
    batches = list(feeder.epoch(0))
    assert len(batches) == feeder.steps_per_epoch()
    assert batches[0][0].shape == (16, 3, 32, 32) and batches[0][1].shape == (16,)


class _Unpicklable:
    """A map operation holding a lock: it cannot travel to worker processes."""

    def __init__(self):
        import threading

        self.lock = threading.Lock()

    def __call__(self, image):
        return image[::2, ::2]


def test_unpicklable_pipeline_with_workers_falls_back_to_threads_with_identical_results(cifar):
    config.set_seed(5)
    base = ds.Cifar10Dataset(cifar)
    one = base.map(_Unpicklable(), "image").map(vision.RandomHorizontalFlip(), "image").batch(8)
    two = base.map(_Unpicklable(), "image", num_parallel_workers=2).map(vision.RandomHorizontalFlip(), "image") \
        .batch(8)
    assert _same(_batches(one.iter_epoch(0)), _batches(two.iter_epoch(0)))


@pytest.mark.slow
def test_worker_processes_give_the_same_batches_and_resume_across_worker_counts(cifar):
    config.set_seed(9)
    single = create_dataset(cifar, batch_size=8, size=32, workers=1).map(lambda im: im * 2, "image")
    multi = create_dataset(cifar, batch_size=8, size=32, workers=2).map(lambda im: im * 2, "image")
    reference = _batches(single.iter_epoch(0)) + _batches(single.iter_epoch(1))
    parallel = multi.iter_epoch(0)
    got = _batches(parallel)
    got += _batches(multi.iter_epoch(1))  # continues on the same worker processes
    assert _same(got, reference)
    it = multi.iter_epoch(0)
    [next(it) for _ in range(3)]
    state = it.get_state()
    it.close()
    resumed = single.iter_epoch(0)
    resumed.set_state(state)
    assert _same(_batches(resumed), reference[3:single.get_dataset_size()])


def test_next_epoch_continues_on_the_stream_that_finished_the_last(cifar):
    data = create_dataset(cifar, batch_size=8, size=32)
    first = data.iter_epoch(0)
    size = data.get_dataset_size()
    [next(first) for _ in range(size)]  # consuming the last batch parks the stream, no StopIteration needed
    parked = data._pool._parked
    assert parked is not None and parked[0][1:] == (1, 0)
    second = data.iter_epoch(1)
    next(second)
    assert data._pool._parked is None and second._stream is parked[1]
    assert data.output_shapes() == [[8, 3, 32, 32], [8]]
    assert data.output_types() == [np.dtype(np.float32), np.dtype(np.int32)]
