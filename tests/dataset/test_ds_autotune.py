"""Feeding that adapts (dataset/autotune.py): the worker count and read-ahead chosen from the platform, the cores and
the measured costs, the user's settings kept exactly, and the same batches in the same order whatever is chosen."""

import time

import numpy as np
import pytest
from dsfiles import cifar10_dir

import graphpar.dataset as ds
import graphpar.dataset.transforms.c_transforms as C
import graphpar.dataset.vision.c_transforms as vision
from graphpar import dtype as mstype
from graphpar.dataset.autotune import WINDOW, FeedTuner, Host, Setting, Window, choose_setting

GiB = 1 << 30
START = Setting(1, 2)


def _stalled(step_ms, interval_ms, steps=8, wall_ms=None, cpu_ms=None, batch_bytes=3 << 20):
    """A window in which the loop's own work took ``step_ms`` a step and a batch came every ``interval_ms``."""
    return Window(steps, steps * (interval_ms - step_ms) / 1e3, steps * interval_ms / 1e3,
                  None if wall_ms is None else wall_ms / 1e3, None if cpu_ms is None else cpu_ms / 1e3, batch_bytes)


# (case, host, current setting, window, fixed workers, fixed prefetch) -> the setting chosen
CASES = [
    ("keeps up: nothing changes", Host("gpu", 16, 64 * GiB), START, _stalled(10.0, 11.0), False, False, START),
    # one in-process worker gives a batch every 11 ms, the step takes 5.6 ms: ceil(11 / 5.6 * 1.5) = 3 processes
    ("GPU: enough processes for the step", Host("gpu", 16, 64 * GiB), START, _stalled(5.6, 11.0), False, False,
     Setting(3, 4, True)),
    # three workers still give a batch every 11 ms: one takes 33 ms, ceil(33 / 5.6 * 1.5) = 9
    ("GPU: raised again from 3", Host("gpu", 16, 64 * GiB), Setting(3, 4, True), _stalled(5.6, 11.0), False, False,
     Setting(9, 8, True)),
    ("GPU: all cores but one", Host("gpu", 4, 64 * GiB), START, _stalled(1.0, 20.0), False, False,
     Setting(3, 4, True)),
    ("GPU: 8 shards read side by side share 15 cores", Host("gpu", 16, 64 * GiB, streams=8), START,
     _stalled(1.0, 20.0), False, False, START),
    ("memory: 3 batches of 1 GiB fill a 4 GiB budget", Host("gpu", 16, 4 * GiB), START,
     _stalled(1.0, 20.0, batch_bytes=GiB), False, False, START),
    ("prefetch within the memory", Host("gpu", 16, 100 << 20), START, _stalled(1.0, 20.0, batch_bytes=10 << 20),
     False, False, Setting(3, 2, True)),
    ("CPU: a computing pipeline keeps its one core", Host("cpu", 16, 64 * GiB), START,
     _stalled(1.0, 20.0, wall_ms=19.0, cpu_ms=18.5), False, False, START),
    ("CPU: unmeasured counts as computing", Host("cpu", 16, 64 * GiB), START, _stalled(1.0, 20.0), False, False,
     START),
    ("CPU: a waiting pipeline gets threads", Host("cpu", 8, 64 * GiB), START,
     _stalled(1.0, 20.0, wall_ms=19.0, cpu_ms=1.0), False, False, Setting(8, 4, False)),
    ("CPU: threads up to 0.9 of a core of computing", Host("cpu", 8, 64 * GiB), START,
     _stalled(1.0, 20.0, wall_ms=19.0, cpu_ms=6.0), False, False, Setting(2, 4, False)),
    ("fixed workers: nothing changes", Host("gpu", 16, 64 * GiB), START, _stalled(1.0, 20.0), True, False, START),
    ("fixed prefetch: only the workers", Host("gpu", 16, 64 * GiB), START, _stalled(5.6, 11.0), False, True,
     Setting(3, 2, True)),
]


@pytest.mark.parametrize("case,host,current,window,fixed_workers,fixed_prefetch,expected", CASES,
                         ids=[c[0] for c in CASES])
def test_the_choice_for_a_platform_cores_and_costs(case, host, current, window, fixed_workers, fixed_prefetch,
                                                   expected):
    assert choose_setting(host, current, window, fixed_workers, fixed_prefetch) == expected


def test_the_user_settings_are_named_and_kept():
    data = ds.NumpySlicesDataset({"x": np.arange(8.0)}, shuffle=False).batch(2)
    free = data.feed_tuner("gpu")
    assert (free.fixed_workers, free.fixed_prefetch, free.setting) == (None, None, Setting(1, 2))
    ds.config.set_num_parallel_workers(1)
    ds.config.set_prefetch_size(3)
    fixed = data.feed_tuner("gpu")
    assert fixed.fixed_workers == "ds.config.set_num_parallel_workers(1)"
    assert fixed.fixed_prefetch == "ds.config.set_prefetch_size(3)" and fixed.setting == Setting(1, 3)
    per_op = ds.NumpySlicesDataset({"x": np.arange(8.0)}).map(lambda x: x, "x", num_parallel_workers=2).batch(2)
    assert per_op.feed_tuner("gpu").fixed_workers == "MapDataset(num_parallel_workers=2)"
    for _ in range(3 * WINDOW):  # the loop waits nearly all the time: still nothing moves
        fixed.observe_step(0.019, 0.020)
    assert fixed.setting == Setting(1, 3) and fixed.changes == []
    assert "ds.config.set_num_parallel_workers(1) fixes the worker count" in fixed.advice()


