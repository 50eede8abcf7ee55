"""MindSpore's Dynamic Cluster (``MS_ROLE``, ``MS_SCHED_HOST``, ``MS_SCHED_PORT``, ``MS_WORKER_NUM``, ``MS_NODE_ID``)
mapped onto ``jax.distributed``.

The scheduler (``MS_ROLE=MS_SCHED``) trains nothing: inside ``init()`` it runs :class:`Scheduler`, a small
rank-assignment service on ``MS_SCHED_HOST:MS_SCHED_PORT`` (bound to that address only), and exits when the
workers have finished. This module is the worker's side. The protocol is one JSON object per line over TCP:

1. each worker connects (retrying until the cluster timeout, since workers may start first) and sends
   ``register`` with its ``MS_NODE_ID`` and ``MS_WORKER_NUM``;
2. once ``MS_WORKER_NUM`` workers have registered the scheduler assigns process indices: an integer
   ``MS_NODE_ID`` fixes the worker's index, the others fill the free indices in registration order. Workers beyond
   ``MS_WORKER_NUM``, duplicate or out-of-range ids are refused by name. Too few workers by the cluster timeout
   (``MS_TOPO_TIMEOUT``) fail every registered worker with a message naming the missing ones;
3. process 0 picks a free port on its own address (as the scheduler sees it) for the JAX coordinator and reports it;
   the scheduler hands that address to everyone, and each worker calls ``jax.distributed.initialize``;
4. the scheduler then supervises: a worker that disconnects without saying ``exit`` (killed) or exits after an
   uncaught exception makes the scheduler tell the others to stop (``abort``) rather than leave them hanging in a
   collective. With ``MS_ENABLE_RECOVERY=1`` it tells them to ``restart`` instead and forms the job again once
   every worker (the dead one restarted by hand with its ``MS_NODE_ID``) has registered (``rejoin``).

Every message is checked field by field on arrival (:mod:`graphpar.communication.scheduler_messages`), and the
scheduler (:mod:`graphpar.communication.scheduler`) serves all connections at once, each with a deadline. With
``set_ps_context(enable_ssl=True, ...)`` in every process (MindSpore's scheduler runs the training script too, which
calls it), the scheduler connection is mutual TLS with the job's certificates: the scheduler presents
``server_cert_path``, each worker ``client_cert_path``, both checked against ``ca_cert_path`` and ``crl_path``; a
worker whose certificate is refused fails at once with a TlsError naming it, and the scheduler logs the refusal. The
JAX coordinator that worker 0 then opens goes through the TLS tunnel (:mod:`graphpar.communication.tls_tunnel`).

Why the JAX coordinator lives in worker 0 and not in the scheduler: JAX's coordination service can only be started
by a participating process through its public API, and the scheduler must not own devices.
"""

from __future__ import annotations

import atexit
import os
import queue
import select
import socket
import ssl
import sys
import threading
import time
from typing import Any

from graphpar.communication import scheduler_messages as messages
from graphpar.communication.addresses import free_port
from graphpar.communication.channel import Channel, WireError
from graphpar.communication.errors import ClusterError
from graphpar.communication.process_plan import ProcessPlan
from graphpar.communication.rejoin import reexec, wait_for_restart
from graphpar.communication.tls_config import TlsError, TlsSettings
from graphpar.communication.tls_context import (HANDSHAKE_SECONDS, handshake_reason, refused_message, ssl_context,
                                                untrusted_server_message, warn_if_expiring)

_PEER = "Dynamic Cluster scheduler"


def _connect(host: str, port: int, deadline: float, timeout: float) -> socket.socket:
    """A TCP connection to the scheduler, retried until ``deadline`` (workers may start before it)."""
    where = f"MS_SCHED_HOST:MS_SCHED_PORT = {host}:{port}"
    while True:
        try:
            return socket.create_connection((host, port), timeout=5)
        except OSError as exc:
            if time.monotonic() > deadline:
                raise ClusterError(f"Dynamic Cluster: no scheduler answered at {where} within {timeout:.0f} s "
                                   f"(MS_TOPO_TIMEOUT): {exc}. Start one process of the job with MS_ROLE=MS_SCHED",
                                   "MS_SCHED_HOST") from exc
            time.sleep(0.2)


def _secure(raw: socket.socket, tls: TlsSettings, where: str) -> ssl.SSLSocket:
    """``raw`` after a mutual TLS handshake with the scheduler; a refusal is a TlsError naming the certificate."""
    warn_if_expiring(tls.client, tls.warning_days, "client_cert_path")
    raw.settimeout(HANDSHAKE_SECONDS)
    try:
        return ssl_context(tls, server=False).wrap_socket(raw)
    except ssl.SSLCertVerificationError as exc:
        raw.close()
        raise TlsError(untrusted_server_message(_PEER, where, tls, exc), where) from None
    except socket.timeout:
        raw.close()
        raise TlsError(f"TLS: the {_PEER} at {where} did not complete the TLS handshake within "
                       f"{HANDSHAKE_SECONDS:.0f} s", where) from None
    except (ssl.SSLEOFError, ConnectionResetError) as exc:
        raw.close()
        raise TlsError(f"TLS: the {_PEER} at {where} ended the TLS handshake ({handshake_reason(exc)}): it runs "
                       "without TLS, or refused this worker; call the same set_ps_context(enable_ssl=True, ...) in "
                       "the scheduler's script (MS_ROLE=MS_SCHED) and check its log", where) from None
    except (ssl.SSLError, OSError) as exc:
        raw.close()
        raise TlsError(refused_message(_PEER, where, tls.client, handshake_reason(exc)), tls.client.path) from None


