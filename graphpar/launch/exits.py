"""How a worker of a launched job ended, as the supervisor learns it: from its exit status, or from the note its
script leaves as Python exits (``GRAPHPAR_EXIT_NOTE``, written by ``graphpar._cluster``).

The note is needed because a worker that leaves a JAX job does not exit: JAX's exit handler holds it in a shutdown
barrier until every other process arrives, up to 300 s, while those wait for it in their next collective; then
JAX aborts them all and the first to die (usually worker 0) looked like the culprit.

What counts as leaving early: in a job of several local workers, one ends its script without an uncaught exception
(exit status 0, or the note ``ended``) while another keeps running for longer than the grace period
(``--early-exit-grace`` / ``GRAPHPAR_EARLY_EXIT_GRACE``, default 60 s), or fails meanwhile. Uneven finishes within
the grace are normal (a last checkpoint, one rank's summary line); in a JAX job the others cannot legitimately run on
much longer anyway, JAX's shutdown barrier giving up after 300 s. A negative grace waits without limit (processes
that never talk to each other). A script that raised is a failure at once (the note ``raised ...``), without waiting
for its exit. Only this node's workers are compared: the launcher sees no other node's.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass

ENDED = "ended"
RAISED = "raised "


@dataclass(frozen=True)
class ExitNotes:
    """A private directory (0700) for one launch's notes, one file per worker and attempt."""

    directory: str

    @staticmethod
    def create() -> "ExitNotes":
        return ExitNotes(tempfile.mkdtemp(prefix="graphpar-launch-exits-"))

    def path(self, restart: int, log_name: str) -> str:
        return os.path.join(self.directory, f"attempt{restart}-{log_name}.exit")

    def remove(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


def read_note(path: str | None) -> str | None:
    """What the worker noted as its script ended (``ended`` / ``raised X: message``), None while it runs."""
    if path is None:
        return None
    try:
        with open(path) as note:
            return note.read().strip() or None
    except OSError:
        return None


@dataclass(frozen=True)
class EarlyExit:
    """A worker that ended its script cleanly while others ran on: ``code`` is its exit status when it has exited,
    None while JAX holds it in the shutdown barrier; ``ended_at`` is when the supervisor saw it end (monotonic)."""

    code: int | None
    ended_at: float

    def how(self) -> str:
        if self.code is not None:
            return f"exited with status {self.code}"
        return ("ended its script with no uncaught exception (Python is exiting: JAX holds the process in its shutdown "
                "barrier, waiting for the others, so its exit status is not known yet)")
