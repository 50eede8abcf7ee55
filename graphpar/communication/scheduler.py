"""The Dynamic Cluster scheduler (``MS_ROLE=MS_SCHED``): one thread, one selector, every connection served at once.

The protocol is in :mod:`graphpar.communication.dynamic_cluster`. How the scheduler stays up whatever connects:

* every socket is non-blocking and watched by one selector, so an idle or slow connection delays nobody: a new
  connection has :data:`HELLO_SECONDS` to finish its TLS handshake and send its ``register`` line, and is closed
  (and logged) after that; at most :data:`MAX_PENDING` such connections wait at once;
* every line is checked (:mod:`graphpar.communication.scheduler_messages`): a line that is not JSON, an unknown
  op or field, a field of the wrong type is refused by name — the refusal is sent back and logged — and the
  scheduler serves on. A registered worker's malformed message is logged and ignored;
* with ``set_ps_context(enable_ssl=True)`` the scheduler speaks mutual TLS with the job's certificates (the server
  certificate, client certificates checked against the CA and CRL): a worker whose certificate is refused is
  logged with its address and the reason, and never registers.
"""

from __future__ import annotations

import re
import selectors
import socket
import ssl
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from graphpar.communication import scheduler_messages as messages
from graphpar.communication.channel import Channel, WireError
from graphpar.communication.errors import ClusterError
from graphpar.communication.tls_config import TlsSettings
from graphpar.communication.tls_context import handshake_reason, ssl_context, warn_if_expiring

HELLO_SECONDS = 10.0  # to finish the TLS handshake and send ``register``
MAX_PENDING = 256  # connections accepted and not yet registered
_TLS_RECORD = b"\x16\x03"  # the first bytes of a TLS handshake


@dataclass
class Worker:
    """A registered worker, as the scheduler knows it."""

    channel: Channel
    hello: messages.Register
    host: str  # its address as the scheduler sees it
    fixed: int | None = None
    process_id: int = -1
    done: str | None = None  # "ok", "failed"

    @property
    def node_id(self) -> str | None:
        return self.hello.node_id

    def describe(self) -> str:
        who = f"MS_NODE_ID={self.node_id}" if self.node_id is not None else "worker without MS_NODE_ID"
        return f"{who} ({self.hello.hostname} {self.host}, pid {self.hello.pid})"


@dataclass
class Arrival:
    """A connection accepted and not yet registered: its handshake and ``register`` line are due by
    ``deadline``."""

    sock: socket.socket
    peer: tuple
    deadline: float
    channel: Channel
    handshaking: bool

    def where(self) -> str:
        return f"{self.peer[0]}:{self.peer[1]}"


