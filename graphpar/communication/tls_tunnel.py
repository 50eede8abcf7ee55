"""Mutual TLS for the control plane: graphpar's own tunnel in front of JAX's coordination service.

JAX's coordinator (a gRPC server inside process 0) has no TLS option. With ``set_ps_context(enable_ssl=True, ...)``
(:mod:`graphpar.communication.tls_config`):

* process 0 binds the coordinator to a **Unix socket** in a fresh 0700 directory of its user (no TCP port at all)
  and runs a :class:`TlsProxy` on the job's public coordinator address: every connection must complete a TLS 1.2+
  handshake with a client certificate signed by the configured CA (not revoked by the CRL, not expired) before a
  byte reaches the coordinator; a refused peer is logged with its address and the reason;
* every other process runs a :class:`TlsForwarder` on a Unix socket in such a directory and gives JAX that socket
  (``unix:PATH``) as the coordinator: each connection JAX opens is carried over mutual TLS to the proxy, which must
  present a certificate of the same CA. The forwarder lends its certificate to **its own process only**: it reads
  the connecting process from the socket (``SO_PEERCRED``) and closes any connection from another pid, logging it.
  Before JAX starts, :meth:`TlsForwarder.probe` makes one connection, so a refused certificate is an error naming
  it at once (JAX would retry until its timeout and abort).

After a successful handshake the proxy sends a short greeting; a TLS 1.3 client learns that the server rejected its
certificate only when it next reads, so waiting for the greeting turns that into an error at connection time.

Not covered (docs/distributed.md §7 has the threat model): the collectives' data plane (gloo on CPU, NCCL on GPU)
connects processes directly and is not encrypted; processes of the job's own user on process 0's host can reach the
coordinator's socket (the directory keeps other users out; the same user can read the keys anyway).
"""

from __future__ import annotations

import os
import select
import shutil
import socket
import ssl
import struct
import sys
import threading
import time
from dataclasses import dataclass, field

from graphpar.communication import private_dir
from graphpar.communication.tls_config import TlsError, TlsSettings
from graphpar.communication.tls_context import (HANDSHAKE_SECONDS, handshake_reason, refused_message, ssl_context,
                                                untrusted_server_message, warn_if_expiring)

GREETING = b"graphpar-tls-ok\n"
_CHUNK = 1 << 16
_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def _pump(a: socket.socket, b: socket.socket) -> None:
    """Copy bytes both ways until either side closes. One thread per connection touches both sockets (an SSL
    socket must not be read and written from two threads)."""
    pair = {a: b, b: a}
    try:
        while True:
            ready = [s for s in pair if isinstance(s, ssl.SSLSocket) and s.pending()]
            if not ready:
                ready, _, _ = select.select(list(pair), [], [], 1.0)
            for sock in ready:
                data = sock.recv(_CHUNK)
                if not data:
                    return
                pair[sock].sendall(data)
    except (OSError, ssl.SSLError):
        return
    finally:
        for sock in pair:
            try:
                sock.close()
            except OSError:
                pass


@dataclass
class PrivateSocketDir:
    """A 0700 directory of this user holding one Unix socket (``path``); :meth:`remove` deletes both."""

    name: str
    directory: str = ""
    path: str = ""

    def __post_init__(self) -> None:
        self.directory = private_dir.job_dir("tls-")
        self.path = private_dir.socket_path(self.directory, self.name)

    @property
    def address(self) -> str:
        """The socket as a gRPC target (what ``jax.distributed`` is given)."""
        return f"unix:{self.path}"

    def remove(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


@dataclass
class TlsProxy:
    """Process 0's side: TLS on ``public`` (host, port), forwarding authenticated connections to the coordinator's
    Unix socket ``target``."""

    settings: TlsSettings
    public: tuple[str, int]
    target: str
    log: object = field(default=sys.stderr)
    _sock: socket.socket | None = None

    def start(self) -> "TlsProxy":
        self._ctx = ssl_context(self.settings, server=True)
        warn_if_expiring(self.settings.server, self.settings.warning_days, "server_cert_path")
        family = socket.AF_INET6 if ":" in self.public[0] else socket.AF_INET
        self._sock = socket.socket(family, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._sock.bind(self.public)
        except OSError as exc:
            self._sock.close()
            raise TlsError(f"TLS: the coordinator's public address {self.public[0]}:{self.public[1]} cannot be "
                           f"bound: {exc.strerror or exc} (another job on that port?)",
                           f"{self.public[0]}:{self.public[1]}") from None
        self._sock.listen(64)
        threading.Thread(target=self._accept, name="graphpar-tls-proxy", daemon=True).start()
        return self

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, peer = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn, peer), daemon=True).start()

    def _serve(self, conn: socket.socket, peer: tuple) -> None:
        conn.settimeout(HANDSHAKE_SECONDS)
        try:
            tls = self._ctx.wrap_socket(conn, server_side=True)
        except (ssl.SSLError, OSError) as exc:
            crl = f" and crl_path {self.settings.crl}" if self.settings.crl else ""
            print(f"[graphpar tls] refused a connection from {peer[0]}:{peer[1]} to the coordinator: "
                  f"{handshake_reason(exc)} (its certificate checked against ca_cert_path {self.settings.ca_cert}"
                  f"{crl})", file=self.log, flush=True)
            conn.close()
            return
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            tls.sendall(GREETING)
            upstream.settimeout(HANDSHAKE_SECONDS)
            upstream.connect(self.target)
        except OSError:
            tls.close()
            upstream.close()
            return
        tls.settimeout(None)
        upstream.settimeout(None)
        _pump(tls, upstream)


