"""The messages between a runtime and its worker processes: pickled tuples, length-framed.

Both ends are the same code on the same interpreter (a worker is started by its
runtime, from the same `sys.executable` and `sys.path`), over a socket pair nobody
else holds: pickle carries the runtime's own records (`EffectContext`, the Python
flow's asks and replies) as they are.

A message is `(kind, task, *fields)`: see `workers.py` (the runtime's side) and
`_engine/worker_main.py` (the worker's).
"""

from __future__ import annotations

import contextlib
import pickle
import socket
import struct
import threading
from typing import Any

_LENGTH = struct.Struct("!I")


class WireClosed(Exception):  # noqa: N818 - the other end is gone: a condition, not a bug
    """The other end closed the connection (or died)."""


class Wire:
    """One end of the socket pair; `send` is safe from any thread, `receive` from one."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._send_lock = threading.Lock()

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, *message: Any) -> None:
        """Raises: WireClosed: the other end is gone."""
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        try:
            with self._send_lock:
                self.sock.sendall(_LENGTH.pack(len(data)) + data)
        except OSError as exc:
            raise WireClosed(str(exc)) from exc

    def receive(self) -> tuple[Any, ...]:
        """The next message (blocking).

        Raises:
            WireClosed: the other end closed the connection.
        """
        header = self._exactly(_LENGTH.size)
        (length,) = _LENGTH.unpack(header)
        found: tuple[Any, ...] = pickle.loads(self._exactly(length))  # noqa: S301 - our own process pair
        return found

    def _exactly(self, size: int) -> bytes:
        chunks: list[bytes] = []
        left = size
        while left:
            try:
                chunk = self.sock.recv(min(left, 1 << 20))
            except OSError as exc:
                raise WireClosed(str(exc)) from exc
            if not chunk:
                raise WireClosed("connection closed")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        # A shutdown wakes a thread blocked reading this socket; a close alone may not.
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
