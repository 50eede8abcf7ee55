"""graphpar launch: both option spellings, host files, and the environment each child gets."""

import argparse
import sys

import pytest

from graphpar.launch import cli, environment, hostfile
from graphpar.launch.config import LaunchError, resolve


def parse(*argv):
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    return parser.parse_args(["launch", *argv])


def test_nproc_spelling_runs_a_script_with_this_python():
    cfg = resolve(parse("--nproc", "2", "--devices-per-proc", "4", "train.py", "--lr", "0.1"))
    assert cfg.command == (sys.executable, "train.py", "--lr", "0.1")
    assert (cfg.local_procs, cfg.total_procs, cfg.first_process, cfg.devices_per_proc) == (2, 2, 0, 4)
    assert cfg.master_addr == "127.0.0.1" and cfg.master_port > 0 and not cfg.dynamic_cluster
    assert cfg.ranks_of(1) == "process 1 (ranks 4-7)" and cfg.log_name(1) == "worker_1.log"


def test_msrun_spelling_for_node_one_of_two():
    cfg = resolve(parse("--worker_num", "16", "--local_worker_num", "8", "--master_addr", "127.0.0.1",
                        "--master_port", "8118", "--node_rank", "1", "--log_dir", "out", "--join", "True",
                        "--cluster_time_out", "30", sys.executable, "train.py"))
    assert (cfg.first_process, cfg.total_procs, cfg.master_port, cfg.log_dir) == (8, 16, 8118, "out")
    assert cfg.cluster_timeout == 30 and not cfg.dynamic_cluster and not cfg.run_scheduler


def test_dynamic_cluster_modes():
    cfg = resolve(parse("--scheduler", "--nproc", "2", "train.py"))
    assert cfg.dynamic_cluster and cfg.run_scheduler and cfg.first_process == 0
    cfg = resolve(parse("--worker_num", "4", "--local_worker_num", "2", "--master_port", "9000", "train.py"))
    assert cfg.dynamic_cluster and cfg.first_process is None  # no node rank: the scheduler assigns
    assert cfg.run_scheduler  # master_addr 127.0.0.1 is this host
    assert cfg.log_name(1) == "worker_1.log" and cfg.ranks_of(1) == "local worker 1"


@pytest.mark.parametrize("argv,message", [
    (["--nproc", "2", "--local_worker_num", "3", "t.py"], "disagree"),
    (["--nproc", "0", "t.py"], "--nproc must be >= 1"),
    (["--nproc", "3", "--worker_num", "2", "t.py"], "exceed --worker_num 2"),
    (["--worker_num", "4", "--local_worker_num", "2", "--node_rank", "2", "t.py"], "valid node ranks: 0..1"),
    (["--nproc", "2"], "give the command to run"),
    (["--nproc", "1", "no-such-program-xyz"], "neither a program on PATH nor a file"),
])
def test_bad_options_are_named(argv, message):
    with pytest.raises(LaunchError, match=message):
        resolve(parse(*argv))


def test_hostfile_gives_counts_and_node_rank(tmp_path):
    path = tmp_path / "hosts"
    path.write_text("# two nodes\nnode-a slots=3\nlocalhost slots=2  # this one\n")
    cfg = resolve(parse("--hostfile", str(path), "train.py"))
    assert (cfg.local_procs, cfg.total_procs, cfg.first_process) == (2, 5, 3)
    assert cfg.master_addr == "node-a"
    cfg = resolve(parse("--hostfile", str(path), "--node_rank", "0", "--master_port", "8118", "train.py"))
    assert (cfg.local_procs, cfg.first_process) == (3, 0)


@pytest.mark.parametrize("text,message", [("", "no hosts"), ("a slots=x\n", "is not 'HOST slots=N'"),
                                           ("a slots=0\n", "slots must be >= 1"), ("a\na\n", "listed twice"),
                                           ("elsewhere slots=2\n", "no line name this host")])
def test_bad_hostfiles(tmp_path, text, message):
    path = tmp_path / "hosts"
    path.write_text(text)
    with pytest.raises(hostfile.HostfileError, match=message):
        hostfile.locate(hostfile.parse(str(path)), None, str(path))


def test_worker_environment_direct_mode(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_foo=1 --xla_force_host_platform_device_count=8")
    monkeypatch.setenv("MS_ROLE", "MS_WORKER")  # must not leak into a direct-mode child
    cfg = resolve(parse("--nproc", "2", "--devices-per-proc", "4", "--master_port", "1234", "train.py"))
    env = environment.worker_environment(cfg, 1, restart=2)
    assert env["XLA_FLAGS"] == "--xla_cpu_foo=1 --xla_force_host_platform_device_count=4"
    assert env["GRAPHPAR_COORDINATOR"] == "127.0.0.1:1234"
    assert (env["GRAPHPAR_NUM_PROCESSES"], env["GRAPHPAR_PROCESS_ID"], env["GRAPHPAR_LOCAL_PROCESS_ID"]) == \
        ("2", "1", "1")
    assert env["GRAPHPAR_RESTART_COUNT"] == "2" and env["GRAPHPAR_LOCAL_DEVICES"] == "4"
    assert "MS_ROLE" not in env


def test_worker_environment_dynamic_cluster():
    cfg = resolve(parse("--scheduler", "--nproc", "2", "--master_port", "1234", "train.py"))
    env = environment.worker_environment(cfg, 1, restart=0)
    assert (env["MS_ROLE"], env["MS_SCHED_PORT"], env["MS_WORKER_NUM"], env["MS_NODE_ID"]) == \
        ("MS_WORKER", "1234", "2", "1")
    assert "GRAPHPAR_PROCESS_ID" not in env
    assert environment.scheduler_environment(cfg, 0)["MS_ROLE"] == "MS_SCHED"
