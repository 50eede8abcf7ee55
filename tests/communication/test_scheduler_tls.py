"""Mutual TLS on the Dynamic Cluster scheduler connection (issue 27, item 18; seed 000's security section).

In threads over 127.0.0.1: trusted workers register over TLS; a worker whose certificate another CA signed is
refused with a TlsError naming its certificate, and the scheduler logs the refusal; plain and TLS peers that do not
match are told so. As real processes (``dist``): seed 000's job — one scheduler, two trusted workers and one worker
with another CA's certificate, every process calling ``set_ps_context(enable_ssl=True, ...)`` before ``init()`` —
trains, and the untrusted worker is refused."""

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from graphpar.communication import dynamic_cluster, scheduler, tls_config, tls_context
from graphpar.communication.channel import Channel
from graphpar.communication.process_plan import free_port
from tests.communication import tls_certs
from tests.communication.test_multiprocess import child_env

PW = tls_certs.PASSWORD.encode()
SCRIPT = Path(__file__).resolve().parent / "scripts" / "tls_dc_train.py"


@pytest.fixture(scope="module")
def configs(tmp_path_factory):
    return tls_certs.make(tmp_path_factory.mktemp("tls"))


def settings(configs, variant):
    return tls_config.load_settings(str(configs[variant]), PW, PW)


def start(worker_num, tls, timeout=20.0):
    port = free_port()
    lines = []
    sched = scheduler.Scheduler("127.0.0.1", port, worker_num, timeout, tls=tls, say=lines.append)
    result = {}
    thread = threading.Thread(target=lambda: result.setdefault("status", sched.serve()), daemon=True)
    thread.start()
    for _ in range(100):  # until it listens
        try:
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
            break
        except OSError:
            time.sleep(0.05)
    return port, thread, result, lines


def tls_register(port, configs, variant, node_id):
    """A trusted worker's registration over TLS, as ``join`` makes it."""
    ctx = tls_context.ssl_context(settings(configs, variant), server=False)
    sock = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10))
    channel = Channel(sock)
    channel.send({"op": "register", "node_id": node_id, "worker_num": 2, "pid": os.getpid(), "hostname": "h"})
    return channel


def logged(lines, text, seconds=10.0):
    deadline = time.monotonic() + seconds
    while not any(text in line for line in lines) and time.monotonic() < deadline:
        time.sleep(0.02)
    return "\n".join(lines)


def test_trusted_workers_register_and_another_ca_is_refused_on_both_sides(configs):
    port, thread, result, lines = start(2, settings(configs, "server"))
    with pytest.raises(tls_config.TlsError) as info:
        dynamic_cluster.join("127.0.0.1", port, 2, "9", 10, None, tls=settings(configs, "other_ca"))
    message = str(info.value)
    assert (f"TLS: the Dynamic Cluster scheduler at 127.0.0.1:{port} refused this worker's certificate "
            f"client_cert_path {configs['other_ca'].parent / 'other_ca.p12'} (CN=worker-other-ca)") in message, message
    assert "unknown ca" in message, message
    text = logged(lines, "refused a TLS connection")
    assert "refused a TLS connection from 127.0.0.1:" in text and "unable to get local issuer certificate" in text, text
    workers = [tls_register(port, configs, "valid", "0"), tls_register(port, configs, "valid", "1")]
    assert workers[0].recv(timeout=10)["process_id"] == 0
    workers[0].send({"op": "coordinator", "address": "127.0.0.1:5"})
    assert workers[1].recv(timeout=10) == {"op": "assign", "process_id": 1, "num_processes": 2,
                                           "local_process_id": 1, "local_process_count": 2,
                                           "coordinator": "127.0.0.1:5"}
    assert not any("MS_NODE_ID=9" in line for line in lines)  # the untrusted worker never registered
    for channel in workers:
        channel.send({"op": "exit", "failed": False})
        channel.close()
    thread.join(10)
    assert result.get("status") == 0


def test_a_plain_worker_gets_nothing_from_a_tls_scheduler(configs):
    port, thread, result, lines = start(2, settings(configs, "server"), timeout=2)
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(json.dumps({"op": "register", "worker_num": 2, "pid": 1}).encode() + b"\n")
    reply = b""
    try:
        while chunk := sock.recv(100):
            reply += chunk
    except ConnectionResetError:
        pass
    assert b"assign" not in reply and b"refused" not in reply, reply  # nothing in clear text
    assert "refused a TLS connection from 127.0.0.1:" in logged(lines, "refused a TLS connection")
    thread.join(10)


def test_a_tls_worker_and_a_plain_scheduler_are_told_so(configs):
    port, thread, result, lines = start(2, None, timeout=2)
    with pytest.raises(tls_config.TlsError, match=r"ended the TLS handshake .*runs without TLS.*set_ps_context"):
        dynamic_cluster.join("127.0.0.1", port, 2, "0", 10, None, tls=settings(configs, "valid"))
    assert "it starts a TLS handshake, and this scheduler runs without TLS" in logged(lines, "starts a TLS")
    thread.join(10)


# --- seed 000: the whole job as processes ---------------------------------------------------------------------------
@pytest.mark.dist
def test_seed_000_dynamic_cluster_job_with_tls_trains_and_refuses_another_ca(tmp_path, configs):
    port = free_port()
    common = dict(MS_WORKER_NUM=2, MS_SCHED_HOST="127.0.0.1", MS_SCHED_PORT=port, MS_TOPO_TIMEOUT=90)
    procs = {}

    def run(name, role, config, **extra):
        log = open(tmp_path / f"{name}.log", "w")
        procs[name] = subprocess.Popen([sys.executable, str(SCRIPT), str(config)], stdout=log,
                                       stderr=subprocess.STDOUT, cwd=tmp_path,
                                       env=child_env(2, MS_ROLE=role, **common, **extra))

    run("scheduler", "MS_SCHED", configs["server"])
    run("rogue", "MS_WORKER", configs["other_ca"])
    time.sleep(1.0)  # the rogue tries first; the trusted pair still forms the job
    run("worker_0", "MS_WORKER", configs["valid"])
    run("worker_1", "MS_WORKER", configs["valid"])
    codes = {name: proc.wait(timeout=300) for name, proc in procs.items()}
    logs = {name: (tmp_path / f"{name}.log").read_text() for name in procs}
    everything = "\n".join(f"== {k} ({codes[k]})\n{v[-3000:]}" for k, v in logs.items())
    assert codes == {"scheduler": 0, "rogue": 1, "worker_0": 0, "worker_1": 0}, everything
    for name in ("worker_0", "worker_1"):
        assert "epoch: 1 step: 4, loss is" in logs[name] and "TRAINED" in logs[name], everything
    assert "refused this worker's certificate client_cert_path" in logs["rogue"], everything
    assert "other_ca.p12 (CN=worker-other-ca)" in logs["rogue"] and "unknown ca" in logs["rogue"], everything
    assert "TlsError" in logs["rogue"] and "epoch:" not in logs["rogue"], everything
    assert "refused a TLS connection from 127.0.0.1:" in logs["scheduler"], everything
    assert "all workers finished" in logs["scheduler"], everything