def join(host: str, port: int, worker_num: int, node_id: str | None, timeout: float,
         local_devices: int | None, recovery: bool = False, tls: TlsSettings | None = None) -> ProcessPlan:
    """Register with the scheduler and return this worker's plan (blocking until the cluster has formed)."""
    deadline = time.monotonic() + timeout
    where = f"{host}:{port}"
    sock = _connect(host, port, deadline, timeout)
    if tls is not None:
        sock = _secure(sock, tls, where)
    channel = Channel(sock)
    channel.send({"op": "register", "node_id": node_id, "worker_num": worker_num, "pid": os.getpid(),
                  "hostname": socket.gethostname()[:255], "local_devices": local_devices})
    reply = _reply(channel, where, max(deadline - time.monotonic(), 0) + 30, timeout, tls)
    if isinstance(reply, messages.Stop):
        channel.close()
        raise ClusterError(reply.reason, "MS_WORKER_NUM")
    if reply.process_id == 0:
        if reply.advertise_host is None:
            raise ClusterError(f"Dynamic Cluster: the scheduler at {where} made this worker process 0 without "
                               "saying where to open the coordinator (advertise_host)")
        coordinator = f"{reply.advertise_host}:{free_port(reply.advertise_host)}"
        channel.send({"op": "coordinator", "address": coordinator})
    elif reply.coordinator is None:
        raise ClusterError(f"Dynamic Cluster: the scheduler at {where} assigned process {reply.process_id} without "
                           "the coordinator address")
    else:
        coordinator = reply.coordinator
    SchedulerLink(channel, recovery).start()
    return ProcessPlan("Dynamic Cluster", coordinator, reply.num_processes, reply.process_id,
                       reply.local_process_id, reply.local_process_count, local_devices)


def _reply(channel: Channel, where: str, wait: float, timeout: float, tls: TlsSettings | None) -> Any:
    """The scheduler's answer to ``register``: an Assign or a Stop (refused, failed), checked."""
    try:
        message = channel.recv(timeout=wait)
    except TimeoutError:
        return messages.Stop("failed", f"Dynamic Cluster: the scheduler at {where} gave no assignment within "
                                       f"{timeout:.0f} s")
    except ssl.SSLError as exc:  # TLS 1.3: a refused client certificate shows at the first read
        channel.close()
        raise TlsError(refused_message(_PEER, where, tls.client, handshake_reason(exc)), tls.client.path) from None
    except WireError as exc:
        raise ClusterError(f"Dynamic Cluster: the scheduler at {where} answered with {exc}") from None
    if message is None:
        return messages.Stop("failed", f"Dynamic Cluster: the scheduler at {where} closed the connection")
    try:
        return messages.parse(message, ("assign", "refused", "failed", "abort"))
    except messages.ProtocolError as exc:
        raise ClusterError(f"Dynamic Cluster: the scheduler at {where} sent a message this worker cannot use: "
                           f"{exc}") from None


class SchedulerLink:
    """The worker's connection to the scheduler for the rest of its life, owned by one thread (OpenSSL forbids two
    threads on one TLS connection): it obeys ``abort`` and ``restart`` and, at exit, reports how this process ended.
    """

    def __init__(self, channel: Channel, recovery: bool):
        self.channel = channel
        self.recovery = recovery
        self.failed = False
        self._outbox: queue.Queue = queue.Queue()
        self._wake_read, self._wake_write = os.pipe()
        self._done = threading.Event()

    def start(self) -> None:
        previous_hook = sys.excepthook

        def excepthook(*args: Any) -> None:
            self.failed = True
            previous_hook(*args)

        sys.excepthook = excepthook
        atexit.register(self._report_exit)
        self.channel.sock.setblocking(False)
        threading.Thread(target=self._run, name="graphpar-dynamic-cluster", daemon=True).start()

    def _report_exit(self) -> None:
        if self.failed and self.recovery:
            wait_for_restart(10.0)  # a peer's death broke our collective: the scheduler's restart is on its way
        self._outbox.put({"op": "exit", "failed": self.failed})
        os.write(self._wake_write, b"x")
        self._done.wait(5.0)

    def _run(self) -> None:
        sock = self.channel.sock
        try:
            while True:
                buffered = isinstance(sock, ssl.SSLSocket) and sock.pending()
                ready = [sock] if buffered else select.select([sock, self._wake_read], [], [], 1.0)[0]
                if self._wake_read in ready:
                    os.read(self._wake_read, 64)
                    while not self._outbox.empty():
                        self.channel.send(self._outbox.get())
                    self.channel.close()
                    return
                if sock in ready and not self._read():
                    return
        finally:
            self._done.set()

    def _read(self) -> bool:
        """Act on what the scheduler sent; False once it closed the connection."""
        open_ = self.channel.feed()
        while True:
            try:
                message = self.channel.pending()
                if message is None:
                    return open_
                order = messages.parse(message, ("abort", "restart"))
            except (WireError, messages.ProtocolError) as exc:
                sys.stderr.write(f"graphpar: ignored a malformed message from the Dynamic Cluster scheduler: {exc}\n")
                continue
            if order.op == "abort":
                sys.stderr.write(f"graphpar: stopping this worker: {order.reason}\n")
                sys.stderr.flush()
                os._exit(1)
            reexec(order.reason)
