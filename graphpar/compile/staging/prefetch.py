"""Reading a train step's executable while its network is traced and planned: the second run of a script overlaps
the executable cache's read (``staging.executables``: deserialising and loading the executable, 0.25-0.3 s of CPU
for the GPT bench model, most of it in XLA with Python's lock released) with the work that finds the step's key
(tracing, planning, the optimizer state, the key's digest: about 0.2 s).

The executable cache's key (``staging.fingerprint``) is known only after planning: it covers the network's code
through the traced graph, and nothing cheaper describes that code without risk (a module global, an environment
variable or a file the network reads decides the traced graph as much as its source does). So the read is a guess
that is checked: before tracing, a cheap *hint* of the program (its name and variant, the batch's and the network
state's names, shapes and dtypes, the settings) names the key that the last run with that hint used (an index file
``<hint>.next`` beside the executables), and that executable is read on a background thread. The step takes it
only when the key computed after planning is that key; otherwise the guess is dropped and the key's own file (if
any) read as before. A changed network, hyperparameter, strategy, dtype, shape or device count changes the key, so
a wrong guess costs the wasted read (on another core where one is free), never a stale program.
"""

from __future__ import annotations

import concurrent.futures
import os
from dataclasses import dataclass
from pathlib import Path

import jax

from graphpar.compile.staging import entry_files, executables
from graphpar.compile.staging.fingerprint import code_digest

# one reader: a second guess waits for the first (a guess is a step's first call, one at a time per process)
_READER = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="graphpar-step-read")
_KEY_CHARACTERS = frozenset("0123456789abcdef")


@dataclass(frozen=True, eq=False)
class Prefetch:
    """A guessed executable being read: ``guess`` is the key the hint's index named (None: no index yet), ``read``
    its read on the background thread."""

    folder: Path
    hint: str
    guess: str | None
    read: concurrent.futures.Future | None

    def load(self, key: str) -> tuple[jax.stages.Compiled | None, bool]:
        """(the executable stored under ``key`` or None, whether the guess read it): the guessed read when ``key`` is
        the guess, else the guess is dropped and ``key``'s file read here (``executables.load``)."""
        if self.read is not None and key == self.guess:
            return self.read.result(), True
        self.drop()  # not started yet: never read; started: its result is dropped
        return executables.load(self.folder, key), False

    def drop(self) -> None:
        """The step is not looked up in the executable cache after all (its key could not be described)."""
        if self.read is not None:
            self.read.cancel()

    def remember(self, key: str) -> None:
        """Make ``key`` the guess of this hint for the next run (the step just loaded or stored under it)."""
        if key == self.guess:
            return
        try:
            entry_files.replace(self.folder / f"{self.hint}.next", key.encode())
        except OSError:
            return  # the executable's own store says so once if the folder cannot be written; the guess just misses


def start(folder: Path, hint: str) -> Prefetch:
    """Read the executable the index of ``hint`` names, on the background thread (nothing when there is no index or
    it names no file, or when this process may use one core only: there the read cannot overlap anything, and
    switching between the threads only adds time). The digest of graphpar's code, which the step's key needs after
    planning (read once per process: 10-15 ms), is read there first."""
    guess = _guess(folder / f"{hint}.next")
    if usable_cores() < 2:
        return Prefetch(folder, hint, guess, None)
    _READER.submit(code_digest)
    if guess is None or not (folder / f"{guess}.exe").exists():
        return Prefetch(folder, hint, guess, None)
    return Prefetch(folder, hint, guess, _READER.submit(executables.load, folder, guess))


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the platform tells it, else the machine's)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS and Windows have no affinity call
        return os.cpu_count() or 1


def _guess(index: Path) -> str | None:
    try:
        text = index.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text if len(text) == 64 and set(text) <= _KEY_CHARACTERS else None  # a sha256 key, nothing else
