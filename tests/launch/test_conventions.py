"""MindSpore's launch conventions: seed 003's one-process-per-device pattern (RANK_ID/RANK_SIZE, with or without
RANK_TABLE_FILE) forms one job; ``msrun`` trains the quickstart; variables that do not apply are said, not fatal.
The multi-process ones are ``dist`` (``make test-dist``)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from graphpar.communication.process_plan import free_port
from tests.communication.test_multiprocess import child_env

ROOT = Path(__file__).resolve().parents[2]
JOIN = "import os, graphpar as ms\nfrom graphpar.communication import init, get_group_size, get_rank\n" \
       "ms.set_context(device_target='CPU', device_id=int(os.environ['DEVICE_ID']))\ninit()\n" \
       "print('RANK', get_rank(), 'OF', get_group_size(), flush=True)\n"


def _rank_table(path: Path, devices: int) -> Path:
    path.write_text(json.dumps({"version": "1.0", "server_count": "1", "server_list": [{
        "server_id": "10.0.0.1", "device": [{"device_id": str(i), "device_ip": f"192.{i}.27.6", "rank_id": str(i)}
                                            for i in range(devices)], "host_nic_ip": "reserve"}],
        "status": "completed"}))
    return path


@pytest.mark.dist
@pytest.mark.parametrize("with_table", [True, False], ids=["rank_table", "rank_id_only"])
def test_seed_003_run_sh_pattern_forms_one_two_process_job(tmp_path, with_table):
    """run.sh: ranks 1..N-1 started in the background from their own directories, then rank 0."""
    script = tmp_path / "train.py"
    script.write_text(JOIN)
    extra = {"RANK_TABLE_FILE": str(_rank_table(tmp_path / "rank_table_2pcs.json", 2))} if with_table else {}
    procs = []
    for i in (1, 0):
        folder = tmp_path / f"device{i}"
        folder.mkdir()
        procs.append(subprocess.Popen([sys.executable, str(script)], cwd=folder, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True,
                                      env=child_env(1, RANK_SIZE=2, RANK_ID=i, DEVICE_ID=i,
                                                    MS_TOPO_TIMEOUT=60, **extra)))
    outputs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    assert "RANK 1 OF 2" in outputs[0] and "RANK 0 OF 2" in outputs[1], outputs


@pytest.mark.dist
def test_device_id_beyond_the_hosts_devices_is_an_error(tmp_path):
    result = subprocess.run([sys.executable, "-c", "import graphpar as ms; ms.set_context(device_id=3)"],
                            env=child_env(2), capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "set_context(device_id=3): this host has 2 CPU device(s); valid device_id: 0..1" in result.stderr


def test_an_unusable_variable_of_another_convention_is_ignored_with_a_notice(monkeypatch, notices):
    from graphpar import _env
    from graphpar.communication import bootstrap

    monkeypatch.setenv("MS_WORKER_NUM", "abc")
    bootstrap._check_variables(_env.cluster_env(), "launch")
    assert "MS_WORKER_NUM='abc' is not an integer; ignored" in notices.text


@pytest.mark.dist
def test_launch_says_which_variables_it_does_not_pass(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("from graphpar.communication import init, get_group_size\ninit()\n"
                      "print('GROUP', get_group_size(), flush=True)\n")
    result = subprocess.run([sys.executable, "-m", "graphpar.cli.main", "launch", "--nproc", "2", "--log_dir",
                             str(tmp_path / "logs"), str(script)], env=child_env(1, MS_WORKER_NUM="abc"),
                            capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "MS_WORKER_NUM='abc' in this environment do(es) not apply" in result.stderr
    assert "GROUP 2" in result.stdout


@pytest.mark.dist
def test_msrun_trains_the_quickstart(tmp_path):
    port = free_port()
    result = subprocess.run([str(Path(sys.executable).parent / "msrun"), "--worker_num", "2", "--local_worker_num",
                             "2", "--master_addr", "127.0.0.1", "--master_port", str(port), "--log_dir",
                             str(tmp_path / "logs"), "--join", "True", str(ROOT / "examples" / "quickstart.py")],
                            env=child_env(4, SAVE_GRAPHS_PATH=str(tmp_path / "ir")), capture_output=True, text=True,
                            timeout=300, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    for i in range(2):
        log = (tmp_path / "logs" / f"worker_{i}.log").read_text()
        assert "epoch: 5 step: 4, loss is" in log, log[-2000:]
    assert "epoch: 5 step: 4, loss is" in result.stdout
