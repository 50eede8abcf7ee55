"""Per-rank checkpoint directories as MindSpore writes them (docs/checkpoints.md §1 "Per-rank folders"): one
process drives the 8 ranks and writes one checkpoint into ``rank_0/``; every other rank's folder gets a view of it,
so MindSpore's per-rank list loads unchanged, under the same or another plan, to the trained values."""

import os
import shutil

import numpy as np
import pytest

import graphpar as ms
from graphpar.checkpoint import CheckpointError, load_checkpoint, save_checkpoint, transform_checkpoints
from tests.checkpoint.helpers import params
from tests.ports.scripts.rank_dirs_port import Network, load_and_predict, numpy_forward, train_saving

X1 = np.random.default_rng(3).normal(size=(1, 8, 8)).astype(np.float32)


@pytest.fixture
def trained(tmp_path):
    return tmp_path, train_saving(str(tmp_path))


def test_every_rank_folder_names_the_checkpoint_and_the_list_loads_to_the_trained_values(trained):
    root, values = trained
    src = root / "src_checkpoints"
    assert sorted(os.listdir(src)) == [f"rank_{r}" for r in range(8)]
    for r in range(8):  # keep_checkpoint_max=1: the older save and its views are gone
        assert [n for n in os.listdir(src / f"rank_{r}") if n.endswith(".ckpt")] == ["checkpoint-2_16.ckpt"]
    for strategy in (((2, 1), (1, 2)), ((1, 4), (4, 1))):  # the training plan, and another one
        net, out = load_and_predict(str(root), strategy, ms.Tensor(X1))
        loaded = params(net)
        for name, value in values.items():
            np.testing.assert_array_equal(loaded[name], value)
        assert out.shape == (1, 10)
        np.testing.assert_allclose(np.asarray(out), numpy_forward(values, X1), rtol=1e-5, atol=1e-5)


def test_a_rank_folder_reads_that_ranks_slices_as_mindspore_rank_files_hold(trained):
    root, values = trained
    whole = load_checkpoint(str(root / "src_checkpoints" / "rank_0" / "checkpoint-2_16.ckpt"))
    np.testing.assert_array_equal(whole["layer1.weight"].asnumpy(), values["layer1.weight"])
    # layer1.weight (64, 32) under ((2, 1), (1, 2)): rank 3 holds columns 16..32
    rank3 = load_checkpoint(str(root / "src_checkpoints" / "rank_3" / "checkpoint-2_16.ckpt"))
    np.testing.assert_array_equal(rank3["layer1.weight"].asnumpy(), values["layer1.weight"][:, 16:])
    # MindSpore's transform_checkpoints reads the rank_* folders: the one checkpoint is read once, whole
    transform_checkpoints(str(root / "src_checkpoints"), str(root / "whole"), "ckpt_")
    merged = load_checkpoint(str(root / "whole" / "rank_0" / "ckpt_0.ckpt"))
    np.testing.assert_array_equal(merged["layer3.weight"].asnumpy(), values["layer3.weight"])


def test_save_checkpoint_into_a_rank_folder_and_a_view_whose_checkpoint_is_gone(tmp_path):
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.SEMI_AUTO_PARALLEL)
    net = Network()
    save_checkpoint(net, str(tmp_path / "rank_0" / "net.ckpt"))  # integrated: every rank's view reads it whole
    view = tmp_path / "rank_7" / "net.ckpt"
    np.testing.assert_array_equal(load_checkpoint(str(view))["layer2.weight"].asnumpy(), params(net)["layer2.weight"])
    save_checkpoint(net, str(tmp_path / "plain.ckpt"))  # not a rank folder: no views
    assert sorted(os.listdir(tmp_path)) == ["plain.ckpt"] + [f"rank_{r}" for r in range(8)]
    shutil.rmtree(tmp_path / "rank_0")
    with pytest.raises(CheckpointError, match="view of rank 7 names the checkpoint .*rank_0/net.ckpt, which is gone"):
        load_checkpoint(str(view))
