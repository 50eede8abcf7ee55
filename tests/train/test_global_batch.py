"""The global batch from each rank's batch, as MindSpore defines it: a rank's batch (numpy or a ``Tensor``) is its
own part of the global batch; rows stack on dimension 0 by default, and a ``dataset_strategy`` tuple that splits
other dimensions (``((1, 8), (1, 1))``, ``((2, 4), (2, 1))``) makes each rank's batch its block of the global
input, which the network is written for. One process of 8 devices here; the multi-process runs (``dist``) launch
``scripts/accum_train.py`` on 127.0.0.1 and compare its losses with one process training on the global batches."""

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import graphpar as ms
from graphpar import nn
from graphpar.communication import get_group_size
from graphpar.compile.plans.global_batch import block_of
from graphpar.train import Model
from graphpar.train.feeding import BatchFeeder

SCRIPT = Path(__file__).resolve().parent / "scripts" / "accum_train.py"
_spec = importlib.util.spec_from_file_location("accum_train", SCRIPT)
sample = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sample)


class Blocks:
    """Each rank reads its own block of the global arrays, as a MindSpore dataset for a ``dataset_strategy`` tuple
    gives each rank its slice; ``with_shard(num_shards, rank)`` is that rank's reader."""

    def __init__(self, arrays, splits, num_shards=None, shard_id=None):
        self.arrays, self.splits, self.num_shards, self.shard_id = arrays, splits, num_shards, shard_id

    def shard_info(self):
        return self.num_shards, self.shard_id

    def with_shard(self, num_shards, shard_id):
        return Blocks(self.arrays, self.splits, num_shards, shard_id)

    def get_dataset_size(self):
        return 1

    def block(self, a, splits):
        at = block_of(self.shard_id, splits, self.num_shards)
        size = [n // s for n, s in zip(a.shape, splits)]
        return a[tuple(slice(i * k, (i + 1) * k) for i, k in zip(at, size))]

    def iter_epoch(self, epoch):
        yield tuple(self.block(a, s) for a, s in zip(self.arrays, self.splits))


def _arrays():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(8, 32)).astype(np.float32)
    return x, (x @ np.linspace(-1, 1, 32, dtype=np.float32)[:, None]).astype(np.float32)


class Wide(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(32, 1, weight_init="ones", bias_init="zeros")

    def construct(self, x):
        return self.fc(x)


def _train(x, y, steps=2):
    net = Wide()
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), 0.01))
    return train, [float(train(x, y)) for _ in range(steps)]


@pytest.mark.parametrize("splits", [((1, 8), (1, 1)), ((2, 4), (2, 1)), ((8, 1), (8, 1))])
def test_each_rank_batch_is_its_block_of_the_global_input(splits):
    """Eight ranks each read their block: the feeder puts every block where the plan's layout holds it, so the
    global batch is the arrays themselves, each device holds its own rank's block, and training on it gives the
    losses of one device training on the whole arrays."""
    x, y = _arrays()
    _, expected = _train(x, y)
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.SEMI_AUTO_PARALLEL, dataset_strategy=splits)
    data = Blocks((x, y), splits, get_group_size(), 0)
    feeder = BatchFeeder(data, 8, 0, get_group_size())
    batch = next(feeder.epoch(0))
    np.testing.assert_array_equal(batch[0], x)
    np.testing.assert_array_equal(batch[1], y)
    train, _ = _train(*batch, steps=0)
    placed = train.program.place_inputs(batch)
    for shard in placed[0].addressable_shards:
        rank = shard.device.id  # one process: device i is rank i
        np.testing.assert_array_equal(np.asarray(shard.data), data.with_shard(8, rank).block(x, splits[0]))
    net = Wide()
    model = Model(net, nn.MSELoss(), nn.SGD(net.trainable_params(), 0.01))
    losses = []
    for _ in range(2):
        model.train(1, data, callbacks=[_Losses(losses)])
    np.testing.assert_allclose(losses, expected, rtol=1e-6)


class _Losses(ms.train.Callback):
    def __init__(self, into):
        self.into = into

    def step_end(self, run_context):
        self.into.append(float(np.asarray(run_context.original_args().net_outputs)))


# --- several processes ---------------------------------------------------------------------------------------------


def _launch(tmp_path, nproc, mode):
    from tests.communication.test_multiprocess import child_env

    command = [sys.executable, "-m", "graphpar.cli.main", "launch", "--log_dir", str(tmp_path / "logs"),
               "--nproc", str(nproc), "--devices-per-proc", "1", str(SCRIPT), mode]
    result = subprocess.run(command, env=child_env(1), capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert result.returncode == 0, result.stderr + result.stdout
    return [float(v) for v in re.findall(r"^LOSS \d+ (\S+)$", result.stdout, re.M)]


def _reference(global_batches):
    """One process, stand-alone: the sample's network trained on the global batches (sum of squared errors)."""
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.STAND_ALONE)
    net = sample.Net()
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss(reduction="sum")), nn.SGD(net.trainable_params(),
                                                                                            sample.LR))
    return [float(train(xb, yb)) for xb, yb in global_batches]


def _row_batches(nproc):
    """The global batches of ``nproc`` ranks each reading rows ``rank::nproc``: the ranks' batches stacked."""
    x, y = sample.data()
    shards = [list(sample.Shard(x, y, sample.BATCH, nproc, r).iter_epoch(0)) for r in range(nproc)]
    return [tuple(np.concatenate([s[i][c] for s in shards]) for c in range(2)) for i in range(len(shards[0]))]


@pytest.mark.dist
@pytest.mark.parametrize("mode", ["model", "loop"])
def test_four_processes_accumulate_a_partial_last_batch(tmp_path, mode):
    """GradAccumulation(micro_size=2) on 4 processes of one device: the last batch of each rank has 10 rows, a
    global batch of 40 (also when the custom loop passes each rank's rows as a ``Tensor``); the losses are one
    process's on the global batches."""
    losses = _launch(tmp_path, 4, mode)
    batches = _row_batches(4)
    assert [len(b[0]) for b in batches] == [80, 40]
    np.testing.assert_allclose(losses, _reference(batches), rtol=1e-5)


@pytest.mark.dist
def test_two_processes_split_the_input_columns(tmp_path):
    """dataset_strategy ((1, 2), (1, 1)) on 2 processes: each rank's batch is its half of the input's columns,
    the network sees the whole width, and the losses are one process's on the whole batches."""
    losses = _launch(tmp_path, 2, "columns")
    x, y = sample.data()
    batches = list(sample.Shard(x, y, sample.BATCH, 1, 0).iter_epoch(0))
    np.testing.assert_allclose(losses, _reference(batches), rtol=1e-5)
