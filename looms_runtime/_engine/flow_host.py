"""The worker's side of Python flow sessions: start them, answer their asks, end them.

A run has at most one session at a time (`slot.flow`). Each ask becomes events that
go through the engine's ordinary append; the answer is held in `slot.reply` and
sent only once those events are durable (`answer`), so a step runs only after its
`effect_dispatched` committed. An ask from a session that is no longer the run's
(ended by a cancel, a fence, a close) is answered `stop` at once.

The branches of a `parallel` call are effects the session runs at once: each is in
`slot.flow_effects` from its dispatch's commit until the session reports it, so the
planner never takes one of them for an attempt left in flight by a crash.

With worker processes (`EffectRunner.workers`) the session runs in a worker: the
flow function, its replay and its steps' calls are there, and each ask comes over
the worker's socket to this same handler (`RemoteSession` stands for the session
here). A worker that dies under a session is that session's crash (`AskCrashed`):
the steps it had in flight are ambiguous (re-run when idempotent, else the run
parks), as after a crash of the daemon; with none in flight, the flow runs again
from its log, and fails after `MAX_FLOW_CRASHES` such crashes.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import structlog

from looms_runtime._cancel import CancelToken
from looms_runtime._canonical import canonical_json
from looms_runtime._effects.launch import EffectRunner
from looms_runtime._engine.attempts import attempt_limit_s
from looms_runtime._engine.flow_asks import (
    AskBranches,
    AskCrashed,
    AskDispatch,
    AskFailed,
    AskFinish,
    AskWait,
    FlowAsk,
    Frontier,
    GroupSpec,
    GroupView,
    Reply,
    effect_id_of,
)
from looms_runtime._engine.flow_asks import Move as AskMove
from looms_runtime._engine.flow_branches import view_of
from looms_runtime._engine.flow_session import FlowSession
from looms_runtime._history.definitions import PythonFlow
from looms_runtime._history.events import EventType, NewEvent, new_event
from looms_runtime._history.fold import RunState, fold
from looms_runtime._history.outcome import EffectResult
from looms_runtime._history.planner import FlowDispatch, Move, late_outcome, outcome_events
from looms_runtime._store.loading import LoadedRun
from looms_runtime._workers.actors import Op, Slot

log = structlog.get_logger()

STOP: Reply = ("stop", None)
MAX_FLOW_CRASHES = 3
"""Sessions of one run whose worker died in the flow's own code (no step in flight)
before the run fails: such code would crash again at every replay."""


class RemoteSession:
    """A session that runs in a worker process, as its run's worker sees it."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.token = CancelToken()


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
        if self._runner.workers is not None:
            self._launch_remote(slot, run, flow)
            return
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
            group=open_group(run.state),
            spawn=self._runner.start,
        )
        slot.flow = session
        slot.flow_effects.clear()
        log.debug("flow_session_started", replaying=len(run.state.journal))
        self._runner.start(session.run)

    def _launch_remote(self, slot: Slot, run: LoadedRun, flow: PythonFlow) -> None:
        workers = self._runner.workers
        assert workers is not None  # noqa: S101 - checked by `launch`
        run_id = run.header.run_id
        session = RemoteSession(run_id)
        spec = {
            "run_id": run_id,
            "ref": flow.ref,
            "input_json": canonical_json(run.header.input),
            "journal": run.state.journal,
            "frontier": frontier_of(run.state),
            "flow_version": flow.version,
            "group": open_group(run.state),
        }
        slot.flow = session
        slot.flow_effects.clear()

        def on_ask(
            move: AskMove, outcome: EffectResult | None, values: tuple[NewEvent, ...], reply: Any
        ) -> None:
            if not self._submit(
                run_id, Op("flow", ask=FlowAsk(session, move, outcome, values, reply))
            ):
                _resolve(reply, STOP)

        def on_crash(error: str, outcome: EffectResult | None) -> None:
            crashed = FlowAsk(session, AskCrashed(error), outcome, (), None)
            self._submit(run_id, Op("flow", ask=crashed))

        log.debug("flow_session_started", replaying=len(run.state.journal), worker=True)
        self._runner.start(
            lambda: workers.run_session(spec, session.token, on_ask=on_ask, on_crash=on_crash)
        )

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
        move = ask.move
        if isinstance(move, AskCrashed):
            return [*events, *self._crashed(slot, run, state, move, now)], None
        if isinstance(move, AskBranches):
            more, dispatch = self._branches(slot, run, state, ask, move, now, closing=closing)
            return [*events, *more], dispatch
        slot.flow_effects.clear()
        if isinstance(move, AskDispatch):
            cancel = state.cancel_requested or any(i.kind == "cancel" for i in run.inbox)
            if cancel or closing or not _dispatchable(state, move):
                self.end(slot, reply=(ask.reply, STOP))
                return events, None
            decision = flow_dispatch(state, move, now_ms=now)
            limit = attempt_limit_s(move.timeout_s, decision.events[0], now)
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

    def _crashed(
        self, slot: Slot, run: LoadedRun, state: RunState, move: AskCrashed, now: int
    ) -> list[NewEvent]:
        """The session's worker died: what it ran is ambiguous (see the module doc)."""
        events: list[NewEvent] = []
        for effect_id in sorted(slot.flow_effects):
            effect = state.effects.get(effect_id)
            if effect is None or effect.status != "dispatched":
                continue
            lost = EffectResult(
                effect_id=effect_id,
                attempt=effect.attempt,
                ok=False,
                error=move.error,
                ambiguous=True,
            )
            recorded = outcome_events(state, run.flow, lost, now_ms=now)
            events.extend(recorded)
            state = fold(recorded, state)
        if not events:
            slot.flow_crashes += 1
            log.warning("flow_session_crashed", error=move.error, crashes=slot.flow_crashes)
            if slot.flow_crashes >= MAX_FLOW_CRASHES and not state.cancel_requested:
                error = f"{move.error}, {slot.flow_crashes} times, in the flow's own code"
                events.append(new_event(EventType.RUN_FAILED, error=error))
        self.end(slot)
        return events

    def refuse(self, ask: FlowAsk) -> None:
        """Answer `stop` to an ask nobody will act on (its run is gone, or failed to drive)."""
        _resolve(ask.reply, STOP)

    def end(self, slot: Slot, *, reply: tuple[Future[Reply] | None, Reply] | None = None) -> None:
        """The run's session is over (its thread may still be finishing)."""
        slot.flow = None
        slot.flow_effects.clear()
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

    def _branches(
        self,
        slot: Slot,
        run: LoadedRun,
        state: RunState,
        ask: FlowAsk,
        move: AskBranches,
        now: int,
        *,
        closing: bool,
    ) -> tuple[list[NewEvent], FlowDispatch | None]:
        """Record a `parallel` call's outcomes, then dispatch what may start of what it
        asks (nothing under a cancel or a closing runtime, nothing for a stopped call)."""
        group = state.parallel
        spec = move.opening
        if spec is None and group is not None and group.position == move.position:
            spec = GroupSpec(group.names, group.fail_fast, group.max_parallel)
        if move.opening is not None:
            slot.flow_effects.clear()  # the session's last step is over: a call opens alone
        events: list[NewEvent] = []
        for branch in move.results:
            slot.flow_effects.discard(branch.result.effect_id)
            retry = None if state.parallel and state.parallel.stopping else branch.retry
            recorded = outcome_events(state, run.flow, branch.result, now_ms=now, retry=retry)
            events.extend(recorded or (late_outcome(branch.result),))
            state = fold(recorded, state)
        refuse = closing or state.cancel_requested or any(i.kind == "cancel" for i in run.inbox)
        opens = move.opening is not None and not refuse and _can_open(state, move.position)
        if spec is None or (move.opening is not None and not opens):
            self.end(slot, reply=(ask.reply, STOP))
            return events, None
        dispatch, granted, state = _started(state, move, spec, now, opens=opens, refuse=refuse)
        if refuse and not slot.flow_effects:
            self.end(slot, reply=(ask.reply, STOP))  # nothing of the session runs any more
            return events, None
        slot.reply = (ask.reply, ("go", {"view": view_of(state, move.position, spec, granted)}))
        return events, dispatch