def peer_process(conn: socket.socket) -> tuple[int, int]:
    """(pid, uid) of the process at the other end of a connected Unix socket (Linux ``SO_PEERCRED``)."""
    pid, uid, _ = _UCRED.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))
    return pid, uid


@dataclass
class TlsForwarder:
    """A worker's side: a Unix socket, for this process's JAX client only, whose connections are carried over
    mutual TLS to ``remote``."""

    settings: TlsSettings
    remote: tuple[str, int]
    log: object = field(default=sys.stderr)
    socket_dir: PrivateSocketDir | None = None

    def __post_init__(self) -> None:
        self._ctx = ssl_context(self.settings, server=False)

    @property
    def address(self) -> str:
        """``unix:PATH`` of the listening socket (after :meth:`start`)."""
        return self.socket_dir.address

    def connect(self) -> ssl.SSLSocket:
        """One authenticated connection to the proxy (raises TlsError naming the refused certificate)."""
        raw = socket.create_connection(self.remote, timeout=HANDSHAKE_SECONDS)
        where = f"{self.remote[0]}:{self.remote[1]}"
        mine = self.settings.client
        try:
            tls = self._ctx.wrap_socket(raw)
            greeting = b""
            while len(greeting) < len(GREETING):
                chunk = tls.recv(len(GREETING) - len(greeting))
                if not chunk:
                    break
                greeting += chunk
        except ssl.SSLCertVerificationError as exc:
            raw.close()
            raise TlsError(untrusted_server_message("coordinator", where, self.settings, exc), where) from None
        except (ssl.SSLError, OSError) as exc:
            raw.close()
            raise TlsError(refused_message("coordinator", where, mine, handshake_reason(exc)), mine.path) from None
        if greeting != GREETING:
            tls.close()
            raise TlsError(refused_message("coordinator", where, mine, "the connection was closed during the "
                                                                         "handshake"), mine.path)
        tls.settimeout(None)
        return tls

    def probe(self, timeout: float) -> None:
        """Connect once (waiting up to ``timeout`` s for process 0 to listen), raising TlsError if refused."""
        warn_if_expiring(self.settings.client, self.settings.warning_days, "client_cert_path")
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.connect().close()
                return
            except (ConnectionRefusedError, ConnectionResetError, socket.timeout) as exc:
                if time.monotonic() > deadline:
                    raise TlsError(f"TLS: no coordinator answered at {self.remote[0]}:{self.remote[1]} within "
                                   f"{timeout:.0f} s ({exc})", f"{self.remote[0]}:{self.remote[1]}") from None
                time.sleep(0.2)

    def start(self) -> "TlsForwarder":
        self.socket_dir = PrivateSocketDir("forwarder.sock")
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(self.socket_dir.path)
        os.chmod(self.socket_dir.path, 0o600)
        self._sock.listen(64)
        threading.Thread(target=self._accept, name="graphpar-tls-forwarder", daemon=True).start()
        return self

    def close(self) -> None:
        if self.socket_dir is not None:
            self._sock.close()
            self.socket_dir.remove()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            pid, uid = peer_process(conn)
            if pid != os.getpid():
                print(f"[graphpar tls] refused a local connection to the TLS forwarder {self.socket_dir.path} from "
                      f"pid {pid} (uid {uid}): it carries this worker's client certificate for this process's own "
                      f"JAX client (pid {os.getpid()}) only", file=self.log, flush=True)
                conn.close()
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            tls = self.connect()
        except (TlsError, OSError) as exc:
            print(f"[graphpar tls] {exc}", file=self.log, flush=True)
            conn.close()
            return
        _pump(conn, tls)
