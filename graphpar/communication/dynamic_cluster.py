"""MindSpore's Dynamic Cluster (``MS_ROLE``, ``MS_SCHED_HOST``, ``MS_SCHED_PORT``, ``MS_WORKER_NUM``, ``MS_NODE_ID``)
mapped onto ``jax.distributed``.

The scheduler (``MS_ROLE=MS_SCHED``) trains nothing: inside ``init()`` it runs :class:`Scheduler`, a small
rank-assignment service on ``MS_SCHED_HOST:MS_SCHED_PORT`` (bound to that address only), and exits when the
workers have finished. The protocol is one JSON object per line over TCP:

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

Why the JAX coordinator lives in worker 0 and not in the scheduler: JAX's coordination service can only be started
by a participating process through its public API, and the scheduler must not own devices.
"""

from __future__ import annotations

import atexit
import os
import re
import selectors
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from graphpar.communication.addresses import free_port
from graphpar.communication.channel import Channel
from graphpar.communication.errors import ClusterError
from graphpar.communication.process_plan import ProcessPlan
from graphpar.communication.rejoin import reexec, wait_for_restart


@dataclass
class Worker:
    """A registered worker, as the scheduler knows it."""

    channel: Channel
    node_id: str | None
    host: str  # its address as the scheduler sees it
    pid: int
    hostname: str
    fixed: int | None = None
    process_id: int = -1
    done: str | None = None  # "ok", "failed", "died"

    def describe(self) -> str:
        who = f"MS_NODE_ID={self.node_id}" if self.node_id is not None else "worker without MS_NODE_ID"
        return f"{who} ({self.hostname} {self.host}, pid {self.pid})"


