"""A run's state as a pure fold of its events, and the snapshot form of that state.

`apply` reads nothing but the event: no clock, no definition, no database. Every
decision that needs those (a retry's time, whether a step is the last) is made by
the planner and recorded in an event's payload, so folding a log today gives the
state it gave when it was written.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from looms_runtime._canonical import digest
from looms_runtime._events import KNOWN_VERSIONS, EventType, FoldEvent, RecordedEvent
from looms_runtime.errors import (
    CorruptHistoryError,
    DuplicateEffectDispatchError,
    UnknownEventTypeError,
    UnknownEventVersionError,
)

FOLD_VERSION = "1"
"""Bumped whenever the state's shape or a rule of `apply` changes; older snapshots are ignored."""

TERMINAL = frozenset({"completed", "failed", "cancelled"})
STUCK = frozenset({"ambiguous", "timed_out"})


@dataclass(frozen=True, slots=True, kw_only=True)
class EffectState:
    """An outstanding effect: dispatched, waiting to retry, stuck or finally failed."""

    effect_id: str
    step_index: int
    kind: str
    idempotent: bool
    status: str
    attempt: int
    failures: int = 0
    ambiguities: int = 0
    dispatched_at: int | None = None
    deadline_at: int | None = None
    next_attempt_at: int | None = None
    last_error: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class WaitState:
    """A durable wait: a sleep until `until`, or a signal (with an optional deadline)."""

    wait_id: str
    step_index: int
    kind: str
    until: int | None
    signal: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RunState:
    """Everything the planner needs to decide a run's next move."""

    seq: int = 0
    status: str = "new"
    flow: str = ""
    version: str = ""
    completed_steps: int = 0
    effects: Mapping[str, EffectState] = field(default_factory=dict)
    waits: Mapping[str, WaitState] = field(default_factory=dict)
    cancel_requested: bool = False
    cancel_reason: str | None = None
    park_reason: str | None = None
    error: str | None = None
    result: Any = None

    @property
    def settled(self) -> bool:
        return self.status in TERMINAL


def fold(events: Iterable[FoldEvent], initial: RunState | None = None) -> RunState:
    """Apply `events` in order to `initial` (an empty run by default)."""
    state = initial if initial is not None else RunState()
    for event in events:
        state = apply(state, event)
    return state


def fold_recorded(events: Iterable[RecordedEvent], initial: RunState | None = None) -> RunState:
    """Fold events read from the store, checking that their sequence has no gap.

    Raises:
        CorruptHistoryError: a sequence number is missing or repeated.
    """
    state = initial if initial is not None else RunState()
    for event in events:
        if event.seq != state.seq + 1:
            raise CorruptHistoryError(
                "event sequence has a gap", expected_seq=state.seq + 1, seq=event.seq
            )
        state = apply(state, event)
    return state


def apply(state: RunState, event: FoldEvent) -> RunState:
    """The state after one more event.

    Raises:
        UnknownEventTypeError: the type is not one this runtime knows.
        UnknownEventVersionError: the event was written by a newer runtime.
        CorruptHistoryError: the event cannot follow this state.
        DuplicateEffectDispatchError: the event dispatches an attempt again.
    """
    known = KNOWN_VERSIONS.get(event.type)
    if known is None:
        raise UnknownEventTypeError(f"unknown event type {event.type!r}", seq=state.seq + 1)
    if event.version > known:
        raise UnknownEventVersionError(
            f"{event.type} v{event.version} is newer than this runtime reads (v{known})",
            seq=state.seq + 1,
        )
    if event.version < 1:
        raise CorruptHistoryError("event version must be >= 1", seq=state.seq + 1)
    kind = EventType(event.type)
    if state.status == "new" and kind is not EventType.RUN_STARTED:
        raise CorruptHistoryError(f"{kind} before run_started", seq=state.seq + 1)
    if state.settled:
        raise CorruptHistoryError(f"{kind} after the run settled", seq=state.seq + 1)
    try:
        next_state = _RULES[kind](state, event.payload)
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptHistoryError(f"malformed {kind} payload: {exc!r}", seq=state.seq + 1) from exc
    return dataclasses.replace(next_state, seq=state.seq + 1)


