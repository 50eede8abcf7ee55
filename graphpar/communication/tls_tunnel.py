"""Mutual TLS for the control plane: graphpar's own tunnel in front of JAX's coordination service.

JAX's coordinator (a gRPC server inside process 0) has no TLS option. With ``set_ps_context(enable_ssl=True, ...)``
(:mod:`graphpar.communication.tls_config`):

* process 0 binds the coordinator to a free **loopback** port and runs a :class:`TlsProxy` on the job's public
  coordinator address: every connection must complete a TLS 1.2+ handshake with a client certificate signed by the
  configured CA (not revoked by the CRL, not expired) before a byte reaches the coordinator; a refused peer is
  logged with its address and the reason;
* every other process runs a :class:`TlsForwarder` on a loopback port and gives JAX that port as the coordinator:
  each connection JAX opens is carried over mutual TLS to the proxy, which must present a certificate of the same
  CA. Before JAX starts, :meth:`TlsForwarder.probe` makes one connection, so a refused certificate is an error
  naming it at once (JAX would retry until its timeout and abort).

After a successful handshake the proxy sends a short greeting; a TLS 1.3 client learns that the server rejected its
certificate only when it next reads, so waiting for the greeting turns that into an error at connection time.

Not covered (see docs/distributed.md): the collectives' data plane (gloo on CPU, NCCL on GPU) connects processes
directly and is not encrypted, and the Dynamic Cluster scheduler's rank assignment is not tunnelled.
"""

from __future__ import annotations

import datetime
import logging
import os
import select
import shutil
import socket
import ssl
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

from graphpar._logging import notice_once
from graphpar.communication.tls_config import Identity, TlsError, TlsSettings

GREETING = b"graphpar-tls-ok\n"
_HANDSHAKE_SECONDS = 15.0
_CHUNK = 1 << 16


def _pem(path: str) -> bytes:
    """A certificate or CRL file as PEM (DER files converted)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    with open(path, "rb") as fh:
        data = fh.read()
    if b"-----BEGIN" in data:
        return data
    for loader in (x509.load_der_x509_certificate, x509.load_der_x509_crl):
        try:
            return loader(data).public_bytes(serialization.Encoding.PEM)
        except ValueError:
            continue
    raise TlsError(f"TLS: {path!r} is neither PEM nor a DER certificate/CRL", path)


def _context(settings: TlsSettings, server: bool) -> ssl.SSLContext:
    """A TLS 1.2+ context that presents ``settings``' server (or client) identity and requires the peer's
    certificate, verified against the CA and the CRL."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if server else ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if not server:
        ctx.check_hostname = False  # identity is "signed by the job's CA", as in MindSpore; hosts move
    ctx.verify_mode = ssl.CERT_REQUIRED
    identity = settings.server if server else settings.client
    # ssl loads keys from files only: the key goes there encrypted with a one-time password, in a 0700 directory
    # removed before this returns
    from cryptography.hazmat.primitives import serialization

    secret = os.urandom(24).hex().encode()
    key_pem = serialization.load_pem_private_key(identity.key_pem, None).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.BestAvailableEncryption(secret))
    folder = tempfile.mkdtemp(prefix="graphpar-tls-")
    try:
        cert, key = os.path.join(folder, "cert.pem"), os.path.join(folder, "key.pem")
        for path, data in ((cert, identity.cert_pem), (key, key_pem)):
            with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "wb") as fh:
                fh.write(data)
        ctx.load_cert_chain(cert, key, password=secret)
        trust = os.path.join(folder, "trust.pem")
        with open(trust, "wb") as fh:
            fh.write(_pem(settings.ca_cert))
            if settings.crl:
                fh.write(b"\n" + _pem(settings.crl))
        ctx.load_verify_locations(cafile=trust)
    except ssl.SSLError as exc:
        raise TlsError(f"TLS: the certificates of {settings.config_file} cannot be used: {exc}",
                       settings.config_file) from None
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if settings.crl:
        ctx.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF
    if settings.cipher_list:
        try:
            ctx.set_ciphers(settings.cipher_list)
        except ssl.SSLError:
            raise TlsError(f"TLS: {settings.config_file}: cipher_list {settings.cipher_list!r} selects no cipher "
                           "OpenSSL knows", "cipher_list") from None
    return ctx


