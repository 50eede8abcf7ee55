"""Checkpoints belong to a run: a restart never rolls back into an earlier run's checkpoint (issue 27 item 1), a
fresh run writes under MindSpore's renamed prefix instead of deleting the earlier run's (item 5), one job at a time
writes a directory + prefix (item 4), and ``ModelCheckpoint(directory=<a file>)`` is refused by name (item 15)."""

import json
import os
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from graphpar.checkpoint import CheckpointError, resume
from graphpar.checkpoint.store import TMP_MARKER
from graphpar.train import CheckpointConfig, ModelCheckpoint

from graphpar.models.mlp import MLP

from .helpers import Record, StopAt, momentum_model, params, shuffled_dataset

STEPS = 12  # one epoch of shuffled_dataset()


def _train(directory, lr, *, prefix="net", every=4, resume_from=False):
    net, record = MLP(16, 32, 8, seed=0), Record()
    cb = ModelCheckpoint(prefix, str(directory), CheckpointConfig(save_checkpoint_steps=every, keep_checkpoint_max=2))
    momentum_model(net, lr).train(1, shuffled_dataset(), callbacks=[cb, record], resume=resume_from)
    return net, record, cb


def _ckpts(directory):
    return sorted(n for n in os.listdir(directory) if n.endswith(".ckpt"))


def test_a_restart_never_rolls_back_into_an_earlier_finished_run(tmp_path, monkeypatch, notices):
    """The issue's case: run 1 (lr 0.05) finishes; run 2 (lr 0.01, same directory) is restarted before its first
    save. The restart trains run 2 from step 0 (saying so once) and ends where an uninterrupted run 2 ends; it does
    not "resume" run 1's final checkpoint and train nothing."""
    monkeypatch.setenv("GRAPHPAR_JOB_ID", "run-1")
    _train(tmp_path / "ckpt", 0.05)
    run1_last = str(tmp_path / "ckpt" / "net-1_12.ckpt")
    monkeypatch.setenv("GRAPHPAR_RESTART_COUNT", "1")  # a restart of run 1 itself still finds run 1's checkpoint
    cb = ModelCheckpoint("net", str(tmp_path / "ckpt"))
    assert resume.choose(False, [cb]) == run1_last

    monkeypatch.setenv("GRAPHPAR_JOB_ID", "run-2")
    net, record, cb = _train(tmp_path / "ckpt", 0.01)
    assert len(record.losses) == STEPS, "the restart of run 2 did not train from step 0"
    said = [r.getMessage() for r in notices.records if "no checkpoint of this job" in r.getMessage()]
    assert said == [f"resume: {tmp_path}/ckpt holds no checkpoint of this job (run-2), only 2 of other runs (the "
                    f"newest, {run1_last}, of job run-1), which a rollback never resumes; training starts from step 0"]
    assert cb.write_prefix == "net_1"  # and run 1's checkpoints are still there (item 5)
    assert _ckpts(tmp_path / "ckpt") == ["net-1_12.ckpt", "net-1_8.ckpt", "net_1-1_12.ckpt", "net_1-1_8.ckpt"]

    monkeypatch.delenv("GRAPHPAR_RESTART_COUNT")
    uninterrupted, _, _ = _train(tmp_path / "other", 0.01)
    for name, value in params(uninterrupted).items():
        assert np.array_equal(params(net)[name], value), name


def test_resume_true_continues_an_earlier_run_explicitly(tmp_path, monkeypatch, notices):
    """resume=True is the user asking to continue the training in that directory: the newest intact checkpoint,
    whichever run wrote it, and the continuation keeps its prefix (docs/checkpoints.md section 7)."""
    monkeypatch.setenv("GRAPHPAR_JOB_ID", "run-1")
    net = MLP(16, 32, 8, seed=0)
    cb = ModelCheckpoint("net", str(tmp_path), CheckpointConfig(save_checkpoint_steps=4))
    momentum_model(net, 0.05).train(1, shuffled_dataset(), callbacks=[cb, StopAt(8)])
    monkeypatch.setenv("GRAPHPAR_JOB_ID", "run-2")
    _, record, cb = _train(tmp_path, 0.05, resume_from=True)
    assert len(record.losses) == STEPS - 8 and cb.write_prefix == "net"
    assert "resuming from " + str(tmp_path / "net-1_8.ckpt") in notices.text


