"""Saving never loses a checkpoint and never leaves one readable by others: replace on commit (a kill at any step
leaves a complete checkpoint under the name), refusals to replace what is not a graphpar checkpoint, owner-only
files, one-line errors for directories that cannot be written (docs/checkpoints.md §4)."""

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import graphpar as ms
from graphpar import nn
from graphpar.checkpoint import CheckpointError, load_checkpoint, manifest, replacing, save_checkpoint
from graphpar.checkpoint.directory import complete_checkpoints, readable_checkpoints, remove_stale
from graphpar.errors import ConfigError
from graphpar.planner import strategy_file

from .helpers import quickstart_net, rand

SCRIPTS = Path(__file__).resolve().parent / "scripts"


def _params(value: float, n: int = 2):
    return [ms.Parameter(ms.Tensor(np.full((8, 8), value + i, np.float32)), name=f"p{i}") for i in range(n)]


def _value(path) -> float:
    return float(load_checkpoint(str(path))["p0"].asnumpy()[0, 0])


class Killed(BaseException):
    """Stands for SIGKILL at one step of a save: nothing after it runs, the disk stays as it is."""


def _die(*args, **kwargs):
    raise Killed


def test_saving_over_a_checkpoint_replaces_it_on_commit(tmp_path):
    name = tmp_path / "model.ckpt"
    save_checkpoint(_params(1.0), str(name))
    save_checkpoint(_params(2.0), str(name))
    assert _value(name) == 2.0
    assert sorted(os.listdir(tmp_path)) == ["model.ckpt"]  # nothing staged or retired is left


@pytest.mark.parametrize("step", ["writing", "committed", "between-renames", "deleting-old"])
def test_a_kill_at_any_step_of_a_replacement_leaves_a_complete_checkpoint(tmp_path, monkeypatch, step):
    name = tmp_path / "model-1_5.ckpt"  # named as ModelCheckpoint names them, so its clean-up settles it
    save_checkpoint(_params(1.0), str(name))
    with monkeypatch.context() as patch:
        if step == "writing":  # orbax's files written, the manifest not yet
            patch.setattr("graphpar.checkpoint.manifest.write", _die)
        elif step == "committed":  # the new manifest is written, no rename yet
            patch.setattr("graphpar.checkpoint.replacing.swap", _die)
        else:
            swapped = []
            real_rename, real_rmtree = os.rename, shutil.rmtree

            def rename(src, dst):
                if str(dst) == str(name) and step == "between-renames":
                    raise Killed
                real_rename(src, dst)
                swapped.append(str(dst) == str(name))

            def rmtree(path, *args, **kwargs):
                if step == "deleting-old" and str(path).endswith(replacing.RETIRED) and any(swapped):
                    os.remove(next(p for p in Path(path).rglob("*") if p.is_file()))  # half deleted
                    raise Killed
                real_rmtree(path, *args, **kwargs)

            patch.setattr("graphpar.checkpoint.replacing.os.rename", rename)
            patch.setattr("graphpar.checkpoint.replacing.shutil.rmtree", rmtree)
        with pytest.raises((Killed, CheckpointError)):
            save_checkpoint(_params(2.0), str(name))
    expected = 1.0 if step == "writing" else 2.0  # committed = the new manifest was written
    assert _value(name) == expected
    # before any clean-up, what a resume reads (the directory's complete checkpoints) finds it under its own name,
    # with the manifest of the committed one
    [(_, found, body)] = complete_checkpoints(str(tmp_path), "model")
    assert found == str(name) and body == manifest.read(replacing.committed(str(name)))
    [(_, readable, _)], damaged = readable_checkpoints(str(tmp_path), "model")
    assert readable == str(name) and not damaged
    # clean-up at the next start (ModelCheckpoint) or the next save of the name finishes the swap
    remove_stale(str(tmp_path), "model")
    assert sorted(os.listdir(tmp_path)) == [name.name]
    assert _value(name) == expected
    save_checkpoint(_params(3.0), str(name))
    assert _value(name) == 3.0 and sorted(os.listdir(tmp_path)) == [name.name]


