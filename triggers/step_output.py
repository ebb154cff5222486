"""Step output, read from a run's event log: each attempt's outcome and its output tails.

The runtime records every attempt's outcome as an event (`effect_succeeded`,
`effect_failed`, ...); a command step's carries the bounded tails of its stdout and
stderr, its exit code and duration. An attempt dispatched without an outcome yet
is still running (or was in flight at a crash).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from triggers.clock import iso
from triggers.errors import InputError

_OUTCOMES = {
    "effect_succeeded": "succeeded",
    "effect_failed": "failed",
    "effect_ambiguous": "ambiguous",
    "effect_cancelled": "cancelled",
    "effect_outcome_late": "late",
}
TAIL_LINES = 10
"""Lines of stderr `runs show` prints for a failed step."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AttemptOutput:
    """One attempt of one step, as its events recorded it."""

    effect_id: str
    attempt: int
    outcome: str
    """succeeded, failed, ambiguous, cancelled, late, or running (no outcome yet)."""
    at: datetime
    """When it ended (when its supervisor saw it end, which may be well before a
    restarted daemon recorded it); a running attempt: when it was dispatched."""
    recorded_at: datetime
    """When its outcome (or its dispatch) was recorded."""
    error: str | None
    output: Mapping[str, Any]
    """What the step recorded: `stdout`, `stderr`, `exit_code`, ... (empty if none)."""

    @property
    def stdout(self) -> str:
        return str(self.output.get("stdout") or "")

    @property
    def stderr(self) -> str:
        return str(self.output.get("stderr") or "")

    def to_json(self) -> dict[str, Any]:
        output = self.output
        return {
            "effect_id": self.effect_id,
            "attempt": self.attempt,
            "outcome": self.outcome,
            "at": iso(self.at),
            "recorded_at": iso(self.recorded_at),
            "error": self.error,
            "exit_code": output.get("exit_code"),
            "signal": output.get("signal"),
            "duration_ms": output.get("duration_ms"),
            "timed_out": output.get("timed_out"),
            "stdout": self.stdout,
            "stderr": self.stderr,
            "stdout_truncated_bytes": int(output.get("stdout_truncated_bytes") or 0),
            "stderr_truncated_bytes": int(output.get("stderr_truncated_bytes") or 0),
        }


def attempt_outputs(events: Iterable[Any]) -> list[AttemptOutput]:
    """Every attempt in the order it was dispatched, with its outcome when recorded."""
    found: dict[tuple[str, int], AttemptOutput] = {}
    for event in events:
        payload = event.payload
        key = (str(payload.get("effect_id", "")), int(payload.get("attempt") or 0))
        if event.type == "effect_dispatched":
            found.setdefault(
                key,
                AttemptOutput(
                    effect_id=key[0],
                    attempt=key[1],
                    outcome="running",
                    at=event.created_at,
                    recorded_at=event.created_at,
                    error=None,
                    output={},
                ),
            )
        elif event.type in _OUTCOMES:
            output = payload.get("output")
            output = output if isinstance(output, Mapping) else {}
            found[key] = AttemptOutput(
                effect_id=key[0],
                attempt=key[1],
                outcome=_OUTCOMES[event.type],
                at=_ended_at(output, event.created_at),
                recorded_at=event.created_at,
                error=payload.get("error"),
                output=output,
            )
    return list(found.values())


def _ended_at(output: Mapping[str, Any], recorded_at: datetime) -> datetime:
    """When the attempt ended, by its supervisor's clock (`ended_at_ms`), or when it was
    recorded; never later than that (the two clocks may differ)."""
    ended_ms = output.get("ended_at_ms")
    if not isinstance(ended_ms, int) or isinstance(ended_ms, bool):
        return recorded_at
    try:
        ended = datetime.fromtimestamp(ended_ms / 1000, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return recorded_at
    return min(ended, recorded_at)


@dataclass(frozen=True, slots=True, kw_only=True)
class StepState:
    """One step (a branch, in a flow whose steps name their needs) as its attempts left it."""

    step: str
    state: str
    """The last attempt's outcome: succeeded, failed, ambiguous, cancelled, late, running;
    for a `sleep` or `wait_signal` step: sleeping, waiting, slept, signalled, timed_out."""
    attempts: int
    """Attempts dispatched (0 for a sleep or a wait: nothing is dispatched)."""
    started_at: datetime
    """When its first attempt was dispatched (a wait: when it began)."""
    ended_at: datetime | None
    """When its last attempt's outcome was recorded (None while it runs or waits)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "state": self.state,
            "attempts": self.attempts,
            "started_at": iso(self.started_at),
            "ended_at": iso(self.ended_at) if self.ended_at else None,
        }


def step_states(attempts: Iterable[AttemptOutput], events: Iterable[Any]) -> list[StepState]:
    """Every step that was dispatched, in the order its first attempt was, with its state:
    branches that ran at once show side by side, each with its own outcome."""
    started: dict[str, datetime] = {}
    for event in events:
        if event.type == "effect_dispatched":
            started.setdefault(str(event.payload.get("effect_id", "")), event.created_at)
    found: dict[str, StepState] = {}
    for attempt in attempts:  # in dispatch order: a step's last attempt comes last
        found[attempt.effect_id] = StepState(
            step=attempt.effect_id,
            state=attempt.outcome,
            attempts=attempt.attempt,
            started_at=started.get(attempt.effect_id, attempt.at),
            ended_at=None if attempt.outcome == "running" else attempt.at,
        )
    found.update(_wait_states(events))
    return sorted(found.values(), key=lambda state: state.started_at)


_WAIT_ENDS = {"signal": "signalled", "timeout": "timed_out", "timer": "slept"}


def _wait_states(events: Iterable[Any]) -> dict[str, StepState]:
    """The sleeps and signal waits of a run, open or finished, by their wait id."""
    found: dict[str, StepState] = {}
    for event in events:
        wait_id = str(event.payload.get("wait_id", ""))
        if event.type == "wait_started":
            kind = event.payload.get("kind")
            found[wait_id] = StepState(
                step=wait_id,
                state="waiting" if kind == "signal" else "sleeping",
                attempts=0,
                started_at=event.created_at,
                ended_at=None,
            )
        elif event.type == "wait_finished" and wait_id in found:
            began = found[wait_id]
            reason = str(event.payload.get("reason"))
            found[wait_id] = StepState(
                step=wait_id,
                state=_WAIT_ENDS.get(reason, reason),
                attempts=0,
                started_at=began.started_at,
                ended_at=event.created_at,
            )
    return found


def step_attempts(
    attempts: Iterable[AttemptOutput], step: str, *, run_id: str
) -> list[AttemptOutput]:
    """The attempts of one step (by its effect id), as `runs logs RUN STEP` shows them.

    Raises:
        InputError: the run has no such step; the message names those it has.
    """
    every = list(attempts)
    found = [attempt for attempt in every if attempt.effect_id == step]
    if not found:
        known = sorted({attempt.effect_id for attempt in every})
        raise InputError(
            f"run {run_id} has no step {step!r}"
            + (f"; its steps: {', '.join(known)}" if known else " (no step has run)"),
            run_id=run_id,
            step=step,
        )
    return found


def tail(text: str, lines: int = TAIL_LINES) -> list[str]:
    """The last `lines` non-empty lines of `text`."""
    return [line for line in text.splitlines() if line.strip()][-lines:]
