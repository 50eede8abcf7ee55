"""Recovery: a worker SIGKILLed mid-training under `graphpar launch --max-restarts` (or MS_ENABLE_RECOVERY) makes
the launcher restart the job, which rolls back to the newest complete checkpoint and ends with parameters bitwise
identical to an uninterrupted run; a Dynamic Cluster worker restarted by hand with its MS_NODE_ID rejoins.

2 processes x 4 CPU devices, the quickstart network (AUTO_PARALLEL, propagated plan), 30 steps, a checkpoint every
5 steps. The script kills itself at the start of step K on the first attempt only, so each trial is deterministic
given K; K is drawn at random in 6..25 and named in every assertion message.
"""

import os
import random
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from graphpar.communication.process_plan import free_port

SCRIPT = Path(__file__).resolve().parent / "scripts" / "fault_train.py"
_PLACEMENT = re.compile(r"^(GRAPHPAR_|MS_|OMPI_|PMIX_|SLURM_)")


def child_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not _PLACEMENT.match(k)}
    env.update(JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1")
    env.update({k: str(v) for k, v in extra.items()})
    return env


def launch(out: Path, kill_step: int, *options: str, mode: str = "", **extra) -> subprocess.CompletedProcess:
    out.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "graphpar.cli.main", "launch", "--log_dir", str(out / "logs"), "--nproc", "2",
               "--devices-per-proc", "4", *options, str(SCRIPT), str(out), str(kill_step)] + ([mode] if mode else [])
    return subprocess.run(command, env=child_env(**extra), capture_output=True, text=True, timeout=300, cwd=out)


def final(out: Path) -> dict:
    with np.load(out / "final.npz") as data:
        return {k: data[k] for k in data}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    out = tmp_path_factory.mktemp("uninterrupted")
    result = launch(out, 0)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "SLICED OK process 0" in result.stdout, result.stdout[-3000:]
    assert "SLICED OK process 1" in (out / "logs" / "worker_1.log").read_text()
    assert sorted(os.listdir(out / "ckpt_of_rank_")) == ["0"]  # one checkpoint, in process 0's directory
    return final(out), re.findall(r"^epoch: \d+ step: \d+, loss is \S+$", result.stdout, re.M)


