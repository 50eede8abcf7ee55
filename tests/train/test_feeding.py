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
