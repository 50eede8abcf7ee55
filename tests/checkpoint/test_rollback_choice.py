"""Which checkpoint a rollback chooses: checksums are verified first and a damaged checkpoint is named and passed
over for the newest intact one (issue 27 item 8); a save in flight as orbax's temporary directory is named when the
rollback takes an older checkpoint (item 17, docs/checkpoints.md section 8)."""

import os
from pathlib import Path

import numpy as np

from graphpar.checkpoint import resume
from graphpar.checkpoint.store import TMP_MARKER
from graphpar.models.mlp import MLP
from graphpar.train import CheckpointConfig, ModelCheckpoint

from .helpers import Record, momentum_model, shuffled_dataset


def _three_checkpoints(directory: Path) -> ModelCheckpoint:
    cb = ModelCheckpoint("net", str(directory), CheckpointConfig(save_checkpoint_steps=4, keep_checkpoint_max=3))
    momentum_model(MLP(16, 32, 8, seed=0)).train(1, shuffled_dataset(), callbacks=[cb])  # 12 steps: 4, 8, 12
    return cb


def _flip_a_byte(checkpoint: Path) -> Path:
    files = [p for p in checkpoint.rglob("*") if p.is_file() and p.name != "graphpar.json"]
    victim = max(files, key=lambda p: p.stat().st_size)
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x10
    victim.write_bytes(bytes(data))
    return victim


def test_a_flipped_byte_in_the_newest_falls_back_to_the_newest_intact(tmp_path, monkeypatch, notices):
    monkeypatch.setenv("GRAPHPAR_JOB_ID", "job-1")
    cb = _three_checkpoints(tmp_path)
    victim = _flip_a_byte(tmp_path / "net-1_12.ckpt")
    monkeypatch.setenv("GRAPHPAR_RESTART_COUNT", "1")
    assert resume.choose(False, [cb]) == str(tmp_path / "net-1_8.ckpt")
    assert f"resume: skipping {tmp_path}/net-1_12.ckpt: {victim}: file corrupted: bytes" in notices.text
    assert "trying the next older checkpoint" in notices.text

    # a damaged manifest is named too (not skipped silently), and resume=True falls back the same way
    (tmp_path / "net-1_8.ckpt" / "graphpar.json").write_text('{"crc32": 1, "body": {"format": "x"}}')
    monkeypatch.delenv("GRAPHPAR_RESTART_COUNT")
    assert resume.choose(True, [cb]) == str(tmp_path / "net-1_4.ckpt")
    assert f"resume: skipping {tmp_path}/net-1_8.ckpt: the manifest is damaged (its checksum does not match its " \
           "contents)" in notices.text


def test_training_resumes_from_the_newest_intact_checkpoint(tmp_path, monkeypatch):
    """The whole path: Model.train with a restart continues from step 8 and trains the last 4 steps."""
    monkeypatch.setenv("GRAPHPAR_JOB_ID", "job-1")
    _three_checkpoints(tmp_path)
    _flip_a_byte(tmp_path / "net-1_12.ckpt")
    monkeypatch.setenv("GRAPHPAR_RESTART_COUNT", "1")
    record = Record()
    cb = ModelCheckpoint("net", str(tmp_path), CheckpointConfig(save_checkpoint_steps=4, keep_checkpoint_max=3))
    momentum_model(MLP(16, 32, 8, seed=0)).train(1, shuffled_dataset(), callbacks=[cb, record])
    assert record.where == [(1, 9), (1, 10), (1, 11), (1, 12)]
    assert np.isfinite(record.losses).all()


def test_a_save_in_flight_as_orbax_temporary_directory_is_named(tmp_path, monkeypatch, notices):
    """An asynchronous save still in flight when the job stopped leaves orbax's temporary directory (its final name
    does not exist): the rollback to the older complete checkpoint says which save was lost."""
    monkeypatch.setenv("GRAPHPAR_JOB_ID", "job-1")
    cb = _three_checkpoints(tmp_path)
    os.makedirs(tmp_path / f"net-2_4.ckpt{TMP_MARKER}-1700000000")
    monkeypatch.setenv("GRAPHPAR_RESTART_COUNT", "1")
    newest = str(tmp_path / "net-1_12.ckpt")
    assert resume.choose(False, [cb]) == newest
    assert f"resume: rolling back to {newest}; the newest save, {tmp_path}/net-2_4.ckpt, was still in flight when " \
           "the job stopped and is incomplete" in notices.text