def test_a_fresh_run_renames_its_prefix_as_mindspore_does(tmp_path, notices):
    """MindSpore's rule: files of the prefix exist, so the new run writes {prefix}_1, then _2 (one more than the
    largest suffix); the earlier runs' checkpoints are kept, and it is said once."""
    _train(tmp_path, 0.05)
    assert _ckpts(tmp_path) == ["net-1_12.ckpt", "net-1_8.ckpt"]
    _train(tmp_path, 0.05)
    assert _ckpts(tmp_path) == ["net-1_12.ckpt", "net-1_8.ckpt", "net_1-1_12.ckpt", "net_1-1_8.ckpt"]
    _, _, cb = _train(tmp_path, 0.05)
    assert cb.write_prefix == "net_2"
    assert _ckpts(tmp_path) == ["net-1_12.ckpt", "net-1_8.ckpt", "net_1-1_12.ckpt", "net_1-1_8.ckpt",
                                "net_2-1_12.ckpt", "net_2-1_8.ckpt"]
    assert f"ModelCheckpoint: {tmp_path} already holds checkpoints of prefix 'net' (an earlier run's); this run " \
           "writes net_2-<epoch>_<step>.ckpt and leaves them (MindSpore's renaming)" in notices.text
    assert not os.path.exists(tmp_path / ".net.graphpar-lock")  # released when training ended


def test_a_restart_writes_where_its_first_attempt_wrote(tmp_path, monkeypatch, notices):
    """The first attempt of job run-2 wrote under net_1 and died with a save in flight (orbax's temporary
    directory, no complete checkpoint): its restart keeps net_1 (not net_2), takes the dead attempt's lock over
    with one line, and names the save that was in flight."""
    _train(tmp_path, 0.05)  # an earlier run: net-*
    os.makedirs(tmp_path / f"net_1-1_4.ckpt{TMP_MARKER}-1700000000")
    dead = {"pid": 999999, "host": socket.gethostname(), "job": "run-2", "prefix": "net_1", "since": time.time()}
    (tmp_path / ".net.graphpar-lock").write_text(json.dumps(dead))
    monkeypatch.setenv("GRAPHPAR_JOB_ID", "run-2")
    monkeypatch.setenv("GRAPHPAR_RESTART_COUNT", "1")
    _, record, cb = _train(tmp_path, 0.05)
    assert cb.write_prefix == "net_1" and len(record.losses) == STEPS
    assert f"the newest save, {tmp_path}/net_1-1_4.ckpt, was still in flight" in notices.text
    assert f"ModelCheckpoint: {tmp_path}/.net.graphpar-lock was left by pid 999999 on {socket.gethostname()}, job " \
           "run-2" in notices.text
    assert not any(TMP_MARKER in n for n in os.listdir(tmp_path))  # its own leftovers are cleared


_HOLDER = """
import os, sys, time
from graphpar.checkpoint import writer_lock
directory = sys.argv[1]
taken = writer_lock.acquire(directory, "net")
writer_lock.record(taken, writer_lock.Owner.this_process("job-A", "net"))
os.makedirs(os.path.join(directory, "net-1_5.ckpt.orbax-checkpoint-tmp-1700000000"))  # A's save in flight
print("holding", flush=True)
time.sleep(120)
"""


