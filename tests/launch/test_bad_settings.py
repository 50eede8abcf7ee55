"""Garbage launch settings end in one line naming the setting and what is valid, before any process starts (issue
27, item 15): they used to fail inside the workers, in C++ or in a Python traceback of the launcher."""

import argparse
import socket
import subprocess
import sys

import pytest

from graphpar import _env
from graphpar.communication import port_check, process_plan
from graphpar.communication.errors import ClusterError
from graphpar.launch import cli
from graphpar.launch.config import LaunchError, check_listen_address_here, resolve
from graphpar.launch.supervisor import Supervisor


def parse(*argv):
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    return parser.parse_args(["launch", *argv])


@pytest.fixture()
def listener():
    """A socket listening on a loopback port, as another job's coordinator would."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        yield sock.getsockname()[1]


def test_a_master_port_out_of_range_is_refused_at_launch():
    with pytest.raises(LaunchError, match=r"--master_port 70000 is not a TCP port; valid: 1\.\.65535"):
        resolve(parse("--master_port", "70000", "--nproc", "2", "train.py"))


def test_a_zero_cluster_timeout_is_refused_at_launch():
    with pytest.raises(LaunchError, match=r"--cluster_time_out 0 .*valid: seconds >= 1"):
        resolve(parse("--cluster_time_out", "0", "train.py"))


def test_a_busy_master_port_is_refused_at_launch(listener, tmp_path):
    config = resolve(parse("--nproc", "2", "--master_port", str(listener), "--log_dir", str(tmp_path), "train.py"))
    with pytest.raises(LaunchError, match=rf"--master_port {listener} on this node, but port {listener} on "
                                          r"127\.0\.0\.1 is in use by another process; valid: a free port"):
        Supervisor(config).run()
    config = resolve(parse("--scheduler", "--nproc", "2", "--master_port", str(listener), "--log_dir", str(tmp_path),
                           "train.py"))
    with pytest.raises(LaunchError, match=rf"the Dynamic Cluster scheduler listens at .* port {listener} on "
                                          r"127\.0\.0\.1 is in use"):
        check_listen_address_here(config)


def test_a_master_addr_of_another_host_is_refused_on_the_node_of_process_0():
    config = resolve(parse("--nproc", "2", "--master_addr", "192.0.2.1", "--master_port", "8118", "train.py"))
    with pytest.raises(LaunchError, match=r"192\.0\.2\.1 is not an address of this machine"):
        check_listen_address_here(config)
    # node 1 only connects to it: nothing to check there
    check_listen_address_here(resolve(parse("--worker_num", "4", "--nproc", "2", "--node_rank", "1",
                                            "--master_addr", "192.0.2.1", "train.py")))


def test_a_log_dir_that_cannot_be_created_is_refused_before_any_process_starts(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    for log_dir in ("/proc/x", str(blocker / "logs")):
        config = resolve(parse("--log_dir", log_dir, "--nproc", "2", "train.py"))
        with pytest.raises(LaunchError, match=rf"--log_dir '{log_dir}' cannot hold the workers' logs: .*; give a "
                                              "directory"):
            Supervisor(config).run()


def test_the_command_line_prints_one_line_and_exits_2(tmp_path):
    result = subprocess.run([sys.executable, "-m", "graphpar.cli.main", "launch", "--log_dir", "/proc/x", "--nproc",
                             "2", "train.py"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.startswith("graphpar launch: error: graphpar launch: --log_dir '/proc/x' cannot hold")
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_worker_settings_passed_through_are_checked_at_launch(monkeypatch):
    monkeypatch.setenv("GRAPHPAR_HEARTBEAT_TIMEOUT", "-5")
    with pytest.raises(LaunchError, match=r"GRAPHPAR_HEARTBEAT_TIMEOUT='-5': out of range; valid: .*>= 1"):
        resolve(parse("--nproc", "2", "train.py"))
    monkeypatch.delenv("GRAPHPAR_HEARTBEAT_TIMEOUT")
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=abc")
    with pytest.raises(LaunchError, match="--xla_force_host_platform_device_count=abc is no device count"):
        resolve(parse("--nproc", "2", "train.py"))
    # --devices-per-proc replaces the count in every worker's XLA_FLAGS: nothing to refuse
    assert resolve(parse("--nproc", "2", "--devices-per-proc", "2", "train.py")).devices_per_proc == 2


def _launch_plan(monkeypatch, coordinator: str, process_id: int) -> process_plan.ProcessPlan:
    monkeypatch.setenv("GRAPHPAR_COORDINATOR", coordinator)
    monkeypatch.setenv("GRAPHPAR_NUM_PROCESSES", "2")
    monkeypatch.setenv("GRAPHPAR_PROCESS_ID", str(process_id))
    return process_plan.from_launcher(_env.cluster_env())


def test_process_0_refuses_a_busy_coordinator_port_by_name(monkeypatch, listener):
    """JAX said "Failed to start RPC server" and aborted."""
    plan = _launch_plan(monkeypatch, f"127.0.0.1:{listener}", 0)
    with pytest.raises(ClusterError, match=rf"coordinator at 127\.0\.0\.1:{listener}, but port {listener} on "
                                           r"127\.0\.0\.1 is in use by another process; valid: a free port") as info:
        port_check.check_coordinator(plan)
    assert info.value.variable == "GRAPHPAR_COORDINATOR"
    port_check.check_coordinator(_launch_plan(monkeypatch, f"127.0.0.1:{listener}", 1))  # process 1 connects


def test_process_0_refuses_a_coordinator_address_of_another_host(monkeypatch):
    plan = _launch_plan(monkeypatch, "192.0.2.1:8118", 0)
    with pytest.raises(ClusterError, match=r"192\.0\.2\.1 is not an address of this machine"):
        port_check.check_coordinator(plan)


def test_a_free_loopback_port_passes():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert port_check.bind_problem("127.0.0.1", port) is None


def test_the_join_timeout_of_the_environment_is_used_and_checked(monkeypatch):
    """The launcher writes GRAPHPAR_CLUSTER_TIMEOUT for its workers: one set by hand was replaced by 600 unseen."""
    monkeypatch.setenv("GRAPHPAR_CLUSTER_TIMEOUT", "45")
    assert resolve(parse("--nproc", "2", "train.py")).cluster_timeout == 45
    assert resolve(parse("--nproc", "2", "--cluster_time_out", "30", "train.py")).cluster_timeout == 30
    monkeypatch.setenv("GRAPHPAR_CLUSTER_TIMEOUT", "0")
    with pytest.raises(LaunchError, match=r"GRAPHPAR_CLUSTER_TIMEOUT='0': out of range; valid: .*>= 1"):
        resolve(parse("--nproc", "2", "train.py"))
    monkeypatch.delenv("GRAPHPAR_CLUSTER_TIMEOUT")
    monkeypatch.setenv("MS_TOPO_TIMEOUT", "0")
    with pytest.raises(LaunchError, match=r"MS_TOPO_TIMEOUT='0'"):
        resolve(parse("--nproc", "2", "train.py"))
    monkeypatch.delenv("MS_TOPO_TIMEOUT")
    assert resolve(parse("--nproc", "2", "train.py")).cluster_timeout == 600
