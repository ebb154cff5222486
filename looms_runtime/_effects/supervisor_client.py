"""A runtime's side of the host's supervisor (`supervisor.py`): reach it, start it, hold it.

One supervisor serves an attempts root for every runtime on the host. `connect`
reaches it, starting one when none answers (at most one per root: the supervisor
takes the root's lock); `Supervisor.hold` keeps a connection open while the runtime
lives, so the supervisor does not exit between two steps.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from looms_runtime._effects.supervisor import SOCKET_NAME, short_path

SUPERVISOR = Path(__file__).with_name("supervisor.py")
START_TIMEOUT_S = 10.0
"""How long a supervisor being started may take to listen."""


class SupervisorUnavailable(Exception):  # noqa: N818 - a condition the caller reports
    """No supervisor answers on this root and none could be started."""


class Channel:
    """One connection to the supervisor: JSON lines each way."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buffer = b""

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, message: dict[str, Any], fds: tuple[int, ...] = ()) -> None:
        """Raises: OSError: the supervisor is gone."""
        data = json.dumps(message).encode() + b"\n"
        sent = socket.send_fds(self.sock, [data], list(fds)) if fds else 0
        if sent < len(data):
            self.sock.sendall(data[sent:])

    @property
    def buffered(self) -> bool:
        """Whether a message was already read off the socket (a wait must not select first)."""
        return b"\n" in self._buffer

    def receive(self) -> dict[str, Any] | None:
        """The next message (blocking); None when the supervisor closed the connection."""
        while b"\n" not in self._buffer:
            try:
                chunk = self.sock.recv(65536)
            except OSError:
                return None
            if not chunk:
                return None
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        found: dict[str, Any] = json.loads(line)
        return found

    def close(self) -> None:
        self.sock.close()


class Supervisor:
    """The host supervisor of one attempts root, as this runtime reaches it."""

    def __init__(self, root: Path, *, environment: dict[str, str] | None = None) -> None:
        self._environment = environment
        """The supervisor's whole environment (None: ours); its commands get theirs
        over the socket, but a command can read its supervisor's from /proc."""
        self.root = root
        self._lock = threading.Lock()
        self._address: str | None = None
        self._hold: Channel | None = None
        self._closed = False

    def _socket_address(self) -> str:
        if self._address is None:
            self._address = short_path(self.root, SOCKET_NAME)
        return self._address

    def connect(self, *, start: bool = True) -> Channel | None:
        """A new connection; with `start`, a supervisor is started when none answers.

        Returns None when none answers and `start` is false.

        Raises:
            SupervisorUnavailable: none answers and none could be started.
        """
        found = self._try_connect()
        if found is not None:
            if self._hold is None and not self._closed:
                self._hold_once()
            return found
        if not start:
            return None
        with self._lock:
            found = self._try_connect()
            if found is None:
                self._start()
                found = self._try_connect()
            if found is None:
                raise SupervisorUnavailable(f"no supervisor answers on {self.root}")
            if not self._closed:
                # A new supervisor (or the first reached): hold it. A hold of one that
                # died holds nothing.
                if self._hold is not None:
                    self._hold.close()
                self._hold = self._open_hold()
        return found

    def _hold_once(self) -> None:
        with self._lock:
            if self._hold is None and not self._closed:
                self._hold = self._open_hold()

    def _try_connect(self) -> Channel | None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(self._socket_address())
        except OSError:
            sock.close()
            return None
        return Channel(sock)

    def _open_hold(self) -> Channel | None:
        channel = self._try_connect()
        if channel is not None:
            try:
                channel.send({"op": "hold"})
            except OSError:
                channel.close()
                return None
        return channel

    def _start(self) -> None:
        """Start a supervisor and wait until it listens (or says another one does)."""
        read_fd, write_fd = os.pipe()
        try:
            with (self.root / "supervisor.log").open("ab") as log_file:
                # The first process forks the supervisor away and exits at once.
                subprocess.run(  # noqa: S603 - our own script, by absolute path
                    [sys.executable, "-I", str(SUPERVISOR), str(self.root), str(write_fd)],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=log_file,
                    env=self._environment,
                    pass_fds=(write_fd,),
                    start_new_session=True,
                    check=True,
                    timeout=START_TIMEOUT_S,
                )
            os.close(write_fd)
            write_fd = -1
            selector = selectors.DefaultSelector()
            with selector:
                selector.register(read_fd, selectors.EVENT_READ)
                if not selector.select(START_TIMEOUT_S):
                    raise SupervisorUnavailable(f"the supervisor on {self.root} did not start")
            os.read(read_fd, 64)  # "ready", "exists", or nothing if it died
        except (OSError, subprocess.SubprocessError) as exc:
            raise SupervisorUnavailable(f"cannot start the supervisor: {exc}") from exc
        finally:
            os.close(read_fd)
            if write_fd >= 0:
                os.close(write_fd)

    def close(self) -> None:
        """Let go of the supervisor: it exits once its commands end (and nobody holds it)."""
        with self._lock:
            self._closed = True
            hold, self._hold = self._hold, None
        if hold is not None:
            with contextlib.suppress(OSError):
                hold.close()
