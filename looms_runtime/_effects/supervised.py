"""One command under the host's supervisor: its pipes, its clocks and its outcome.

Loaded by `supervisor.py` by path (never through the package: the supervisor imports
only the standard library), and driven by its one event loop: the supervisor owns the
selector and calls `on_ready` for this command's descriptors, `check_clocks` on every
turn, and `cancel` when a daemon asks. What the attempt directory holds is listed in
`attempts.py`.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

CHUNK = 65536
EXIT_DRAIN_S = 1.0
"""How long output is still read after the command exits: a background child that kept
the pipes open must not hold the attempt open."""
ERROR_TAIL_LINES = 3
ERROR_TAIL_CHARS = 300
"""How much of stderr a failure's message carries (all of it is in the outcome's output)."""


def now_ms() -> int:
    """Wall-clock epoch milliseconds (recorded for people, never used for decisions)."""
    return time.time_ns() // 1_000_000


def process_start(pid: int) -> int | None:
    """When process `pid` started (clock ticks after boot: /proc/PID/stat's field 22);
    None when no such process lives (an exited one not yet reaped counts as gone).

    A pid alone names a process only while it lives: once it is gone, another one may
    get the same pid, but not the same start time.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces or ")".
    fields = stat[stat.rfind(b")") + 2 :].split()
    try:
        state, start = fields[0], int(fields[19])
    except (IndexError, ValueError):
        return None
    return None if state in (b"Z", b"X") else start


def create(path: Path) -> int:
    """Create `path`, which must not exist; its descriptor, open for writing."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class Supervised:
    """One command from its start to its recorded outcome (exit, timeout or cancel).

    `on_finished` gets the outcome once `result.json` is durable; the attempt's lock
    (`lock_fd`, which the command inherited) is closed right after, so a free lock
    then proves that neither the command nor its supervision still runs.
    """

    def __init__(
        self,
        directory: Path,
        lock_fd: int,
        spec: dict[str, Any],
        *,
        selector: selectors.BaseSelector,
        output: Any,
        supervisor_pid: int,
        on_finished: Callable[[Supervised, dict[str, Any]], None],
    ) -> None:
        self.directory = directory
        self.lock_fd = lock_fd
        self.selector = selector
        self.spec = spec
        limit = int(self.spec["output_limit_bytes"])
        self.stdout = output.TailBuffer(limit)
        self.stderr = output.TailBuffer(limit)
        # On disk as it comes: what a command printed outlives a supervisor killed
        # before it recorded the outcome.
        self.stdout_file = output.StreamFile(directory, "stdout", limit)
        self.stderr_file = output.StreamFile(directory, "stderr", limit)
        self.returncode: int | None = None
        self.timed_out = False
        self.cancelled = False
        self.kill_at: float | None = None
        self.drain_until: float | None = None
        self.started = time.monotonic()
        self.finished = False
        self._supervisor_pid = supervisor_pid
        self._on_finished = on_finished
        self._stdin = self.spec.get("input", "").encode()
        self._streams: set[int] = set()
        self.proc: subprocess.Popen[bytes] | None = None
        self._pidfd: int | None = None

    # -- life ---------------------------------------------------------------------

    def start(self) -> None:
        """Start the command (or record why it could not start)."""
        # The marker goes first: without it, no command was ever started. It then
        # holds who runs it (written after the start: a crash between leaves it empty).
        marker = create(self.directory / "spawned")
        try:
            try:
                self.proc = subprocess.Popen(  # noqa: S603 - argv from the flow definition, no shell
                    self.spec["argv"],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    cwd=self.spec.get("cwd"),
                    env=self.spec["env"],
                    start_new_session=True,
                    pass_fds=(self.lock_fd,),
                )
            except OSError as exc:
                argv0 = self.spec["argv"][0]
                self._finish({"exit_code": None}, ok=False, error=f"cannot start {argv0!r}: {exc}")
                return
            status = {
                "supervisor_pid": self._supervisor_pid,
                "supervisor_start": process_start(self._supervisor_pid),
                "output_limit_bytes": int(self.spec["output_limit_bytes"]),
                "pid": self.proc.pid,
                "started_at": now_ms(),
            }
            write_all(marker, json.dumps(status).encode())
        finally:
            os.close(marker)
        self._watch()

    def _watch(self) -> None:
        proc = self.proc
        assert proc is not None  # noqa: S101 - started by start()
        for stream, sink in (
            (proc.stdout, (self.stdout, self.stdout_file)),
            (proc.stderr, (self.stderr, self.stderr_file)),
        ):
            if stream is not None:
                os.set_blocking(stream.fileno(), False)
                self.selector.register(stream, selectors.EVENT_READ, (self, sink))
                self._streams.add(stream.fileno())
        stdin = proc.stdin
        if stdin is not None:
            if self._stdin:
                os.set_blocking(stdin.fileno(), False)
                self.selector.register(stdin, selectors.EVENT_WRITE, (self, "stdin"))
            else:
                stdin.close()
        self._pidfd = os.pidfd_open(proc.pid)
        self.selector.register(self._pidfd, selectors.EVENT_READ, (self, "exit"))

    def on_ready(self, key: selectors.SelectorKey, what: Any) -> None:
        """One of this command's descriptors is ready (the supervisor's loop calls it)."""
        if what == "stdin":
            self._write_stdin(key.fileobj)
        elif what == "exit":
            self._on_exit()
        else:
            try:
                chunk = os.read(key.fd, CHUNK)
            except BlockingIOError:
                return
            if chunk:
                for sink in what:
                    sink.feed(chunk)
            else:
                self._close_stream(key)
        self._maybe_done()

    def _close_stream(self, key: selectors.SelectorKey) -> None:
        self.selector.unregister(key.fileobj)
        self._streams.discard(key.fd)
        with contextlib.suppress(OSError):
            key.fileobj.close()  # type: ignore[union-attr] # a pipe of Popen's

    def _write_stdin(self, stream: Any) -> None:
        try:
            written = os.write(stream.fileno(), self._stdin[:CHUNK])
        except BlockingIOError:
            return
        except BrokenPipeError:
            written = len(self._stdin)  # the command does not read its input
        self._stdin = self._stdin[written:]
        if not self._stdin:
            self.selector.unregister(stream)
            with contextlib.suppress(BrokenPipeError):
                stream.close()

    def wait_s(self, now: float) -> float | None:
        """How long the loop may sleep before this command's next clock is due."""
        marks = [self.drain_until, self.kill_at]
        timeout_s = self.spec.get("timeout_s")
        if timeout_s is not None and not self.timed_out and not self.cancelled:
            marks.append(self.started + float(timeout_s))
        waits = [max(0.0, mark - now) for mark in marks if mark is not None]
        return min(waits) if waits else None

    # -- stopping -----------------------------------------------------------------

    def cancel(self, grace_s: float) -> None:
        """SIGTERM to the command's process group, SIGKILL when the grace ends."""
        if self.cancelled or self.returncode is not None or self.finished:
            return
        self.cancelled = True
        self._terminate(grace_s)

    def check_clocks(self, now: float) -> None:
        """Enforce the timeout and the kill after a grace; end a drain that ran out."""
        if self.returncode is None:
            timeout_s = self.spec.get("timeout_s")
            if (
                timeout_s is not None
                and not self.timed_out
                and not self.cancelled
                and now >= self.started + float(timeout_s)
            ):
                self.timed_out = True
                self._terminate(float(self.spec["kill_grace_s"]))
            if self.kill_at is not None and now >= self.kill_at:
                self._signal_group(signal.SIGKILL)
                self.kill_at = None
        self._maybe_done()

    def _terminate(self, grace_s: float) -> None:
        self._signal_group(signal.SIGTERM)
        self.kill_at = time.monotonic() + grace_s

    def _signal_group(self, sig: signal.Signals) -> None:
        # The exited leader stays a zombie until `wait` reaps it, so its group id
        # cannot have been reused by then.
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, sig)

    def _on_exit(self) -> None:
        proc = self.proc
        assert proc is not None  # noqa: S101 - registered after the start
        if self.timed_out or self.cancelled:
            self._signal_group(signal.SIGKILL)  # stragglers of a stopped command go too
        self.returncode = proc.wait()
        self.kill_at = None
        self.drain_until = time.monotonic() + EXIT_DRAIN_S
        if self._pidfd is not None:
            self.selector.unregister(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None

    def _maybe_done(self) -> None:
        if self.finished or self.returncode is None:
            return
        if self._streams and time.monotonic() < (self.drain_until or 0.0):
            return
        for key in list(self.selector.get_map().values()):
            if isinstance(key.data, tuple) and key.data[0] is self:
                self._close_stream(key)
        self._report()

    # -- the outcome ----------------------------------------------------------------

    def _report(self) -> None:
        code = self.returncode
        output: dict[str, Any] = {
            "exit_code": code if code is not None and code >= 0 else None,
            "signal": signal.Signals(-code).name if code is not None and code < 0 else None,
            "stdout": self.stdout.text(),
            "stderr": self.stderr.text(),
            "stdout_truncated_bytes": self.stdout.dropped,
            "stderr_truncated_bytes": self.stderr.dropped,
            "duration_ms": round((time.monotonic() - self.started) * 1000),
            "timed_out": self.timed_out,
        }
        if self.cancelled:
            self._finish(output, ok=False, error="cancelled", cancelled=True)
        elif self.timed_out:
            timeout_s = float(self.spec["timeout_s"])
            self._finish(output, ok=False, error=self._failure(f"timed out after {timeout_s:g}s"))
        elif code == 0:
            self._finish(output, ok=True, error=None)
        elif code is not None and code >= 0:
            self._finish(output, ok=False, error=self._failure(f"exit code {code}"))
        else:
            self._finish(output, ok=False, error=self._failure(f"killed by {output['signal']}"))

    def _failure(self, message: str) -> str:
        """A failure's message with the last lines of stderr, which usually say why: the
        ledger, `history` and the logs then show it where people look."""
        lines = [line.strip() for line in self.stderr.text().splitlines() if line.strip()]
        said = " | ".join(lines[-ERROR_TAIL_LINES:])
        if not said:
            return message
        if len(said) > ERROR_TAIL_CHARS:
            said = "..." + said[-ERROR_TAIL_CHARS:]
        return f"{message}: {said}"

    def _finish(
        self, output: dict[str, Any], *, ok: bool, error: str | None, cancelled: bool = False
    ) -> None:
        result = {
            "ok": ok,
            "error": error,
            "cancelled": cancelled,
            "output": output,
            "finished_at": now_ms(),
        }
        self.finished = True
        self.stdout_file.close()
        self.stderr_file.close()
        try:
            fd = create(self.directory / "result.json")
            try:
                write_all(fd, json.dumps(result).encode())
            finally:
                os.close(fd)
        finally:
            os.close(self.lock_fd)
        self._on_finished(self, result)
