"""A run's state as a pure fold of its events.

`apply` reads nothing but the event: no clock, no definition, no database. Every
decision that needs those (a retry's time, whether a step is the last) is made by
the planner and recorded in an event's payload, so folding a log today gives the
state it gave when it was written.

A Python flow's calls land in `RunState.journal` in call order, each at the
position its event names: a replay of the flow function reads them back by
position, so a log whose positions do not follow each other is refused here. The
branches of a `parallel` call finish in any order and join the journal together
(see `parallel`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from looms_runtime._history.events import (
    INFORMATIONAL,
    KNOWN_VERSIONS,
    EventType,
    FoldEvent,
    RecordedEvent,
)
from looms_runtime._history.parallel import answered, check_branch_dispatch, opened, settle
from looms_runtime._history.payloads import opt_int, opt_marker, opt_str
from looms_runtime._history.state import (
    FOLD_VERSION,
    STUCK,
    TERMINAL,
    EffectState,
    RunState,
    WaitState,
    evolve,
    state_from_json,
    state_hash,
    state_to_json,
)
from looms_runtime.errors import (
    CorruptHistoryError,
    DuplicateEffectDispatchError,
    UnknownEventTypeError,
    UnknownEventVersionError,
)

__all__ = [
    "FOLD_VERSION",
    "STUCK",
    "TERMINAL",
    "EffectState",
    "RunState",
    "WaitState",
    "apply",
    "fold",
    "fold_recorded",
    "state_from_json",
    "state_hash",
    "state_to_json",
]


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
    if kind in INFORMATIONAL:
        return evolve(state, seq=state.seq + 1)
    if state.settled:
        raise CorruptHistoryError(f"{kind} after the run settled", seq=state.seq + 1)
    try:
        next_state = _RULES[kind](state, event.payload)
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptHistoryError(f"malformed {kind} payload: {exc!r}", seq=state.seq + 1) from exc
    return evolve(next_state, seq=state.seq + 1)


def _run_started(state: RunState, p: Mapping[str, Any]) -> RunState:
    if state.status != "new":
        raise CorruptHistoryError("run_started twice", seq=state.seq + 1)
    return evolve(
        state,
        status="active",
        flow=str(p["flow"]),
        version=str(p["version"]),
        flow_kind=str(p.get("flow_kind", "steps")),
    )


def _at_frontier(state: RunState, position: int) -> None:
    """A Python flow's new call must take the next free position of its journal."""
    if state.parallel is not None:
        raise CorruptHistoryError(
            f"flow call at position {position} while a parallel call is open", seq=state.seq + 1
        )
    if state.python and position != len(state.journal):
        raise CorruptHistoryError(
            f"flow call at position {position}, the journal holds {len(state.journal)}",
            seq=state.seq + 1,
        )