def _run_started(state: RunState, p: Mapping[str, Any]) -> RunState:
    if state.status != "new":
        raise CorruptHistoryError("run_started twice", seq=state.seq + 1)
    return dataclasses.replace(
        state, status="active", flow=str(p["flow"]), version=str(p["version"])
    )


def _dispatched(state: RunState, p: Mapping[str, Any]) -> RunState:
    effect_id = str(p["effect_id"])
    attempt = int(p["attempt"])
    previous = state.effects.get(effect_id)
    if previous is not None and (previous.status == "dispatched" or attempt <= previous.attempt):
        raise DuplicateEffectDispatchError(
            f"effect {effect_id!r} attempt {attempt} dispatched again",
            effect_id=effect_id,
            attempt=attempt,
            seq=state.seq + 1,
        )
    effect = EffectState(
        effect_id=effect_id,
        step_index=int(p["step_index"]),
        kind=str(p["kind"]),
        idempotent=bool(p["idempotent"]),
        status="dispatched",
        attempt=attempt,
        failures=previous.failures if previous else 0,
        ambiguities=previous.ambiguities if previous else 0,
        dispatched_at=_opt_int(p.get("dispatched_at")),
        deadline_at=_opt_int(p.get("deadline_at")),
        last_error=previous.last_error if previous else None,
    )
    return dataclasses.replace(state, effects={**state.effects, effect_id: effect})


def _current(state: RunState, p: Mapping[str, Any]) -> EffectState | None:
    """The effect an outcome is for, or None for a stale outcome of an older attempt."""
    effect = state.effects.get(str(p["effect_id"]))
    if effect is None or effect.attempt != int(p["attempt"]) or effect.status != "dispatched":
        return None
    return effect


def _succeeded(state: RunState, p: Mapping[str, Any]) -> RunState:
    effect = _current(state, p)
    if effect is None:
        return state
    effects = {k: v for k, v in state.effects.items() if k != effect.effect_id}
    return dataclasses.replace(
        state,
        effects=effects,
        completed_steps=max(state.completed_steps, effect.step_index + 1),
        result=p.get("output"),
    )


def _failed(state: RunState, p: Mapping[str, Any]) -> RunState:
    effect = _current(state, p)
    if effect is None:
        return state
    next_at = _opt_int(p.get("next_attempt_at"))
    failed = dataclasses.replace(
        effect,
        status="retry_wait" if next_at is not None else "failed",
        failures=effect.failures + 1,
        next_attempt_at=next_at,
        last_error=_opt_str(p.get("error")),
    )
    return dataclasses.replace(state, effects={**state.effects, effect.effect_id: failed})


def _ambiguous(state: RunState, p: Mapping[str, Any]) -> RunState:
    effect = _current(state, p)
    if effect is None:
        return state
    stuck = dataclasses.replace(
        effect,
        status="timed_out" if p.get("timed_out") else "ambiguous",
        ambiguities=effect.ambiguities + 1,
        last_error=_opt_str(p.get("reason")),
    )
    return dataclasses.replace(state, effects={**state.effects, effect.effect_id: stuck})


def _cancelled_effect(state: RunState, p: Mapping[str, Any]) -> RunState:
    effect = _current(state, p)
    if effect is None:
        return state
    done = dataclasses.replace(effect, status="cancelled", last_error=_opt_str(p.get("error")))
    return dataclasses.replace(state, effects={**state.effects, effect.effect_id: done})


def _retry_requested(state: RunState, p: Mapping[str, Any]) -> RunState:
    effect_id = str(p["effect_id"])
    effect = state.effects.get(effect_id)
    if effect is None or effect.status not in STUCK | {"failed"}:
        raise CorruptHistoryError(f"retry of effect {effect_id!r} that is not stuck")
    waiting = dataclasses.replace(effect, status="retry_wait", next_attempt_at=int(p["at"]))
    status = "active" if state.status == "parked" else state.status
    return dataclasses.replace(
        state, status=status, park_reason=None, effects={**state.effects, effect_id: waiting}
    )