def warn_if_expiring(identity: Identity, days: int, what: str) -> None:
    """A warning when ``identity`` expires within ``days`` (MindSpore's cert_expire_warning_time_in_day)."""
    left = identity.not_after - datetime.datetime.now(datetime.timezone.utc)
    if left < datetime.timedelta(days=days):
        state = "EXPIRED on" if left.total_seconds() < 0 else f"expires in {left.days} day(s), on"
        notice_once(f"tls-expiry:{identity.path}", f"TLS: {what} {identity.path} ({identity.subject}) {state} "
                    f"{identity.not_after:%Y-%m-%d %H:%M} UTC (cert_expire_warning_time_in_day={days})",
                    logging.WARNING)


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


def _reason(exc: BaseException) -> str:
    """OpenSSL's words for a failed handshake: the verify message, else the alert (``tlsv13 alert certificate
    revoked``), else the error text."""
    message = getattr(exc, "verify_message", None)
    if message:
        return str(message)
    reason = getattr(exc, "reason", None)
    if reason:
        return str(reason).lower().replace("_", " ")
    return str(exc) or type(exc).__name__


@dataclass
class TlsProxy:
    """Process 0's side: TLS on ``public`` (host, port), forwarding authenticated connections to ``target``."""

    settings: TlsSettings
    public: tuple[str, int]
    target: tuple[str, int]
    log: object = field(default=sys.stderr)
    _sock: socket.socket | None = None

    def start(self) -> "TlsProxy":
        self._ctx = _context(self.settings, server=True)
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
        conn.settimeout(_HANDSHAKE_SECONDS)
        try:
            tls = self._ctx.wrap_socket(conn, server_side=True)
        except (ssl.SSLError, OSError) as exc:
            crl = f" and crl_path {self.settings.crl}" if self.settings.crl else ""
            print(f"[graphpar tls] refused a connection from {peer[0]}:{peer[1]} to the coordinator: "
                  f"{_reason(exc)} (its certificate checked against ca_cert_path {self.settings.ca_cert}{crl})",
                  file=self.log, flush=True)
            conn.close()
            return
        try:
            tls.sendall(GREETING)
            upstream = socket.create_connection(self.target, timeout=_HANDSHAKE_SECONDS)
        except OSError:
            tls.close()
            return
        tls.settimeout(None)
        upstream.settimeout(None)
        _pump(tls, upstream)


@dataclass
class TlsForwarder:
    """A worker's side: a loopback port whose connections are carried over mutual TLS to ``remote``."""

    settings: TlsSettings
    remote: tuple[str, int]
    port: int = 0

    def __post_init__(self) -> None:
        self._ctx = _context(self.settings, server=False)

    def connect(self) -> ssl.SSLSocket:
        """One authenticated connection to the proxy (raises TlsError naming the refused certificate)."""
        raw = socket.create_connection(self.remote, timeout=_HANDSHAKE_SECONDS)
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
            raise TlsError(f"TLS: the coordinator at {where} presented a certificate this worker does not trust: "
                           f"{exc.verify_message} (checked against ca_cert_path {self.settings.ca_cert}"
                           f"{' and crl_path ' + self.settings.crl if self.settings.crl else ''})", where) from None
        except (ssl.SSLError, OSError) as exc:
            raw.close()
            raise TlsError(self._refused(where, mine, _reason(exc)), mine.path) from None
        if greeting != GREETING:
            tls.close()
            raise TlsError(self._refused(where, mine, "the connection was closed during the handshake"), mine.path)
        tls.settimeout(None)
        return tls

    @staticmethod
    def _refused(where: str, mine: Identity, reason: str) -> str:
        expired = mine.not_after < datetime.datetime.now(datetime.timezone.utc)
        return (f"TLS: the coordinator at {where} refused this worker's certificate client_cert_path {mine.path} "
                f"({mine.subject}{', expired on ' + format(mine.not_after, '%Y-%m-%d') if expired else ''}): "
                f"{reason}. Use a certificate signed by the job's CA, not revoked and not expired")

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
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self.port = self._sock.getsockname()[1]
        threading.Thread(target=self._accept, name="graphpar-tls-forwarder", daemon=True).start()
        return self

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            tls = self.connect()
        except (TlsError, OSError) as exc:
            print(f"[graphpar tls] {exc}", file=sys.stderr, flush=True)
            conn.close()
            return
        _pump(conn, tls)
