"""The planner of graph flows: steps that name their needs run as concurrent branches."""

from __future__ import annotations

from collections.abc import Sequence

from looms_runtime._history.definitions import StepsFlow
from looms_runtime._history.events import EventType, new_event
from looms_runtime._history.fold import RunState
from looms_runtime._history.inbox import InboxItem
from looms_runtime._history.moves import Emit, Idle, Move, Sleep
from looms_runtime._history.steps import effect_move, failure_of, start_step, step_at, wait_move


def graph_move(
    state: RunState, flow: StepsFlow, *, now_ms: int, inbox: Sequence[InboxItem]
) -> Move:
    """The next move of a graph flow: its branches' own moves first, then a new step.

    Moves that can happen now come first (a due retry, a stuck step, a delivered
    signal, an expired timer, a step whose needs are met); otherwise the run waits
    for its running branches (`Idle`) or its earliest timer (`Sleep`).
    """
    effects = sorted(state.effects.values(), key=lambda effect: effect.step_index)
    waits = sorted(state.waits.values(), key=lambda wait: wait.step_index)
    failed = [effect for effect in effects if effect.status == "failed"]
    running = [effect for effect in effects if effect.status != "failed"]
    timers: list[int] = []
    if failed and state.failure is None:
        step = step_at(flow.steps, failed[0].step_index)
        error = failure_of(failed[0], step.id)
        if running or waits:
            return Emit(
                (
                    new_event(
                        EventType.BRANCH_FAILED,
                        effect_id=failed[0].effect_id,
                        error=error,
                        cancel=flow.fail_fast,
                    ),
                )
            )
        return Emit((new_event(EventType.RUN_FAILED, error=error),))
    for effect in running:
        if effect.status == "dispatched":
            continue
        move = effect_move(effect, step_at(flow.steps, effect.step_index), now_ms)
        if isinstance(move, Sleep):
            timers.append(move.until)
            continue
        return move
    for wait in waits:
        step = step_at(flow.steps, wait.step_index)
        move = wait_move(wait, step.id, now_ms, inbox, fails_run=True)
        if isinstance(move, Sleep):
            timers.append(move.until)
        elif not isinstance(move, Idle):
            return move
    if state.failure is None:
        ready = _ready_step(state, flow, busy=len(running) + len(waits))
        if ready is not None:
            return start_step(flow.steps[ready], ready, now_ms)
    if running or waits:
        return Sleep(min(timers)) if timers else Idle("branches_running")
    if state.failure is not None:
        return Emit((new_event(EventType.RUN_FAILED, error=state.failure),))
    return Emit((new_event(EventType.RUN_COMPLETED, result=state.result),))


def _ready_step(state: RunState, flow: StepsFlow, *, busy: int) -> int | None:
    """The first step whose needs are all done and that has not started, if another
    branch may start (at most `max_parallel` run at once)."""
    if busy >= flow.max_parallel:
        return None
    started = {effect.step_index for effect in state.effects.values()}
    started |= {wait.step_index for wait in state.waits.values()}
    for index in range(len(flow.steps)):
        if index in state.done or index in started:
            continue
        if flow.needs_of(index) <= state.done:
            return index
    return None