def _wait_started(state: RunState, p: Mapping[str, Any]) -> RunState:
    wait = WaitState(
        wait_id=str(p["wait_id"]),
        step_index=int(p["step_index"]),
        kind=str(p["kind"]),
        until=_opt_int(p.get("until")),
        signal=_opt_str(p.get("signal")),
    )
    return dataclasses.replace(state, waits={**state.waits, wait.wait_id: wait})


def _wait_finished(state: RunState, p: Mapping[str, Any]) -> RunState:
    wait = state.waits.get(str(p["wait_id"]))
    if wait is None:
        raise CorruptHistoryError(f"wait {p['wait_id']!r} finished but never started")
    waits = {k: v for k, v in state.waits.items() if k != wait.wait_id}
    reason = str(p["reason"])
    if reason == "timeout":
        return dataclasses.replace(state, waits=waits)
    result = p.get("payload") if reason == "signal" else state.result
    completed = max(state.completed_steps, wait.step_index + 1)
    return dataclasses.replace(state, waits=waits, completed_steps=completed, result=result)


def _cancel_requested(state: RunState, p: Mapping[str, Any]) -> RunState:
    return dataclasses.replace(
        state, cancel_requested=True, cancel_reason=_opt_str(p.get("reason"))
    )


def _parked(state: RunState, p: Mapping[str, Any]) -> RunState:
    return dataclasses.replace(state, status="parked", park_reason=str(p["reason"]))


def _completed(state: RunState, p: Mapping[str, Any]) -> RunState:
    return dataclasses.replace(state, status="completed", result=p.get("result"))


def _run_failed(state: RunState, p: Mapping[str, Any]) -> RunState:
    return dataclasses.replace(state, status="failed", error=str(p["error"]))


def _run_cancelled(state: RunState, p: Mapping[str, Any]) -> RunState:
    reason = _opt_str(p.get("reason"))
    return dataclasses.replace(
        state, status="cancelled", error=f"cancelled: {reason}" if reason else "cancelled"
    )


_RULES = {
    EventType.RUN_STARTED: _run_started,
    EventType.EFFECT_DISPATCHED: _dispatched,
    EventType.EFFECT_SUCCEEDED: _succeeded,
    EventType.EFFECT_FAILED: _failed,
    EventType.EFFECT_AMBIGUOUS: _ambiguous,
    EventType.EFFECT_CANCELLED: _cancelled_effect,
    EventType.EFFECT_RETRY_REQUESTED: _retry_requested,
    EventType.WAIT_STARTED: _wait_started,
    EventType.WAIT_FINISHED: _wait_finished,
    EventType.CANCEL_REQUESTED: _cancel_requested,
    EventType.RUN_PARKED: _parked,
    EventType.RUN_COMPLETED: _completed,
    EventType.RUN_FAILED: _run_failed,
    EventType.RUN_CANCELLED: _run_cancelled,
}


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


def state_to_json(state: RunState) -> dict[str, Any]:
    """The snapshot form of a state (plain JSON)."""
    return dataclasses.asdict(state)


def state_from_json(data: Mapping[str, Any]) -> RunState:
    """The state a snapshot holds.

    Raises:
        CorruptHistoryError: the snapshot does not have the state's shape.
    """
    try:
        effects = {k: EffectState(**v) for k, v in data["effects"].items()}
        waits = {k: WaitState(**v) for k, v in data["waits"].items()}
        fields = {k: v for k, v in data.items() if k not in {"effects", "waits"}}
        return RunState(**fields, effects=effects, waits=waits)
    except (KeyError, TypeError, AttributeError) as exc:
        raise CorruptHistoryError(f"snapshot does not match fold v{FOLD_VERSION}: {exc}") from exc


def state_hash(state: RunState) -> str:
    """A digest of the state, stored with its snapshot to detect a corrupt or stale one."""
    return digest(state_to_json(state))