def _started(
    state: RunState, move: AskBranches, spec: GroupSpec, now: int, *, opens: bool, refuse: bool
) -> tuple[FlowDispatch | None, dict[int, float | None], RunState]:
    """The dispatch of the call's opening (when it opens) and of the attempts it may
    start now, the time limit of each started branch by index, and the state after."""
    events: list[NewEvent] = []
    if opens:
        opening = new_event(
            EventType.PARALLEL_STARTED,
            position=move.position,
            names=list(spec.names),
            fail_fast=spec.fail_fast,
            max_parallel=spec.max_parallel,
        )
        events.append(opening)
        state = fold([opening], state)
    granted: dict[int, float | None] = {}
    ids: list[str] = []
    for start in () if refuse else move.dispatches:
        if _branch_dispatchable(state, start, now):
            decision = flow_dispatch(state, start, now_ms=now, branch_of=move.position)
            events.extend(decision.events)
            ids.extend(decision.effect_ids)
            state = fold(decision.events, state)
            index = start.position - move.position
            granted[index] = attempt_limit_s(start.timeout_s, decision.events[0], now)
    dispatch = FlowDispatch(events=tuple(events), effect_ids=tuple(ids)) if events else None
    return dispatch, granted, state


def open_group(state: RunState) -> GroupView | None:
    """The log's view of a `parallel` call still open, for a session that resumes it."""
    group = state.parallel
    if group is None:
        return None
    spec = GroupSpec(group.names, group.fail_fast, group.max_parallel)
    return view_of(state, group.position, spec, {})


