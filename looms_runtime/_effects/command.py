"""Command steps: a subprocess without a shell, supervised by one thread.

The supervisor multiplexes the child's stdin, stdout, stderr, its exit (a pidfd) and
the cancel token on one selector, so a cancel or a timeout acts at once and no
extra thread is spent per stream. The child runs in its own session: SIGTERM and
SIGKILL go to its whole process group, so `sh -c 'sleep 60'` stops with its shell.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
from dataclasses import dataclass, field
from typing import Any

from looms_runtime._cancel import CancelToken
from looms_runtime._clock import monotonic
from looms_runtime._effects.context import EffectContext
from looms_runtime._effects.output import TailBuffer
from looms_runtime._history.definitions import CommandStep
from looms_runtime._history.outcome import EffectResult

TIMEOUT_KILL_GRACE_S = 5.0
"""After a timeout's SIGTERM, how long the command has to exit before SIGKILL."""

EXIT_DRAIN_S = 1.0
"""How long output is still read after the command exits: a background child that kept
the pipes open must not hold the attempt open."""

_CHUNK = 65536


MAX_INPUT_ENV_BYTES = 65536
"""Above this, `{prefix}INPUT` is left out (Linux refuses an exec with a longer
variable); the input is always on stdin."""


def command_env(step: CommandStep, ctx: EffectContext) -> dict[str, str]:
    """The daemon's environment, then the step's, then the run's, then the runtime's own."""
    env = dict(os.environ)
    env.update(step.env)
    env.update(ctx.run_env)
    prefix = ctx.env_prefix
    env[f"{prefix}RUN_ID"] = ctx.run_id
    env[f"{prefix}STEP_ID"] = ctx.step_id
    env[f"{prefix}ATTEMPT"] = str(ctx.attempt)
    if len(ctx.input_json.encode()) <= MAX_INPUT_ENV_BYTES:
        env[f"{prefix}INPUT"] = ctx.input_json
    return env


