"""Log files of a launched job: their directory, streaming one of them to the console, quoting the end of another."""

from __future__ import annotations

import os
import sys
import tempfile
import threading
from typing import TextIO

from graphpar.launch.config import LaunchError


class LogStream:
    """Copies what is appended to ``path`` (from byte ``start``) to ``out`` until :meth:`stop`."""

    def __init__(self, path: str, start: int = 0, out: TextIO | None = None):
        self.path, self.start = path, start
        self.out = out or sys.stdout
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="graphpar-log-stream", daemon=True)

    def begin(self) -> "LogStream":
        self._thread.start()
        return self

    def _run(self) -> None:
        with open(self.path, "rb") as f:
            f.seek(self.start)
            while True:
                chunk = f.read(65536)
                if chunk:
                    self.out.write(chunk.decode(errors="replace"))
                    self.out.flush()
                    continue
                if self._stop.is_set():
                    return
                self._stop.wait(0.1)

    def stop(self) -> None:
        """Stop after copying everything written so far."""
        self._stop.set()
        self._thread.join(timeout=5)


def last_lines(path: str, count: int = 20, start: int = 0) -> str:
    """The last ``count`` lines of ``path`` written after byte ``start`` (this attempt's part of the log)."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            f.seek(max(start, size - 64 * 1024))
            text = f.read().decode(errors="replace")
    except OSError as exc:
        return f"(cannot read {path}: {exc})"
    lines = text.splitlines()[-count:]
    return "\n".join(lines) if lines else "(empty)"


def prepare_log_dir(path: str) -> None:
    """Create ``--log_dir`` and make sure files can be written in it, before any process starts: a directory that
    cannot hold the logs once ended the launcher in a FileNotFoundError traceback."""
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        raise LaunchError(f"graphpar launch: --log_dir {path!r} cannot hold the workers' logs: "
                          f"{exc.strerror or exc}; give a directory this user can create and write "
                          "(default graphpar_logs in the current directory)") from None
