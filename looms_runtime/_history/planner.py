"""The next move of a run: a pure function of its state, its definition and the time.

The runtime asks `plan` again after every decision it applies, until the answer is
to wait. Decisions that only append events are buffered and committed together with
the next one that must be durable before anything runs (a dispatch), so a one-step
run costs three commits: start, dispatch, outcome plus settlement.

A Python flow decides its own steps (its code runs in a session, see
`_engine.flow_session`); the planner only says when to run it again from the top, and
handles what no code has to decide: timers, retries, crashes, signals and cancels.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from looms_runtime._history.definitions import (
    FlowDef,
    PythonFlow,
)
from looms_runtime._history.events import EventType, new_event
from looms_runtime._history.fold import STUCK, RunState
from looms_runtime._history.graph import graph_move
from looms_runtime._history.inbox import InboxItem
from looms_runtime._history.moves import (
    Dispatch,
    Emit,
    Finished,
    FlowDispatch,
    Idle,
    Move,
    RunFlow,
    Sleep,
)
from looms_runtime._history.state import ParallelState
from looms_runtime._history.steps import (
    MAX_AMBIGUOUS_RERUNS,
    ambiguous,
    dispatch,
    effect_move,
    late_outcome,
    next_wake_at,
    outcome_events,
    park,
    start_step,
    step_at,
    wait_move,
)

__all__ = [
    "MAX_AMBIGUOUS_RERUNS",
    "Dispatch",
    "Emit",
    "Finished",
    "FlowDispatch",
    "Idle",
    "InboxItem",
    "Move",
    "RunFlow",
    "Sleep",
    "dispatch",
    "late_outcome",
    "next_wake_at",
    "outcome_events",
    "plan",
]


def plan(
    state: RunState,
    flow: FlowDef,
    *,
    now_ms: int,
    in_flight: Collection[str] = (),
    inbox: Sequence[InboxItem] = (),
    running: bool = False,
) -> Move:
    """The run's next move.

    Args:
        in_flight: effects this process is running now; a dispatched effect not among
            them was in flight when a previous owner stopped, so it is ambiguous.
        inbox: pending external requests for the run.
        running: a session of the run's Python flow is running its code now.
    """
    if state.settled:
        return Finished()
    cancel = next((item for item in inbox if item.kind == "cancel"), None)
    if cancel is not None:
        if state.cancel_requested:
            return Emit((), consumed=(cancel.key,))
        return Emit((new_event(EventType.CANCEL_REQUESTED, reason=cancel.name),), (cancel.key,))
    for effect in state.effects.values():
        if effect.status == "dispatched" and effect.effect_id not in in_flight:
            return Emit((ambiguous(effect, now_ms),))
    if state.cancel_requested:
        if any(effect.status == "dispatched" for effect in state.effects.values()):
            return Idle("cancelling")
        if state.failure is not None:  # a graph that failed fast: its branches have stopped
            return Emit((new_event(EventType.RUN_FAILED, error=state.failure),))
        return Emit((new_event(EventType.RUN_CANCELLED, reason=state.cancel_reason),))
    retry = next((item for item in inbox if item.kind == "retry"), None)
    if retry is not None:
        return _operator_retry(state, retry, now_ms)
    if state.status == "parked":
        return Idle("parked")
    if isinstance(flow, PythonFlow):
        return _flow_move(state, now_ms, inbox, running=running)
    if state.graph:
        return graph_move(state, flow, now_ms=now_ms, inbox=inbox)
    for effect in state.effects.values():
        return effect_move(effect, step_at(flow.steps, effect.step_index), now_ms)
    for wait in state.waits.values():
        step = step_at(flow.steps, wait.step_index)
        return wait_move(wait, step.id, now_ms, inbox, fails_run=True)
    index = state.completed_steps
    if index >= len(flow.steps):
        return Emit((new_event(EventType.RUN_COMPLETED, result=state.result),))
    return start_step(flow.steps[index], index, now_ms)


def _flow_move(state: RunState, now_ms: int, inbox: Sequence[InboxItem], *, running: bool) -> Move:
    if running:
        return Idle("flow_running")
    if state.parallel is not None:
        return _branches_move(state, state.parallel, now_ms)
    for effect in state.effects.values():
        if effect.status in STUCK:
            if effect.idempotent and effect.ambiguities <= MAX_AMBIGUOUS_RERUNS:
                # The session re-dispatches it when the replay reaches its position.
                at = new_event(
                    EventType.EFFECT_RETRY_REQUESTED, effect_id=effect.effect_id, at=now_ms
                )
                return Emit((at,))
            return Emit((park(effect, effect.name or effect.effect_id),))
        if effect.status == "retry_wait":
            due = effect.next_attempt_at or 0
            return RunFlow() if due <= now_ms else Sleep(due)
        if effect.status == "cancelled":
            return Emit((new_event(EventType.RUN_CANCELLED, reason=effect.last_error),))
        if effect.status == "dispatched":
            return Idle("in_flight")
    for wait in state.waits.values():
        return wait_move(wait, wait.signal or wait.wait_id, now_ms, inbox, fails_run=False)
    return RunFlow()


def _branches_move(state: RunState, group: ParallelState, now_ms: int) -> Move:
    """An open `parallel` call whose session ended (a crash, a backoff): settle what a
    crash left ambiguous branch by branch, then run the flow again when a branch can
    start (a retry is due, or one never started) or sleep until the first retry."""
    effects = sorted(state.effects.values(), key=lambda effect: effect.step_index)
    stuck = [effect for effect in effects if effect.status in STUCK]
    for effect in stuck:
        if effect.idempotent and effect.ambiguities <= MAX_AMBIGUOUS_RERUNS:
            at = new_event(EventType.EFFECT_RETRY_REQUESTED, effect_id=effect.effect_id, at=now_ms)
            return Emit((at,))
    if stuck:
        # Each needs its own operator retry; the run parks again while one is left.
        return Emit((park(stuck[0], stuck[0].name or stuck[0].effect_id),))
    if any(effect.status == "dispatched" for effect in effects):
        return Idle("in_flight")
    # Answered branches leave `effects`; an unanswered one without an effect never started.
    unstarted = sum(entry is None for entry in group.results) - len(effects)
    due = [effect.next_attempt_at or 0 for effect in effects if effect.status == "retry_wait"]
    if unstarted > 0 or not due or min(due) <= now_ms:
        return RunFlow()
    return Sleep(min(due))


def _operator_retry(state: RunState, item: InboxItem, now_ms: int) -> Move:
    effect = state.effects.get(item.name or "")
    if effect is None or effect.status not in STUCK:
        return Emit((), consumed=(item.key,))
    event = new_event(EventType.EFFECT_RETRY_REQUESTED, effect_id=effect.effect_id, at=now_ms)
    return Emit((event,), consumed=(item.key,))
