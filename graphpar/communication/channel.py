"""A socket carrying one JSON object per line: the wire of Dynamic Cluster's scheduler and workers.

The socket is plain TCP or, with ``set_ps_context(enable_ssl=True)``, an ``ssl.SSLSocket``; either way one thread
owns it (OpenSSL forbids reading and writing one connection from two threads). A line that is not a JSON object, or
that grows past :data:`MAX_LINE` bytes, raises :class:`WireError` naming what was wrong; what the object holds is
checked by :mod:`graphpar.communication.scheduler_messages`.
"""

from __future__ import annotations

import json
import socket
import ssl
import time
from typing import Any

MAX_LINE = 1 << 16  # a register line is ~200 bytes; anything this long is not graphpar talking
_SEND_SECONDS = 5.0


class WireError(ValueError):
    """A line on the wire that is no JSON object (the reason says how)."""


class Channel:
    """A socket carrying one JSON object per line."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self._buffer = b""
        self.closed = False

    def send(self, message: dict[str, Any]) -> bool:
        """Write one message (waiting at most 5 s on a non-blocking socket); False when the peer is gone."""
        data = (json.dumps(message) + "\n").encode()
        blocking = self.sock.gettimeout() != 0.0
        try:
            if not blocking:
                self.sock.settimeout(_SEND_SECONDS)
            self.sock.sendall(data)
            return True
        except OSError:  # ssl.SSLError and socket.timeout included
            return False
        finally:
            if not blocking and not self.closed:
                try:
                    self.sock.setblocking(False)
                except OSError:
                    pass

    def starts_with(self, prefix: bytes) -> bool:
        """Whether the unread bytes begin with ``prefix`` (a TLS record on a plain channel, say)."""
        return self._buffer.startswith(prefix)

    def pending(self) -> dict[str, Any] | None:
        """A complete message already buffered, if any. Raises WireError for a line that is no JSON object."""
        if b"\n" not in self._buffer:
            if len(self._buffer) > MAX_LINE:
                self._buffer = b""
                raise WireError(f"a line longer than {MAX_LINE} bytes")
            return None
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            message = json.loads(line.decode())
        except (UnicodeDecodeError, ValueError):
            shown = line[:60].decode(errors="replace")
            raise WireError(f"a line that is not JSON: {shown!r}{'...' if len(line) > 60 else ''}") from None
        if not isinstance(message, dict):
            raise WireError(f"a JSON {type(message).__name__} where an object {{\"op\": ...}} was expected")
        return message

    def recv(self, timeout: float | None) -> dict[str, Any] | None:
        """The next message, blocking; ``None`` when the peer closed the connection. Raises ``TimeoutError``,
        WireError, and ``ssl.SSLError`` when the peer's TLS layer refused us (an alert)."""
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
            except ssl.SSLError:
                self.closed = True
                raise
            except OSError:
                chunk = b""
            if not chunk:
                self.closed = True
                return None
            self._buffer += chunk

    def feed(self) -> bool:
        """Read what is available on a non-blocking socket (after a selector said so); False on end of stream or
        a broken connection. An SSL socket is drained of the records OpenSSL has already decrypted, which a
        selector cannot see."""
        while True:
            try:
                chunk = self.sock.recv(65536)
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
                return True
            except OSError:
                chunk = b""
            if not chunk:
                self.closed = True
                return False
            self._buffer += chunk
            if len(self._buffer) > MAX_LINE and b"\n" not in self._buffer:
                return True  # pending() refuses it
            if not isinstance(self.sock, ssl.SSLSocket):
                return True
            # an SSL socket: read on until OpenSSL wants more from the network

    def close(self) -> None:
        self.closed = True
        try:
            self.sock.close()
        except OSError:
            pass
