"""The planner's decisions in the situations that decide safety."""

from __future__ import annotations

from typing import Any

from looms_runtime._history.definitions import StepsFlow
from looms_runtime._history.events import EventType, new_event
from looms_runtime._history.fold import RunState, fold
from looms_runtime._history.outcome import EffectResult
from looms_runtime._history.parsing import parse_flow
from looms_runtime._history.planner import (
    MAX_AMBIGUOUS_RERUNS,
    Dispatch,
    Emit,
    Idle,
    InboxItem,
    RunFlow,
    Sleep,
    outcome_events,
    plan,
)


def flow(
    *, idempotent: bool = False, retry: dict[str, Any] | None = None, timeout_s: float | None = None
) -> StepsFlow:
    step = {
        "id": "a",
        "type": "command",
        "argv": ["x"],
        "idempotent": idempotent,
        "retry": retry,
        "timeout_s": timeout_s,
    }
    parsed = parse_flow(
        {"kind": "steps", "steps": [step, {"id": "b", "type": "python", "ref": "m:f"}]}
    )
    assert isinstance(parsed, StepsFlow)
    return parsed


def started() -> RunState:
    return fold([new_event(EventType.RUN_STARTED, flow="f", version="v", input=None)])


def dispatched(state: RunState, steps: StepsFlow, now: int = 0) -> tuple[RunState, Dispatch]:
    decision = plan(state, steps, now_ms=now)
    assert isinstance(decision, Dispatch)
    return fold([decision.event], state), decision


def emitted(decision: object) -> list[str]:
    assert isinstance(decision, Emit)
    return [event.type for event in decision.events]


def apply_all(state: RunState, decision: object) -> RunState:
    assert isinstance(decision, Emit)
    return fold(decision.events, state)


def test_a_dispatched_effect_not_in_flight_is_ambiguous_then_rerun_when_idempotent() -> None:
    steps = flow(idempotent=True)
    state, _ = dispatched(started(), steps)

    found = plan(state, steps, now_ms=5)
    assert emitted(found) == ["effect_ambiguous"]
    rerun = plan(apply_all(state, found), steps, now_ms=5)

    assert isinstance(rerun, Dispatch)
    assert rerun.attempt == 2


def test_an_ambiguous_effect_that_is_not_idempotent_parks_the_run() -> None:
    steps = flow(idempotent=False)
    state, _ = dispatched(started(), steps)
    state = apply_all(state, plan(state, steps, now_ms=5))

    parked = plan(state, steps, now_ms=5)

    assert emitted(parked) == ["run_parked"]
    assert plan(apply_all(state, parked), steps, now_ms=5) == Idle("parked")


def test_an_effect_in_flight_past_its_deadline_at_a_crash_is_timed_out() -> None:
    steps = flow(timeout_s=1.0)
    state, _ = dispatched(started(), steps, now=0)

    found = plan(state, steps, now_ms=1000)

    assert isinstance(found, Emit)
    assert found.events[0].payload["timed_out"] is True


def test_an_idempotent_step_in_flight_at_every_crash_parks_after_the_limit() -> None:
    steps = flow(idempotent=True)
    state = started()
    for _ in range(MAX_AMBIGUOUS_RERUNS + 1):
        state, _ = dispatched(state, steps)
        state = apply_all(state, plan(state, steps, now_ms=0))

    assert emitted(plan(state, steps, now_ms=0)) == ["run_parked"]


def test_an_effect_in_flight_here_is_left_alone() -> None:
    steps = flow()
    state, decision = dispatched(started(), steps)

    assert plan(state, steps, now_ms=0, in_flight=(decision.step.id,)) == Idle("in_flight")


def test_a_failure_with_attempts_left_waits_for_its_backoff() -> None:
    steps = flow(retry={"max_attempts": 3, "backoff_s": 2, "max_backoff_s": 10})
    state, _ = dispatched(started(), steps, now=0)
    failure = EffectResult(effect_id="a", attempt=1, ok=False, error="exit code 1")
    state = fold(outcome_events(state, steps, failure, now_ms=100), state)

    assert plan(state, steps, now_ms=100) == Sleep(2100)
    again = plan(state, steps, now_ms=2100)
    assert isinstance(again, Dispatch)
    assert again.attempt == 2


def test_the_last_failure_fails_the_run() -> None:
    steps = flow()
    state, _ = dispatched(started(), steps)
    failure = EffectResult(effect_id="a", attempt=1, ok=False, error="exit code 1")
    events = outcome_events(state, steps, failure, now_ms=1)

    assert events[0].payload["next_attempt_at"] is None
    final = plan(fold(events, state), steps, now_ms=1)
    assert isinstance(final, Emit)
    assert final.events[0].payload == {"error": "step 'a' failed after 1 attempt: exit code 1"}


def test_a_completed_step_is_never_dispatched_again() -> None:
    steps = flow()
    state, _ = dispatched(started(), steps)
    success = EffectResult(effect_id="a", attempt=1, ok=True, output={"exit_code": 0})
    state = fold(outcome_events(state, steps, success, now_ms=1), state)

    following = plan(state, steps, now_ms=1)

    assert isinstance(following, Dispatch)
    assert following.step.id == "b"


def test_a_stale_result_records_nothing() -> None:
    steps = flow()
    state, _ = dispatched(started(), steps)

    stale = EffectResult(effect_id="a", attempt=7, ok=True)

    assert outcome_events(state, steps, stale, now_ms=1) == ()


def test_cancel_waits_for_the_effect_in_flight_then_settles() -> None:
    steps = flow()
    state, _ = dispatched(started(), steps)
    cancel = [InboxItem(key="cancel", kind="cancel", name="stop")]

    requested = plan(state, steps, now_ms=1, in_flight=("a",), inbox=cancel)
    assert emitted(requested) == ["cancel_requested"]
    state = apply_all(state, requested)
    assert plan(state, steps, now_ms=1, in_flight=("a",)) == Idle("cancelling")
    killed = EffectResult(effect_id="a", attempt=1, ok=False, error="cancelled", cancelled=True)
    state = fold(outcome_events(state, steps, killed, now_ms=2), state)

    assert emitted(plan(state, steps, now_ms=2)) == ["run_cancelled"]


def test_a_python_flow_is_run_from_the_top_when_nothing_is_outstanding() -> None:
    python_flow = parse_flow({"kind": "python", "ref": "m:f"})

    assert plan(started(), python_flow, now_ms=0) == RunFlow()
    assert plan(started(), python_flow, now_ms=0, running=True) == Idle("flow_running")


def test_a_signal_sent_early_waits_in_the_inbox_until_the_step_waits() -> None:
    steps = parse_flow(
        {"kind": "steps", "steps": [{"id": "w", "type": "wait_signal", "signal": "go"}]}
    )
    signal = [InboxItem(key="signal:1", kind="signal", name="go", payload=1)]
    waiting = plan(started(), steps, now_ms=0, inbox=signal)
    assert emitted(waiting) == ["wait_started"]
    state = apply_all(started(), waiting)

    received = plan(state, steps, now_ms=0, inbox=signal)

    assert isinstance(received, Emit)
    assert received.consumed == ("signal:1",)
    assert fold(received.events, state).completed_steps == 1
