"""Command steps: each attempt runs under a supervisor process that outlives the daemon.

The daemon makes the attempt's directory, takes its lock, writes what to run and
starts `supervisor.py`, which starts the command (argv, no shell, a session of its
own so SIGTERM and SIGKILL reach its whole process group), enforces the timeout and
writes the outcome. The daemon's side only waits: for the supervisor to exit (a
pidfd), for a cancel (forwarded as `cancel.json` plus SIGTERM), or for the runtime to
close, which detaches the wait and leaves the attempt running for the next daemon
on this host to adopt (`adopt`).
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from looms_runtime._cancel import CancelToken
from looms_runtime._effects import attempts
from looms_runtime._effects.context import EffectContext
from looms_runtime._history.definitions import CommandStep
from looms_runtime._history.outcome import EffectResult

SUPERVISOR = Path(__file__).with_name("supervisor.py")

TIMEOUT_KILL_GRACE_S = 5.0
"""After a timeout's SIGTERM, how long the command has to exit before SIGKILL."""

MAX_INPUT_ENV_BYTES = 65536
"""Above this, `{prefix}INPUT` is left out (Linux refuses an exec with a longer
variable); the input is always on stdin."""

LOCK_POLL_S = 0.5
"""How often an attempt whose supervisor is gone is looked at until its command ends."""


class Detached(Exception):  # noqa: N818 - a way out of a wait, not a failure
    """The runtime closed while the attempt ran: it goes on, for the next runtime to adopt."""


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
    step: CommandStep,
    ctx: EffectContext,
    token: CancelToken,
    *,
    timeout_s: float | None,
    path: Path,
    detach: threading.Event,
    restart: bool = False,
) -> EffectResult:
    """Start one attempt under its supervisor and wait for its outcome.

    `restart` starts an attempt a previous owner dispatched but provably never
    started (its directory may exist, without a `spawned` marker).

    Raises:
        Detached: the runtime closed first; the attempt runs on.
    """
    ids: dict[str, Any] = {"effect_id": ctx.effect_id, "attempt": ctx.attempt}
    if token.cancelled:
        return EffectResult(**ids, ok=False, error="cancelled before it started", cancelled=True)
    try:
        lock_fd = attempts.claim(path, restart=restart)
    except attempts.AttemptTaken:
        error = "another owner of the run started this attempt"
        return EffectResult(**ids, ok=False, error=error, ambiguous=True)
    except OSError as exc:
        return EffectResult(**ids, ok=False, error=f"cannot prepare the attempt: {exc}")
    try:
        attempts.write_spec(path, _spec(step, ctx, timeout_s))
        with (path / "supervisor.log").open("wb") as log_file:
            # The first process forks the supervisor away and exits at once.
            subprocess.run(  # noqa: S603 - our own script, by absolute path
                [sys.executable, "-I", str(SUPERVISOR), str(path), str(lock_fd)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log_file,
                pass_fds=(lock_fd,),
                start_new_session=True,
                check=True,
            )
    except (OSError, subprocess.CalledProcessError) as exc:
        # No `spawned` marker: the command never ran, and the next owner would know.
        return EffectResult(**ids, ok=False, error=f"cannot start the step's supervisor: {exc}")
    finally:
        os.close(lock_fd)  # the supervisor holds the same lock from here on
    token.detachable = True
    return _outcome(path, ids, _wait(path, attempts.supervisor_pid(path), token, detach))


def adopt(
    path: Path,
    ids: dict[str, Any],
    token: CancelToken,
    *,
    supervisor_pid: int | None,
    detach: threading.Event,
) -> EffectResult:
    """Wait for an attempt a previous runtime started (its supervisor is not our child).

    Raises:
        Detached: the runtime closed first; the attempt runs on.
    """
    token.detachable = True
    pid = supervisor_pid or attempts.supervisor_pid(path)
    pid = pid if pid and _is_supervisor_of(pid, path) else None
    return _outcome(path, ids, _wait(path, pid, token, detach))


def _spec(step: CommandStep, ctx: EffectContext, timeout_s: float | None) -> dict[str, Any]:
    return {
        "argv": list(step.argv),
        "env": command_env(step, ctx),
        "cwd": step.cwd,
        "input": ctx.input_json,
        "timeout_s": timeout_s,
        "kill_grace_s": TIMEOUT_KILL_GRACE_S,
        "output_limit_bytes": ctx.output_limit_bytes,
    }


def _wait(path: Path, pid: int | None, token: CancelToken, detach: threading.Event) -> bool:
    """Wait until the attempt ends; True when its supervisor was seen to exit."""
    pidfd = None
    if pid is not None:
        with contextlib.suppress(ProcessLookupError, OSError):
            pidfd = os.pidfd_open(pid)
    if pid is None or pidfd is None:
        _wait_for_lock(path, token, detach)
        return False
    selector = selectors.DefaultSelector()
    try:
        selector.register(pidfd, selectors.EVENT_READ, "exit")
        selector.register(token.fileno(), selectors.EVENT_READ, "cancel")
        forwarded = False
        while True:
            if detach.is_set():
                raise Detached(str(path))
            for key, _ in selector.select(LOCK_POLL_S):
                if key.data == "exit":
                    return True
                if not forwarded:
                    forwarded = True
                    _forward_cancel(path, pid, token.grace_s)
    finally:
        selector.close()
        os.close(pidfd)


def _wait_for_lock(path: Path, token: CancelToken, detach: threading.Event) -> None:
    """The supervisor is gone but its command may live on: wait while the lock is held."""
    while attempts.lock_held(path):
        if detach.is_set():
            raise Detached(str(path))
        token.wait(LOCK_POLL_S)


def _forward_cancel(path: Path, pid: int, grace_s: float) -> None:
    with contextlib.suppress(OSError):
        (path / ".cancel.json.tmp").write_text(json.dumps({"grace_s": grace_s}))
        (path / ".cancel.json.tmp").replace(path / "cancel.json")
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGTERM)


def _is_supervisor_of(pid: int, path: Path) -> bool:
    """Whether `pid` is still the supervisor of this attempt (not a reused pid)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return str(path).encode() in argv and str(SUPERVISOR).encode() in argv


def _outcome(path: Path, ids: dict[str, Any], exited: bool) -> EffectResult:
    found = attempts.read_result(path)
    if found is None:
        why = "its supervisor" if exited else "its supervisor (or the command)"
        error = f"the step's outcome is unknown: {why} stopped without recording it"
        return EffectResult(**ids, ok=False, error=error, ambiguous=True)
    return result_of(found, ids)


def result_of(found: dict[str, Any], ids: dict[str, Any]) -> EffectResult:
    """The attempt's result as the supervisor recorded it."""
    return EffectResult(
        **ids,
        ok=bool(found.get("ok")),
        output=found.get("output"),
        error=found.get("error"),
        cancelled=bool(found.get("cancelled")),
    )
