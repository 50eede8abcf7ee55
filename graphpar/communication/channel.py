"""A socket carrying one JSON object per line: the wire of Dynamic Cluster's scheduler and workers."""

from __future__ import annotations

import json
import socket
import time
from typing import Any


class Channel:
    """A socket carrying one JSON object per line."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self._buffer = b""
        self.closed = False

    def send(self, message: dict[str, Any]) -> bool:
        try:
            self.sock.sendall((json.dumps(message) + "\n").encode())
            return True
        except OSError:
            return False

    def pending(self) -> dict[str, Any] | None:
        """A complete message already buffered, if any."""
        if b"\n" in self._buffer:
            line, self._buffer = self._buffer.split(b"\n", 1)
            return json.loads(line.decode())
        return None

    def recv(self, timeout: float | None) -> dict[str, Any] | None:
        """The next message; ``None`` when the peer closed the connection. Raises ``TimeoutError``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            message = self.pending()
            if message is not None:
                return message
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                self.sock.settimeout(left)
            else:
                self.sock.settimeout(None)
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout as exc:
                raise TimeoutError from exc
            except OSError:
                chunk = b""
            if not chunk:
                self.closed = True
                return None
            self._buffer += chunk

    def feed(self) -> bool:
        """Read what is available (after a selector said so); False on end of stream."""
        try:
            chunk = self.sock.recv(65536)
        except OSError:
            chunk = b""
        if not chunk:
            self.closed = True
            return False
        self._buffer += chunk
        return True

    def close(self) -> None:
        self.closed = True
        try:
            self.sock.close()
        except OSError:
            pass