def test_sigkill_between_the_renames_keeps_the_new_checkpoint(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRAPHPAR_", "MS_"))}
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=1"
    result = subprocess.run([sys.executable, str(SCRIPTS / "crash_while_replacing.py"), str(tmp_path)], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == -signal.SIGKILL, result.stderr
    assert not (tmp_path / "model.ckpt").exists()  # killed with the old one moved aside, the new one staged
    assert _value(tmp_path / "model.ckpt") == 2.0


@pytest.mark.parametrize("kind", ["mindspore-file", "folder"])
def test_refuses_to_replace_what_is_not_a_graphpar_checkpoint(tmp_path, kind):
    name = tmp_path / "model.ckpt"
    if kind == "mindspore-file":
        name.write_bytes(b"\x0a\x04name MindSpore protobuf")
        victim = name
    else:
        name.mkdir()
        victim = name / "notes.txt"
        victim.write_text("mine")
    before = victim.read_bytes()
    with pytest.raises(CheckpointError, match=r"model\.ckpt: is a (file|folder).*not a graphpar checkpoint.*another "
                                              "name, or remove it yourself"):
        save_checkpoint(_params(1.0), str(name))
    assert victim.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["model.ckpt"]


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_checkpoints_and_strategy_files_are_owner_only(tmp_path):
    name = tmp_path / "new" / "model.ckpt"
    save_checkpoint(_params(1.0), str(name))
    save_checkpoint(_params(2.0), str(name))  # a replacement too
    assert _mode(tmp_path / "new") == 0o700  # a folder graphpar creates
    entries = [name, *name.rglob("*")]
    assert {str(p.relative_to(tmp_path)): _mode(p) for p in entries if p.is_dir() and _mode(p) != 0o700} == {}
    assert {str(p.relative_to(tmp_path)): _mode(p) for p in entries if p.is_file() and _mode(p) != 0o600} == {}
    assert (name / "graphpar.json").is_file()
    strategy = tmp_path / "plans" / "strategy.json"
    strategy_file.write(str(strategy), {"parallel_layout_item": {}})
    assert _mode(strategy) == 0o600 and _mode(strategy.parent) == 0o700
    assert json.loads(strategy.read_text()) == {"parallel_layout_item": {}}


def test_strategy_save_file_that_is_a_directory(tmp_path):
    folder = tmp_path / "strategy.json"
    folder.mkdir()
    with pytest.raises(ConfigError, match="strategy.json: save_file is a directory; give the path of a file"):
        strategy_file.write(str(folder), {"parallel_layout_item": {}})
    assert os.listdir(folder) == [] and sorted(os.listdir(tmp_path)) == ["strategy.json"]  # no .tmp-PID file
    # the same through planning a train step, as a script sets it
    ms.reset_auto_parallel_context()
    try:
        ms.set_auto_parallel_context(parallel_mode="auto_parallel", search_mode="sharding_propagation",
                                     strategy_ckpt_config={"save_file": str(folder)})
        net = quickstart_net()
        train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.Momentum(net.trainable_params(), 0.1, 0.9))
        with pytest.raises(ConfigError, match="save_file is a directory"):
            train.program.plan_graph([rand(16, 32), rand(16, 16, seed=3)])
    finally:
        ms.reset_auto_parallel_context()
    assert os.listdir(folder) == [] and sorted(os.listdir(tmp_path)) == ["strategy.json"]


def _without_override() -> list[str]:
    """A prefix that runs a command without the right to override file permissions (root has it)."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: a read-only directory stays writable")
    caps = "-dac_override,-dac_read_search"
    return ["setpriv", f"--inh-caps={caps}", f"--bounding-set={caps}"]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_directory_made_read_only_mid_run_is_one_line(tmp_path, mode):
    directory = tmp_path / "ckpt"
    directory.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRAPHPAR_", "MS_"))}
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=1"
    env["MS_COMPILER_CACHE_ENABLE"] = "0"  # the suite's setting (tests/conftest.py): no cache, nothing said of it
    try:
        result = subprocess.run([*_without_override(), sys.executable, str(SCRIPTS / "readonly_directory.py"),
                                 str(directory), mode], env=env, capture_output=True, text=True, timeout=180)
    finally:
        os.chmod(directory, 0o700)
    lines = [line for line in (result.stdout + result.stderr).strip().splitlines()
             if "compiling " not in line or " took " not in line]  # graphpar's slow-compile notice, on a loaded machine
    assert result.returncode == 1, lines[-5:]
    assert lines[0] == "Traceback (most recent call last):", lines[:3]  # no orbax log before it
    assert lines[-1].startswith(f"graphpar.checkpoint.errors.CheckpointError: checkpoint {directory}: cannot write "
                                "checkpoint net-1_"), lines[-1]
    assert "Permission denied" in lines[-1] and "orbax" not in "\n".join(lines)
    assert len(lines) < 40
