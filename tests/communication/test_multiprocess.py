"""Real multi-process jobs on 127.0.0.1: graphpar launch, Dynamic Cluster variables, mpirun.

Every child gets its own XLA_FLAGS (the test process forces 8 CPU devices, which children must not inherit
blindly) and a free port picked at run time. The quick, robust ones run in the default suite; the rest are marked
``dist`` (``make test-dist``).
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from graphpar.communication.process_plan import free_port

ROOT = Path(__file__).resolve().parents[2]
ALLGATHER = ROOT / "examples" / "nccl_allgather.py"
DP_TRAIN = Path(__file__).resolve().parent / "scripts" / "dp_train.py"
RUN_DC = ROOT / "examples" / "run_dynamic_cluster.sh"
_PLACEMENT = re.compile(r"^(GRAPHPAR_|MS_|OMPI_|PMIX_|SLURM_)")


def child_env(devices: int | None = None, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not _PLACEMENT.match(k)}
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONUNBUFFERED"] = "1"
    if devices is not None:
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    env.update({k: str(v) for k, v in extra.items()})
    return env


def launch(args: list, tmp_path: Path, timeout: float = 180, **extra) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "graphpar.cli.main", "launch", "--log_dir", str(tmp_path / "logs"), *args]
    return subprocess.run(command, env=child_env(**extra), capture_output=True, text=True, timeout=timeout,
                          cwd=tmp_path)


def rows(text: str) -> list[float]:
    """The rows of the first printed column vector ``[[0.] [1.] ...]``."""
    match = re.search(r"\[\[[-\d.\s\]\[e+]*\]\]", text)
    assert match, text
    return [float(v) for v in re.findall(r"-?\d+\.?\d*(?:e[+-]?\d+)?", match.group(0))]


def losses(text: str) -> list[float]:
    # not anchored: mpirun merges the processes' output streams, so a line may follow another's text
    return [float(m) for m in re.findall(r"LOSS \d+ (-?\d+\.?\d*(?:e[+-]?\d+)?)", text)]


def test_launch_two_processes_allgather_in_rank_order(tmp_path):
    result = launch(["--nproc", "2", "--devices-per-proc", "2", str(ALLGATHER)], tmp_path, DEVICE_TARGET="CPU")
    assert result.returncode == 0, result.stderr + result.stdout
    assert rows(result.stdout) == [0.0, 1.0, 2.0, 3.0]
    assert rows((tmp_path / "logs" / "worker_1.log").read_text()) == [0.0, 1.0, 2.0, 3.0]


@pytest.mark.dist
def test_launch_four_processes_of_two_devices(tmp_path):
    result = launch(["--nproc", "4", "--devices-per-proc", "2", str(ALLGATHER)], tmp_path, DEVICE_TARGET="CPU")
    assert result.returncode == 0, result.stderr + result.stdout
    assert rows(result.stdout) == [float(r) for r in range(8)]
    for i in range(4):
        assert rows((tmp_path / "logs" / f"worker_{i}.log").read_text()) == [float(r) for r in range(8)]


def test_one_process_of_eight_devices_allgather(tmp_path):
    """No DEVICE_TARGET: the example runs on the platform it finds (CPU here)."""
    result = subprocess.run([sys.executable, str(ALLGATHER)], env=child_env(8),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert rows(result.stdout) == [float(r) for r in range(8)]


def _dynamic_cluster(tmp_path: Path, workers: int, script: Path, *args: str, **extra) -> subprocess.CompletedProcess:
    env = child_env(MS_WORKER_NUM=workers, MS_SCHED_PORT=free_port(), LOG_DIR=tmp_path, PYTHON=sys.executable,
                    **extra)
    return subprocess.run(["bash", str(RUN_DC), str(script), *args], env=env, capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)


@pytest.mark.dist
def test_dynamic_cluster_variables_train_with_model(tmp_path):
    result = _dynamic_cluster(tmp_path, 2, DP_TRAIN, "2", DEVICES_PER_WORKER=2)
    logs = {p.name: p.read_text() for p in tmp_path.glob("*.log")}
    assert result.returncode == 0, result.stdout + "\n".join(f"== {k}\n{v}" for k, v in logs.items())
    assert "all workers finished" in logs["scheduler.log"]
    assert "LOSS" not in logs["scheduler.log"]  # the scheduler ran none of the training
    trained = [name for name, text in logs.items() if losses(text)]
    assert len(trained) == 1 and len(losses(logs[trained[0]])) == 32  # 128 rows / (4 ranks x 2) = 16 steps x 2
    assert all("DONE process" in logs[f"worker_{i}.log"] for i in range(2))


def test_dynamic_cluster_with_a_missing_worker_fails_naming_it(tmp_path):
    """MS_WORKER_NUM=3 but only workers 0 and 1 start: every process fails when the cluster timeout (MS_TOPO_TIMEOUT)
    expires, naming the missing worker and the timeout, instead of waiting for it forever (``communicate`` bounds the
    wait; how long it took is not asserted, as timings on a loaded machine are not a test)."""
    port = free_port()
    common = dict(MS_WORKER_NUM=3, MS_SCHED_HOST="127.0.0.1", MS_SCHED_PORT=port, MS_TOPO_TIMEOUT=3)
    code = "from graphpar.communication import init; init(); print('joined')"
    procs = [subprocess.Popen([sys.executable, "-c", code], env=child_env(1, MS_ROLE="MS_SCHED", **common),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)]
    for i in range(2):
        procs.append(subprocess.Popen([sys.executable, "-c", code],
                                      env=child_env(1, MS_ROLE="MS_WORKER", MS_NODE_ID=i, **common),
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = [p.communicate(timeout=120)[0] for p in procs]
    assert all(p.returncode != 0 for p in procs), outputs
    for text in outputs:
        assert "only 2 of MS_WORKER_NUM=3 workers" in text and "Missing: MS_NODE_ID=2" in text, text
        assert "within 3 s (MS_TOPO_TIMEOUT)" in text, text
        assert "joined" not in text


@pytest.mark.dist
@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun (OpenMPI) is not installed; `make test-dist` "
                    "installs openmpi-bin with apt-get where it can")
def test_mpirun_trains_with_model(tmp_path):
    command = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-n", "2",
               "-x", "XLA_FLAGS=--xla_force_host_platform_device_count=4", "-x", "JAX_PLATFORMS=cpu",
               sys.executable, str(DP_TRAIN), "1"]
    result = subprocess.run(command, env=child_env(), capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(losses(result.stdout)) == 8
    assert "DONE process 0" in result.stdout and "DONE process 1" in result.stdout


@pytest.mark.dist
def test_data_parallel_two_processes_match_one_process(tmp_path):
    """Model.train in DATA_PARALLEL: 2 processes x 4 devices follow the loss trajectory of 1 process x 8 devices on
    the same global data (non-sink and sink mode)."""
    for sink in ("", "sink"):
        single = subprocess.run([sys.executable, str(DP_TRAIN), "2", sink], env=child_env(8), capture_output=True,
                                text=True, timeout=300)
        assert single.returncode == 0, single.stderr
        workdir = tmp_path / (sink or "step")
        workdir.mkdir()
        multi = launch(["--nproc", "2", "--devices-per-proc", "4", str(DP_TRAIN), "2", sink], workdir)
        assert multi.returncode == 0, multi.stderr + multi.stdout
        expected, got = losses(single.stdout), losses(multi.stdout)
        assert len(expected) == (16 if not sink else 2) and len(got) == len(expected)
        np.testing.assert_allclose(got, expected, rtol=1e-5)


def test_launcher_environment_with_a_missing_process_says_why_before_jax_aborts():
    env = child_env(1, GRAPHPAR_COORDINATOR=f"127.0.0.1:{free_port()}", GRAPHPAR_NUM_PROCESSES=2,
                    GRAPHPAR_PROCESS_ID=0, GRAPHPAR_CLUSTER_TIMEOUT=2)
    result = subprocess.run([sys.executable, "-c", "from graphpar.communication import init; init()"], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "the job did not form within 2 s" in result.stderr and "process 0 of 2" in result.stderr


QUICKSTART = ROOT / "examples" / "quickstart.py"
AUTO_EVAL = Path(__file__).resolve().parent / "scripts" / "auto_eval.py"


def test_quickstart_two_processes_match_one_process(tmp_path):
    """Issue 5: 2 processes x 4 devices train the quickstart (propagated strategies) along the loss trajectory of
    1 process x 8 devices; each process writes the dumps of the ranks it owns."""
    single = subprocess.run([sys.executable, str(QUICKSTART)], env=child_env(8, SAVE_GRAPHS_PATH=tmp_path / "one"),
                            capture_output=True, text=True, timeout=300)
    assert single.returncode == 0, single.stderr
    multi = launch(["--nproc", "2", "--devices-per-proc", "4", str(QUICKSTART)], tmp_path,
                   SAVE_GRAPHS_PATH=tmp_path / "two")
    assert multi.returncode == 0, multi.stderr + multi.stdout
    pick = re.compile(r"^epoch: (\d+) step: (\d+), loss is (\S+)$", re.M)
    expected, got = pick.findall(single.stdout), pick.findall(multi.stdout)
    assert len(expected) == 20 and [e[:2] for e in got] == [e[:2] for e in expected]
    np.testing.assert_allclose([float(g[2]) for g in got], [float(e[2]) for e in expected], rtol=1e-5)
    assert sorted(p.name for p in (tmp_path / "two").iterdir()) == [f"rank_{r}" for r in range(8)]
    begin = (tmp_path / "two" / "rank_5" / "step_parallel_begin_0000.ir").read_text()
    assert "{in_strategy: ((2, 4))}" in next(l for l in begin.splitlines() if "instance name: relu}" in l)


@pytest.mark.dist
def test_eval_and_predict_across_processes(tmp_path):
    single = subprocess.run([sys.executable, str(AUTO_EVAL)], env=child_env(4), capture_output=True, text=True,
                            timeout=300, cwd=AUTO_EVAL.parent)
    assert single.returncode == 0, single.stderr
    multi = launch(["--nproc", "2", "--devices-per-proc", "2", str(AUTO_EVAL)], tmp_path)
    assert multi.returncode == 0, multi.stderr + multi.stdout
    for key in ("EVAL", "PREDICT"):
        want = next(l for l in single.stdout.splitlines() if l.startswith(key))
        have = next(l for l in multi.stdout.splitlines() if l.startswith(key))
        assert want.split()[:1] == have.split()[:1]
        np.testing.assert_allclose([float(v) for v in re.findall(r"-?\d+\.\d+(?:e[+-]?\d+)?", have)],
                                   [float(v) for v in re.findall(r"-?\d+\.\d+(?:e[+-]?\d+)?", want)], rtol=1e-5)
