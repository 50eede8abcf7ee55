"""What each device gets under DATA_PARALLEL from one process: its own shard of a dataset sharded over the ranks,
or, from an unsharded dataset, the same batch on every device (as every MindSpore process reading the whole
dataset) — said once, since it silently multiplies the work per distinct sample."""

import numpy as np

import graphpar as ms
import graphpar.dataset as ds
from graphpar.communication import get_group_size, get_rank
from graphpar.train.feeding import BatchFeeder


def _data(**shard):
    rows = np.arange(64, dtype=np.float32).reshape(64, 1)
    return ds.NumpySlicesDataset({"x": rows}, shuffle=False, **shard).batch(2, drop_remainder=True)


def test_unsharded_dataset_gives_every_device_the_same_batch_and_says_so(notices):
    ms.set_auto_parallel_context(parallel_mode="data_parallel")
    feeder = BatchFeeder(_data(), 8, 0, get_group_size())
    (x,) = next(feeder.epoch(0))
    assert feeder.steps_per_epoch() == 32 and x.shape == (16, 1)
    np.testing.assert_array_equal(x.reshape(8, 2), np.tile([[0.0, 1.0]], (8, 1)))
    assert "each of the 8 local devices gets the same batch" in notices.text
    assert "num_shards=get_group_size(), shard_id=get_rank()" in notices.text


def test_sharded_dataset_gives_each_device_its_own_rows(notices):
    ms.set_auto_parallel_context(parallel_mode="data_parallel")
    feeder = BatchFeeder(_data(num_shards=get_group_size(), shard_id=get_rank()), 8, 0, get_group_size())
    (x,) = next(feeder.epoch(0))
    assert feeder.steps_per_epoch() == 4 and x.shape == (16, 1)
    assert len(np.unique(x)) == 16  # 16 distinct rows: 2 from each of the 8 shards
    assert "gets the same batch" not in notices.text


class _SlowSource:
    """Rows that take ``delay`` seconds each to read: a pipeline slower than any step of the tiny network."""

    def __init__(self, n, delay):
        rng = np.random.default_rng(0)
        self.x = rng.normal(size=(n, 16)).astype(np.float32)
        self.y = rng.normal(size=(n, 8)).astype(np.float32)
        self.delay = delay

    def __getitem__(self, i):
        import time

        time.sleep(self.delay)
        return self.x[i], self.y[i]

    def __len__(self):
        return len(self.x)


def _train_on(source, notices, batch=4):
    from graphpar import nn
    from graphpar.train import Model
    from tests.train.helpers import MLP

    net = MLP()
    model = Model(net, nn.MSELoss(), nn.Momentum(net.trainable_params(), 0.01, 0.9))
    data = ds.GeneratorDataset(source, ["x", "y"], shuffle=False).batch(batch, drop_remainder=True)
    model.train(1, data)
    return notices.text


def test_a_pipeline_the_devices_wait_for_is_named_once_with_its_workers_and_the_cores(notices):
    """20 steps whose batches take 4 x 15 ms to read, against a step of a millisecond or two: the loop waits for
    the data nearly all the time, and Model.train says so, with what to change."""
    ms.set_auto_parallel_context(parallel_mode="stand_alone")
    text = _train_on(_SlowSource(80, 0.015), notices)
    assert "Model.train waited for the dataset" in text and "of epoch 1" in text
    assert "num_parallel_workers=1" in text and "cores" in text
    assert text.count("Model.train waited for the dataset") == 1


def test_a_short_epoch_is_not_judged(notices):
    """Under a second of training says nothing, however slow its data (a toy run is not worth the line)."""
    ms.set_auto_parallel_context(parallel_mode="stand_alone")
    assert "waited for the dataset" not in _train_on(_SlowSource(40, 0.002), notices)
