"""The worker's side of Python flow sessions: start them, answer their asks, end them.

A run has at most one session at a time (`slot.flow`). Each ask becomes events that
go through the engine's ordinary append; the answer is held in `slot.reply` and
sent only once those events are durable (`answer`), so a step runs only after its
`effect_dispatched` committed. An ask from a session that is no longer the run's
(ended by a cancel, a fence, a close) is answered `stop` at once.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future

import structlog

from looms_runtime._canonical import canonical_json
from looms_runtime._effects.launch import EffectRunner
from looms_runtime._engine.attempts import attempt_limit_s
from looms_runtime._engine.flow_session import (
    AskDispatch,
    AskFailed,
    AskFinish,
    AskWait,
    FlowAsk,
    FlowSession,
    Frontier,
    Reply,
    effect_id_of,
)
from looms_runtime._history.definitions import PythonFlow
from looms_runtime._history.events import EventType, NewEvent, new_event
from looms_runtime._history.fold import RunState, fold
from looms_runtime._history.planner import FlowDispatch, Move, outcome_events
from looms_runtime._store.loading import LoadedRun
from looms_runtime._workers.actors import Op, Slot

log = structlog.get_logger()

STOP: Reply = ("stop", None)


class FlowHost:
    """See the module docstring."""

    def __init__(
        self,
        *,
        clock_ms: Callable[[], int],
        runner: EffectRunner,
        submit: Callable[[str, Op], bool],
    ) -> None:
        self._clock_ms = clock_ms
        self._runner = runner
        self._submit = submit

    def launch(self, slot: Slot, run: LoadedRun) -> None:
        """Start a session that runs the flow function from the top."""
        flow = run.flow
        assert isinstance(flow, PythonFlow)  # noqa: S101 - RunFlow is planned for these only
        run_id = run.header.run_id
        session = FlowSession(
            run_id=run_id,
            ref=flow.ref,
            input_json=canonical_json(run.header.input),
            journal=run.state.journal,
            frontier=frontier_of(run.state),
            flow_version=flow.version,
            clock_ms=self._clock_ms,
            submit=lambda ask: self._submit(run_id, Op("flow", ask=ask)),
        )
        slot.flow = session
        slot.in_flight = session.token
        slot.in_flight_effect = None
        log.debug("flow_session_started", replaying=len(run.state.journal))
        self._runner.start(session.run)

    def on_ask(
        self, slot: Slot, run: LoadedRun, state: RunState, ask: FlowAsk, *, closing: bool
    ) -> tuple[list[NewEvent], Move | None]:
        """The events an ask appends, and a dispatch to commit first (or None).

        The ask's answer is left in `slot.reply` for `answer`.
        """
        if slot.flow is not ask.session:
            _resolve(ask.reply, STOP)
            return [], None
        now = self._clock_ms()
        events: list[NewEvent] = []
        if ask.outcome is not None:
            events.extend(outcome_events(state, run.flow, ask.outcome, now_ms=now))
        events.extend(ask.values)
        state = fold(events, state)
        slot.in_flight_effect = None
        move = ask.move
        if isinstance(move, AskDispatch):
            cancel = state.cancel_requested or any(i.kind == "cancel" for i in run.inbox)
            if cancel or closing or not _dispatchable(state, move):
                self.end(slot, reply=(ask.reply, STOP))
                return events, None
            decision = flow_dispatch(state, move, now_ms=now)
            limit = attempt_limit_s(move.timeout_s, decision.event, now)
            slot.reply = (ask.reply, ("go", {"timeout_s": limit}))
            return events, decision
        if isinstance(move, AskFailed):
            failed = outcome_events(state, run.flow, move.result, now_ms=now, retry=move.retry)
            events.extend(failed)
            after = fold(failed, state)
            if failed and move.result.effect_id not in after.effects:
                slot.reply = (ask.reply, ("raise", after.journal[-1]))
            else:
                self.end(slot, reply=(ask.reply, ("suspend", None)))
            return events, None
        self.end(slot)
        if isinstance(move, AskWait):
            events.append(_wait_started(move, now))
        elif isinstance(move, AskFinish) and not state.cancel_requested:
            if move.ok:
                events.append(new_event(EventType.RUN_COMPLETED, result=move.result))
            else:
                log.warning("flow_failed", error=move.error)
                events.append(new_event(EventType.RUN_FAILED, error=move.error))
        return events, None

    def refuse(self, ask: FlowAsk) -> None:
        """Answer `stop` to an ask nobody will act on (its run is gone, or failed to drive)."""
        _resolve(ask.reply, STOP)

    def end(self, slot: Slot, *, reply: tuple[Future[Reply] | None, Reply] | None = None) -> None:
        """The run's session is over (its thread may still be finishing)."""
        slot.flow = None
        slot.in_flight = None
        slot.in_flight_effect = None
        if reply is not None:
            slot.reply = reply

    def answer(self, slot: Slot) -> None:
        """Send the held answer (its events are durable now)."""
        held, slot.reply = slot.reply, None
        if held is not None:
            _resolve(held[0], held[1])

    def abandon(self, slot: Slot) -> None:
        """Stop the run's session without an answer to wait for (a lost fence, a failure)."""
        held, slot.reply = slot.reply, None
        if held is not None:
            _resolve(held[0], STOP)
        if slot.flow is not None:
            slot.flow.token.cancel(0.0)
            self.end(slot)


def frontier_of(state: RunState) -> Frontier | None:
    """The step due for another attempt where the journal ends, if there is one."""
    for effect in state.effects.values():
        if effect.status == "retry_wait" and effect.name is not None:
            return Frontier(name=effect.name, attempt=effect.attempt)
    return None


def _dispatchable(state: RunState, move: AskDispatch) -> bool:
    previous = state.effects.get(effect_id_of(move.name, move.position))
    if move.position != len(state.journal):
        return False
    if previous is None:
        return move.attempt == 1 and not state.effects and not state.waits
    return previous.status == "retry_wait" and move.attempt == previous.attempt + 1


def flow_dispatch(state: RunState, move: AskDispatch, *, now_ms: int) -> FlowDispatch:
    """The `effect_dispatched` event of a flow step's attempt."""
    effect_id = effect_id_of(move.name, move.position)
    previous = state.effects.get(effect_id)
    give_up_at = previous.give_up_at if previous is not None else None
    if previous is None and move.retry is not None and move.retry.deadline_s is not None:
        give_up_at = now_ms + round(move.retry.deadline_s * 1000)
    deadline = None if move.timeout_s is None else now_ms + round(move.timeout_s * 1000)
    if give_up_at is not None:
        deadline = give_up_at if deadline is None else min(deadline, give_up_at)
    extra = {} if give_up_at is None else {"give_up_at": give_up_at}
    event = new_event(
        EventType.EFFECT_DISPATCHED,
        effect_id=effect_id,
        step_index=move.position,
        kind="python",
        attempt=move.attempt,
        idempotent=move.idempotent,
        dispatched_at=now_ms,
        deadline_at=deadline,
        name=move.name,
        **extra,
    )
    return FlowDispatch(event=event, effect_id=effect_id)


def _wait_started(move: AskWait, now_ms: int) -> NewEvent:
    until = None if move.duration_ms is None else now_ms + move.duration_ms
    return new_event(
        EventType.WAIT_STARTED,
        wait_id=f"{move.name}#{move.position}",
        step_index=move.position,
        kind=move.kind,
        until=until,
        signal=move.name if move.kind == "signal" else None,
    )


def _resolve(future: Future[Reply] | None, reply: Reply) -> None:
    if future is not None and not future.done():
        future.set_result(reply)
