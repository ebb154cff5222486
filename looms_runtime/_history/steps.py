"""One step's moves: dispatching an attempt, its outcome, retries, waits and crashes.

Shared by the planner of flows run in order and by the planner of graphs: what
becomes of one step does not depend on how the flow orders its steps.
"""

from __future__ import annotations

from collections.abc import Sequence

from looms_runtime._history.definitions import (
    EffectStep,
    FlowDef,
    PythonFlow,
    RetryPolicy,
    SleepStep,
    StepDef,
    WaitSignalStep,
)
from looms_runtime._history.events import EventType, NewEvent, new_event
from looms_runtime._history.fold import STUCK, EffectState, RunState, WaitState
from looms_runtime._history.inbox import InboxItem
from looms_runtime._history.moves import Dispatch, Emit, Idle, Move, Sleep
from looms_runtime._history.outcome import EffectResult
from looms_runtime.errors import CorruptHistoryError

MAX_AMBIGUOUS_RERUNS = 3
"""An idempotent step found in flight after this many crashes parks: a crash loop, not bad luck."""


def park(effect: EffectState, name: str) -> NewEvent:
    why = "not idempotent" if not effect.idempotent else "in flight at too many crashes"
    reason = f"step {name!r} attempt {effect.attempt} is {effect.status} ({why})"
    return new_event(EventType.RUN_PARKED, effect_id=effect.effect_id, reason=reason)


def step_at(steps: Sequence[StepDef], index: int) -> StepDef:
    if not 0 <= index < len(steps):
        raise CorruptHistoryError(f"the log names step {index}, the flow has {len(steps)}")
    return steps[index]


def ambiguous(effect: EffectState, now_ms: int) -> NewEvent:
    timed_out = effect.deadline_at is not None and effect.deadline_at <= now_ms
    return new_event(
        EventType.EFFECT_AMBIGUOUS,
        effect_id=effect.effect_id,
        attempt=effect.attempt,
        timed_out=timed_out,
        reason="in flight when its owner stopped" + (", past its deadline" if timed_out else ""),
    )


def failure_of(effect: EffectState, step_id: str) -> str:
    attempts = f"{effect.failures} attempt{'s' if effect.failures != 1 else ''}"
    return f"step {step_id!r} failed after {attempts}: {effect.last_error}"


def effect_move(effect: EffectState, step: StepDef, now_ms: int) -> Move:
    if not isinstance(step, EffectStep):
        raise CorruptHistoryError(f"effect {effect.effect_id!r} names a {step.kind} step")
    if effect.status == "dispatched":
        return Idle("in_flight")
    if effect.status in STUCK:
        if step.idempotent and effect.ambiguities <= MAX_AMBIGUOUS_RERUNS:
            return dispatch(step, effect.step_index, effect.attempt + 1, now_ms, effect.give_up_at)
        return Emit((park(effect, step.id),))
    if effect.status == "retry_wait":
        due = effect.next_attempt_at or 0
        if due <= now_ms:
            return dispatch(step, effect.step_index, effect.attempt + 1, now_ms, effect.give_up_at)
        return Sleep(due)
    if effect.status == "cancelled":
        return Emit((new_event(EventType.RUN_CANCELLED, reason=effect.last_error),))
    return Emit((new_event(EventType.RUN_FAILED, error=failure_of(effect, step.id)),))


def wait_move(
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


def start_step(step: StepDef, index: int, now_ms: int) -> Move:
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
        # What output reached its files is kept (older logs have none: the key is optional).
        left = {} if result.output is None else {"output": result.output}
        event = new_event(EventType.EFFECT_AMBIGUOUS, **ids, timed_out=False, reason=reason, **left)
        return (event,)
    if result.ok:
        return (new_event(EventType.EFFECT_SUCCEEDED, **ids, output=result.output),)
    if result.cancelled or state.cancel_requested:
        event = new_event(
            EventType.EFFECT_CANCELLED, **ids, error=result.error, output=result.output
        )
        return (event,)
    if not isinstance(flow, PythonFlow):
        step = step_at(flow.steps, effect.step_index)
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