def run_command(
    step: CommandStep, ctx: EffectContext, token: CancelToken, *, timeout_s: float | None
) -> EffectResult:
    """Run one attempt of a command step to its end (exit, timeout or cancel)."""
    ids: dict[str, Any] = {"effect_id": ctx.effect_id, "attempt": ctx.attempt}
    if token.cancelled:
        return EffectResult(**ids, ok=False, error="cancelled before it started", cancelled=True)
    started = monotonic()
    try:
        proc = subprocess.Popen(  # noqa: S603 - argv from the flow definition, never a shell
            list(step.argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=step.cwd,
            env=command_env(step, ctx),
            start_new_session=True,
        )
    except OSError as exc:
        error = f"cannot start {step.argv[0]!r}: {exc.strerror or exc}"
        return EffectResult(**ids, ok=False, error=error, output={"exit_code": None})
    with proc:
        run = _Supervisor(proc, token, ctx.output_limit_bytes, started, timeout_s)
        run.feed_stdin(ctx.input_json.encode())
        run.loop()
    return run.result(ids)


@dataclass
class _Supervisor:
    proc: subprocess.Popen[bytes]
    token: CancelToken
    limit: int
    started: float
    timeout_s: float | None
    stdout: TailBuffer = field(init=False)
    stderr: TailBuffer = field(init=False)
    returncode: int | None = None
    timed_out: bool = False
    cancelled: bool = False
    kill_at: float | None = None
    drain_until: float | None = None
    _stdin: bytes = b""
    _selector: selectors.BaseSelector = field(default_factory=selectors.DefaultSelector)
    _pidfd: int | None = None

    def __post_init__(self) -> None:
        self.stdout = TailBuffer(self.limit)
        self.stderr = TailBuffer(self.limit)
        for stream, sink in ((self.proc.stdout, self.stdout), (self.proc.stderr, self.stderr)):
            if stream is not None:
                os.set_blocking(stream.fileno(), False)
                self._selector.register(stream, selectors.EVENT_READ, sink)
        self._selector.register(self.token.fileno(), selectors.EVENT_READ, "cancel")
        if hasattr(os, "pidfd_open"):
            self._pidfd = os.pidfd_open(self.proc.pid)
            self._selector.register(self._pidfd, selectors.EVENT_READ, "exit")

    def feed_stdin(self, data: bytes) -> None:
        stdin = self.proc.stdin
        if stdin is None:
            return
        if not data:
            stdin.close()
            return
        self._stdin = data
        os.set_blocking(stdin.fileno(), False)
        self._selector.register(stdin, selectors.EVENT_WRITE, "stdin")

    def loop(self) -> None:
        try:
            while not self._done():
                for key, _ in self._selector.select(self._wait_s()):
                    self._on_ready(key)
                self._check_clocks()
                if self._pidfd is None and self.returncode is None:
                    self._on_exit()
        finally:
            self._close()

    def _done(self) -> bool:
        if self.returncode is None:
            return False
        streams_open = any(
            isinstance(k.data, TailBuffer) for k in self._selector.get_map().values()
        )
        return not streams_open or monotonic() >= (self.drain_until or 0.0)

    def _wait_s(self) -> float | None:
        now = monotonic()
        marks = [self.drain_until, self.kill_at]
        if self.timeout_s is not None and not self.timed_out and not self.cancelled:
            marks.append(self.started + self.timeout_s)
        waits = [max(0.0, mark - now) for mark in marks if mark is not None]
        if self._pidfd is None and self.returncode is None:
            waits.append(0.05)  # no pidfd on this platform: poll for the exit
        return min(waits) if waits else None

    def _on_ready(self, key: selectors.SelectorKey) -> None:
        if isinstance(key.data, TailBuffer):
            try:
                chunk = os.read(key.fd, _CHUNK)
            except BlockingIOError:
                return
            if chunk:
                key.data.feed(chunk)
            else:
                self._selector.unregister(key.fileobj)
        elif key.data == "stdin":
            self._write_stdin(key.fileobj)
        elif key.data == "cancel":
            self.token.drain()
            if not self.cancelled and self.returncode is None:
                self.cancelled = True
                self._terminate(self.token.grace_s)
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
            self._selector.unregister(stream)
            with contextlib.suppress(BrokenPipeError):
                stream.close()

    def _check_clocks(self) -> None:
        now = monotonic()
        if self.returncode is not None:
            return
        if (
            self.timeout_s is not None
            and not self.timed_out
            and not self.cancelled
            and now >= self.started + self.timeout_s
        ):
            self.timed_out = True
            self._terminate(TIMEOUT_KILL_GRACE_S)
        if self.kill_at is not None and now >= self.kill_at:
            self._signal_group(signal.SIGKILL)
            self.kill_at = None

    def _terminate(self, grace_s: float) -> None:
        self._signal_group(signal.SIGTERM)
        self.kill_at = monotonic() + grace_s

    def _signal_group(self, sig: signal.Signals) -> None:
        # The exited leader stays a zombie until `poll` reaps it, so its group id cannot
        # have been reused by then.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)

    def _on_exit(self) -> None:
        if self._pidfd is None and self.proc.poll() is None:
            return
        if self.timed_out or self.cancelled:
            self._signal_group(signal.SIGKILL)  # stragglers of a stopped command go too
        self.returncode = self.proc.wait()
        self.kill_at = None
        self.drain_until = monotonic() + EXIT_DRAIN_S
        self._close_pidfd()

    def _close_pidfd(self) -> None:
        if self._pidfd is not None:
            self._selector.unregister(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None

    def _close(self) -> None:
        if self.returncode is None:
            # Only a bug in the loop gets here; never leave the command running unwatched.
            self._signal_group(signal.SIGKILL)
            self.returncode = self.proc.wait()
        self._close_pidfd()
        self._selector.close()

    def result(self, ids: dict[str, Any]) -> EffectResult:
        code = self.returncode
        output: dict[str, Any] = {
            "exit_code": code if code is not None and code >= 0 else None,
            "signal": signal.Signals(-code).name if code is not None and code < 0 else None,
            "stdout": self.stdout.text(),
            "stderr": self.stderr.text(),
            "stdout_truncated_bytes": self.stdout.dropped,
            "stderr_truncated_bytes": self.stderr.dropped,
            "duration_ms": round((monotonic() - self.started) * 1000),
            "timed_out": self.timed_out,
        }
        if self.cancelled:
            return EffectResult(**ids, ok=False, output=output, error="cancelled", cancelled=True)
        if self.timed_out:
            return EffectResult(
                **ids, ok=False, output=output, error=f"timed out after {self.timeout_s:g}s"
            )
        if code == 0:
            return EffectResult(**ids, ok=True, output=output)
        error = (
            f"exit code {code}"
            if code is not None and code >= 0
            else f"killed by {output['signal']}"
        )
        return EffectResult(**ids, ok=False, output=output, error=error)