def _slow(image):
    time.sleep(0.002)  # a read that waits (a slow disk): wall time, little CPU
    return image


def _cifar_pipeline(path):
    """The seeds' CIFAR pipeline (random crop and flip, a global shuffle) behind a map that waits."""
    data = ds.Cifar10Dataset(path, usage="train")
    data = data.map(_slow, "image")
    data = data.map([vision.RandomCrop((32, 32), (4, 4, 4, 4)), vision.RandomHorizontalFlip(), vision.HWC2CHW()],
                    "image")
    data = data.map(C.TypeCast(mstype.int32), "label").shuffle(10)
    return data.batch(4, drop_remainder=True)


def _same(a, b):
    return len(a) == len(b) and all(all(np.array_equal(x, y) for x, y in zip(p, q)) for p, q in zip(a, b))


def test_batches_keep_their_order_when_the_workers_change_mid_epoch(tmp_path):
    """Epoch 0 starts in the calling process; after a window in which the loop waited, the tuner moves the pipeline
    to threads and the iterator reopens at its position: every batch of both epochs is the one a single worker
    gives for the same seed (the shuffles and random crops included)."""
    path = str(cifar10_dir(tmp_path, n_train=64, n_test=4, per_file=16))
    ds.config.set_seed(11)
    reference = [[tuple(b) for b in _cifar_pipeline(path).iter_epoch(e)] for e in (0, 1)]

    ds.config.set_seed(11)
    data = _cifar_pipeline(path)
    tuner = FeedTuner(Host("cpu", 4, 64 * GiB), Setting(1, 2))
    epoch0 = data.iter_epoch(0, read_ahead=False, tuner=tuner)
    got = [tuple(next(epoch0)) for _ in range(4)]
    for _ in range(WINDOW):  # what the loop would report: a fast step, waiting for every batch
        tuner.observe_step(0.0075, 0.008)
    assert tuner.setting.workers > 1 and not tuner.setting.processes  # a CPU run: threads, for the waiting
    assert "raised num_parallel_workers 1 -> " in tuner.changes[0].describe()
    got += [tuple(b) for b in epoch0]
    assert _same(got, reference[0])
    assert _same([tuple(b) for b in data.iter_epoch(1, read_ahead=False, tuner=tuner)], reference[1])


@pytest.mark.slow
def test_worker_processes_chosen_on_an_accelerator_keep_the_order(tmp_path):
    """The same on a host the tuner takes for an accelerator's: the new workers are processes (spawned: slow
    here)."""
    path = str(cifar10_dir(tmp_path, n_train=64, n_test=4, per_file=16))
    reference = [tuple(b) for b in _cifar_pipeline(path).iter_epoch(0)]
    tuner = FeedTuner(Host("gpu", 4, 64 * GiB), Setting(1, 2))
    epoch0 = _cifar_pipeline(path).iter_epoch(0, read_ahead=False, tuner=tuner)
    got = [tuple(next(epoch0)) for _ in range(3)]
    for _ in range(WINDOW):
        tuner.observe_step(0.0075, 0.008)
    assert tuner.setting == Setting(3, 4, True)
    got += [tuple(b) for b in epoch0]
    assert _same(got, reference)


def test_a_computing_pipeline_on_a_cpu_keeps_its_one_core_and_the_advice_says_why():
    """On a CPU the step computes on every core: a pipeline whose batches are all CPU work is left on its one
    worker, however long the loop waits, and the advice says to make the map cheaper."""
    tuner = FeedTuner(Host("cpu", 16, 64 * GiB), Setting(1, 2))
    for _ in range(2 * WINDOW):
        tuner.observe_pipeline(0.019, 0.0185, 3 << 20)  # 19 ms a batch, 18.5 of them CPU
        assert tuner.observe_step(0.018, 0.020)  # every step counts: nothing changes
    assert tuner.setting == Setting(1, 2) and tuner.changes == []
    assert "on a CPU the step computes on every core" in tuner.advice()
    assert "make the pipeline's map cheaper" in tuner.advice()


def test_a_change_is_said_once_and_the_next_steps_settle(notices):
    tuner = FeedTuner(Host("gpu", 16, 64 * GiB), Setting(1, 2))
    tuner.start_epoch(1)
    counted = [tuner.observe_step(0.0054, 0.011) for _ in range(WINDOW + 3)]
    assert counted == [True] * (WINDOW - 1) + [False, False, False, True]  # the change, then 2 steps settle
    assert tuner.setting == Setting(3, 4, True)
    assert ("data stall: Model.train waited for the dataset 49% of the last 8 steps (step 9 of epoch 1); raised "
            "num_parallel_workers 1 -> 3 (worker processes), prefetch 2 -> 4 (16 cores, gpu)") in notices.text