@dataclass
class Scheduler:
    """The ``MS_SCHED`` role: assigns process indices, hands out the coordinator, supervises. ``serve()`` returns
    the exit status of the scheduler process."""

    host: str
    port: int
    worker_num: int
    timeout: float
    recovery: bool = False  # MS_ENABLE_RECOVERY: a dead worker makes the job form again instead of failing
    tls: TlsSettings | None = None
    say: Callable[[str], None] = field(default=lambda line: print(f"[graphpar scheduler] {line}", flush=True))
    workers: list[Worker] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    arrivals: dict[socket.socket, Arrival] = field(default_factory=dict)
    coordinator: str | None = None

    def serve(self) -> int:
        try:
            server = socket.create_server((self.host, self.port))
        except OSError as exc:
            raise ClusterError(f"Dynamic Cluster scheduler: cannot listen on MS_SCHED_HOST:MS_SCHED_PORT = "
                               f"{self.host}:{self.port}: {exc}", "MS_SCHED_PORT") from exc
        self._ctx = ssl_context(self.tls, server=True) if self.tls else None
        if self.tls:
            warn_if_expiring(self.tls.server, self.tls.warning_days, "server_cert_path")
        server.setblocking(False)
        self._server = server
        self._selector = selectors.DefaultSelector()
        self._selector.register(server, selectors.EVENT_READ, None)
        self.say(f"listening on {self.host}:{self.port} for MS_WORKER_NUM={self.worker_num} workers "
                 f"(cluster timeout {self.timeout:.0f} s{', mutual TLS' if self.tls else ''})")
        try:
            while True:
                status = self._generation()
                if status is not None:
                    return status
                self.say(f"waiting for {self.worker_num} workers to register again (restart the dead worker with "
                         f"its MS_NODE_ID; cluster timeout {self.timeout:.0f} s)")
                self.workers, self.failures, self.coordinator = [], [], None
        finally:
            for arrival in list(self.arrivals.values()):
                self._drop(arrival)
            self._selector.close()
            server.close()

    def _generation(self) -> int | None:
        """Form the job, run it, and return its exit status (None: form it again, MS_ENABLE_RECOVERY)."""
        deadline = time.monotonic() + self.timeout
        while len(self.workers) < self.worker_num:
            if time.monotonic() > deadline:
                self._fail_formation()
                return 1
            self._poll(deadline)
        leader = self._assign()
        deadline = time.monotonic() + max(self.timeout, 30)
        while self.coordinator is None and not leader.channel.closed:
            if time.monotonic() > deadline:
                message = f"Dynamic Cluster: process 0 ({leader.describe()}) did not report its coordinator address"
                self.say(message)
                for worker in self.workers:
                    worker.channel.send({"op": "failed", "reason": message})
                return 1
            self._poll(deadline)
        if self.coordinator is not None:
            self._hand_out(leader)
        while any(not w.channel.closed for w in self.workers):
            self._poll(None)
            if self.recovery and self.failures:
                self._restart_survivors()
                return None
        if self.failures:
            self.say(f"job failed: {'; '.join(self.failures)}")
            return 1
        self.say("all workers finished")
        return 0

    # --- the event loop ----------------------------------------------------------------------------------------
    def _poll(self, until: float | None) -> None:
        """Serve whatever is ready for up to 0.5 s (less when ``until`` comes first), then close arrivals whose
        deadline has passed."""
        wait = 0.5 if until is None else max(0.0, min(0.5, until - time.monotonic()))
        for key, _ in self._selector.select(timeout=wait):
            if key.data is None:
                self._accept()
            elif isinstance(key.data, Arrival):
                try:
                    self._on_arrival(key.data)
                except Exception as exc:  # noqa: BLE001 - one peer's surprise must not end the job's scheduler
                    self.say(f"dropped the connection from {key.data.where()}: {type(exc).__name__}: {exc}")
                    self._drop(key.data)
            else:
                self._on_worker(key.data)
        now = time.monotonic()
        for arrival in [a for a in self.arrivals.values() if a.deadline < now]:
            awaited = "TLS handshake and register line" if arrival.handshaking else "register line"
            self.say(f"closed the connection from {arrival.where()}: no {awaited} within {HELLO_SECONDS:.0f} s")
            self._drop(arrival)

    def _accept(self) -> None:
        while True:
            try:
                sock, peer = self._server.accept()
            except (BlockingIOError, OSError):
                return
            if len(self.arrivals) >= MAX_PENDING:
                self.say(f"closed the connection from {peer[0]}:{peer[1]}: {MAX_PENDING} connections are already "
                         "waiting to register")
                sock.close()
                continue
            sock.setblocking(False)
            if self._ctx is not None:
                sock = self._ctx.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
            arrival = Arrival(sock, peer, time.monotonic() + HELLO_SECONDS, Channel(sock), self._ctx is not None)
            self.arrivals[sock] = arrival
            self._selector.register(sock, selectors.EVENT_READ, arrival)

    def _drop(self, arrival: Arrival) -> None:
        self.arrivals.pop(arrival.sock, None)
        try:
            self._selector.unregister(arrival.sock)
        except (KeyError, ValueError):
            pass
        arrival.channel.close()

    def _on_arrival(self, arrival: Arrival) -> None:
        if arrival.handshaking and not self._handshake(arrival):
            return
        if not arrival.channel.feed():
            self._drop(arrival)  # gone before registering: nothing to say
            return
        if self._ctx is None and arrival.channel.starts_with(_TLS_RECORD):
            self.say(f"refused the connection from {arrival.where()}: it starts a TLS handshake, and this scheduler "
                     "runs without TLS (call set_ps_context(enable_ssl=True, ...) in the scheduler's script too)")
            self._drop(arrival)
            return
        try:
            message = arrival.channel.pending()
            if message is None:
                return
            hello = messages.parse(message, ("register",))
        except (WireError, messages.ProtocolError) as exc:
            self._refuse(arrival, f"a malformed message from {arrival.where()}: {exc}")
            return
        self.arrivals.pop(arrival.sock)
        self._selector.unregister(arrival.sock)
        self._register(arrival, hello)

    def _handshake(self, arrival: Arrival) -> bool:
        """Advance ``arrival``'s TLS handshake; True once it is complete."""
        try:
            arrival.sock.do_handshake()
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return False  # more bytes to come (the peer's; ours are small enough to fit the socket's buffer)
        except (ssl.SSLError, OSError) as exc:
            crl = f" and crl_path {self.tls.crl}" if self.tls.crl else ""
            self.say(f"refused a TLS connection from {arrival.where()}: {handshake_reason(exc)} (its certificate "
                     f"checked against ca_cert_path {self.tls.ca_cert}{crl})")
            self._drop(arrival)
            return False
        arrival.handshaking = False
        return True

    def _refuse(self, arrival: Arrival, reason: str) -> None:
        self.say(f"refused {reason}")
        arrival.channel.send({"op": "refused", "reason": f"Dynamic Cluster scheduler refused {reason}"})
        self._drop(arrival)

    # --- phase 1: registration ---------------------------------------------------------------------------------
    def _register(self, arrival: Arrival, hello: messages.Register) -> None:
        worker = Worker(arrival.channel, hello, arrival.peer[0])
        reason = self._refusal(worker)
        if reason:
            self.say(f"refused {worker.describe()}: {reason}")
            worker.channel.send({"op": "refused", "reason": f"Dynamic Cluster scheduler refused "
                                                            f"{worker.describe()}: {reason}"})
            worker.channel.close()
            return
        self.workers.append(worker)
        self._selector.register(worker.channel.sock, selectors.EVENT_READ, worker)
        self.say(f"registered {worker.describe()} ({len(self.workers)}/{self.worker_num})")
        self._on_worker(worker, read=False)  # lines that came with the register line

    def _refusal(self, worker: Worker) -> str | None:
        if worker.hello.worker_num != self.worker_num:
            return (f"its MS_WORKER_NUM={worker.hello.worker_num} differs from the scheduler's "
                    f"MS_WORKER_NUM={self.worker_num}; every process of a job must use the same value")
        if len(self.workers) >= self.worker_num:
            return (f"the cluster already has MS_WORKER_NUM={self.worker_num} workers "
                    f"({', '.join(w.describe() for w in self.workers)})")
        if worker.node_id is not None:
            for other in self.workers:
                if other.node_id == worker.node_id:
                    return f"MS_NODE_ID={worker.node_id} is already taken by {other.describe()}"
            if re.fullmatch(r"[0-9]+", worker.node_id):
                worker.fixed = int(worker.node_id)
                if worker.fixed >= self.worker_num:
                    return (f"MS_NODE_ID={worker.node_id} fixes a rank outside MS_WORKER_NUM={self.worker_num}; "
                            f"valid: 0..{self.worker_num - 1}")
        return None

    def _fail_formation(self) -> None:
        taken = {w.fixed for w in self.workers if w.fixed is not None}
        free = [i for i in range(self.worker_num) if i not in taken]
        missing_count = self.worker_num - len(self.workers)
        if self.workers and all(w.fixed is not None for w in self.workers):
            missing = ", ".join(f"MS_NODE_ID={i}" for i in free)
        else:
            missing = f"{missing_count} worker(s) (process indices {free[-missing_count:]} unassigned)"
        registered = ", ".join(w.describe() for w in self.workers) or "none"
        message = (f"Dynamic Cluster: only {len(self.workers)} of MS_WORKER_NUM={self.worker_num} workers registered "
                   f"with the scheduler at {self.host}:{self.port} within {self.timeout:.0f} s (MS_TOPO_TIMEOUT). "
                   f"Missing: {missing}. Registered: {registered}. Start the missing worker(s) with the same "
                   "MS_SCHED_HOST/MS_SCHED_PORT/MS_WORKER_NUM, or lower MS_WORKER_NUM.")
        self.say(message)
        for worker in self.workers:
            worker.channel.send({"op": "failed", "reason": message})
            self._close(worker)
        self.failures.append(message)

    # --- phase 2: assignment -----------------------------------------------------------------------------------
    def _assign(self) -> Worker:
        """Give every worker its index and send process 0 its assignment; returns process 0."""
        free = iter(sorted(set(range(self.worker_num)) - {w.fixed for w in self.workers if w.fixed is not None}))
        for worker in self.workers:  # registration order
            worker.process_id = worker.fixed if worker.fixed is not None else next(free)
        self.workers.sort(key=lambda w: w.process_id)
        leader = self.workers[0]
        leader.channel.send(self._assignment(leader, advertise_host=leader.host))
        return leader

    def _assignment(self, worker: Worker, **extra: Any) -> dict[str, Any]:
        peers = [w for w in self.workers if w.host == worker.host]
        return {"op": "assign", "process_id": worker.process_id, "num_processes": self.worker_num,
                "local_process_id": peers.index(worker), "local_process_count": len(peers), **extra}

    def _hand_out(self, leader: Worker) -> None:
        for worker in self.workers[1:]:
            worker.channel.send(self._assignment(worker, coordinator=self.coordinator))
        self.say(f"cluster formed: {self.worker_num} workers, JAX coordinator {self.coordinator}; "
                 + ", ".join(f"process {w.process_id} = {w.describe()}" for w in self.workers))

    # --- phase 3: supervision ----------------------------------------------------------------------------------
    def _on_worker(self, worker: Worker, read: bool = True) -> None:
        open_ = worker.channel.feed() if read else True
        while True:
            try:
                message = worker.channel.pending()
                if message is None:
                    break
                parsed = messages.parse(message, ("coordinator", "exit"))
            except (WireError, messages.ProtocolError) as exc:
                self.say(f"ignored a malformed message from {worker.describe()}: {exc}")
                continue
            if isinstance(parsed, messages.Exit):
                worker.done = "failed" if parsed.failed else "ok"
            elif worker.process_id == 0 and self.coordinator is None:
                self.coordinator = parsed.address
        if not open_:
            self._close(worker)
            if worker.process_id < 0:  # before the job formed: its place is free again
                self.workers.remove(worker)
                self.say(f"{worker.describe()} disconnected before the job formed; its place is free again")
            else:
                self._finished(worker)

    def _close(self, worker: Worker) -> None:
        try:
            self._selector.unregister(worker.channel.sock)
        except (KeyError, ValueError):
            pass
        worker.channel.close()

    def _restart_survivors(self) -> None:
        for other in self.workers:
            if not other.channel.closed:
                other.channel.send({"op": "restart", "reason": f"Dynamic Cluster: {self.failures[-1]}"})
                self._close(other)

    def _finished(self, worker: Worker) -> None:
        if worker.done == "ok":
            self.say(f"process {worker.process_id} ({worker.describe()}) exited")
            return
        what = "exited after an error" if worker.done == "failed" else "disconnected without exiting (killed?)"
        message = f"process {worker.process_id} ({worker.describe()}) {what}"
        self.failures.append(message)
        if self.recovery:
            self.say(message + "; MS_ENABLE_RECOVERY: restarting the other workers, the job forms again")
            return
        self.say(message + "; stopping the other workers")
        for other in self.workers:
            if not other.channel.closed:
                other.channel.send({"op": "abort", "reason": f"Dynamic Cluster: {message}"})
