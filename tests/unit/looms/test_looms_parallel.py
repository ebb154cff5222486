"""The fold and planner of a Python flow's `parallel` call: branches finish in any order.

Events are built as the engine writes them (`parallel_started`, then each branch's
dispatch naming the call's position); outcomes go through `outcome_events`, so the
retry and cancel decisions are the runtime's own.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from looms_runtime._history.definitions import RetryPolicy
from looms_runtime._history.events import EventType, NewEvent, new_event
from looms_runtime._history.fold import RunState, fold, state_from_json, state_hash, state_to_json
from looms_runtime._history.outcome import EffectResult
from looms_runtime._history.parsing import parse_flow
from looms_runtime._history.planner import Emit, Idle, RunFlow, Sleep, outcome_events, plan
from looms_runtime.errors import CorruptHistoryError

PYTHON = parse_flow({"kind": "python", "ref": "m:f"})
RETRY = RetryPolicy(max_attempts=3, backoff_s=1.0, max_backoff_s=10.0)


def python_run(*events: NewEvent) -> RunState:
    started = new_event(
        EventType.RUN_STARTED, flow="f", version="v", input=None, flow_kind="python"
    )
    return fold([started, *events])


def opened(names: list[str], *, at: int = 0, fail_fast: bool = True) -> NewEvent:
    return new_event(
        EventType.PARALLEL_STARTED,
        position=at,
        names=names,
        fail_fast=fail_fast,
        max_parallel=len(names),
    )


def dispatched(
    name: str, position: int, *, at: int = 0, attempt: int = 1, idempotent: bool = False
) -> NewEvent:
    return new_event(
        EventType.EFFECT_DISPATCHED,
        effect_id=f"{name}#{position}",
        step_index=position,
        kind="python",
        attempt=attempt,
        idempotent=idempotent,
        dispatched_at=0,
        deadline_at=None,
        name=name,
        branch_of=at,
    )


def call(names: list[str], *, at: int = 0, fail_fast: bool = True, **extra: Any) -> RunState:
    """A run whose `parallel` call at `at` dispatched every branch (after `at` values)."""
    values = [
        new_event(EventType.FLOW_VALUE_RECORDED, position=i, kind="now", value=i) for i in range(at)
    ]
    events = [opened(names, at=at, fail_fast=fail_fast)]
    events += [dispatched(name, at + i, at=at, **extra) for i, name in enumerate(names)]
    return python_run(*values, *events)


def report(
    state: RunState,
    effect_id: str,
    *,
    ok: bool = True,
    retry: RetryPolicy | None = None,
    now: int = 1,
    **fields: Any,
) -> RunState:
    effect = state.effects[effect_id]
    output = fields.pop("output", {"from": effect_id}) if ok else None
    result = EffectResult(
        effect_id=effect_id, attempt=effect.attempt, ok=ok, output=output, **fields
    )
    return fold(outcome_events(state, PYTHON, result, now_ms=now, retry=retry), state)


def branch_names(state: RunState) -> list[Any]:
    return [(entry["kind"], entry["name"]) for entry in state.journal]


def test_branches_that_finish_out_of_order_join_the_journal_in_argument_order() -> None:
    state = call(["dump-a", "dump-b", "dump-c"], at=1)
    state = report(state, "dump-c#3")
    state = report(state, "dump-a#1", ok=False, error="disk full")
    assert len(state.journal) == 1  # nothing joins before every branch has an answer
    assert state.parallel is not None

    state = report(state, "dump-b#2")

    assert state.parallel is None
    assert state.journal[1:] == (
        {
            "kind": "branch",
            "name": "dump-a",
            "of": 3,
            "ok": False,
            "error": "disk full",
            "attempts": 1,
        },
        {"kind": "branch", "name": "dump-b", "of": 3, "ok": True, "output": {"from": "dump-b#2"}},
        {"kind": "branch", "name": "dump-c", "of": 3, "ok": True, "output": {"from": "dump-c#3"}},
    )
    assert state.completed_steps == 3
    assert state.effects == {}


OUTCOMES = st.lists(st.sampled_from(["ok", "fail", "retry_then_ok"]), min_size=1, max_size=5)


def join(outcomes: list[str], order: list[int]) -> tuple[RunState, list[bool]]:
    """Fold the outcomes of a call's branches in `order`; also whether it joined early."""
    names = [f"b{i}" for i in range(len(outcomes))]
    state = call(names, at=2, fail_fast=False)
    retried: list[int] = []
    joined: list[bool] = []
    for index in order:
        effect_id = f"b{index}#{index + 2}"
        if outcomes[index] == "retry_then_ok":
            state = report(state, effect_id, ok=False, error="flaky", retry=RETRY)
            retried.append(index)
        else:
            state = report(state, effect_id, ok=outcomes[index] == "ok", error="boom")
        joined.append(state.parallel is None)
    for index in retried:  # the retries, due now, in the order their failures came
        state = fold([dispatched(f"b{index}", index + 2, at=2, attempt=2)], state)
        state = report(state, f"b{index}#{index + 2}")
        joined.append(state.parallel is None)
    return state, joined