def _check_trial(out: Path, kill_step: int, result, reference, async_save: bool = False) -> None:
    """The job rolled back to the newest complete checkpoint and ended bitwise identical. With synchronous saves
    that is the last multiple of 5 before the kill step; with ``async_save`` the newest save may still have been in
    flight when the worker died (a commit takes ~0.2-1 s here, a step a few ms), so it is the newest one committed
    by the kill (the marker says which), or the in-flight one if it committed while the job stopped."""
    params, lines = reference
    why = f"kill step {kill_step}: {result.stderr[-3000:]}"
    assert result.returncode == 0, why
    assert "failed: killed by SIGKILL" in result.stderr, why
    assert "Model.train rolls back to the newest complete checkpoint" in result.stderr, why
    newest = 5 * ((kill_step - 1) // 5)
    committed = int((out / "killed").read_text())
    log = (out / "logs" / "worker_0.log").read_text()
    found = re.search(r"resuming from \S+ \(epoch \d+, step (\d+)\)", log)
    resumed = int(found.group(1)) if found else 0
    if async_save:
        assert resumed in (committed, newest) and resumed >= committed, f"resumed at {resumed}, committed " \
            f"{committed} ({why})"
    else:
        assert committed == newest == resumed, f"resumed at {resumed}, committed {committed} ({why})"
    if resumed < newest:  # the newest save was in flight: the restart says so, naming it and the directory
        in_flight = f"{out}/ckpt_of_rank_/0/fault-{(newest - 1) // 10 + 1}_{(newest - 1) % 10 + 1}.ckpt, was still " \
            "in flight"
        assert in_flight in log, log[-3000:]
        if resumed == 0:
            assert f"no complete checkpoint in {out}/ckpt_of_rank_/0; the newest save" in log, log[-3000:]
    got = final(out)
    for name, value in params.items():
        assert np.array_equal(got[name], value), f"{name} differs after recovery ({why})"
    # the rolled-back steps print again, with the same numbering and losses, and training ends at step 30
    printed = re.findall(r"^epoch: \d+ step: \d+, loss is \S+$", result.stdout, re.M)
    assert printed[-(30 - resumed):] == lines[resumed:], why


def test_killed_worker_the_job_restarts_and_ends_bitwise_identical(tmp_path, uninterrupted):
    kill_step = random.randint(6, 25)
    result = launch(tmp_path, kill_step, "--max-restarts", "1")
    _check_trial(tmp_path, kill_step, result, uninterrupted)


@pytest.mark.slow
@pytest.mark.parametrize("trial", range(3))
def test_recovery_trials_with_other_kill_steps(tmp_path, uninterrupted, trial):
    """Three more kill steps (one with asynchronous saving, one through MS_ENABLE_RECOVERY + MS_RECOVERY_PATH with
    the launcher's default restart count)."""
    kill_step = random.Random(6).sample(range(6, 26), 3)[trial]  # three distinct steps
    if trial == 2:
        recovery = tmp_path / "recovery"
        result = launch(tmp_path, kill_step, MS_ENABLE_RECOVERY=1, MS_RECOVERY_PATH=recovery)
        assert not (recovery / "graphpar_recovery.json").exists()  # removed when training finished
    else:
        result = launch(tmp_path, kill_step, "--max-restarts", "1", mode="async" if trial == 1 else "")
    _check_trial(tmp_path, kill_step, result, uninterrupted, async_save=trial == 1)


@pytest.mark.dist
def test_dynamic_cluster_worker_restarted_by_hand_rejoins(tmp_path, uninterrupted):
    """Scheduler and 2 workers started by hand with MS_ENABLE_RECOVERY=1; worker 1 dies at step 13; the scheduler
    restarts worker 0, worker 1 is restarted by hand with the same MS_NODE_ID, and the job completes."""
    port = free_port("127.0.0.1")
    common = dict(MS_WORKER_NUM=2, MS_SCHED_HOST="127.0.0.1", MS_SCHED_PORT=port, MS_ENABLE_RECOVERY=1,
                  MS_RECOVERY_PATH=tmp_path / "recovery", MS_TOPO_TIMEOUT=120)

    def start(role, node_id, log):
        env = child_env(MS_ROLE=role, MS_NODE_ID=node_id, GRAPHPAR_LOCAL_DEVICES=4,
                        XLA_FLAGS="--xla_force_host_platform_device_count=4", **common)
        return subprocess.Popen([sys.executable, str(SCRIPT), str(tmp_path), "13"], env=env, cwd=tmp_path,
                                stdout=open(tmp_path / log, "ab"), stderr=subprocess.STDOUT)

    scheduler = start("MS_SCHED", "sched", "scheduler.log")
    workers = [start("MS_WORKER", str(i), f"worker_{i}.log") for i in range(2)]
    try:
        assert workers[1].wait(timeout=180) == -signal.SIGKILL, (tmp_path / "worker_1.log").read_text()
        workers[1] = start("MS_WORKER", "1", "worker_1.log")  # by hand, same MS_NODE_ID
        codes = [w.wait(timeout=180) for w in workers] + [scheduler.wait(timeout=60)]
    finally:
        for proc in [scheduler, *workers]:
            if proc.poll() is None:
                proc.kill()
    logs = {n: (tmp_path / n).read_text() for n in ("scheduler.log", "worker_0.log", "worker_1.log")}
    assert codes == [0, 0, 0], logs
    assert "restarting this worker to rejoin the job" in logs["worker_0.log"]
    assert "waiting for 2 workers to register again" in logs["scheduler.log"]
    for name, value in uninterrupted[0].items():
        assert np.array_equal(final(tmp_path)[name], value), name
