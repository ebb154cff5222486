"""The next move of a run: a pure function of its state, its definition and the time.

The runtime asks `plan` again after every decision it applies, until the answer is
to wait. Decisions that only append events are buffered and committed together with
the next one that must be durable before anything runs (a dispatch), so a one-step
run costs three commits: start, dispatch, outcome plus settlement.

A Python flow decides its own steps (its code runs in a session, see
`_flow_session`); the planner only says when to run it again from the top, and
handles what no code has to decide: timers, retries, crashes, signals and cancels.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from looms_runtime._history.definitions import (
    EffectStep,
    FlowDef,
    PythonFlow,
    RetryPolicy,
    SleepStep,
    StepDef,
    StepsFlow,
    WaitSignalStep,
)
from looms_runtime._history.events import EventType, NewEvent, new_event
from looms_runtime._history.fold import STUCK, EffectState, RunState, WaitState
from looms_runtime._history.outcome import EffectResult
from looms_runtime.errors import CorruptHistoryError

MAX_AMBIGUOUS_RERUNS = 3
"""An idempotent step found in flight after this many crashes parks: a crash loop, not bad luck."""


@dataclass(frozen=True, slots=True, kw_only=True)
class InboxItem:
    """A durable external request not yet folded into the log (cancel, signal, retry)."""

    key: str
    kind: str
    name: str | None = None
    payload: Any = None


@dataclass(frozen=True, slots=True)
class Emit:
    """Append these events (and mark these inbox keys consumed); nothing runs."""

    events: tuple[NewEvent, ...]
    consumed: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Dispatch:
    """Commit `event` (effect_dispatched), then run the step's attempt."""

    event: NewEvent
    step: EffectStep
    attempt: int
    deadline_at: int | None


@dataclass(frozen=True, slots=True)
class FlowDispatch:
    """Commit `event` (a Python flow step's effect_dispatched), then let the session run it."""

    event: NewEvent
    effect_id: str


@dataclass(frozen=True, slots=True)
class RunFlow:
    """Run the Python flow's function from the top, replaying its journal."""


@dataclass(frozen=True, slots=True)
class Sleep:
    """Nothing to do before `until` (epoch ms): a timer wakes the run."""

    until: int


@dataclass(frozen=True, slots=True)
class Idle:
    """Nothing to do until something external happens (an outcome, a signal, an operator)."""

    reason: str


@dataclass(frozen=True, slots=True)
class Finished:
    """The run has settled."""


Move: TypeAlias = Emit | Dispatch | FlowDispatch | RunFlow | Sleep | Idle | Finished


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
            return Emit((_ambiguous(effect, now_ms),))
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
        return _effect_move(effect, _step(flow.steps, effect.step_index), now_ms)
    for wait in state.waits.values():
        step = _step(flow.steps, wait.step_index)
        return _wait_move(wait, step.id, now_ms, inbox, fails_run=True)
    index = state.completed_steps
    if index >= len(flow.steps):
        return Emit((new_event(EventType.RUN_COMPLETED, result=state.result),))
    return _start_step(flow.steps[index], index, now_ms)


def _flow_move(state: RunState, now_ms: int, inbox: Sequence[InboxItem], *, running: bool) -> Move:
    if running:
        return Idle("flow_running")
    for effect in state.effects.values():
        if effect.status in STUCK:
            if effect.idempotent and effect.ambiguities <= MAX_AMBIGUOUS_RERUNS:
                # The session re-dispatches it when the replay reaches its position.
                at = new_event(
                    EventType.EFFECT_RETRY_REQUESTED, effect_id=effect.effect_id, at=now_ms
                )
                return Emit((at,))
            return Emit((_park(effect, effect.name or effect.effect_id),))
        if effect.status == "retry_wait":
            due = effect.next_attempt_at or 0
            return RunFlow() if due <= now_ms else Sleep(due)
        if effect.status == "cancelled":
            return Emit((new_event(EventType.RUN_CANCELLED, reason=effect.last_error),))
        if effect.status == "dispatched":
            return Idle("in_flight")
    for wait in state.waits.values():
        return _wait_move(wait, wait.signal or wait.wait_id, now_ms, inbox, fails_run=False)
    return RunFlow()


def _park(effect: EffectState, name: str) -> NewEvent:
    why = "not idempotent" if not effect.idempotent else "in flight at too many crashes"
    reason = f"step {name!r} attempt {effect.attempt} is {effect.status} ({why})"
    return new_event(EventType.RUN_PARKED, effect_id=effect.effect_id, reason=reason)


