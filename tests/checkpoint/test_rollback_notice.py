"""A rollback that cannot use the newest save says so in one line, naming the checkpoint directory and the save
that was still in flight when the job stopped (a recovery must never start over silently)."""

import os

import numpy as np

from graphpar.checkpoint import resume
from graphpar.checkpoint.store import TMP_MARKER
from graphpar.train import CheckpointConfig, ModelCheckpoint


def _restarted(monkeypatch):
    monkeypatch.setenv("GRAPHPAR_RESTART_COUNT", "1")


def test_no_complete_checkpoint_names_directory_and_the_save_in_flight(tmp_path, monkeypatch, notices):
    _restarted(monkeypatch)
    os.makedirs(tmp_path / f"net-1_5.ckpt{TMP_MARKER}-1700000000")  # orbax's directory of an uncommitted save
    cb = ModelCheckpoint("net", str(tmp_path), CheckpointConfig(save_checkpoint_steps=5))
    assert resume.choose(False, [cb]) is None
    lines = [r.getMessage() for r in notices.records if "no complete checkpoint" in r.getMessage()]
    assert lines == [f"resume: no complete checkpoint in {tmp_path}; the newest save, {tmp_path}/net-1_5.ckpt, was "
                     "still in flight when the job stopped and is incomplete; training starts from the beginning"]


def test_a_newer_save_in_flight_is_named_when_rolling_back_to_an_older_one(tmp_path, monkeypatch, notices):
    import graphpar as ms
    from graphpar import Parameter, Tensor, nn

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.w = Parameter(Tensor(np.ones((2, 2), np.float32)), "w")

        def construct(self, x):
            return x @ self.w

    path = str(tmp_path / "net-1_5.ckpt")
    ms.save_checkpoint(Net(), path)
    os.makedirs(tmp_path / "net-1_10.ckpt")  # committed by orbax, but its manifest was never written
    _restarted(monkeypatch)
    cb = ModelCheckpoint("net", str(tmp_path), CheckpointConfig(save_checkpoint_steps=5))
    assert resume.choose(False, [cb]) == path
    assert f"resume: rolling back to {path}; the newest save, {tmp_path}/net-1_10.ckpt, was still in flight" in \
        notices.text


def test_a_relative_path_loads_as_it_was_saved(tmp_path, monkeypatch):
    """save_checkpoint and load_checkpoint agree on a relative path (the current directory)."""
    import graphpar as ms
    from graphpar import Parameter, Tensor, nn

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.w = Parameter(Tensor(np.arange(4, dtype=np.float32)), "w")

        def construct(self, x):
            return x * self.w

    monkeypatch.chdir(tmp_path)
    ms.save_checkpoint(Net(), "sub/rel.ckpt")
    loaded = ms.load_checkpoint("sub/rel.ckpt")
    assert np.array_equal(np.asarray(loaded["w"]), np.arange(4, dtype=np.float32))
