"""The host's supervisor of command attempts: one long-lived process per attempts root.

Started by the first runtime that runs a command there (`python -I supervisor.py
ROOT READY_FD`), it forks away from that runtime at once (nobody's child: no runtime
reaps it, and it outlives them all) and serves every runtime on this host that
uses the same root. It imports only the standard library, and `supervised.py` and
`output.py` by path, never the package: no SQLAlchemy, none of a daemon's state.

A command attempt costs it a fork/exec and a few file writes: the command runs in a
session of its own, gets its input on stdin, has the tails of its output kept, its
timeout enforced and a cancel forwarded, and its outcome is written (synced) to
`result.json` in the attempt's directory whether or not any runtime still listens.
A runtime that stops or crashes meanwhile leaves it running; the next one on this
host asks the supervisor to tell it when the attempt ends (`watch`), or reads the
outcome it left.

The protocol: a Unix socket `ROOT/supervisor-1.sock` (only this user's processes
are served: the root is 0700 and each peer's uid is checked), one connection per
request, one JSON object per line:

- `{"op": "run", "path": P, "spec": {...}}` (argv, env, cwd, input, timeout, output
  limit) with the attempt's locked descriptor attached
  (SCM_RIGHTS): answered `{"op": "started"}` once the supervisor holds the attempt,
  then `{"op": "done"}` once `result.json` is durable (a command that could not
  start has an outcome too), or `{"op": "lost"}` if supervising it failed;
- `{"op": "watch", "path": P}`: `{"op": "watching"}`, then `{"op": "done"}` when that
  attempt ends; or `{"op": "unknown"}` when this supervisor does not run it;
- `{"op": "cancel", "grace_s": G}` on a run or watch connection: SIGTERM to the
  command's process group, SIGKILL after the grace;
- `{"op": "hold"}`: a runtime keeps one such connection open while it lives.

It exits once no command runs and no connection has been open for `LINGER_S`; a
later runtime starts another. SIGTERM makes it take no more commands and exit when
the running ones end.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import importlib.util
import json
import os
import selectors
import signal
import socket
import struct
import sys
import threading
import time
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
PROTOCOL = 1
SOCKET_NAME = f"supervisor-{PROTOCOL}.sock"
LOCK_NAME = f"supervisor-{PROTOCOL}.lock"
LINGER_S = 2.0
"""How long an idle supervisor (no command, no runtime connected) waits before it exits."""
_CHUNK = 262144
MAX_MESSAGE = 256 * 1024 * 1024
"""A request's bound (a run's input and environment travel in it)."""
_UCRED = struct.Struct("3i")
_ADDRESS_BYTES = 100
"""A socket's path is limited to 107 bytes (and 100 keeps a margin)."""