@settings(max_examples=60, deadline=None)
@given(outcomes=OUTCOMES, data=st.data())
def test_the_joined_call_is_the_same_whatever_order_the_branches_finish_in(
    outcomes: list[str], data: st.DataObject
) -> None:
    order = data.draw(st.permutations(range(len(outcomes))))

    state, joined = join(outcomes, order)

    reference, _ = join(outcomes, sorted(order))
    assert state.journal == reference.journal
    assert joined == [False] * (len(joined) - 1) + [True]  # only the last answer joins
    entries = state.journal[2:]
    assert [entry["name"] for entry in entries] == [f"b{i}" for i in range(len(outcomes))]
    assert [entry["ok"] for entry in entries] == [outcome != "fail" for outcome in outcomes]
    assert [entry.get("attempts") for entry in entries] == [
        1 if outcome == "fail" else None for outcome in outcomes
    ]
    assert all(entry["of"] == len(outcomes) for entry in entries)
    assert state.completed_steps == len(outcomes)


def test_a_branch_that_fails_for_good_stops_the_branches_that_are_not_running() -> None:
    names = ["failing", "running", "backing-off", "unstarted"]
    state = python_run(opened(names), *(dispatched(name, i) for i, name in enumerate(names[:3])))
    state = report(state, "backing-off#2", ok=False, error="flaky", retry=RETRY)
    assert state.effects["backing-off#2"].status == "retry_wait"

    state = report(state, "failing#0", ok=False, error="disk full")

    assert state.parallel is not None
    assert state.parallel.stopping
    assert list(state.effects) == ["running#1"]  # asked to stop by the session, not here
    stopped = state.parallel.results
    assert stopped[2] is not None
    assert stopped[2]["cancelled"]
    assert "waiting for attempt 2" in stopped[2]["error"]
    assert stopped[3] is not None
    assert stopped[3]["cancelled"]
    assert stopped[3]["attempts"] == 0
    state = report(state, "running#1", ok=False, error="stopped", cancelled=True)
    assert [entry["ok"] for entry in state.journal] == [False] * 4
    assert [bool(entry.get("cancelled")) for entry in state.journal] == [False, True, True, True]


def test_without_fail_fast_a_failure_stops_nothing() -> None:
    state = call(["a", "b"], fail_fast=False)

    state = report(state, "a#0", ok=False, error="boom")

    assert state.parallel is not None
    assert not state.parallel.stopping
    assert list(state.effects) == ["b#1"]


