"""Running a job's processes on this node: start them, watch them, stop them all when one fails, restart.

Supervision lives here and not in the workers because a worker cannot always report its own death: when a peer
dies, JAX may abort the survivors with SIGABRT (a missed heartbeat is fatal), and a SIGKILLed process says nothing.
The supervisor polls its children; the first one to exit non-zero (or by a signal), or whose script raised (it says
so as it exits, see ``graphpar.launch.exits``), fails the attempt, and so does a worker that ended its script cleanly
while the others ran on past ``--early-exit-grace`` (it left the job early; the others' errors are consequences):
the others are stopped (SIGTERM, then SIGKILL), the cause is reported in one line naming the process, its ranks, its
pid and its log, and, while ``--max-restarts`` allows, every local worker is started again with
``GRAPHPAR_RESTART_COUNT`` incremented.
A restarted job's ``Model.train`` rolls back to the newest complete checkpoint of its ``ModelCheckpoint`` (see
``graphpar.checkpoint.recovery``); ``MS_ENABLE_RECOVERY=1`` makes ``--max-restarts`` default to 3.

Each child runs in its own session, so a Ctrl-C in the terminal reaches only the launcher, which forwards SIGINT or
SIGTERM to every child and exits with 128 + the signal number. On Linux each child also gets SIGKILL if the launcher
itself dies.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field

from graphpar._env import cluster_env
from graphpar.checkpoint.recovery import recorded_checkpoint
from graphpar.launch import environment
from graphpar.launch.config import LaunchConfig, check_listen_address_here
from graphpar.launch.exits import ENDED, RAISED, EarlyExit, ExitNotes, read_note
from graphpar.launch.logs import LogStream, last_lines, prepare_log_dir

_GRACE_SECONDS = 5.0
_POLL_SECONDS = 0.1


def _recorded_checkpoint() -> str:
    """``: <path>`` of the checkpoint MS_RECOVERY_PATH's record names (see graphpar.checkpoint.recovery), if any."""
    path = recorded_checkpoint()
    return f" ({path})" if path else ""


def _job_id() -> str:
    """This launch's job identity: GRAPHPAR_JOB_ID when the user set one (a job of several launchers, one per node,
    shares it that way), else a new one. Every child of every attempt gets it, so checkpoints record which job wrote
    them and a restart rolls back only into this job's, never into an earlier run's (graphpar.checkpoint.recovery)."""
    return cluster_env().job_id or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


@dataclass
class Child:
    name: str  # "worker 1" / "scheduler"
    label: str  # "process 1 (ranks 2-3)"
    log_path: str
    log_start: int
    popen: subprocess.Popen
    exit_note: str | None = None  # where a worker notes that its script ended (see graphpar.launch.exits)

    def describe_exit(self, code: int) -> str:
        if code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exit status {code}"


@dataclass
class Outcome:
    ok: bool
    signal_number: int | None = None
    failed: Child | None = None  # the cause: the child that failed, or the worker that left early
    code: int | None = 0  # its exit status
    raised: str | None = None  # "raised X: message": the failed worker's own note (it had not exited yet)
    # when the cause is a worker that left early: how, why the job ended then, how many others still ran, and
    # what each of them did (one entry each)
    early: EarlyExit | None = None
    why: str = ""
    running: int = 0
    consequences: list[str] = field(default_factory=list)