def _forbid_inspection() -> None:
    """Undumpable, as `looms_runtime.host.forbid_inspection` makes the runtime's process
    (this file loads no module of the package): the steps it starts, of its user, cannot
    read its memory, where their secrets pass."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE


def _say(message: str) -> None:
    """One line to the supervisor's log (its stderr: the root's `supervisor.log`)."""
    sys.stderr.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {message}\n")
    sys.stderr.flush()


def _load(name: str) -> Any:
    # By path, not through the package: importing `looms_runtime` would load the
    # whole runtime (SQLAlchemy and all) into the supervisor.
    spec = importlib.util.spec_from_file_location(f"looms_supervisor_{name}", _HERE / f"{name}.py")
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {_HERE / name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def short_path(directory: Path, name: str) -> str:
    """A path to `directory / name` short enough for a Unix socket's address.

    A socket's path is limited to 107 bytes; a deep root is reached through
    /proc/self/fd/N (the caller keeps the directory's descriptor open).
    """
    full = str(directory / name)
    if len(full.encode()) < _ADDRESS_BYTES:
        return full
    fd = os.open(directory, os.O_PATH | os.O_DIRECTORY)
    return f"/proc/self/fd/{fd}/{name}"


class _Client:
    """One connection: its unread bytes, the descriptors it passed, what it waits for."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""
        self.fds: list[int] = []
        self.attempt: Any = None

    def send(self, message: dict[str, Any]) -> None:
        with contextlib.suppress(OSError):
            self.sock.sendall(json.dumps(message).encode() + b"\n")


class Host:
    """The supervisor's one event loop: connections, commands and their clocks."""

    def __init__(self, root: Path, listener: socket.socket, supervised: Any, output: Any) -> None:
        self.root = root
        self.listener = listener
        self.supervised = supervised
        self.output = output
        self.selector = selectors.DefaultSelector()
        self.clients: dict[int, _Client] = {}
        self.attempts: dict[str, Any] = {}
        self.watchers: dict[str, list[_Client]] = {}
        self.draining = False
        self.idle_since: float | None = time.monotonic()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self.selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        listener.setblocking(False)
        self.selector.register(listener, selectors.EVENT_READ, "accept")

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        while not self._over():
            for key, _ in self.selector.select(self._wait_s()):
                self._dispatch(key)
            now = time.monotonic()
            for attempt in list(self.attempts.values()):
                self._guarded(attempt, lambda a=attempt, n=now: a.check_clocks(n))
        return 0

    def _over(self) -> bool:
        if self.attempts or self.clients:
            self.idle_since = None
            return False
        if self.draining:
            return True
        now = time.monotonic()
        if self.idle_since is None:
            self.idle_since = now
        return now - self.idle_since >= LINGER_S

    def _wait_s(self) -> float:
        now = time.monotonic()
        waits = [LINGER_S]
        for attempt in self.attempts.values():
            wait = attempt.wait_s(now)
            if wait is not None:
                waits.append(wait)
        return max(0.0, min(waits))

    def _on_signal(self, _signum: int, _frame: object) -> None:
        with contextlib.suppress(BlockingIOError):
            os.write(self._wake_w, b"t")

    def _dispatch(self, key: selectors.SelectorKey) -> None:
        data = key.data
        if data == "accept":
            self._accept()
        elif data == "wake":
            with contextlib.suppress(BlockingIOError):
                while os.read(self._wake_r, 64):
                    pass
            self._drain()
        elif isinstance(data, _Client):
            self._read(data)
        else:
            attempt, what = data
            self._guarded(attempt, lambda: attempt.on_ready(key, what))

    def _drain(self) -> None:
        """SIGTERM: take no more commands; the running ones end as they would."""
        self.draining = True
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(self.listener)
        self.listener.close()
        with contextlib.suppress(OSError):
            (self.root / SOCKET_NAME).unlink()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except (BlockingIOError, OSError):
                return
            pid, uid, _gid = _UCRED.unpack(
                sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
            )
            if uid != os.getuid():
                _say(f"refused a connection of uid {uid} (pid {pid})")
                sock.close()
                continue
            sock.setblocking(False)
            client = _Client(sock)
            self.clients[sock.fileno()] = client
            self.selector.register(sock, selectors.EVENT_READ, client)

    def _read(self, client: _Client) -> None:
        try:
            data, fds, _flags, _address = socket.recv_fds(client.sock, _CHUNK, 4)
        except BlockingIOError:
            return
        except OSError:
            data, fds = b"", []
        client.fds.extend(fds)
        if not data:
            self._drop(client)
            return
        client.buffer += data
        while b"\n" in client.buffer:
            line, client.buffer = client.buffer.split(b"\n", 1)
            try:
                message = json.loads(line)
            except ValueError:
                self._drop(client)
                return
            self._handle(client, message)
        if len(client.buffer) > MAX_MESSAGE:
            self._drop(client)

    def _handle(self, client: _Client, message: dict[str, Any]) -> None:
        op = message.get("op")
        if op == "run":
            self._run(client, Path(str(message["path"])), message.get("spec"))
        elif op == "watch":
            self._watch(client, str(message["path"]))
        elif op == "cancel" and client.attempt is not None:
            attempt = client.attempt
            self._guarded(attempt, lambda: attempt.cancel(float(message.get("grace_s", 10.0))))
        elif op != "hold":
            client.send({"op": "error", "error": f"unknown request {op!r}"})

    def _run(self, client: _Client, path: Path, spec: Any) -> None:
        if not client.fds or not isinstance(spec, dict) or self.draining:
            client.send({"op": "refused", "error": "no attempt lock or spec passed, or stopping"})
            self._close_fds(client)
            return
        lock_fd = client.fds.pop(0)
        self._close_fds(client)
        try:
            attempt = self.supervised.Supervised(
                path,
                lock_fd,
                spec,
                selector=self.selector,
                output=self.output,
                supervisor_pid=os.getpid(),
                on_finished=self._finished,
            )
        except (OSError, ValueError, KeyError, TypeError) as exc:
            os.close(lock_fd)
            client.send({"op": "refused", "error": f"cannot take the attempt's spec: {exc}"})
            return
        client.attempt = attempt
        self.attempts[str(path)] = attempt
        self.watchers[str(path)] = [client]
        # Taken: the caller may let go of its lock. What follows is `done` (a start that
        # failed is an outcome too) or, should supervising it fail, `lost`.
        client.send({"op": "started"})
        self._guarded(attempt, attempt.start)

    def _watch(self, client: _Client, path: str) -> None:
        attempt = self.attempts.get(path)
        if attempt is None:
            client.send({"op": "unknown"})
            return
        client.attempt = attempt
        self.watchers[path].append(client)
        client.send({"op": "watching"})

    def _finished(self, attempt: Any, _result: dict[str, Any]) -> None:
        key = str(attempt.directory)
        self.attempts.pop(key, None)
        for client in self.watchers.pop(key, []):
            client.send({"op": "done"})
            client.attempt = None

    def _guarded(self, attempt: Any, call: Any) -> None:
        """Run one command's step of work; a failure there ends that command's
        supervision alone (its lock is freed, its outcome unknown), never the others'."""
        try:
            call()
        except Exception as exc:  # noqa: BLE001 - one attempt's failure, not the supervisor's
            _say(f"supervision of {attempt.directory} failed: {exc!r}")
            key = str(attempt.directory)
            if self.attempts.pop(key, None) is not None:
                with contextlib.suppress(OSError):
                    os.close(attempt.lock_fd)
                for client in self.watchers.pop(key, []):
                    client.send({"op": "lost", "error": repr(exc)})
                    client.attempt = None

    def _drop(self, client: _Client) -> None:
        self._close_fds(client)
        self.clients.pop(client.sock.fileno(), None)
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(client.sock)
        if client.attempt is not None:
            watchers = self.watchers.get(str(client.attempt.directory), [])
            if client in watchers:
                watchers.remove(client)
        client.sock.close()

    @staticmethod
    def _close_fds(client: _Client) -> None:
        for fd in client.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        client.fds = []


def _answers(address: str) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(address)
    except OSError:
        return False
    finally:
        probe.close()
    return True


def _listen(root: Path) -> socket.socket | None:
    """Take the root's supervisor lock and listen on its socket; None when another
    supervisor serves the root."""
    lock_fd = os.open(root / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
    address = short_path(root, SOCKET_NAME)
    deadline = time.monotonic() + 10.0
    while True:
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if _answers(address):
                return None  # another one serves: the caller connects to it
            # Otherwise it is on its way out: wait for its lock.
        if time.monotonic() > deadline:
            return None
        threading.Event().wait(0.02)
    # Held for the process's life (never closed): the lock is what makes it the only one.
    with contextlib.suppress(FileNotFoundError):
        (root / SOCKET_NAME).unlink()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o077)
    try:
        listener.bind(address)
    finally:
        os.umask(old)
    listener.listen(128)
    (root / "supervisor.pid").write_text(str(os.getpid()))
    return listener


def main(argv: list[str]) -> int:
    root = Path(argv[1])
    ready_fd = int(argv[2])
    # Fork once more and let the first process exit at once: the supervisor is then
    # nobody's child, so no runtime has to reap it (or can leave a zombie).
    if os.fork():
        os._exit(0)
    os.chdir("/")
    _forbid_inspection()
    try:
        listener = _listen(root)
        os.write(ready_fd, b"ready\n" if listener is not None else b"exists\n")
    finally:
        os.close(ready_fd)
    if listener is None:
        return 0
    return Host(root, listener, _load("supervised"), _load("output")).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