@dataclass
class Scheduler:
    """The ``MS_SCHED`` role: assigns process indices, hands out the coordinator, supervises. ``serve()`` returns
    the exit status of the scheduler process."""

    host: str
    port: int
    worker_num: int
    timeout: float
    recovery: bool = False  # MS_ENABLE_RECOVERY: a dead worker makes the job form again instead of failing
    say: Callable[[str], None] = field(default=lambda line: print(f"[graphpar scheduler] {line}", flush=True))
    workers: list[Worker] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def serve(self) -> int:
        try:
            server = socket.create_server((self.host, self.port))
        except OSError as exc:
            raise ClusterError(f"Dynamic Cluster scheduler: cannot listen on MS_SCHED_HOST:MS_SCHED_PORT = "
                               f"{self.host}:{self.port}: {exc}", "MS_SCHED_PORT") from exc
        with server:
            self.say(f"listening on {self.host}:{self.port} for MS_WORKER_NUM={self.worker_num} workers "
                     f"(cluster timeout {self.timeout:.0f} s)")
            while True:
                if not self._gather(server):
                    return 1
                self._assign()
                status = self._supervise(server)
                if status is not None:
                    return status
                self.say(f"waiting for {self.worker_num} workers to register again (restart the dead worker with "
                         f"its MS_NODE_ID; cluster timeout {self.timeout:.0f} s)")
                self.workers, self.failures = [], []

    # --- phase 1: registration -------------------------------------------------------------------------------
    def _gather(self, server: socket.socket) -> bool:
        deadline = time.monotonic() + self.timeout
        server.settimeout(0.2)
        while len(self.workers) < self.worker_num:
            if time.monotonic() > deadline:
                self._fail_formation()
                return False
            try:
                sock, peer = server.accept()
            except socket.timeout:
                continue
            self._register(Channel(sock), peer[0])
        return True

    def _register(self, channel: Channel, host: str) -> None:
        try:
            hello = channel.recv(timeout=10)
        except (TimeoutError, ValueError):
            channel.close()
            return
        if not hello or hello.get("op") != "register":
            channel.close()
            return
        worker = Worker(channel, hello.get("node_id"), host, int(hello.get("pid", 0)), str(hello.get("hostname")))
        reason = self._refusal(worker, hello)
        if reason:
            self.say(f"refused {worker.describe()}: {reason}")
            channel.send({"op": "refused", "reason": f"Dynamic Cluster scheduler refused {worker.describe()}: "
                                                      f"{reason}"})
            channel.close()
            return
        self.workers.append(worker)
        self.say(f"registered {worker.describe()} ({len(self.workers)}/{self.worker_num})")

    def _refusal(self, worker: Worker, hello: dict[str, Any]) -> str | None:
        if hello.get("worker_num") != self.worker_num:
            return (f"its MS_WORKER_NUM={hello.get('worker_num')} differs from the scheduler's "
                    f"MS_WORKER_NUM={self.worker_num}; every process of a job must use the same value")
        if len(self.workers) >= self.worker_num:
            return (f"the cluster already has MS_WORKER_NUM={self.worker_num} workers "
                    f"({', '.join(w.describe() for w in self.workers)})")
        if worker.node_id is not None:
            for other in self.workers:
                if other.node_id == worker.node_id:
                    return f"MS_NODE_ID={worker.node_id} is already taken by {other.describe()}"
            if re.fullmatch(r"\d+", worker.node_id):
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
            worker.channel.close()
        self.failures.append(message)

    # --- phase 2: assignment ---------------------------------------------------------------------------------
    def _assign(self) -> None:
        free = iter(sorted(set(range(self.worker_num)) - {w.fixed for w in self.workers if w.fixed is not None}))
        for worker in self.workers:  # registration order
            worker.process_id = worker.fixed if worker.fixed is not None else next(free)
        ordered = sorted(self.workers, key=lambda w: w.process_id)
        by_host: dict[str, list[Worker]] = {}
        for worker in ordered:
            by_host.setdefault(worker.host, []).append(worker)

        def assignment(worker: Worker, **extra: Any) -> dict[str, Any]:
            peers = by_host[worker.host]
            return {"op": "assign", "process_id": worker.process_id, "num_processes": self.worker_num,
                    "local_process_id": peers.index(worker), "local_process_count": len(peers), **extra}

        leader = ordered[0]
        leader.channel.send(assignment(leader, advertise_host=leader.host))
        try:
            reply = leader.channel.recv(timeout=max(self.timeout, 30))
        except TimeoutError:
            reply = None
        if not reply or reply.get("op") != "coordinator":
            raise ClusterError(f"Dynamic Cluster: process 0 ({leader.describe()}) did not report its coordinator "
                               "address")
        coordinator = reply["address"]
        for worker in ordered[1:]:
            worker.channel.send(assignment(worker, coordinator=coordinator))
        self.say(f"cluster formed: {self.worker_num} workers, JAX coordinator {coordinator}; "
                 + ", ".join(f"process {w.process_id} = {w.describe()}" for w in ordered))

    # --- phase 3: supervision --------------------------------------------------------------------------------
    def _supervise(self, server: socket.socket) -> int | None:
        """The job's exit status, or None when a failure in recovery mode asks for the job to form again."""
        selector = selectors.DefaultSelector()
        server.setblocking(False)
        selector.register(server, selectors.EVENT_READ, None)
        for worker in self.workers:
            worker.channel.sock.setblocking(False)
            selector.register(worker.channel.sock, selectors.EVENT_READ, worker)
        alive = len(self.workers)
        while alive:
            for key, _ in selector.select(timeout=1.0):
                if key.data is None:
                    self._refuse_late(server)
                    continue
                worker: Worker = key.data
                open_ = worker.channel.feed()
                while (message := worker.channel.pending()) is not None:
                    if message.get("op") == "exit":
                        worker.done = "failed" if message.get("failed") else "ok"
                if not open_:
                    selector.unregister(worker.channel.sock)
                    worker.channel.close()
                    alive -= 1
                    self._finished(worker)
                    if self.recovery and self.failures:
                        self._restart_survivors(selector)
                        return None
        selector.close()
        if self.failures:
            self.say(f"job failed: {'; '.join(self.failures)}")
            return 1
        self.say("all workers finished")
        return 0

    def _refuse_late(self, server: socket.socket) -> None:
        try:
            sock, peer = server.accept()
        except OSError:
            return
        sock.setblocking(True)
        self._register(Channel(sock), peer[0])  # refused: the cluster is full

    def _restart_survivors(self, selector: selectors.BaseSelector) -> None:
        for other in self.workers:
            if not other.channel.closed:
                other.channel.send({"op": "restart", "reason": f"Dynamic Cluster: {self.failures[-1]}"})
                other.channel.close()
        selector.close()

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