@dataclass
class Supervisor:
    config: LaunchConfig
    out: object = field(default=sys.stderr)
    _signal: int | None = None
    job_id: str = field(default_factory=_job_id)  # the same for every attempt of this launch

    def say(self, line: str) -> None:
        print(f"[graphpar launch] {line}", file=self.out, flush=True)

    # --- the restart loop --------------------------------------------------------------------------------------
    def run(self) -> int:
        prepare_log_dir(self.config.log_dir)
        check_listen_address_here(self.config)
        replaced = environment.replaced_variables()
        if replaced:
            self.say(f"{', '.join(replaced)} in this environment do(es) not apply: the launcher places its "
                     "processes itself and does not pass these to them")
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        notes = ExitNotes.create()
        try:
            restart = 0
            while True:
                outcome = self._attempt(restart, notes)
                if outcome.ok:
                    return 0
                if outcome.signal_number is not None:
                    return 128 + outcome.signal_number
                self._report(outcome)
                if restart >= self.config.max_restarts:
                    if self.config.max_restarts:
                        self.say(f"giving up after {restart} restart(s) (--max-restarts {self.config.max_restarts})")
                    return 1
                restart += 1
                self.say(f"restarting all local workers (restart {restart} of {self.config.max_restarts}, "
                         f"GRAPHPAR_RESTART_COUNT={restart}); Model.train rolls back to the newest complete "
                         f"checkpoint{_recorded_checkpoint()}")
        finally:
            notes.remove()
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _on_signal(self, signum: int, frame) -> None:
        self._signal = signum

    def _report(self, outcome: Outcome) -> None:
        child = outcome.failed
        if outcome.early is not None:
            self.say(f"{child.name}, {child.label}, pid {child.popen.pid}, left the job early: it "
                     f"{outcome.early.how()} while {outcome.running} other worker(s) still ran; {outcome.why}. "
                     f"Its log: {child.log_path}")
            for line in outcome.consequences:
                self.say(f"  consequence: {line}")
            return
        if outcome.raised:
            what = (f"its script {outcome.raised} (its process was held in JAX's shutdown barrier, waiting for the "
                    "others)")
        else:
            what = child.describe_exit(outcome.code)
        self.say(f"{child.name}, {child.label}, failed: {what}. Last lines of "
                 f"{child.log_path}:\n{last_lines(child.log_path, 20, child.log_start)}")

    # --- one attempt -------------------------------------------------------------------------------------------
    def _spawn(self, name: str, label: str, log_name: str, command: list[str], env: dict[str, str],
               restart: int, exit_note: str | None = None) -> Child:
        path = os.path.join(self.config.log_dir, log_name)
        log = open(path, "ab")
        if restart:
            log.write(f"\n===== graphpar launch: restart {restart} =====\n".encode())
            log.flush()
        start = log.tell()
        env = {**env, "GRAPHPAR_JOB_ID": self.job_id}
        popen = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                 start_new_session=True,
                                 preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None)
        log.close()
        return Child(name, label, path, start, popen, exit_note)

    def _start(self, restart: int, notes: ExitNotes) -> list[Child]:
        cfg = self.config
        children = []
        if cfg.run_scheduler:
            command = [sys.executable, "-m", "graphpar.launch.scheduler_main"]
            children.append(self._spawn("scheduler", f"Dynamic Cluster scheduler at {cfg.master_addr}:"
                                        f"{cfg.master_port}", "scheduler.log", command,
                                        environment.scheduler_environment(cfg, restart), restart))
        for i in range(cfg.local_procs):
            pid = cfg.process_id(i)
            note = notes.path(restart, cfg.log_name(i))
            children.append(self._spawn(f"worker {i if pid is None else pid}", cfg.ranks_of(i), cfg.log_name(i),
                                        list(cfg.command), environment.worker_environment(cfg, i, restart, note),
                                        restart, note))
        return children

    def _console_child(self, children: list[Child]) -> Child:
        """Rank 0's worker if it runs here, else this node's first worker."""
        workers = [c for c in children if c.name != "scheduler"]
        return next((c for c in workers if c.label.startswith("process 0")), workers[0])

    def _attempt(self, restart: int, notes: ExitNotes) -> Outcome:
        children = self._start(restart, notes)
        shown = self._console_child(children)
        stream = LogStream(shown.log_path, shown.log_start).begin()
        workers = [c for c in children if c.name != "scheduler"]
        self.say(f"started {len(workers)} worker(s) ({self.config.total_procs} in the job); logs in "
                 f"{self.config.log_dir}/; showing {shown.name}")
        try:
            return self._watch(children, workers)
        finally:
            stream.stop()

    def _watch(self, children: list[Child], workers: list[Child]) -> Outcome:
        done_at: float | None = None
        ended: dict[int, float] = {}  # worker index -> when it was seen to end its script cleanly (see exits)
        while True:
            if self._signal is not None:
                signum, self._signal = self._signal, None
                self.say(f"received {signal.Signals(signum).name}: forwarding it to every child")
                self._stop(children, signum)
                return Outcome(ok=False, signal_number=signum)
            now = time.monotonic()
            for child in children:
                code = child.popen.poll()
                if code is not None and code != 0:
                    before = {i: t for i, t in ended.items() if workers[i] is not child}  # not its own sys.exit(3)
                    if before and child in workers:
                        return self._left_early(children, workers, before, f"then {child.name} failed", child)
                    self._stop(children, signal.SIGTERM)
                    return Outcome(ok=False, failed=child, code=code)
            for index, worker in enumerate(workers):
                if index in ended:
                    continue
                note = read_note(worker.exit_note)
                if note is not None and note.startswith(RAISED) and worker.popen.poll() is None:
                    if ended:
                        return self._left_early(children, workers, ended, f"then {worker.name} failed", worker)
                    self._stop(children, signal.SIGTERM)
                    return Outcome(ok=False, failed=worker, code=None, raised=note)
                if note == ENDED or worker.popen.poll() == 0:
                    ended[index] = now
            if all(w.popen.poll() == 0 for w in workers):
                done_at = done_at or time.monotonic()
                # The scheduler exits by itself once it has seen every worker leave; give it a moment.
                if all(c.popen.poll() is not None for c in children) or time.monotonic() - done_at > _GRACE_SECONDS:
                    self._stop(children, signal.SIGTERM)
                    return Outcome(ok=True)
            elif ended and len(ended) < len(workers):
                grace = self.config.early_exit_grace
                if 0 <= grace < now - min(ended.values()):
                    return self._left_early(children, workers, ended, f"they still ran {grace:g} s later "
                                            "(--early-exit-grace / GRAPHPAR_EARLY_EXIT_GRACE), so the launcher "
                                            "stopped the job")
            time.sleep(_POLL_SECONDS)

    def _left_early(self, children: list[Child], workers: list[Child], ended: dict[int, float], why: str,
                    failed: Child | None = None) -> Outcome:
        """Stop the attempt whose first clean ender (``ended``) left the job early; the others' ends (``failed``,
        the one that failed meanwhile, if any) are described as its consequences."""
        first = min(ended, key=ended.__getitem__)
        cause = workers[first]
        early = EarlyExit(cause.popen.poll(), ended[first])
        running = {index for index, w in enumerate(workers) if w.popen.poll() is None and index not in ended}
        after = time.monotonic() - early.ended_at
        self._stop(children, signal.SIGTERM)
        lines = []
        for index, worker in enumerate(workers):
            head = f"{worker.name}, {worker.label}, pid {worker.popen.pid},"
            if worker is failed:
                note = read_note(worker.exit_note)
                how = (f"its script {note}" if note is not None and note.startswith(RAISED)
                       else worker.describe_exit(worker.popen.returncode))
                lines.append(f"{head} failed {after:.0f} s after {cause.name} left: {how}. "
                             f"Last lines of {worker.log_path}:\n"
                             f"{last_lines(worker.log_path, 10, worker.log_start)}")
            elif index in ended and index != first:
                lines.append(f"{head} also ended its script (its log: {worker.log_path})")
            elif index in running:
                lines.append(f"{head} still ran and was stopped by the launcher (its log: {worker.log_path})")
        return Outcome(ok=False, failed=cause, code=early.code, early=early, why=why, consequences=lines,
                       running=len(workers) - len(ended))

    def _stop(self, children: list[Child], signum: int) -> None:
        """Send ``signum`` to every running child's process group, then SIGKILL whatever outlives the grace time."""
        for child in children:
            if child.popen.poll() is None:
                try:
                    os.killpg(child.popen.pid, signum)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + _GRACE_SECONDS
        for child in children:
            try:
                child.popen.wait(timeout=max(deadline - time.monotonic(), 0.01))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(child.popen.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                child.popen.wait()
