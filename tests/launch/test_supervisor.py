"""graphpar launch as a supervisor: logs, failure reports naming the rank, restarts, signal forwarding, and a
SIGKILLed JAX worker stopping the job."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parent / "scripts"
ROOT = Path(__file__).resolve().parents[2]
_PLACEMENT = re.compile(r"^(GRAPHPAR_|MS_|OMPI_|PMIX_|SLURM_)")


def env() -> dict:
    out = {k: v for k, v in os.environ.items() if not _PLACEMENT.match(k)}
    out.update(JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1")
    return out


def command(tmp_path, *args):
    return [sys.executable, "-m", "graphpar.cli.main", "launch", "--log_dir", str(tmp_path / "logs"), *args]


def test_success_streams_rank_zero_and_writes_every_log(tmp_path):
    result = subprocess.run(command(tmp_path, "--nproc", "3", "--devices-per-proc", "2", str(SCRIPTS /
                                    "plain_worker.py"), "ok", str(tmp_path)),
                            env=env(), capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "process 0 attempt 0 devices 2" in result.stdout and "process 1" not in result.stdout
    for i in range(3):
        assert f"process {i} attempt 0" in (tmp_path / "logs" / f"worker_{i}.log").read_text()


def test_failure_names_the_rank_and_quotes_its_log(tmp_path):
    result = subprocess.run(command(tmp_path, "--nproc", "2", "--devices-per-proc", "2", str(SCRIPTS /
                                    "plain_worker.py"), "fail-1", str(tmp_path)),
                            env=env(), capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "worker 1, process 1 (ranks 2-3), failed: exit status 3" in result.stderr
    assert "boom" in result.stderr and "worker_1.log" in result.stderr
    assert (tmp_path / "signal_0").read_text() == "SIGTERM"  # the sleeping worker 0 was stopped, not waited for


def test_restart_increments_the_restart_count(tmp_path):
    result = subprocess.run(command(tmp_path, "--nproc", "2", "--max-restarts", "2", str(SCRIPTS /
                                    "plain_worker.py"), "restart", str(tmp_path)),
                            env=env(), capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "restarting all local workers (restart 1 of 2, GRAPHPAR_RESTART_COUNT=1)" in result.stderr
    log = (tmp_path / "logs" / "worker_0.log").read_text()
    assert "attempt 0" in log and "===== graphpar launch: restart 1 =====" in log and "attempt 1" in log


def test_restarts_exhausted_fail(tmp_path):
    result = subprocess.run(command(tmp_path, "--nproc", "2", str(SCRIPTS / "plain_worker.py"), "fail-1",
                                    str(tmp_path)), env=env(), capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and "restarting" not in result.stderr


def test_sigint_is_forwarded_to_every_child(tmp_path):
    proc = subprocess.Popen(command(tmp_path, "--nproc", "2", str(SCRIPTS / "plain_worker.py"), "sleep",
                                    str(tmp_path)), env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 30
    while not all((tmp_path / f"pid_{i}").exists() for i in range(2)) and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGINT, err
    assert all((tmp_path / f"signal_{i}").read_text() == "SIGINT" for i in range(2))


def test_sigkilled_jax_worker_stops_the_job_naming_its_rank(tmp_path):
    child = env()
    proc = subprocess.Popen(command(tmp_path, "--nproc", "2", "--devices-per-proc", "2", "--cluster_time_out",
                                    "60", str(SCRIPTS / "jax_sleeper.py"), str(tmp_path)),
                            env=child, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 90
    while not (tmp_path / "pid_1").exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    assert (tmp_path / "pid_1").exists(), proc.communicate(timeout=10)
    killed_at = time.monotonic()
    os.kill(int((tmp_path / "pid_1").read_text()), signal.SIGKILL)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert time.monotonic() - killed_at < 30
    assert "worker 1, process 1 (ranks 2-3), failed: killed by SIGKILL" in err


@pytest.mark.dist
def test_launch_with_a_scheduler_runs_dynamic_cluster(tmp_path):
    result = subprocess.run(command(tmp_path, "--scheduler", "--nproc", "2", "--devices-per-proc", "2",
                                    str(ROOT / "examples" / "nccl_allgather.py")),
                            env={**env(), "DEVICE_TARGET": "CPU"}, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr + result.stdout
    assert "[[0.]\n [1.]\n [2.]\n [3.]]" in result.stdout
    assert "all workers finished" in (tmp_path / "logs" / "scheduler.log").read_text()


def test_a_worker_that_exits_0_early_is_named_as_the_cause(tmp_path):
    """Process 1 exits 0 at once while process 0 runs on: after the grace the job stops, naming process 1 (its
    rank, pid, exit status and log) in one line, and process 0's end as a consequence. It used to wait for process
    0 (in a JAX job: ~304 s, then blame process 0)."""
    result = subprocess.run(command(tmp_path, "--nproc", "2", "--early-exit-grace", "1", str(SCRIPTS /
                                    "plain_worker.py"), "early-0", str(tmp_path)),
                            env=env(), capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result.stderr
    cause = next(line for line in result.stderr.splitlines() if "left the job early" in line)
    assert re.search(r"worker 1, process 1, pid \d+, left the job early: it exited with status 0 while 1 other "
                     r"worker\(s\) still ran; they still ran 1 s later \(--early-exit-grace", cause), cause
    assert cause.endswith(str(tmp_path / "logs" / "worker_1.log"))
    assert re.search(r"consequence: worker 0, process 0, pid \d+, still ran and was stopped by the launcher",
                     result.stderr)
    assert "worker 0, process 0, failed" not in result.stderr
    assert (tmp_path / "signal_0").read_text() == "SIGTERM"


def test_uneven_finishes_within_the_grace_succeed(tmp_path):
    result = subprocess.run(command(tmp_path, "--nproc", "2", "--early-exit-grace", "20", str(SCRIPTS /
                                    "plain_worker.py"), "uneven", str(tmp_path)),
                            env=env(), capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "left the job early" not in result.stderr


def test_the_grace_comes_from_the_environment_and_a_negative_one_waits(tmp_path):
    result = subprocess.run(command(tmp_path, "--nproc", "2", str(SCRIPTS / "plain_worker.py"), "uneven",
                                    str(tmp_path)),
                            env={**env(), "GRAPHPAR_EARLY_EXIT_GRACE": "-1"}, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    result = subprocess.run(command(tmp_path, "--nproc", "2", str(SCRIPTS / "plain_worker.py"), "uneven",
                                    str(tmp_path)),
                            env={**env(), "GRAPHPAR_EARLY_EXIT_GRACE": "soon"}, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 2
    assert "GRAPHPAR_EARLY_EXIT_GRACE='soon': must be a number of seconds" in result.stderr


@pytest.mark.dist
@pytest.mark.parametrize("mode", ["exit-0", "raise"])
def test_a_jax_worker_that_leaves_early_is_named_at_once(tmp_path, mode):
    """In a JAX job the leaver does not exit (JAX holds it in a shutdown barrier for 300 s while process 0 waits in a
    collective, then aborts both): the worker notes the end of its script, and the launcher names it."""
    # the subprocess timeout (240 s) is below JAX's 300 s shutdown barrier: a job that was not stopped fails it
    result = subprocess.run(command(tmp_path, "--nproc", "2", "--devices-per-proc", "1", "--early-exit-grace", "3",
                                    "--cluster_time_out", "60", str(SCRIPTS / "jax_leaver.py"), mode),
                            env=env(), capture_output=True, text=True, timeout=240)
    assert result.returncode == 1, result.stderr
    if mode == "exit-0":
        assert re.search(r"worker 1, process 1 \(rank 1\), pid \d+, left the job early: it ended its script with no "
                         r"uncaught exception", result.stderr), result.stderr
        assert "consequence: worker 0, process 0 (rank 0)" in result.stderr
    else:
        assert ("worker 1, process 1 (rank 1), failed: its script raised ValueError: process 1 gives up"
                in result.stderr), result.stderr
    assert "worker 0, process 0 (rank 0), failed" not in result.stderr


@pytest.mark.parametrize(("ending", "note"), [
    ("pass", "ended"), ("import sys; sys.exit(0)", "ended"),
    ("raise ValueError('no data\\nsecond line')", "raised ValueError: no data")])
def test_a_worker_that_joined_notes_how_its_script_ended(tmp_path, ending, note):
    """What the supervisor reads while JAX still holds the process in its shutdown barrier."""
    path = tmp_path / "worker_0.log.exit"
    script = f"from graphpar import _cluster\n_cluster.record_join(_cluster.HostPlacement())\n{ending}\n"
    subprocess.run([sys.executable, "-c", script], env={**env(), "GRAPHPAR_EXIT_NOTE": str(path)},
                   capture_output=True, timeout=60)
    assert path.read_text() == note