# --- the worker side ---------------------------------------------------------------------------------------------
_session: dict[str, Any] = {}


def join(host: str, port: int, worker_num: int, node_id: str | None, timeout: float,
         local_devices: int | None, recovery: bool = False) -> ProcessPlan:
    """Register with the scheduler and return this worker's plan (blocking until the cluster has formed)."""
    deadline = time.monotonic() + timeout
    where = f"MS_SCHED_HOST:MS_SCHED_PORT = {host}:{port}"
    sock = None
    while sock is None:
        try:
            sock = socket.create_connection((host, port), timeout=5)
        except OSError as exc:
            if time.monotonic() > deadline:
                raise ClusterError(f"Dynamic Cluster: no scheduler answered at {where} within {timeout:.0f} s "
                                   f"(MS_TOPO_TIMEOUT): {exc}. Start one process of the job with MS_ROLE=MS_SCHED",
                                   "MS_SCHED_HOST") from exc
            time.sleep(0.2)
    channel = Channel(sock)
    channel.send({"op": "register", "node_id": node_id, "worker_num": worker_num, "pid": os.getpid(),
                  "hostname": socket.gethostname(), "local_devices": local_devices})
    try:
        reply = channel.recv(timeout=max(deadline - time.monotonic(), 0) + 30)
    except TimeoutError:
        reply = {"op": "failed", "reason": f"Dynamic Cluster: the scheduler at {where} gave no assignment within "
                                           f"{timeout:.0f} s"}
    if reply is None:
        reply = {"op": "failed", "reason": f"Dynamic Cluster: the scheduler at {where} closed the connection"}
    if reply.get("op") != "assign":
        channel.close()
        raise ClusterError(reply.get("reason", f"Dynamic Cluster: unexpected answer {reply}"), "MS_WORKER_NUM")
    if reply["process_id"] == 0:
        coordinator = f"{reply['advertise_host']}:{free_port(reply['advertise_host'])}"
        channel.send({"op": "coordinator", "address": coordinator})
    else:
        coordinator = reply["coordinator"]
    _watch(channel, recovery)
    return ProcessPlan("Dynamic Cluster", coordinator, reply["num_processes"], reply["process_id"],
                       reply["local_process_id"], reply["local_process_count"], local_devices)


def _watch(channel: Channel, recovery: bool = False) -> None:
    """Keep the scheduler connection for the process's life: report the exit, obey ``abort``."""
    _session["channel"] = channel
    _session["failed"] = False
    previous_hook = sys.excepthook

    def excepthook(*args: Any) -> None:
        _session["failed"] = True
        previous_hook(*args)

    sys.excepthook = excepthook

    def report_exit() -> None:
        if _session["failed"] and recovery:
            wait_for_restart(10.0)  # a peer's death broke our collective: the scheduler's restart is on its way
        channel.send({"op": "exit", "failed": _session["failed"]})
        channel.close()

    atexit.register(report_exit)

    def listen() -> None:
        while True:
            try:
                message = channel.recv(timeout=None)
            except (TimeoutError, ValueError):
                return
            if message is None:
                return
            if message.get("op") == "abort":
                sys.stderr.write(f"graphpar: stopping this worker: {message.get('reason')}\n")
                sys.stderr.flush()
                os._exit(1)
            if message.get("op") == "restart":
                reexec(str(message.get("reason")))

    threading.Thread(target=listen, name="graphpar-dynamic-cluster", daemon=True).start()
