"""TLS on the control plane in real 2-process jobs on 127.0.0.1 (graphpar launch), certificates generated at test
time: with valid certificates the job trains; a worker whose certificate is signed by another CA, revoked or
expired is refused with a clear error on both sides, and no training starts."""

import subprocess
import sys

import pytest

from tests.communication import tls_certs
from tests.communication.test_multiprocess import child_env

from pathlib import Path

SCRIPT = Path(__file__).resolve().parent / "scripts" / "tls_train.py"


@pytest.fixture(scope="module")
def configs(tmp_path_factory):
    return tls_certs.make(tmp_path_factory.mktemp("tls"))


def run(tmp_path, configs, worker):
    command = [sys.executable, "-m", "graphpar.cli.main", "launch", "--log_dir", str(tmp_path / "logs"), "--nproc",
               "2", "--devices-per-proc", "2", "--cluster_time_out", "60", str(SCRIPT), str(configs["server"]),
               str(configs[worker])]
    result = subprocess.run(command, env=child_env(), capture_output=True, text=True, timeout=240, cwd=tmp_path)
    logs = [(tmp_path / "logs" / f"worker_{i}.log").read_text() for i in range(2)]
    return result, logs


@pytest.mark.dist
def test_valid_certificates_train(tmp_path, configs):
    result, logs = run(tmp_path, configs, "valid")
    assert result.returncode == 0, result.stderr[-3000:]
    for log in logs:
        assert "epoch: 1 step: 4, loss is" in log and "TRAINED" in log, log[-3000:]


@pytest.mark.dist
@pytest.mark.parametrize("worker,reason", [("other_ca", "unknown ca"), ("revoked", "certificate revoked"),
                                           ("expired", "certificate expired")])
def test_a_bad_worker_certificate_is_refused_and_nothing_trains(tmp_path, configs, worker, reason):
    result, (coordinator, refused) = run(tmp_path, configs, worker)
    assert result.returncode != 0
    assert f"refused this worker's certificate client_cert_path {configs[worker].parent / worker}.p12" in refused, \
        refused[-3000:]
    assert reason in refused, refused[-3000:]
    assert "[graphpar tls] refused a connection from 127.0.0.1:" in coordinator, coordinator[-3000:]
    assert "epoch:" not in coordinator + refused
