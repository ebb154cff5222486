"""Command steps: each attempt runs under the host's supervisor, which outlives the daemon.

The daemon makes the attempt's directory, takes its lock and hands the attempt (what
to run, and the locked descriptor) to the host's supervisor (`supervisor.py`,
one long-lived process per attempts root, reached and started by
`supervisor_client`), which starts the command (argv, no shell, a session of its
own so SIGTERM and SIGKILL reach its whole process group), enforces the timeout and
writes the outcome. The daemon's side only waits on its connection: for the
supervisor's `done`, for a cancel (forwarded on the same connection), or for the
runtime to close, which detaches the wait and leaves the attempt running for the
next runtime on this host to adopt (`adopt`).
"""

from __future__ import annotations

import contextlib
import os
import selectors
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from looms_runtime._cancel import CancelToken
from looms_runtime._effects import attempts
from looms_runtime._effects.context import EffectContext
from looms_runtime._effects.secrets import (
    SecretUnavailableError,
    read_secrets,
    redacted,
    secret_values,
)
from looms_runtime._effects.supervisor_client import Channel, Supervisor, SupervisorUnavailable
from looms_runtime._history.definitions import CommandStep
from looms_runtime._history.outcome import EffectResult

TIMEOUT_KILL_GRACE_S = 5.0
"""After a timeout's SIGTERM, how long the command has to exit before SIGKILL."""

MAX_INPUT_ENV_BYTES = 65536
"""Above this, `{prefix}INPUT` is left out (Linux refuses an exec with a longer
variable); the input is always on stdin."""

LOCK_POLL_S = 0.5
"""How often an attempt whose supervisor is gone is looked at until its command ends."""

HAND_OVER_TRIES = 3
"""Connections tried for one attempt: a supervisor that was exiting as it was reached
closes the connection unanswered, and the next try starts a new one."""


class Detached(Exception):  # noqa: N818 - a way out of a wait, not a failure
    """The runtime closed while the attempt ran: it goes on, for the next runtime to adopt."""


def command_env(
    step: CommandStep, ctx: EffectContext, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """`base` (the runtime's step environment; None: this process's), then the step's
    `env`, then the run's, then the runtime's own variables."""
    env = dict(os.environ if base is None else base)
    for name in step.env_inherit:
        if name in os.environ:
            env[name] = os.environ[name]
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
    supervisor: Supervisor,
    restart: bool = False,
    environment: Mapping[str, str] | None = None,
) -> EffectResult:
    """Hand one attempt to the host's supervisor and wait for its outcome.

    `restart` starts an attempt a previous owner dispatched but provably never
    started (its directory may exist, without a `spawned` marker).

    Raises:
        Detached: the runtime closed first; the attempt runs on.
    """
    ids: dict[str, Any] = {"effect_id": ctx.effect_id, "attempt": ctx.attempt}
    if token.cancelled:
        return EffectResult(**ids, ok=False, error="cancelled before it started", cancelled=True)
    try:
        values = read_secrets(step)
    except SecretUnavailableError as exc:
        return EffectResult(**ids, ok=False, error=str(exc))
    try:
        lock_fd = attempts.claim(path, restart=restart)
    except attempts.AttemptTaken:
        error = "another owner of the run started this attempt"
        return EffectResult(**ids, ok=False, error=error, ambiguous=True)
    except OSError as exc:
        return EffectResult(**ids, ok=False, error=f"cannot prepare the attempt: {exc}")
    try:
        spec = _spec(step, ctx, timeout_s, environment)
        spec["env"].update(values)
        channel = _hand_over(supervisor, path, lock_fd, spec)
    except (OSError, SupervisorUnavailable) as exc:
        # No `spawned` marker: the command never ran, and the next owner would know.
        return EffectResult(**ids, ok=False, error=f"cannot start the step's supervisor: {exc}")
    finally:
        os.close(lock_fd)  # the supervisor holds the same lock from here on
    token.detachable = True
    return _outcome(path, ids, _wait(path, channel, token, detach), values)


def _hand_over(
    supervisor: Supervisor, path: Path, lock_fd: int, spec: dict[str, Any]
) -> Channel | None:
    """Pass the attempt to the supervisor; its connection, or None when the supervisor
    took it and died at once (the command may run: its lock says until when).

    Raises:
        SupervisorUnavailable: none could take it, and no command was started.
    """
    for _ in range(HAND_OVER_TRIES):
        channel = supervisor.connect()
        assert channel is not None  # noqa: S101 - connect starts one or raises
        try:
            channel.send({"op": "run", "path": str(path), "spec": spec}, fds=(lock_fd,))
            reply = channel.receive()
        except OSError:
            reply = None
        if reply is not None and reply.get("op") == "started":
            return channel
        channel.close()
        if reply is not None:
            raise SupervisorUnavailable(str(reply.get("error") or reply))
        if (path / "spawned").exists():
            return None
    raise SupervisorUnavailable(f"the supervisor on {supervisor.root} closed every connection")


