"""Atomic saves, integrity checks naming the damaged file, retention, asynchronous saving."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import graphpar as ms
from graphpar.checkpoint import CheckpointError, latest_checkpoint, load_checkpoint, save_checkpoint
from graphpar.checkpoint.directory import complete_checkpoints
from graphpar.train import CheckpointConfig, ModelCheckpoint

from .helpers import dropout_mlp, momentum_model, shuffled_dataset

SCRIPTS = Path(__file__).resolve().parent / "scripts"


def _params(n=3, size=64):
    rng = np.random.default_rng(0)
    return [ms.Parameter(ms.Tensor(rng.normal(size=(size, size)).astype(np.float32)), name=f"p{i}") for i in range(n)]


def _biggest_file(root: Path) -> Path:
    files = [p for p in root.rglob("*") if p.is_file() and p.name != "graphpar.json"]
    return max(files, key=lambda p: p.stat().st_size)


def test_roundtrip_and_manifest(tmp_path):
    values = _params()
    save_checkpoint(values, str(tmp_path / "c"))
    loaded = load_checkpoint(str(tmp_path / "c"))  # ".ckpt" is appended, as MindSpore does
    for p in values:
        np.testing.assert_array_equal(loaded[p.name].asnumpy(), p.asnumpy())
    assert (tmp_path / "c.ckpt" / "graphpar.json").is_file()


def test_truncated_file_is_named(tmp_path):
    save_checkpoint(_params(), str(tmp_path / "c.ckpt"))
    victim = _biggest_file(tmp_path / "c.ckpt")
    victim.write_bytes(victim.read_bytes()[:-100])
    with pytest.raises(CheckpointError, match=f"{victim.name}: file truncated or altered"):
        load_checkpoint(str(tmp_path / "c.ckpt"))


def test_bit_flip_is_named(tmp_path):
    save_checkpoint(_params(), str(tmp_path / "c.ckpt"))
    victim = _biggest_file(tmp_path / "c.ckpt")
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x04
    victim.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=f"{victim.name}: file corrupted"):
        load_checkpoint(str(tmp_path / "c.ckpt"))


def test_damaged_manifest_and_missing_file(tmp_path):
    save_checkpoint(_params(), str(tmp_path / "c.ckpt"))
    manifest = tmp_path / "c.ckpt" / "graphpar.json"
    manifest.write_text(manifest.read_text().replace('"float32"', '"float64"'))
    with pytest.raises(CheckpointError, match="graphpar.json: the manifest is damaged"):
        load_checkpoint(str(tmp_path / "c.ckpt"))
    save_checkpoint(_params(), str(tmp_path / "d.ckpt"))
    victim = _biggest_file(tmp_path / "d.ckpt")
    victim.unlink()
    with pytest.raises(CheckpointError, match=f"{victim.name}: file missing"):
        load_checkpoint(str(tmp_path / "d.ckpt"))
    with pytest.raises(CheckpointError, match="no such checkpoint directory"):
        load_checkpoint(str(tmp_path / "nothing.ckpt"))


@pytest.mark.parametrize("when", ["before-manifest", "during-write"])
def test_a_process_killed_while_saving_leaves_the_previous_checkpoint(tmp_path, when):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRAPHPAR_", "MS_"))}
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=1"
    result = subprocess.run([sys.executable, str(SCRIPTS / "crash_while_saving.py"), str(tmp_path), when],
                            env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == -signal.SIGKILL, result.stderr
    assert "A saved" in result.stdout
    assert latest_checkpoint(str(tmp_path)) == str(tmp_path / "A.ckpt")
    assert [p for _, p, _ in complete_checkpoints(str(tmp_path))] == [str(tmp_path / "A.ckpt")]
    if (tmp_path / "B.ckpt").exists():
        with pytest.raises(CheckpointError, match="B.ckpt: incomplete checkpoint"):
            load_checkpoint(str(tmp_path / "B.ckpt"))
    assert load_checkpoint(str(tmp_path / "A.ckpt"))["p1"].asnumpy()[0, 0] == 1.0


@pytest.mark.parametrize("async_save", [False, True])
def test_keep_checkpoint_max_and_async_save(tmp_path, async_save):
    ms.set_seed(3)
    net = dropout_mlp()
    config = CheckpointConfig(save_checkpoint_steps=2, keep_checkpoint_max=3, async_save=async_save)
    ckpt = ModelCheckpoint("m", str(tmp_path), config)
    momentum_model(net).train(2, shuffled_dataset(), callbacks=[ckpt])  # 24 steps: saves at 2, 4, ..., 24
    assert sorted(os.listdir(tmp_path)) == ["m-2_10.ckpt", "m-2_12.ckpt", "m-2_8.ckpt"]  # the 3 newest
    assert ckpt.latest_ckpt_file_name == str(tmp_path / "m-2_12.ckpt")
    final = load_checkpoint(ckpt.latest_ckpt_file_name)
    np.testing.assert_array_equal(final["fc1.weight"].asnumpy(), net.fc1.weight.asnumpy())
    assert "drop.rng" in final and "optimizer.0.0.trace.fc1.weight" in final


def test_checkpoint_config_rules():
    config = CheckpointConfig(save_checkpoint_steps=5, save_checkpoint_seconds=10, keep_checkpoint_max=0,
                              keep_checkpoint_per_n_minutes=0)
    assert config.save_checkpoint_seconds is None and config.keep_checkpoint_max == 1
    with pytest.raises(ValueError, match="cannot all be 0"):
        CheckpointConfig(0, 0, 0, 0)
    with pytest.raises(ValueError, match="must be an int >= 0"):
        CheckpointConfig(save_checkpoint_steps=-1)
    with pytest.raises(ValueError, match="without '/'"):
        ModelCheckpoint(prefix="a/b")
    with pytest.raises(TypeError, match="CheckpointConfig"):
        ModelCheckpoint(config={"save_checkpoint_steps": 1})


def test_loading_a_folder_of_checkpoints_takes_the_newest(tmp_path):
    """Seed 003 passes its ModelCheckpoint directory to load_checkpoint."""
    save_checkpoint(_params(1), str(tmp_path / "auto_parallel-1_1.ckpt"))
    newer = _params(2)
    save_checkpoint(newer, str(tmp_path / "auto_parallel-1_2.ckpt"))
    (tmp_path / "auto_parallel-1_3.ckpt").mkdir()  # an interrupted save is ignored
    loaded = load_checkpoint(str(tmp_path))
    assert sorted(loaded) == ["p0", "p1"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="empty: not a graphpar checkpoint"):
        load_checkpoint(str(tmp_path / "empty"))
