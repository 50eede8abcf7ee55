"""The local leg of the TLS tunnel is authenticated too: a worker's forwarder is a Unix socket (0600, in a 0700
directory of the user) that carries only its own process's connections (``SO_PEERCRED``): another process gets
nothing and is logged by pid; process 0's coordinator listens on such a socket instead of a loopback TCP port, so no
other user's process can speak plain gRPC to it."""

import io
import os
import socket
import stat
import subprocess
import sys
import time

import pytest

from graphpar.communication import bootstrap, tls_config, tls_tunnel
from graphpar.communication.process_plan import ProcessPlan, free_port
from tests.communication import tls_certs
from tests.communication.test_tls_tunnel import Echo, through

PW = tls_certs.PASSWORD.encode()


@pytest.fixture(scope="module")
def configs(tmp_path_factory):
    return tls_certs.make(tmp_path_factory.mktemp("tls"))


@pytest.fixture()
def forwarder(configs, tmp_path):
    echo = Echo(tmp_path / "coordinator.sock")
    proxy = tls_tunnel.TlsProxy(tls_config.load_settings(str(configs["server"]), PW, PW),
                                ("127.0.0.1", free_port()), echo.path, log=io.StringIO()).start()
    log = io.StringIO()
    forwarder = tls_tunnel.TlsForwarder(tls_config.load_settings(str(configs["valid"]), PW, PW), proxy.public,
                                        log=log).start()
    yield forwarder, echo, log
    forwarder.close()
    proxy.close()


_CLIENT = """
import socket, sys
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.settimeout(10)
try:
    sock.connect(sys.argv[1])
except PermissionError as exc:
    print("PERMISSION", exc.strerror); raise SystemExit
reply = b""
try:
    sock.sendall(b"PRI * HTTP/2.0 RegisterTask")
    while chunk := sock.recv(100):
        reply += chunk
except OSError:
    pass
print("REPLY", reply)
"""


def test_another_process_cannot_borrow_the_forwarder(forwarder):
    forwarder, echo, log = forwarder
    path = forwarder.address.removeprefix("unix:")
    child = subprocess.run([sys.executable, "-c", _CLIENT, path], capture_output=True, text=True, timeout=60)
    assert child.stdout.strip() == "REPLY b''", child.stdout + child.stderr
    deadline = time.monotonic() + 5
    while "refused a local connection" not in log.getvalue() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert f"refused a local connection to the TLS forwarder {path} from pid " in log.getvalue(), log.getvalue()
    assert echo.connections == 0  # nothing reached the coordinator
    assert through(forwarder) == b"SECRET:hello"  # while this process's own client still gets through


def test_the_forwarder_socket_is_private(forwarder):
    forwarder, _, _ = forwarder
    path = forwarder.address.removeprefix("unix:")
    assert stat.S_ISSOCK(os.stat(path).st_mode) and stat.S_IMODE(os.stat(path).st_mode) == 0o600
    directory = os.path.dirname(path)
    assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700 and os.stat(directory).st_uid == os.geteuid()


def _as_nobody(path: str) -> str:
    """What another user (uid 65534) gets when connecting to ``path``."""
    drop = "import os, socket, sys; os.setgid(65534); os.setuid(65534); exec(sys.argv.pop(1))"
    return subprocess.run([sys.executable, "-c", drop, _CLIENT, path], capture_output=True, text=True,
                          timeout=60).stdout.strip()


@pytest.mark.skipif(os.geteuid() != 0, reason="acting as another user needs root (setuid)")
def test_another_user_cannot_reach_the_forwarder(forwarder):
    forwarder, echo, _ = forwarder
    assert _as_nobody(forwarder.address.removeprefix("unix:")) == "PERMISSION Permission denied"
    assert echo.connections == 0


def test_process_0_coordinator_listens_on_a_private_unix_socket(configs):
    tls_config.set_ps_context(enable_ssl=True, config_file_path=str(configs["server"]), client_password=PW.decode(),
                              server_password=PW.decode())
    try:
        public = f"127.0.0.1:{free_port()}"
        coordinator, bind = bootstrap._through_tls(ProcessPlan("test", public, 2, 0), 10)
        proxy = bootstrap._tunnels.pop()
    finally:
        tls_config.set_ps_context(enable_ssl=False)
    try:
        assert coordinator == bind and coordinator.startswith("unix:"), coordinator
        directory = os.path.dirname(coordinator.removeprefix("unix:"))
        assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700 and os.stat(directory).st_uid == os.geteuid()
        if os.geteuid() == 0:  # a socket there (JAX's, here a stand-in) is out of another user's reach
            stand_in = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            stand_in.bind(coordinator.removeprefix("unix:"))
            stand_in.listen(1)
            assert _as_nobody(coordinator.removeprefix("unix:")) == "PERMISSION Permission denied"
            stand_in.close()
    finally:
        proxy.close()


def test_key_and_certificate_files_written_for_openssl_are_private(configs, monkeypatch):
    """``ssl`` loads keys and trust anchors from files only: graphpar's copies are 0600 in a 0700 directory while
    they exist, and gone afterwards."""
    import ssl

    from graphpar.communication import tls_context

    modes = {}

    def spy(name):
        original = getattr(ssl.SSLContext, name)

        def record(self, *args, **kwargs):
            for path in [*args[:2], kwargs.get("cafile")]:
                if isinstance(path, str) and os.path.exists(path):
                    modes[os.path.basename(path)] = stat.S_IMODE(os.stat(path).st_mode)
                    modes["directory"] = stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode)
                    modes.setdefault("paths", []).append(path)
            return original(self, *args, **kwargs)

        monkeypatch.setattr(ssl.SSLContext, name, record)

    spy("load_cert_chain")
    spy("load_verify_locations")
    tls_context.ssl_context(tls_config.load_settings(str(configs["server"]), PW, PW), server=True)
    paths = modes.pop("paths")
    assert modes == {"cert.pem": 0o600, "key.pem": 0o600, "trust.pem": 0o600, "directory": 0o700}, modes
    assert not any(os.path.exists(path) for path in paths)


def test_socket_directories_of_killed_processes_are_swept(tmp_path, monkeypatch):
    """A process killed before it could remove its socket directory (SIGKILL) leaves it behind; the next one made
    sweeps those of dead processes, and leaves live ones alone."""
    import tempfile

    from graphpar.communication import private_dir

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = os.path.join(private_dir.user_dir(), f"tls-{gone.stdout.strip()}-abc")
    live = os.path.join(private_dir.user_dir(), f"tls-{os.getppid()}-abc")
    for path in (dead, live):
        os.mkdir(path, 0o700)
    made = tls_tunnel.PrivateSocketDir("x.sock")
    assert not os.path.exists(dead) and os.path.isdir(live) and os.path.isdir(made.directory)
    assert os.path.basename(made.directory).startswith(f"tls-{os.getpid()}-")
    made.remove()
