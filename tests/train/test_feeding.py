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


def _train_on(data, notices, epochs=1):
    """Train the tiny MLP on ``data``; the text of the notices and the host batches of every step, in order."""
    from graphpar import nn
    from graphpar.train import Callback, Model
    from tests.train.helpers import MLP

    class Batches(Callback):
        def __init__(self):
            self.seen = []

        def on_train_step_end(self, run_context):
            self.seen.append(tuple(np.array(v) for v in run_context.original_args().train_dataset_element))

    net = MLP()
    model = Model(net, nn.MSELoss(), nn.Momentum(net.trainable_params(), 0.01, 0.9))
    batches = Batches()
    model.train(epochs, data, callbacks=[batches])
    return notices.text, batches.seen


def _slow_data(rows, delay, batch=4, **workers):
    return ds.GeneratorDataset(_SlowSource(rows, delay), ["x", "y"], shuffle=False, **workers) \
        .batch(batch, drop_remainder=True)


def _wait(x):
    """A map whose work is mostly waiting (a read from a slow disk or the network)."""
    import time

    time.sleep(0.003)
    return x


def test_a_stalled_step_gets_more_workers_with_the_same_batches_in_the_same_order(notices, monkeypatch):
    """A shuffled pipeline whose map waits 4 x 3 ms a batch, against a step of a millisecond or two: after a
    window of steps the tuner moves it to threads (a CPU run: they overlap the waiting without taking the step's
    cores) and says what it changed; the steps still train on exactly the batches one worker gives."""
    ms.set_auto_parallel_context(parallel_mode="stand_alone")
    monkeypatch.setattr(ds.config, "_seed", None)  # restored after the test
    ds.config.set_seed(3)
    rows = np.random.default_rng(1).normal(size=(128, 24)).astype(np.float32)

    def data():
        return ds.NumpySlicesDataset({"x": rows[:, :16], "y": rows[:, 16:]}, shuffle=True) \
            .map(_wait, "x").batch(4, drop_remainder=True)

    one_worker = [tuple(b) for e in (0, 1) for b in data().iter_epoch(e)]
    text, seen = _train_on(data(), notices, epochs=2)
    assert "data stall: Model.train waited for the dataset" in text
    assert "raised num_parallel_workers 1 -> " in text and "(threads)" in text and "cpu)" in text
    assert len(seen) == len(one_worker) == 64
    assert all(np.array_equal(a, b) for p, q in zip(seen, one_worker) for a, b in zip(p, q))


def test_a_worker_count_the_user_fixed_is_kept_and_named(notices):
    """20 steps whose batches take 4 x 15 ms to read with num_parallel_workers=1 given: graphpar leaves it and, the
    devices waiting for data nearly all the time, says which setting to change."""
    ms.set_auto_parallel_context(parallel_mode="stand_alone")
    text, _ = _train_on(_slow_data(80, 0.015, num_parallel_workers=1), notices)
    assert "raised" not in text
    assert "Model.train waited for the dataset" in text and "of epoch 1" in text
    assert "GeneratorDataset(num_parallel_workers=1) fixes the worker count" in text and "cores" in text
    assert text.count("Model.train waited for the dataset") == 1


def test_a_short_epoch_is_not_judged(notices, monkeypatch):
    """Under a second of training says nothing, however slow its data (a toy run is not worth the line)."""
    ms.set_auto_parallel_context(parallel_mode="stand_alone")
    monkeypatch.setattr(ds.config, "_num_parallel_workers", None)  # restored after the test
    ds.config.set_num_parallel_workers(1)
    assert "waited for the dataset" not in _train_on(_slow_data(40, 0.002), notices)[0]


class _ShortIterator:
    """A dataset that promises 3 batches but whose iterator is spent after 1 (MindSpore's test mocks keep one
    iterator across epochs, so their second epoch is empty)."""

    def get_dataset_size(self):
        return 3

    def iter_epoch(self, epoch):
        yield (np.ones((2, 1), np.float32),)


def test_an_iterator_that_ends_early_ends_the_epoch_there():
    ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel")
    feeder = BatchFeeder(_ShortIterator(), 1, 0, 1)
    assert len(list(feeder.epoch(0))) == 1