def _journaled(state: RunState, entry: Mapping[str, Any], *, counts: bool) -> RunState:
    return evolve(
        state,
        journal=(*state.journal, entry),
        completed_steps=state.completed_steps + (1 if counts else 0),
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
    if previous is None and state.parallel is not None:
        check_branch_dispatch(state, p)
    elif previous is None:
        _at_frontier(state, int(p["step_index"]))
    effect = EffectState(
        effect_id=effect_id,
        step_index=int(p["step_index"]),
        kind=str(p["kind"]),
        idempotent=bool(p["idempotent"]),
        status="dispatched",
        attempt=attempt,
        failures=previous.failures if previous else 0,
        ambiguities=previous.ambiguities if previous else 0,
        dispatched_at=opt_int(p.get("dispatched_at")),
        deadline_at=opt_int(p.get("deadline_at")),
        last_error=previous.last_error if previous else None,
        name=opt_str(p.get("name")),
        give_up_at=previous.give_up_at if previous else opt_int(p.get("give_up_at")),
        supervised=opt_marker(p.get("supervised")),
    )
    return evolve(state, effects={**state.effects, effect_id: effect})


def _current(state: RunState, p: Mapping[str, Any]) -> EffectState | None:
    """The effect an outcome is for, or None for a stale outcome of an older attempt."""
    effect = state.effects.get(str(p["effect_id"]))
    if effect is None or effect.attempt != int(p["attempt"]) or effect.status != "dispatched":
        return None
    return effect


def _without(state: RunState, effect_id: str) -> dict[str, EffectState]:
    return {k: v for k, v in state.effects.items() if k != effect_id}


def _succeeded(state: RunState, p: Mapping[str, Any]) -> RunState:
    effect = _current(state, p)
    if effect is None:
        return state
    if state.parallel is not None:
        return answered(state, effect, ok=True, output=p.get("output"))
    effects = _without(state, effect.effect_id)
    if state.python:
        entry = {"kind": "step", "name": effect.name, "ok": True, "output": p.get("output")}
        return _journaled(evolve(state, effects=effects), entry, counts=True)
    return _step_done(evolve(state, effects=effects), effect.step_index, p.get("output"))


def _step_done(state: RunState, index: int, result: Any) -> RunState:
    """A steps flow's step completed: in order, or (a graph) as one of the done set."""
    if state.graph:
        done = state.done | {index}
        return evolve(state, done=done, completed_steps=len(done), result=result)
    completed = max(state.completed_steps, index + 1)
    return evolve(state, completed_steps=completed, result=result)


def _failed(state: RunState, p: Mapping[str, Any]) -> RunState:
    effect = _current(state, p)
    if effect is None:
        return state
    next_at = opt_int(p.get("next_attempt_at"))
    error = opt_str(p.get("error"))
    if state.parallel is not None and next_at is None:
        return answered(state, effect, ok=False, error=error, attempts=effect.failures + 1)
    if state.python and next_at is None:
        # The flow function sees this failure as an exception it may handle.
        entry = {
            "kind": "step",
            "name": effect.name,
            "ok": False,
            "error": error,
            "attempts": effect.failures + 1,
        }
        state = evolve(state, effects=_without(state, effect.effect_id))
        return _journaled(state, entry, counts=True)
    failed = evolve(
        effect,
        status="retry_wait" if next_at is not None else "failed",
        failures=effect.failures + 1,
        next_attempt_at=next_at,
        last_error=error,
    )
    return settle(evolve(state, effects={**state.effects, effect.effect_id: failed}))


def _ambiguous(state: RunState, p: Mapping[str, Any]) -> RunState:
    effect = _current(state, p)
    if effect is None:
        return state
    stuck = evolve(
        effect,
        status="timed_out" if p.get("timed_out") else "ambiguous",
        ambiguities=effect.ambiguities + 1,
        last_error=opt_str(p.get("reason")),
    )
    return settle(evolve(state, effects={**state.effects, effect.effect_id: stuck}))


def _cancelled_effect(state: RunState, p: Mapping[str, Any]) -> RunState:
    effect = _current(state, p)
    if effect is None:
        return state
    if state.parallel is not None:
        error = opt_str(p.get("error"))
        return answered(
            state, effect, ok=False, cancelled=True, error=error, attempts=effect.attempt
        )
    done = evolve(effect, status="cancelled", last_error=opt_str(p.get("error")))
    return evolve(state, effects={**state.effects, effect.effect_id: done})


def _retry_requested(state: RunState, p: Mapping[str, Any]) -> RunState:
    effect_id = str(p["effect_id"])
    effect = state.effects.get(effect_id)
    if effect is None or effect.status not in STUCK | {"failed"}:
        raise CorruptHistoryError(f"retry of effect {effect_id!r} that is not stuck")
    waiting = evolve(effect, status="retry_wait", next_attempt_at=int(p["at"]))
    status = "active" if state.status == "parked" else state.status
    return evolve(
        state, status=status, park_reason=None, effects={**state.effects, effect_id: waiting}
    )


def _wait_started(state: RunState, p: Mapping[str, Any]) -> RunState:
    wait = WaitState(
        wait_id=str(p["wait_id"]),
        step_index=int(p["step_index"]),
        kind=str(p["kind"]),
        until=opt_int(p.get("until")),
        signal=opt_str(p.get("signal")),
    )
    _at_frontier(state, wait.step_index)
    return evolve(state, waits={**state.waits, wait.wait_id: wait})


def _wait_finished(state: RunState, p: Mapping[str, Any]) -> RunState:
    wait = state.waits.get(str(p["wait_id"]))
    if wait is None:
        raise CorruptHistoryError(f"wait {p['wait_id']!r} finished but never started")
    waits = {k: v for k, v in state.waits.items() if k != wait.wait_id}
    reason = str(p["reason"])
    if state.python:
        entry: dict[str, Any] = {"kind": wait.kind}
        if wait.kind == "signal":
            entry |= {"name": wait.signal, "timed_out": reason == "timeout"}
            entry["payload"] = p.get("payload") if reason == "signal" else None
        return _journaled(evolve(state, waits=waits), entry, counts=True)
    if reason == "timeout":
        return evolve(state, waits=waits)
    result = p.get("payload") if reason == "signal" else state.result
    return _step_done(evolve(state, waits=waits), wait.step_index, result)


def _flow_value(state: RunState, p: Mapping[str, Any]) -> RunState:
    if not state.python:
        raise CorruptHistoryError("flow_value_recorded in a run that is not a Python flow")
    _at_frontier(state, int(p["position"]))
    entry = {"kind": str(p["kind"]), "value": p["value"]}
    return _journaled(state, entry, counts=False)


def _cancel_requested(state: RunState, p: Mapping[str, Any]) -> RunState:
    # `failure`: a graph's failed step stops its other branches before the run fails.
    return evolve(
        state,
        cancel_requested=True,
        cancel_reason=opt_str(p.get("reason")),
        failure=opt_str(p.get("failure")) or state.failure,
    )


def _branch_failed(state: RunState, p: Mapping[str, Any]) -> RunState:
    """A graph's step failed for good while other branches still run: no step starts
    any more, and with `cancel` (fail fast) the running ones are cancelled."""
    if not state.graph:
        raise CorruptHistoryError("branch_failed in a run that is not a graph flow")
    error = str(p["error"])
    if p.get("cancel"):
        return evolve(state, failure=error, cancel_requested=True, cancel_reason=f"failed: {error}")
    return evolve(state, failure=error)


def _parked(state: RunState, p: Mapping[str, Any]) -> RunState:
    return evolve(state, status="parked", park_reason=str(p["reason"]))


def _completed(state: RunState, p: Mapping[str, Any]) -> RunState:
    return evolve(state, status="completed", result=p.get("result"))


def _run_failed(state: RunState, p: Mapping[str, Any]) -> RunState:
    return evolve(state, status="failed", error=str(p["error"]))


def _run_cancelled(state: RunState, p: Mapping[str, Any]) -> RunState:
    reason = opt_str(p.get("reason"))
    return evolve(
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
    EventType.FLOW_VALUE_RECORDED: _flow_value,
    EventType.BRANCH_FAILED: _branch_failed,
    EventType.PARALLEL_STARTED: opened,
}
