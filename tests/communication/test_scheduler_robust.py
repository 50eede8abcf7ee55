"""The Dynamic Cluster scheduler keeps serving whatever connects (issue 27, item 11): a malformed line is refused by
name and the job still forms; idle connections delay nobody and are closed after their deadline. In threads over
127.0.0.1; the multi-process TLS job is in test_scheduler_tls.py."""

import json
import socket
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graphpar.communication import scheduler, scheduler_messages
from graphpar.communication.channel import Channel
from graphpar.communication.process_plan import free_port


def start(worker_num, timeout=20.0, **kwargs):
    port = free_port()
    lines = []
    sched = scheduler.Scheduler("127.0.0.1", port, worker_num, timeout, say=lines.append, **kwargs)
    result = {}
    thread = threading.Thread(target=lambda: result.setdefault("status", sched.serve()), daemon=True)
    thread.start()
    return port, thread, result, lines


def connect(port):
    for _ in range(100):
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=5)
        except OSError:
            time.sleep(0.05)
    raise AssertionError("the scheduler never listened")


def send_line(port, raw: bytes):
    sock = connect(port)
    sock.sendall(raw)
    return Channel(sock)


def register(port, node_id):
    return send_line(port, json.dumps({"op": "register", "node_id": node_id, "worker_num": 2, "pid": 1,
                                       "hostname": "h"}).encode() + b"\n")


def finish(workers, thread, result):
    leader = workers[0]
    assert leader.recv(timeout=10)["process_id"] == 0
    leader.send({"op": "coordinator", "address": "127.0.0.1:5"})
    assert workers[1].recv(timeout=10)["coordinator"] == "127.0.0.1:5"
    for channel in workers:
        channel.send({"op": "exit", "failed": False})
        channel.close()
    thread.join(10)
    assert result.get("status") == 0


@pytest.mark.parametrize("raw,words", [
    (b'{"op":"register","worker_num":2,"pid":"x"}\n', "register: field 'pid' must be an integer >= 0, got 'x'"),
    (b'{"op":"register","worker_num":"2","pid":3}\n', "field 'worker_num' must be an integer >= 1, got '2'"),
    (b'{"op":"register","worker_num":2,"pid":3,"rank":0}\n', "unknown field(s) ['rank']"),
    (b'{"op":"register","pid":3}\n', "field(s) ['worker_num'] missing"),
    (b'{"op":"hello"}\n', "op 'hello' is not expected here; valid: register"),
    (b"GET / HTTP/1.1\r\n\r\n", "a line that is not JSON: 'GET / HTTP/1.1\\r'"),
    (b"[1, 2]\n", "a JSON list where an object"),
    (b"x" * 70000, "a line longer than 65536 bytes"),
])
def test_a_malformed_line_is_refused_by_name_and_the_job_still_forms(raw, words):
    port, thread, result, lines = start(2)
    bad = send_line(port, raw)
    refusal = bad.recv(timeout=10)
    assert refusal["op"] == "refused" and words in refusal["reason"], refusal
    assert any(words in line and line.startswith("refused a malformed message from 127.0.0.1:") for line in lines), \
        lines
    finish([register(port, "0"), register(port, "1")], thread, result)


def test_idle_connections_delay_nobody_and_are_closed_after_their_deadline(monkeypatch):
    monkeypatch.setattr(scheduler, "HELLO_SECONDS", 3.0)
    port, thread, result, lines = start(2)
    idle = [connect(port) for _ in range(3)]
    workers = [register(port, "0"), register(port, "1")]
    assert workers[0].recv(timeout=10)["process_id"] == 0
    # served while the idle connections are still open: a scheduler serving one connection at a time would have
    # waited out each idle one's deadline (closing it) before reading the workers' lines
    for sock in idle:
        sock.setblocking(False)
        with pytest.raises(BlockingIOError):
            sock.recv(10)  # nothing to read yet, and not closed
    workers[0].send({"op": "coordinator", "address": "127.0.0.1:5"})
    assert workers[1].recv(timeout=10)["process_id"] == 1
    for sock in idle:  # closed by the scheduler once their deadline passed
        sock.settimeout(10)
        assert sock.recv(10) == b""
    assert sum("no register line within 3 s" in line for line in lines) == 3, lines
    for channel in workers:
        channel.send({"op": "exit", "failed": False})
        channel.close()
    thread.join(10)
    assert result.get("status") == 0


def test_a_worker_that_leaves_before_the_job_forms_frees_its_place():
    port, thread, result, lines = start(2)
    gone = register(port, "0")
    time.sleep(0.3)
    gone.close()
    time.sleep(0.3)
    assert any("disconnected before the job formed" in line for line in lines), lines
    finish([register(port, "0"), register(port, "1")], thread, result)


def test_a_malformed_message_from_a_registered_worker_is_logged_and_ignored():
    port, thread, result, lines = start(2)
    workers = [register(port, "0"), register(port, "1")]
    assert workers[0].recv(timeout=10)["process_id"] == 0
    workers[0].sock.sendall(b'{"op":"exit","failed":"yes"}\n')
    workers[0].send({"op": "coordinator", "address": "127.0.0.1:5"})
    assert workers[1].recv(timeout=10)["coordinator"] == "127.0.0.1:5"
    assert any("ignored a malformed message from MS_NODE_ID=0" in line and "field 'failed' must be true or false"
               in line for line in lines), lines
    for channel in workers:
        channel.send({"op": "exit", "failed": False})
        channel.close()
    thread.join(10)
    assert result.get("status") == 0


def _nested(inner: st.SearchStrategy) -> st.SearchStrategy:
    return st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3))


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                     _nested, max_leaves=8)
_field = st.sampled_from(["op", "node_id", "worker_num", "pid", "hostname", "local_devices", "address", "failed",
                          "reason", "process_id", "x"])


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_field, _json, max_size=6),
       st.sampled_from([scheduler_messages.WORKER_OPS, scheduler_messages.SCHEDULER_OPS, ("register",)]))
def test_any_json_object_is_a_message_or_a_named_refusal(message, allowed):
    try:
        parsed = scheduler_messages.parse(message, allowed)
    except scheduler_messages.ProtocolError as exc:
        assert str(exc)
        return
    assert message["op"] in allowed and type(parsed).__name__ in ("Register", "CoordinatorReport", "Exit", "Assign",
                                                                  "Stop")
