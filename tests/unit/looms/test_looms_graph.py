"""Graph flows: steps that name their `needs` run as branches, concurrently and bounded."""

from __future__ import annotations

from typing import Any, cast

import pytest

from looms_runtime import InvalidFlowError
from looms_runtime._history.definitions import StepsFlow
from looms_runtime._history.events import EventType, NewEvent, new_event
from looms_runtime._history.fold import RunState, fold
from looms_runtime._history.outcome import EffectResult
from looms_runtime._history.parsing import parse_flow
from looms_runtime._history.planner import Dispatch, Emit, Idle, Move, outcome_events, plan


def command(step_id: str, **fields: Any) -> dict[str, Any]:
    return {"id": step_id, "type": "command", "argv": ["x"], **fields}


def graph(*steps: dict[str, Any], **flow: Any) -> StepsFlow:
    parsed = parse_flow({"kind": "steps", "steps": list(steps), **flow})
    assert isinstance(parsed, StepsFlow)
    return parsed


BACKUP = graph(
    command("dump-a", needs=[]),
    command("dump-b", needs=[]),
    command("dump-c", needs=[]),
    command("upload", needs=["dump-a", "dump-b", "dump-c"]),
    max_parallel=2,
)


def started(kind: str = "graph") -> RunState:
    return fold(
        [new_event(EventType.RUN_STARTED, flow="f", version="v", input=None, flow_kind=kind)]
    )


def start_all(
    state: RunState, flow: StepsFlow, running: tuple[str, ...] = ()
) -> tuple[RunState, list[str]]:
    """Plan as the engine does: every dispatch the run can make now, until it waits."""
    started_ids: list[str] = []
    for _ in range(20):
        decision: Move = plan(state, flow, now_ms=0, in_flight=(*running, *started_ids))
        if not isinstance(decision, Dispatch):
            return state, started_ids
        started_ids.append(decision.step.id)
        state = fold([decision.event], state)
    raise AssertionError("no stable state")


def finish(
    state: RunState, flow: StepsFlow, effect_id: str, *, ok: bool = True, error: str | None = None
) -> RunState:
    effect = state.effects[effect_id]
    result = EffectResult(
        effect_id=effect_id, attempt=effect.attempt, ok=ok, error=error, output={"step": effect_id}
    )
    return fold(outcome_events(state, flow, result, now_ms=1), state)


def emitted(state: RunState, flow: StepsFlow, running: tuple[str, ...]) -> list[NewEvent]:
    decision = plan(state, flow, now_ms=1, in_flight=running)
    assert isinstance(decision, Emit), decision
    return list(decision.events)


def test_ready_branches_start_together_up_to_max_parallel() -> None:
    state, first = start_all(started(), BACKUP)

    assert first == ["dump-a", "dump-b"]
    state = finish(state, BACKUP, "dump-a")
    state, second = start_all(state, BACKUP, running=("dump-b",))
    assert second == ["dump-c"]  # upload still needs dump-b and dump-c


def test_a_step_starts_once_every_step_it_needs_completed() -> None:
    state, _ = start_all(started(), BACKUP)
    state = finish(state, BACKUP, "dump-a")
    state = finish(state, BACKUP, "dump-b")
    state, third = start_all(state, BACKUP)
    assert third == ["dump-c"]
    state = finish(state, BACKUP, "dump-c")

    state, last = start_all(state, BACKUP)
    assert last == ["upload"]
    state = finish(state, BACKUP, "upload")
    assert [e.type for e in emitted(state, BACKUP, ())] == ["run_completed"]


def test_a_failed_branch_cancels_its_running_siblings_then_fails_the_run() -> None:
    state, _ = start_all(started(), BACKUP)
    state = finish(state, BACKUP, "dump-a", ok=False, error="exit code 3")

    [failing] = emitted(state, BACKUP, ("dump-b",))
    assert failing.type == EventType.BRANCH_FAILED
    assert failing.payload["cancel"] is True
    state = fold([failing], state)
    assert state.cancel_requested
    assert isinstance(plan(state, BACKUP, now_ms=1, in_flight=("dump-b",)), Idle)

    state = fold(
        outcome_events(
            state,
            BACKUP,
            EffectResult(
                effect_id="dump-b", attempt=1, ok=False, error="cancelled", cancelled=True
            ),
            now_ms=2,
        ),
        state,
    )
    [failed] = emitted(state, BACKUP, ())
    assert failed.type == EventType.RUN_FAILED
    assert "'dump-a' failed after 1 attempt: exit code 3" in str(failed.payload["error"])


def test_without_fail_fast_running_branches_finish_and_nothing_new_starts() -> None:
    patient = graph(
        command("a", needs=[]), command("b", needs=[]), command("c", needs=["b"]), fail_fast=False
    )
    state, running = start_all(started(), patient)
    assert running == ["a", "b"]
    state = finish(state, patient, "a", ok=False, error="boom")
    [failing] = emitted(state, patient, ("b",))
    state = fold([failing], state)
    assert not state.cancel_requested

    state = finish(state, patient, "b")
    [failed] = emitted(state, patient, ())

    assert failed.type == EventType.RUN_FAILED  # c never started
    assert {effect.effect_id for effect in state.effects.values()} == {"a"}


def test_a_flow_without_needs_keeps_its_order_and_its_events() -> None:
    plain = graph(command("a"), command("b"))
    assert not plain.graph

    state = started("steps")
    state, running = start_all(state, plain)

    assert running == ["a"]
    assert state.done == frozenset()  # not a graph: `completed_steps` counts, as before


@pytest.mark.parametrize(
    ("steps", "problem"),
    [
        ([command("a", needs=["nope"])], "$.steps[0].needs: no step 'nope' in this flow"),
        ([command("a", needs=["a"])], "$.steps[0].needs: a step cannot need itself"),
        (
            [command("a", needs=["b"]), command("b", needs=["a"])],
            "$.steps: the needs form a cycle: a -> b -> a",
        ),
        ([command("a", needs="b")], "$.steps[0].needs: must be a list of step ids"),
    ],
    ids=["unknown", "itself", "cycle", "not-a-list"],
)
def test_needs_that_cannot_be_met_are_refused(steps: list[dict[str, Any]], problem: str) -> None:
    with pytest.raises(InvalidFlowError) as caught:
        parse_flow({"kind": "steps", "steps": steps})

    assert problem in cast("list[str]", caught.value.details["problems"])


def test_max_parallel_must_be_positive() -> None:
    with pytest.raises(InvalidFlowError) as caught:
        parse_flow({"kind": "steps", "steps": [command("a", needs=[])], "max_parallel": 0})

    assert "$.max_parallel: must be an integer >= 1" in cast(
        "list[str]", caught.value.details["problems"]
    )
