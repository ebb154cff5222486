"""What one attempt of an effect gets from its run: its context and its own time limit."""

from __future__ import annotations

import json
from collections.abc import Mapping

from looms_runtime._canonical import canonical_json
from looms_runtime._effects.context import EffectContext
from looms_runtime._history.definitions import FlowDef
from looms_runtime._history.events import NewEvent
from looms_runtime._history.fold import RunState, apply
from looms_runtime._history.planner import Dispatch, Emit, plan
from looms_runtime._store.loading import LoadedRun


def effect_context(
    run: LoadedRun, decision: Dispatch, *, env_prefix: str, output_limit_bytes: int
) -> EffectContext:
    """What one attempt of a steps flow's effect gets from its run."""
    header = run.header
    step = decision.step
    input_json = header.input_json
    if input_json is None:
        input_json = canonical_json(header.input)
    return EffectContext(
        run_id=header.run_id,
        effect_id=step.id,
        step_id=step.id,
        attempt=decision.attempt,
        # Each attempt gets its own copy: a step that mutates its input cannot
        # change what the next step (or a replay) sees.
        input=json.loads(input_json),
        input_json=input_json,
        run_env=header.env,
        env_prefix=env_prefix,
        output_limit_bytes=output_limit_bytes,
    )


def attempt_limit_s(timeout_s: float | None, dispatched: NewEvent, now_ms: int) -> float | None:
    """An attempt's own time limit: its step's timeout, cut short by the step's deadline."""
    give_up_at = dispatched.payload.get("give_up_at")
    if give_up_at is None:
        return timeout_s
    remaining = max(0.0, (int(give_up_at) - now_ms) / 1000)
    return remaining if timeout_s is None else min(timeout_s, remaining)


def supervised(decision: Dispatch, marker: Mapping[str, str]) -> Dispatch:
    """A command's dispatch records where its attempt runs (`marker`: the boot and root
    of its attempt directory), for whoever owns the run next (see `adoption`)."""
    if decision.step.kind != "command":
        return decision
    payload = {**decision.event.payload, "supervised": dict(marker)}
    event = NewEvent(decision.event.type, payload, decision.event.version)
    return Dispatch(
        event=event, step=decision.step, attempt=decision.attempt, deadline_at=decision.deadline_at
    )


def first_moves(
    state: RunState, flow: FlowDef, *, now_ms: int, marker: Mapping[str, str]
) -> tuple[tuple[Dispatch, ...], RunState]:
    """The attempts a run just started dispatches at once (committed with its start): the
    planner's dispatches until it answers anything else; and the run's state with them."""
    found: list[Dispatch] = []
    for _ in range(_MAX_FIRST_MOVES):
        move = plan(state, flow, now_ms=now_ms, in_flight=tuple(d.step.id for d in found))
        if not isinstance(move, Dispatch):
            break
        move = supervised(move, marker)
        found.append(move)
        state = apply(state, move.event)
    return tuple(found), state


_MAX_FIRST_MOVES = 1000


def completion_at_start(state: RunState, flow: FlowDef, *, now_ms: int) -> tuple[NewEvent, ...]:
    """The events that complete a run just started without running anything (a flow with
    no steps), to commit with its start; empty when the run has anything to do first.

    Only a completion qualifies: the planner's answers must all be events to append
    (no attempt, no wait, no timer) and end in `completed`. A run that would fail or
    park at once goes to a worker as any other, where its transition is reported."""
    events: list[NewEvent] = []
    for _ in range(_MAX_SETTLING_MOVES):
        move = plan(state, flow, now_ms=now_ms)
        if not isinstance(move, Emit) or move.consumed:
            return ()
        for event in move.events:
            state = apply(state, event)
        events.extend(move.events)
        if state.settled:
            return tuple(events) if state.status == "completed" else ()
    return ()


_MAX_SETTLING_MOVES = 8