def _step(steps: Sequence[StepDef], index: int) -> StepDef:
    if not 0 <= index < len(steps):
        raise CorruptHistoryError(f"the log names step {index}, the flow has {len(steps)}")
    return steps[index]


def _ambiguous(effect: EffectState, now_ms: int) -> NewEvent:
    timed_out = effect.deadline_at is not None and effect.deadline_at <= now_ms
    return new_event(
        EventType.EFFECT_AMBIGUOUS,
        effect_id=effect.effect_id,
        attempt=effect.attempt,
        timed_out=timed_out,
        reason="in flight when its owner stopped" + (", past its deadline" if timed_out else ""),
    )


def _operator_retry(state: RunState, item: InboxItem, now_ms: int) -> Move:
    effect = state.effects.get(item.name or "")
    if effect is None or effect.status not in STUCK:
        return Emit((), consumed=(item.key,))
    event = new_event(EventType.EFFECT_RETRY_REQUESTED, effect_id=effect.effect_id, at=now_ms)
    return Emit((event,), consumed=(item.key,))


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
        step = _step(flow.steps, failed[0].step_index)
        error = _failure(failed[0], step.id)
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
        move = _effect_move(effect, _step(flow.steps, effect.step_index), now_ms)
        if isinstance(move, Sleep):
            timers.append(move.until)
            continue
        return move
    for wait in waits:
        step = _step(flow.steps, wait.step_index)
        move = _wait_move(wait, step.id, now_ms, inbox, fails_run=True)
        if isinstance(move, Sleep):
            timers.append(move.until)
        elif not isinstance(move, Idle):
            return move
    if state.failure is None:
        ready = _ready_step(state, flow, busy=len(running) + len(waits))
        if ready is not None:
            return _start_step(flow.steps[ready], ready, now_ms)
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


def _failure(effect: EffectState, step_id: str) -> str:
    attempts = f"{effect.failures} attempt{'s' if effect.failures != 1 else ''}"
    return f"step {step_id!r} failed after {attempts}: {effect.last_error}"


def _effect_move(effect: EffectState, step: StepDef, now_ms: int) -> Move:
    if not isinstance(step, EffectStep):
        raise CorruptHistoryError(f"effect {effect.effect_id!r} names a {step.kind} step")
    if effect.status == "dispatched":
        return Idle("in_flight")
    if effect.status in STUCK:
        if step.idempotent and effect.ambiguities <= MAX_AMBIGUOUS_RERUNS:
            return dispatch(step, effect.step_index, effect.attempt + 1, now_ms, effect.give_up_at)
        return Emit((_park(effect, step.id),))
    if effect.status == "retry_wait":
        due = effect.next_attempt_at or 0
        if due <= now_ms:
            return dispatch(step, effect.step_index, effect.attempt + 1, now_ms, effect.give_up_at)
        return Sleep(due)
    if effect.status == "cancelled":
        return Emit((new_event(EventType.RUN_CANCELLED, reason=effect.last_error),))
    return Emit((new_event(EventType.RUN_FAILED, error=_failure(effect, step.id)),))


def _wait_move(
    wait: WaitState, name: str, now_ms: int, inbox: Sequence[InboxItem], *, fails_run: bool
) -> Move:
    if wait.kind == "signal":
        for item in inbox:
            if item.kind == "signal" and item.name == wait.signal:
                event = new_event(
                    EventType.WAIT_FINISHED,
                    wait_id=wait.wait_id,
                    reason="signal",
                    key=item.key,
                    payload=item.payload,
                )
                return Emit((event,), consumed=(item.key,))
    if wait.until is None:
        return Idle("waiting_signal")
    if wait.until > now_ms:
        return Sleep(wait.until)
    if wait.kind == "sleep":
        return Emit((new_event(EventType.WAIT_FINISHED, wait_id=wait.wait_id, reason="timer"),))
    timeout = new_event(EventType.WAIT_FINISHED, wait_id=wait.wait_id, reason="timeout")
    if not fails_run:
        return Emit((timeout,))  # a Python flow gets the timeout as an exception
    error = f"step {name!r} timed out waiting for signal {wait.signal!r}"
    return Emit((timeout, new_event(EventType.RUN_FAILED, error=error)))