def _can_open(state: RunState, position: int) -> bool:
    free = state.parallel is None and not state.effects and not state.waits
    return free and position == len(state.journal)


def _branch_dispatchable(state: RunState, move: AskDispatch, now_ms: int) -> bool:
    group = state.parallel
    if group is None or group.stopping:
        return False
    index = move.position - group.position
    if not 0 <= index < len(group.names) or group.results[index] is not None:
        return False
    if group.names[index] != move.name:
        return False
    previous = state.effects.get(effect_id_of(move.name, move.position))
    if previous is None:
        return move.attempt == 1
    due = (previous.next_attempt_at or 0) <= now_ms
    return previous.status == "retry_wait" and move.attempt == previous.attempt + 1 and due


def frontier_of(state: RunState) -> Frontier | None:
    """The step due for another attempt where the journal ends, if there is one."""
    if state.parallel is not None:
        return None  # a parallel call's branches are resumed by the call (`open_group`)
    for effect in state.effects.values():
        if effect.status == "retry_wait" and effect.name is not None:
            return Frontier(name=effect.name, attempt=effect.attempt)
    return None


def _dispatchable(state: RunState, move: AskDispatch) -> bool:
    previous = state.effects.get(effect_id_of(move.name, move.position))
    if move.position != len(state.journal):
        return False
    if previous is None:
        free = state.parallel is None and not state.effects and not state.waits
        return move.attempt == 1 and free
    return previous.status == "retry_wait" and move.attempt == previous.attempt + 1


def flow_dispatch(
    state: RunState, move: AskDispatch, *, now_ms: int, branch_of: int | None = None
) -> FlowDispatch:
    """The `effect_dispatched` event of a flow step's attempt (of a `parallel` call's
    branch: `branch_of` is the call's position, the branch's thread in the log)."""
    effect_id = effect_id_of(move.name, move.position)
    previous = state.effects.get(effect_id)
    give_up_at = previous.give_up_at if previous is not None else None
    if previous is None and move.retry is not None and move.retry.deadline_s is not None:
        give_up_at = now_ms + round(move.retry.deadline_s * 1000)
    deadline = None if move.timeout_s is None else now_ms + round(move.timeout_s * 1000)
    if give_up_at is not None:
        deadline = give_up_at if deadline is None else min(deadline, give_up_at)
    extra: dict[str, int] = {} if give_up_at is None else {"give_up_at": give_up_at}
    if branch_of is not None:
        extra["branch_of"] = branch_of
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
    return FlowDispatch(events=(event,), effect_ids=(effect_id,))


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