def test_a_crash_leaves_each_branch_to_its_own_rule() -> None:
    names = ["done", "safe", "unsafe"]
    state = python_run(opened(names), dispatched("done", 0), dispatched("safe", 1, idempotent=True))
    state = fold([dispatched("unsafe", 2)], state)
    state = report(state, "done#0")

    for _ in range(2):  # the new owner finds both in flight: ambiguous
        decision = plan(state, PYTHON, now_ms=5)
        assert isinstance(decision, Emit)
        assert [event.type for event in decision.events] == ["effect_ambiguous"]
        state = fold(decision.events, state)
    rerun = plan(state, PYTHON, now_ms=5)
    assert isinstance(rerun, Emit)
    assert [(e.type, e.payload["effect_id"]) for e in rerun.events] == [
        ("effect_retry_requested", "safe#1")
    ]
    state = fold(rerun.events, state)
    parked = plan(state, PYTHON, now_ms=5)
    assert isinstance(parked, Emit)
    assert [(e.type, e.payload["effect_id"]) for e in parked.events] == [("run_parked", "unsafe#2")]
    state = fold(parked.events, state)
    assert state.parallel is not None
    assert state.parallel.results[0] is not None  # the completed branch is kept, never re-run

    retry = new_event(EventType.EFFECT_RETRY_REQUESTED, effect_id="unsafe#2", at=6)
    state = fold([retry], state)

    assert state.status == "active"
    assert plan(state, PYTHON, now_ms=6) == RunFlow()


def test_a_branch_in_flight_at_a_crash_of_a_stopping_call_is_not_rerun_nor_parked() -> None:
    state = call(["failing", "running"], idempotent=False)
    state = report(state, "failing#0", ok=False, error="disk full")

    decision = plan(state, PYTHON, now_ms=5)
    assert isinstance(decision, Emit)
    state = fold(decision.events, state)

    assert state.parallel is None
    assert state.journal[1]["cancelled"]
    assert "attempt 1 ambiguous" in state.journal[1]["error"]
    assert plan(state, PYTHON, now_ms=5) == RunFlow()


@pytest.mark.parametrize(
    ("now", "expected"), [(500, Sleep(1001)), (1001, RunFlow())], ids=["backoff", "due"]
)
def test_an_open_call_with_only_backoffs_left_sleeps_until_the_first_is_due(
    now: int, expected: object
) -> None:
    state = call(["a", "b"])
    state = report(state, "a#0", ok=False, error="x", retry=RETRY)
    state = report(
        state,
        "b#1",
        ok=False,
        error="x",
        retry=RetryPolicy(max_attempts=2, backoff_s=5, max_backoff_s=5),
    )

    assert plan(state, PYTHON, now_ms=now) == expected
    assert plan(state, PYTHON, now_ms=now, running=True) == Idle("flow_running")


def test_an_open_call_with_a_branch_never_started_runs_the_flow_again() -> None:
    state = python_run(opened(["a", "b"]), dispatched("a", 0))
    state = report(state, "a#0", ok=False, error="x", retry=RETRY)

    assert plan(state, PYTHON, now_ms=0) == RunFlow()  # b may start while a backs off


@pytest.mark.parametrize(
    "event",
    [
        dispatched("b", 1, at=1),
        dispatched("other", 1),
        dispatched("a", 2),
        new_event(EventType.FLOW_VALUE_RECORDED, position=2, kind="now", value=1),
        opened(["c"], at=2),
    ],
    ids=["wrong-call", "wrong-name", "outside", "value", "nested"],
)
def test_an_event_that_does_not_fit_the_open_call_is_a_corrupt_history(event: NewEvent) -> None:
    state = python_run(opened(["a", "b"]), dispatched("a", 0))

    with pytest.raises(CorruptHistoryError):
        fold([event], state)


def test_a_parallel_call_away_from_the_journal_end_or_in_a_steps_flow_is_corrupt() -> None:
    steps = fold([new_event(EventType.RUN_STARTED, flow="f", version="v", input=None)])

    with pytest.raises(CorruptHistoryError):
        fold([opened(["a"], at=1)], python_run())
    with pytest.raises(CorruptHistoryError):
        fold([opened(["a"])], steps)


def test_an_open_call_round_trips_through_its_snapshot_form() -> None:
    state = report(call(["a", "b"], at=1), "b#2")

    data = json.loads(json.dumps(state_to_json(state)))

    assert data["parallel"]["results"][0] is None
    assert data["parallel"]["results"][1]["name"] == "b"
    assert state_from_json(data) == state
    assert state_hash(state_from_json(data)) == state_hash(state)


def test_a_python_flow_without_parallel_keeps_its_snapshot_form() -> None:
    state = python_run(new_event(EventType.FLOW_VALUE_RECORDED, position=0, kind="now", value=1))

    assert "parallel" not in state_to_json(state)