def _start_step(step: StepDef, index: int, now_ms: int) -> Move:
    if isinstance(step, SleepStep):
        wake_at = now_ms + round(step.duration_s * 1000)
        return Emit((_wait_started(step.id, index, "sleep", wake_at, None),))
    if isinstance(step, WaitSignalStep):
        until = None if step.timeout_s is None else now_ms + round(step.timeout_s * 1000)
        return Emit((_wait_started(step.id, index, "signal", until, step.signal),))
    return dispatch(step, index, 1, now_ms)


def _wait_started(
    wait_id: str, index: int, kind: str, until: int | None, signal: str | None
) -> NewEvent:
    return new_event(
        EventType.WAIT_STARTED,
        wait_id=wait_id,
        step_index=index,
        kind=kind,
        until=until,
        signal=signal,
    )


def dispatch(
    step: EffectStep, index: int, attempt: int, now_ms: int, give_up_at: int | None = None
) -> Dispatch:
    """The decision to run `attempt` of an effect step, with its deadline.

    The first attempt fixes when the step gives up (its retry `deadline_s`); no
    attempt's own deadline runs past that.
    """
    if attempt == 1 and step.retry is not None and step.retry.deadline_s is not None:
        give_up_at = now_ms + round(step.retry.deadline_s * 1000)
    deadline = None if step.timeout_s is None else now_ms + round(step.timeout_s * 1000)
    if give_up_at is not None:
        deadline = give_up_at if deadline is None else min(deadline, give_up_at)
    extra = {} if give_up_at is None else {"give_up_at": give_up_at}
    event = new_event(
        EventType.EFFECT_DISPATCHED,
        effect_id=step.id,
        step_index=index,
        kind=step.kind,
        attempt=attempt,
        idempotent=step.idempotent,
        dispatched_at=now_ms,
        deadline_at=deadline,
        **extra,
    )
    return Dispatch(event=event, step=step, attempt=attempt, deadline_at=deadline)


def outcome_events(
    state: RunState,
    flow: FlowDef,
    result: EffectResult,
    *,
    now_ms: int,
    retry: RetryPolicy | None = None,
) -> tuple[NewEvent, ...]:
    """The events recording an attempt's result; empty for a stale result.

    `retry` is the policy of a Python flow's step (given with its call); a steps
    flow's policy comes from its definition.
    """
    effect = state.effects.get(result.effect_id)
    if effect is None or effect.attempt != result.attempt or effect.status != "dispatched":
        return ()
    ids = {"effect_id": effect.effect_id, "attempt": effect.attempt}
    if result.ambiguous:
        reason = result.error or "its outcome is unknown"
        return (new_event(EventType.EFFECT_AMBIGUOUS, **ids, timed_out=False, reason=reason),)
    if result.ok:
        return (new_event(EventType.EFFECT_SUCCEEDED, **ids, output=result.output),)
    if result.cancelled or state.cancel_requested:
        event = new_event(
            EventType.EFFECT_CANCELLED, **ids, error=result.error, output=result.output
        )
        return (event,)
    if not isinstance(flow, PythonFlow):
        step = _step(flow.steps, effect.step_index)
        retry = step.retry if isinstance(step, EffectStep) else None
    event = new_event(
        EventType.EFFECT_FAILED,
        **ids,
        error=result.error,
        output=result.output,
        next_attempt_at=_next_attempt_at(effect, retry, result, now_ms),
    )
    return (event,)


def _next_attempt_at(
    effect: EffectState, retry: RetryPolicy | None, result: EffectResult, now_ms: int
) -> int | None:
    if retry is None or not result.retryable or effect.failures + 1 >= retry.max_attempts:
        return None
    output = result.output
    if isinstance(output, dict) and output.get("exit_code") in retry.non_retryable_exit_codes:
        return None
    next_at = now_ms + retry.delay_ms(effect.failures + 1)
    if effect.give_up_at is not None and next_at > effect.give_up_at:
        return None
    return next_at


def late_outcome(result: EffectResult) -> NewEvent:
    """The informational record of a result that came after its attempt stopped counting."""
    return new_event(
        EventType.EFFECT_OUTCOME_LATE,
        effect_id=result.effect_id,
        attempt=result.attempt,
        ok=result.ok,
        error=result.error,
        output=result.output,
    )


def next_wake_at(state: RunState) -> int | None:
    """The earliest time the run has something to do by itself (a retry, a timer)."""
    times = [e.next_attempt_at for e in state.effects.values() if e.status == "retry_wait"]
    times += [w.until for w in state.waits.values()]
    due = [t for t in times if t is not None]
    return min(due) if due and not state.settled else None
