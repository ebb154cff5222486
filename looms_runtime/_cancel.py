"""The token that asks a running attempt to stop, shared by workers, effects and records."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable


class CancelToken:
    """Asks a running attempt to stop: SIGTERM at once, SIGKILL when the grace runs out.

    Safe to call from any thread, any number of times; the shortest grace asked wins.
    A command's supervisor waits on `fileno()`, an HTTP request is cancelled by a
    callback, and Python code polls `cancelled` (or waits with `wait`).
    """

    def __init__(self) -> None:
        self.detachable = False
        """Set when the attempt runs outside this process and outlives it (a supervised
        command): a closing runtime does not wait for it."""
        self._lock = threading.Lock()
        self._grace_s: float | None = None
        self._pipe: tuple[int, int] | None = None
        self._closed = False
        self._event = threading.Event()
        self._callbacks: list[Callable[[], None]] = []

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    @property
    def grace_s(self) -> float:
        with self._lock:
            return self._grace_s if self._grace_s is not None else 0.0

    def cancel(self, grace_s: float) -> None:
        with self._lock:
            grace = max(0.0, grace_s)
            first = self._grace_s is None
            self._grace_s = grace if self._grace_s is None else min(self._grace_s, grace)
            if self._pipe is not None and not self._closed:
                # A full pipe already holds a wake-up; one is enough.
                with contextlib.suppress(BlockingIOError):
                    os.write(self._pipe[1], b"x")
            callbacks, self._callbacks = (self._callbacks, []) if first else ([], [])
            self._event.set()
        for callback in callbacks:
            callback()

    def wait(self, timeout_s: float | None) -> bool:
        """Wait up to `timeout_s` for a cancel request; True when one came."""
        return self._event.wait(timeout_s)

    def on_cancel(self, callback: Callable[[], None]) -> None:
        """Call `callback` once when a cancel is requested (at once if it already was)."""
        with self._lock:
            if self._grace_s is None:
                self._callbacks.append(callback)
                return
        callback()

    def fileno(self) -> int:
        """A descriptor that becomes readable when a cancel is requested."""
        with self._lock:
            if self._pipe is None:
                read_fd, write_fd = os.pipe()
                os.set_blocking(read_fd, False)
                os.set_blocking(write_fd, False)
                self._pipe = (read_fd, write_fd)
                if self._grace_s is not None:
                    os.write(write_fd, b"x")
            return self._pipe[0]

    def drain(self) -> None:
        with self._lock:
            if self._pipe is not None and not self._closed:
                with contextlib.suppress(BlockingIOError):
                    while os.read(self._pipe[0], 64):
                        pass

    def close(self) -> None:
        with self._lock:
            if self._pipe is not None and not self._closed:
                os.close(self._pipe[0])
                os.close(self._pipe[1])
            self._closed = True
            self._callbacks = []