def test_a_second_job_in_the_same_directory_is_refused_naming_the_first(tmp_path, notices):
    """Job A holds the directory (its save in flight); job B is refused by name before it touches anything, so A's
    temporary directory survives. Once A is dead, its stale lock is taken over with one line."""
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                              env=env)
    try:
        assert holder.stdout.readline().strip() == "holding"
        with pytest.raises(CheckpointError, match=rf"another live job writes checkpoints of prefix 'net' here \(pid "
                                                  rf"{holder.pid} on {socket.gethostname()}, job job-A"):
            _train(tmp_path, 0.05)
        assert os.path.isdir(tmp_path / f"net-1_5.ckpt{TMP_MARKER}-1700000000")
    finally:
        holder.kill()
        holder.wait()
    _, record, cb = _train(tmp_path, 0.05)
    assert len(record.losses) == STEPS and cb.write_prefix == "net_1"  # A's name counts, as MindSpore's rule has it
    assert f"was left by pid {holder.pid} on {socket.gethostname()}, job job-A" in notices.text
    assert "which is no longer running; this process takes it over" in notices.text


def test_a_directory_that_is_a_file_is_refused_by_name(tmp_path):
    victim = tmp_path / "ckpt"
    victim.write_text("not a directory")
    with pytest.raises(CheckpointError, match=rf"checkpoint {victim}: ModelCheckpoint\(directory\) is an existing "
                                              "file, not a directory"):
        ModelCheckpoint("net", str(victim))


SCRIPT = os.path.join(os.path.dirname(__file__), "scripts", "two_runs_train.py")


def _launch(out, ckpt, lr, kill_step, *options):
    from .test_recovery import child_env

    os.makedirs(out, exist_ok=True)
    command = [sys.executable, "-m", "graphpar.cli.main", "launch", "--log_dir", str(out / "logs"), "--nproc", "2",
               "--devices-per-proc", "2", *options, SCRIPT, str(out), str(ckpt), str(lr), str(kill_step)]
    return subprocess.run(command, env=child_env(), capture_output=True, text=True, timeout=300, cwd=out)


def _final(out):
    with np.load(out / "final.npz") as data:
        return {k: data[k] for k in data}


@pytest.mark.dist
def test_a_launcher_restart_of_run_2_never_resumes_run_1(tmp_path):
    """The issue's reproducer under `graphpar launch`: run 1 (lr 0.05) finishes; run 2 (lr 0.01, same checkpoint
    directory, --max-restarts 1) loses a worker at step 3, before its first save. Every worker of every attempt of
    run 2 has one job identity, different from run 1's; the restart trains run 2 from step 0 and ends with the
    parameters of an uninterrupted run 2."""
    ckpt = tmp_path / "ckpt"
    first = _launch(tmp_path / "run1", ckpt, 0.05, 0)
    assert first.returncode == 0, first.stderr[-3000:]
    second = _launch(tmp_path / "run2", ckpt, 0.01, 3, "--max-restarts", "1")
    assert second.returncode == 0, second.stderr[-3000:]
    assert "failed: killed by SIGKILL" in second.stderr
    logs = [(tmp_path / "run2" / "logs" / f"worker_{i}.log").read_text() for i in range(2)]
    jobs = {line for log in logs for line in log.splitlines() if line.startswith("JOB ")}
    run1_jobs = {line for line in first.stdout.splitlines() if line.startswith("JOB ")}
    assert len(jobs) == 1 and "JOB None" not in jobs and jobs != run1_jobs, (jobs, run1_jobs)
    assert logs[0].count("START STEP 0") == 2, logs[0][-3000:]  # both attempts start at step 0
    assert "holds no checkpoint of this job" in logs[0], logs[0][-3000:]
    reference = _launch(tmp_path / "alone", tmp_path / "alone_ckpt", 0.01, 0)
    assert reference.returncode == 0, reference.stderr[-3000:]
    got, want, run1 = _final(tmp_path / "run2"), _final(tmp_path / "alone"), _final(tmp_path / "run1")
    for name, value in want.items():
        assert np.array_equal(got[name], value), name
        assert not np.array_equal(got[name], run1[name]), name