def adopt(
    path: Path,
    ids: dict[str, Any],
    token: CancelToken,
    *,
    detach: threading.Event,
    supervisor: Supervisor,
    step: CommandStep | None = None,
) -> EffectResult:
    """Wait for an attempt a previous runtime started (the host's supervisor runs it);
    `step`'s secrets, read again, are redacted from its outcome.

    Raises:
        Detached: the runtime closed first; the attempt runs on.
    """
    token.detachable = True
    channel = None
    with contextlib.suppress(OSError, SupervisorUnavailable):
        channel = supervisor.connect(start=False)
    if channel is not None:
        try:
            channel.send({"op": "watch", "path": str(path)})
            reply = channel.receive()
        except OSError:
            reply = None
        if reply is None or reply.get("op") != "watching":
            channel.close()
            channel = None
    return _outcome(path, ids, _wait(path, channel, token, detach), secret_values(step))


def _spec(
    step: CommandStep,
    ctx: EffectContext,
    timeout_s: float | None,
    environment: Mapping[str, str] | None,
) -> dict[str, Any]:
    return {
        "argv": list(step.argv),
        "env": command_env(step, ctx, environment),
        # The supervisor runs in `/`: a step without a directory runs in the daemon's.
        "cwd": step.cwd or str(Path.cwd()),
        "input": ctx.input_json,
        "timeout_s": timeout_s,
        "kill_grace_s": TIMEOUT_KILL_GRACE_S,
        "output_limit_bytes": ctx.output_limit_bytes,
    }


def _wait(path: Path, channel: Channel | None, token: CancelToken, detach: threading.Event) -> bool:
    """Wait until the attempt ends; True when its supervisor said it recorded the outcome."""
    if channel is None:
        _wait_for_lock(path, detach)
        return False
    selector = selectors.DefaultSelector()
    try:
        selector.register(channel, selectors.EVENT_READ, "supervisor")
        selector.register(token.fileno(), selectors.EVENT_READ, "cancel")
        while True:
            if detach.is_set():
                raise Detached(str(path))
            # `done` may have come in the same read as `started`: no select for it.
            if not channel.buffered:
                ready = {key.data for key, _ in selector.select(LOCK_POLL_S)}
                if "cancel" in ready:
                    selector.unregister(token.fileno())
                    with contextlib.suppress(OSError):
                        channel.send({"op": "cancel", "grace_s": token.grace_s})
                if "supervisor" not in ready:
                    continue
            reply = channel.receive()
            if reply is not None and reply.get("op") == "done":
                return True
            # The supervisor died (or lost the attempt): the command may live on.
            _wait_for_lock(path, detach)
            return False
    finally:
        selector.close()
        channel.close()


def _wait_for_lock(path: Path, detach: threading.Event) -> None:
    """The supervisor's connection is gone but its command may live on: wait while the
    lock is held, unless the supervisor is known to be gone (its outcome then never
    comes, however long its orphaned command runs)."""
    while attempts.lock_held(path) and not attempts.supervisor_gone(path):
        # Not the token's wait: once cancelled, it would return at once, every time.
        if detach.wait(LOCK_POLL_S):
            raise Detached(str(path))


def _outcome(
    path: Path, ids: dict[str, Any], exited: bool, secrets: Mapping[str, str]
) -> EffectResult:
    found = redacted(attempts.read_result(path), secrets)
    if found is None:
        why = "its supervisor" if exited else "its supervisor (or the command)"
        error = f"the step's outcome is unknown: {why} stopped without recording it"
        output = redacted(attempts.left_output(path), secrets)
        return EffectResult(**ids, ok=False, error=error, ambiguous=True, output=output)
    return result_of(found, ids)


def result_of(found: dict[str, Any], ids: dict[str, Any]) -> EffectResult:
    """The attempt's result as the supervisor recorded it (its output says when it ended)."""
    output = found.get("output")
    if isinstance(output, dict) and isinstance(found.get("finished_at"), int):
        output = {**output, "ended_at_ms": found["finished_at"]}
    return EffectResult(
        **ids,
        ok=bool(found.get("ok")),
        output=output,
        error=found.get("error"),
        cancelled=bool(found.get("cancelled")),
    )
