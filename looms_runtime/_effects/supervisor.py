"""The supervisor of one command attempt: a small process that outlives its daemon.

Started as a script (`python -I supervisor.py ATTEMPT_DIR LOCK_FD`), it imports only
the standard library and the output buffers, so it costs a few milliseconds and
none of the daemon's state. It runs the command in a session of its own, feeds it
the run's input, keeps the tails of its output, enforces its timeout, forwards a
cancel, and writes the outcome to `result.json` in the attempt directory before it
exits. A daemon that stops or crashes meanwhile leaves it running; the next daemon
on this host adopts it (or reads the outcome it left) instead of calling the step
ambiguous.

The attempt directory (see `attempts.py`, which owns its layout) holds:

- `lock`: an `flock` taken by the daemon before the supervisor exists and inherited
  by the supervisor and the command, so a free lock proves that neither still runs;
- `supervisor.pid`: the supervisor's pid (it forks away from the daemon at once);
- `spec.json`: what to run (argv, env, cwd, input, timeout, output limit);
- `spawned`: created just before the command is started, so its absence proves
  that the command never ran;
- `status.json`: the supervisor's and the command's pids;
- `cancel.json`: written by a daemon asking for a cancel (then SIGTERM to us);
- `result.json`: the outcome, written atomically (and synced) at the end.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
_CHUNK = 65536
EXIT_DRAIN_S = 1.0
"""How long output is still read after the command exits: a background child that kept
the pipes open must not hold the attempt open."""
ERROR_TAIL_LINES = 3
ERROR_TAIL_CHARS = 300
"""How much of stderr a failure's message carries (all of it is in the outcome's output)."""


def _load_output() -> Any:
    # By path, not through the package: importing `looms_runtime` would load the
    # whole runtime (SQLAlchemy and all) into every supervisor.
    spec = importlib.util.spec_from_file_location("looms_effect_output", _HERE / "output.py")
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {_HERE / 'output.py'}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def now_ms() -> int:
    """Wall-clock epoch milliseconds (recorded for people, never used for decisions)."""
    return time.time_ns() // 1_000_000


def write_json(path: Path, value: object, *, sync: bool = False) -> None:
    """Write `value` to `path` atomically (a temporary file renamed over it)."""
    temporary = path.with_name(f".{path.name}.tmp")
    with temporary.open("w", encoding="utf-8") as stream:
        json.dump(value, stream, sort_keys=True)
        if sync:
            stream.flush()
            os.fsync(stream.fileno())
    temporary.replace(path)
    if sync:
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)


class Supervisor:
    """Runs one command to its end (exit, timeout or cancel) and records the outcome."""

    def __init__(self, directory: Path, lock_fd: int, output: Any) -> None:
        self.directory = directory
        self.lock_fd = lock_fd
        self.spec: dict[str, Any] = json.loads((directory / "spec.json").read_text())
        limit = int(self.spec["output_limit_bytes"])
        self.stdout = output.TailBuffer(limit)
        self.stderr = output.TailBuffer(limit)
        self.selector = selectors.DefaultSelector()
        self.returncode: int | None = None
        self.timed_out = False
        self.cancelled = False
        self.kill_at: float | None = None
        self.drain_until: float | None = None
        self.started = time.monotonic()
        self._stdin = self.spec.get("input", "").encode()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self.selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self.proc: subprocess.Popen[bytes] | None = None
        self._pidfd: int | None = None

    # -- life ---------------------------------------------------------------------

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        # The marker goes first: without it, no command was ever started.
        (self.directory / "spawned").touch(exist_ok=False)
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
            return 0
        write_json(
            self.directory / "status.json",
            {"supervisor_pid": os.getpid(), "pid": self.proc.pid, "started_at": now_ms()},
        )
        self._watch()
        self._loop()
        self._report()
        return 0

    def _watch(self) -> None:
        assert self.proc is not None  # noqa: S101 - started by run()
        for stream, sink in ((self.proc.stdout, self.stdout), (self.proc.stderr, self.stderr)):
            if stream is not None:
                os.set_blocking(stream.fileno(), False)
                self.selector.register(stream, selectors.EVENT_READ, sink)
        stdin = self.proc.stdin
        if stdin is not None:
            if self._stdin:
                os.set_blocking(stdin.fileno(), False)
                self.selector.register(stdin, selectors.EVENT_WRITE, "stdin")
            else:
                stdin.close()
        self._pidfd = os.pidfd_open(self.proc.pid)
        self.selector.register(self._pidfd, selectors.EVENT_READ, "exit")
        if (self.directory / "cancel.json").exists():
            self._cancel()  # asked before the command even started

    def _on_signal(self, _signum: int, _frame: object) -> None:
        with contextlib.suppress(BlockingIOError):
            os.write(self._wake_w, b"c")

    def _loop(self) -> None:
        while not self._done():
            for key, _ in self.selector.select(self._wait_s()):
                self._on_ready(key)
            self._check_clocks()

    def _done(self) -> bool:
        if self.returncode is None:
            return False
        streams_open = any(hasattr(key.data, "feed") for key in self.selector.get_map().values())
        return not streams_open or time.monotonic() >= (self.drain_until or 0.0)

    def _wait_s(self) -> float | None:
        now = time.monotonic()
        marks = [self.drain_until, self.kill_at]
        timeout_s = self.spec.get("timeout_s")
        if timeout_s is not None and not self.timed_out and not self.cancelled:
            marks.append(self.started + float(timeout_s))
        waits = [max(0.0, mark - now) for mark in marks if mark is not None]
        return min(waits) if waits else None

    def _on_ready(self, key: selectors.SelectorKey) -> None:
        if hasattr(key.data, "feed"):
            try:
                chunk = os.read(key.fd, _CHUNK)
            except BlockingIOError:
                return
            if chunk:
                key.data.feed(chunk)
            else:
                self.selector.unregister(key.fileobj)
        elif key.data == "stdin":
            self._write_stdin(key.fileobj)
        elif key.data == "wake":
            with contextlib.suppress(BlockingIOError):
                while os.read(self._wake_r, 64):
                    pass
            self._cancel()
        elif key.data == "exit":
            self._on_exit()

    def _write_stdin(self, stream: Any) -> None:
        try:
            written = os.write(stream.fileno(), self._stdin[:_CHUNK])
        except BlockingIOError:
            return
        except BrokenPipeError:
            written = len(self._stdin)  # the command does not read its input
        self._stdin = self._stdin[written:]
        if not self._stdin:
            self.selector.unregister(stream)
            with contextlib.suppress(BrokenPipeError):
                stream.close()

    # -- stopping -----------------------------------------------------------------

    def _cancel(self) -> None:
        if self.cancelled or self.returncode is not None:
            return
        self.cancelled = True
        grace = float(self.spec.get("cancel_grace_s", 10.0))
        with contextlib.suppress(OSError, ValueError):
            grace = float(json.loads((self.directory / "cancel.json").read_text())["grace_s"])
        self._terminate(grace)

    def _check_clocks(self) -> None:
        if self.returncode is not None:
            return
        now = time.monotonic()
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
        assert self.proc is not None  # noqa: S101 - registered after the start
        if self.timed_out or self.cancelled:
            self._signal_group(signal.SIGKILL)  # stragglers of a stopped command go too
        self.returncode = self.proc.wait()
        self.kill_at = None
        self.drain_until = time.monotonic() + EXIT_DRAIN_S
        if self._pidfd is not None:
            self.selector.unregister(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None

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
        # Synced: after a power cut the outcome must still be there, or be absent.
        write_json(self.directory / "result.json", result, sync=True)


def main(argv: list[str]) -> int:
    directory = Path(argv[1])
    lock_fd = int(argv[2])
    # Fork once more and let the first process exit at once: the supervisor is then
    # nobody's child, so the daemon never has to reap it (and cannot leave a zombie),
    # and it waits for it exactly as a later daemon that adopts it does (a pidfd).
    child = os.fork()
    if child:
        write_json(directory / "supervisor.pid", child)
        os._exit(0)
    return Supervisor(directory, lock_fd, _load_output()).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
