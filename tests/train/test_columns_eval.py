"""``Model.eval`` and ``Model.predict`` with a ``dataset_strategy`` that splits the input's columns: each rank's
batch is its block of the global input (compile.plans.global_batch), in evaluation as in training. One process of
8 devices here; the two-process run (``dist``) launches ``scripts/columns_eval.py`` and compares with one device
on the whole arrays."""

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import graphpar as ms
from graphpar import nn
from graphpar.train import Model

SCRIPT = Path(__file__).resolve().parent / "scripts" / "columns_eval.py"
_spec = importlib.util.spec_from_file_location("columns_eval", SCRIPT)
sample = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sample)


def _reference():
    """One device, stand-alone: the loss and the outputs on the whole arrays."""
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.STAND_ALONE)
    x, y = sample.data()
    model = Model(sample.net(), nn.MSELoss(), metrics={"loss"})
    loss = model.eval(sample.Columns(x, y, 1, 0))["loss"]
    return loss, np.asarray(model.predict(ms.Tensor(x[:8]))).ravel()


def test_eval_of_column_blocks_in_one_process_sees_the_whole_width():
    """8 devices in one process read the blocks of ((1, 8), (1, 1)): the evaluated loss is the whole arrays'."""
    loss, _ = _reference()
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.SEMI_AUTO_PARALLEL, dataset_strategy=((1, 8), (1, 1)))
    x, y = sample.data()

    class Blocks(sample.Columns):  # each local device reads its own block (a dataset sharded over the 8 ranks)
        def __init__(self, num_shards=None, shard_id=None):
            super().__init__(x, y, num_shards or 8, shard_id or 0)
            self.shards = (num_shards, shard_id)

        def shard_info(self):
            return self.shards

        def with_shard(self, num_shards, shard_id):
            return Blocks(num_shards, shard_id)

    model = Model(sample.net(), nn.MSELoss(), metrics={"loss"})
    np.testing.assert_allclose(model.eval(Blocks(8, 0))["loss"], loss, rtol=1e-6)


@pytest.mark.dist
def test_two_processes_evaluate_and_predict_their_column_blocks(tmp_path):
    """dataset_strategy ((1, 2), (1, 1)) on 2 processes: eval and predict place each rank's batch as its half of
    the columns (not as rows), so the loss and the outputs are one device's on the whole arrays."""
    from tests.communication.test_multiprocess import child_env

    command = [sys.executable, "-m", "graphpar.cli.main", "launch", "--log_dir", str(tmp_path / "logs"),
               "--nproc", "2", "--devices-per-proc", "1", str(SCRIPT)]
    result = subprocess.run(command, env=child_env(1), capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert result.returncode == 0, result.stderr + result.stdout
    loss, outputs = _reference()
    np.testing.assert_allclose(float(re.search(r"^EVAL (\S+)$", result.stdout, re.M).group(1)), loss, rtol=1e-5)
    pred = [float(v) for v in re.search(r"^PRED (.*)$", result.stdout, re.M).group(1).split()]
    np.testing.assert_allclose(pred, outputs, rtol=1e-5, atol=1e-6)
