"""Fold and planner rules of Python flows, retry limits and late outcomes (pure code)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from looms_runtime._history.definitions import StepsFlow
from looms_runtime._history.events import EventType, NewEvent, new_event
from looms_runtime._history.fold import RunState, fold, state_from_json, state_hash, state_to_json
from looms_runtime._history.outcome import EffectResult
from looms_runtime._history.parsing import parse_flow
from looms_runtime._history.planner import (
    Dispatch,
    Emit,
    Idle,
    InboxItem,
    RunFlow,
    Sleep,
    late_outcome,
    outcome_events,
    plan,
)
from looms_runtime.errors import CorruptHistoryError

PYTHON = parse_flow({"kind": "python", "ref": "m:f"})


def python_run() -> RunState:
    started = new_event(
        EventType.RUN_STARTED, flow="f", version="v", input=None, flow_kind="python"
    )
    return fold([started])


def dispatched(position: int, name: str = "s", *, attempt: int = 1, **extra: Any) -> NewEvent:
    return new_event(
        EventType.EFFECT_DISPATCHED,
        effect_id=f"{name}#{position}",
        step_index=position,
        kind="python",
        attempt=attempt,
        idempotent=extra.pop("idempotent", False),
        dispatched_at=0,
        deadline_at=None,
        name=name,
        **extra,
    )


def types(decision: object) -> list[str]:
    assert isinstance(decision, Emit)
    return [event.type for event in decision.events]


def test_each_flow_call_lands_in_the_journal_at_its_position() -> None:
    state = fold(
        [
            dispatched(0, "a"),
            new_event(EventType.EFFECT_SUCCEEDED, effect_id="a#0", attempt=1, output=[1]),
            new_event(EventType.FLOW_VALUE_RECORDED, position=1, kind="now", value=5),
            dispatched(2, "b"),
            new_event(EventType.EFFECT_FAILED, effect_id="b#2", attempt=1, error="x"),
        ],
        python_run(),
    )

    assert state.journal == (
        {"kind": "step", "name": "a", "ok": True, "output": [1]},
        {"kind": "now", "value": 5},
        {"kind": "step", "name": "b", "ok": False, "error": "x", "attempts": 1},
    )
    assert state.effects == {}
    assert state.completed_steps == 2


@pytest.mark.parametrize(
    "event",
    [
        dispatched(1),
        new_event(EventType.FLOW_VALUE_RECORDED, position=3, kind="new_id", value="x"),
        new_event(
            EventType.WAIT_STARTED, wait_id="w", step_index=2, kind="sleep", until=1, signal=None
        ),
    ],
    ids=["step", "value", "wait"],
)
def test_a_call_away_from_the_journal_end_is_a_corrupt_history(event: NewEvent) -> None:
    with pytest.raises(CorruptHistoryError):
        fold([event], python_run())


def test_a_recorded_value_in_a_steps_flow_is_a_corrupt_history() -> None:
    started = fold([new_event(EventType.RUN_STARTED, flow="f", version="v", input=None)])

    with pytest.raises(CorruptHistoryError):
        fold([new_event(EventType.FLOW_VALUE_RECORDED, position=0, kind="now", value=1)], started)


def test_a_signal_timeout_is_journaled_for_the_flow_and_does_not_fail_the_run() -> None:
    waiting = fold(
        [
            new_event(
                EventType.WAIT_STARTED,
                wait_id="go#0",
                step_index=0,
                kind="signal",
                until=10,
                signal="go",
            )
        ],
        python_run(),
    )

    decision = plan(waiting, PYTHON, now_ms=10)

    assert types(decision) == ["wait_finished"]
    assert isinstance(decision, Emit)
    after = fold(decision.events, waiting)
    assert after.journal == ({"kind": "signal", "name": "go", "timed_out": True, "payload": None},)
    assert plan(after, PYTHON, now_ms=10) == RunFlow()


def test_a_flow_step_in_flight_at_a_crash_reruns_when_idempotent_else_parks() -> None:
    for idempotent, expected in ((True, "effect_retry_requested"), (False, "run_parked")):
        state = fold([dispatched(0, idempotent=idempotent)], python_run())
        ambiguous = plan(state, PYTHON, now_ms=1)
        assert types(ambiguous) == ["effect_ambiguous"]
        assert isinstance(ambiguous, Emit)
        state = fold(ambiguous.events, state)

        decision = plan(state, PYTHON, now_ms=1)

        assert types(decision) == [expected]
        if idempotent:
            assert isinstance(decision, Emit)
            assert plan(fold(decision.events, state), PYTHON, now_ms=1) == RunFlow()


def test_a_flow_retry_waits_for_its_backoff_then_runs_the_flow_again() -> None:
    state = fold(
        [
            dispatched(0),
            new_event(
                EventType.EFFECT_FAILED, effect_id="s#0", attempt=1, error="x", next_attempt_at=50
            ),
        ],
        python_run(),
    )

    assert plan(state, PYTHON, now_ms=10) == Sleep(50)
    assert plan(state, PYTHON, now_ms=50) == RunFlow()
    assert plan(state, PYTHON, now_ms=50, running=True) == Idle("flow_running")


def command_flow(retry: dict[str, Any]) -> StepsFlow:
    step = {"id": "a", "type": "command", "argv": ["x"], "retry": retry}
    flow = parse_flow({"kind": "steps", "steps": [step]})
    assert isinstance(flow, StepsFlow)
    return flow


def first_failure(flow: StepsFlow, result: EffectResult, now: int = 0) -> dict[str, Any]:
    state = fold([new_event(EventType.RUN_STARTED, flow="f", version="v", input=None)])
    decision = plan(state, flow, now_ms=now)
    assert isinstance(decision, Dispatch)
    state = fold([decision.event], state)
    (event,) = outcome_events(state, flow, result, now_ms=now + 1)
    return dict(event.payload)


def test_a_non_retryable_exit_code_ends_the_step_at_once() -> None:
    flow = command_flow({"max_attempts": 5, "backoff_s": 1, "non_retryable_exit_codes": [3]})
    failed = EffectResult(effect_id="a", attempt=1, ok=False, error="exit", output={"exit_code": 3})
    other = EffectResult(effect_id="a", attempt=1, ok=False, error="exit", output={"exit_code": 4})

    assert first_failure(flow, failed)["next_attempt_at"] is None
    assert first_failure(flow, other)["next_attempt_at"] == 1001


def test_a_failure_marked_not_retryable_is_never_retried() -> None:
    flow = command_flow({"max_attempts": 5, "backoff_s": 1})
    final = EffectResult(effect_id="a", attempt=1, ok=False, error="no", retryable=False)

    assert first_failure(flow, final)["next_attempt_at"] is None


def test_no_retry_is_scheduled_past_the_steps_deadline() -> None:
    flow = command_flow({"max_attempts": 5, "backoff_s": 10, "deadline_s": 5})
    failed = EffectResult(effect_id="a", attempt=1, ok=False, error="x")

    assert first_failure(flow, failed)["next_attempt_at"] is None
    roomy = command_flow({"max_attempts": 5, "backoff_s": 1, "deadline_s": 5})
    assert first_failure(roomy, failed)["next_attempt_at"] == 1001


def test_the_first_attempt_fixes_the_deadline_and_caps_its_own_timeout() -> None:
    step = {"id": "a", "type": "command", "argv": ["x"], "timeout_s": 60}
    step["retry"] = {"max_attempts": 2, "deadline_s": 5}
    flow = parse_flow({"kind": "steps", "steps": [step]})
    state = fold([new_event(EventType.RUN_STARTED, flow="f", version="v", input=None)])

    decision = plan(state, flow, now_ms=100)

    assert isinstance(decision, Dispatch)
    assert decision.event.payload["give_up_at"] == 5100
    assert decision.deadline_at == 5100


def test_a_late_outcome_is_kept_after_the_run_settled_and_changes_nothing() -> None:
    settled = fold([new_event(EventType.RUN_CANCELLED, reason="stop")], python_run())
    late = late_outcome(EffectResult(effect_id="s#0", attempt=1, ok=True, output=1))

    after = fold([late], settled)

    assert after.seq == settled.seq + 1
    assert state_to_json(after) | {"seq": settled.seq} == state_to_json(settled)


def test_a_steps_flow_state_keeps_its_snapshot_form_and_digest() -> None:
    state = fold([new_event(EventType.RUN_STARTED, flow="f", version="v", input=None)])

    data = state_to_json(state)

    assert "journal" not in data
    assert "flow_kind" not in data
    assert state_from_json(data) == state
    assert state_hash(state_from_json(json.loads(json.dumps(data)))) == state_hash(state)


def test_a_python_flow_state_round_trips_through_its_snapshot_form() -> None:
    value = new_event(EventType.FLOW_VALUE_RECORDED, position=0, kind="now", value=1)
    state = fold([value, dispatched(1, give_up_at=9)], python_run())

    data = json.loads(json.dumps(state_to_json(state)))

    assert data["effects"]["s#1"]["give_up_at"] == 9
    assert data["journal"] == [{"kind": "now", "value": 1}]
    assert state_from_json(data) == state


def test_an_early_signal_finishes_a_flow_wait_once_it_starts() -> None:
    signal = [InboxItem(key="signal:1", kind="signal", name="go", payload={"n": 1})]
    waiting = fold(
        [
            new_event(
                EventType.WAIT_STARTED,
                wait_id="go#0",
                step_index=0,
                kind="signal",
                until=None,
                signal="go",
            )
        ],
        python_run(),
    )

    decision = plan(waiting, PYTHON, now_ms=0, inbox=signal)

    assert isinstance(decision, Emit)
    assert decision.consumed == ("signal:1",)
    assert fold(decision.events, waiting).journal[-1]["payload"] == {"n": 1}
