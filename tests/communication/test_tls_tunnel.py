"""The TLS tunnel in one process, on 127.0.0.1, with certificates generated at test time: a worker with a valid
certificate reaches the coordinator's port through it; one signed by another CA, a revoked one and an expired one
are refused with an error naming the certificate (worker side) and the peer and reason (coordinator side), and no
byte reaches the coordinator; a plain-TCP client gets nothing."""

import io
import socket
import threading
import time

import pytest

from graphpar.communication import tls_config, tls_tunnel
from graphpar.communication.process_plan import free_port
from tests.communication import tls_certs


@pytest.fixture(scope="module")
def configs(tmp_path_factory):
    return tls_certs.make(tmp_path_factory.mktemp("tls"))


def logged(log, text, seconds=10.0):
    """The coordinator's log once it holds ``text`` (its handshake thread may finish after the worker's)."""
    deadline = time.monotonic() + seconds
    while text not in log.getvalue() and time.monotonic() < deadline:
        time.sleep(0.02)
    return log.getvalue()


def settings(path):
    pw = tls_certs.PASSWORD.encode()
    return tls_config.load_settings(str(path), pw, pw)


class Echo:
    """Stands in for the coordinator on a Unix socket: answers every connection with SECRET + what it received,
    counts them."""

    def __init__(self, path):
        self.path = str(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        self.sock.listen(8)
        self.connections = 0
        threading.Thread(target=self.run, daemon=True).start()

    def run(self):
        while True:
            conn, _ = self.sock.accept()
            self.connections += 1
            try:
                data = conn.recv(100)
                if data:  # the probe's connection closes without a byte
                    conn.sendall(b"SECRET:" + data)
            except OSError:
                pass
            conn.close()


@pytest.fixture()
def proxy(configs, tmp_path):
    echo = Echo(tmp_path / "coordinator.sock")
    log = io.StringIO()
    proxy = tls_tunnel.TlsProxy(settings(configs["server"]), ("127.0.0.1", free_port()), echo.path, log=log).start()
    yield proxy, echo, log
    proxy.close()


def through(forwarder, data=b"hello"):
    """What a client connecting to the forwarder's Unix socket gets back for ``data``."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(forwarder.address.removeprefix("unix:"))
        sock.sendall(data)
        reply = b""
        while chunk := sock.recv(100):
            reply += chunk
    return reply


def test_a_valid_certificate_reaches_the_coordinator(configs, proxy):
    proxy, echo, _ = proxy
    forwarder = tls_tunnel.TlsForwarder(settings(configs["valid"]), proxy.public)
    forwarder.probe(10)
    forwarder.start()
    assert through(forwarder) == b"SECRET:hello"
    forwarder.close()


@pytest.mark.parametrize("variant,worker_says,coordinator_says", [
    ("other_ca", "unknown ca", "unable to get local issuer certificate"),
    ("revoked", "certificate revoked", "certificate revoked"),
    ("expired", "certificate expired", "certificate has expired"),
])
def test_a_bad_certificate_is_refused_on_both_sides(configs, proxy, variant, worker_says, coordinator_says):
    proxy, echo, log = proxy
    forwarder = tls_tunnel.TlsForwarder(settings(configs[variant]), proxy.public)
    with pytest.raises(tls_config.TlsError) as info:
        forwarder.probe(10)
    message = str(info.value)
    assert f"refused this worker's certificate client_cert_path {configs[variant].parent / variant}.p12" in message
    assert f"CN=worker-{variant.replace('_', '-')}" in message and worker_says in message, message
    assert info.value.culprit == str(configs[variant].parent / f"{variant}.p12")
    text = logged(log, coordinator_says)
    assert "refused a connection from 127.0.0.1:" in text and coordinator_says in text, text
    assert echo.connections == 0


def test_plain_tcp_to_the_public_port_gets_nothing(configs, proxy):
    proxy, echo, log = proxy
    with socket.create_connection(proxy.public, timeout=10) as sock:
        sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")  # what a gRPC client sends first
        reply = b""
        try:
            while chunk := sock.recv(100):
                reply += chunk
        except ConnectionResetError:
            pass
    assert b"SECRET" not in reply and (reply == b"" or reply[0] == 0x15), reply  # nothing, or a TLS alert
    assert echo.connections == 0
    assert "refused a connection" in logged(log, "refused a connection")


def test_a_certificate_near_expiry_warns(configs, proxy, notices):
    proxy, _, _ = proxy
    forwarder = tls_tunnel.TlsForwarder(settings(configs["expiring"]), proxy.public)
    forwarder.probe(10)
    assert f"client_cert_path {configs['expiring'].parent / 'expiring.p12'} (CN=worker-expiring) expires in" in \
        notices.text


def test_wrong_password_and_missing_file_name_the_file(configs, tmp_path):
    with pytest.raises(tls_config.TlsError, match=r"server\.p12.*password is wrong"):
        tls_config.load_settings(str(configs["valid"]), tls_certs.PASSWORD.encode(), b"nope")
    missing = tmp_path / "c.json"
    missing.write_text('{"server_cert_path": "s.p12", "client_cert_path": "c.p12", "ca_cert_path": "ca.crt"}')
    with pytest.raises(tls_config.TlsError, match=r"server_cert_path '.*s\.p12' cannot be read"):
        tls_config.load_settings(str(missing), None, None)


def test_a_public_port_in_use_is_named(configs, proxy):
    proxy, echo, _ = proxy
    with pytest.raises(tls_config.TlsError, match=rf"127\.0\.0\.1:{proxy.public[1]} cannot be bound"):
        tls_tunnel.TlsProxy(settings(configs["server"]), proxy.public, echo.path).start()
