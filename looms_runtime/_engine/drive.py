"""Drives one run at a time: load, plan, append, run effects, settle.

A run's worker folds the run's state, asks the planner for the next move and
applies it, buffering appends until a move must be durable first (a dispatch) or
the run has nothing left to do now. Effects run on their own threads and come back
as `outcome` operations, so the worker never blocks on a command.

Crash safety rests on two rules: an effect runs only after its `effect_dispatched`
event committed, and a run loaded from the store has nothing in flight in this
process: a dispatched command is what its supervisor's directory says (`adoption`),
any other dispatched effect without an outcome is ambiguous (the planner says so).

A Python flow's code runs in a session (`flow_host`) whose asks arrive as `flow`
operations; they are folded and appended like any other events.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Sequence

import structlog

from looms_runtime._effects import attempts
from looms_runtime._effects.launch import EffectRunner
from looms_runtime._engine.adoption import reattach
from looms_runtime._engine.flow_host import FlowHost
from looms_runtime._engine.jobs import (
    RETRY_MIN_MS,
    EngineConfig,
    Unflushed,
    append_job,
    releases,
    retry_backoff_ms,
    take_requests,
)
from looms_runtime._engine.late import LateOutcomes, abandoned
from looms_runtime._engine.launches import Launches
from looms_runtime._engine.reports import (
    announce_settled,
    bind_log_fields,
    log_emitted,
    log_outcome,
)
from looms_runtime._history.events import NewEvent
from looms_runtime._history.fold import RunState, apply, fold
from looms_runtime._history.planner import (
    Dispatch,
    Emit,
    FlowDispatch,
    Idle,
    Move,
    RunFlow,
    Sleep,
    late_outcome,
    outcome_events,
    plan,
)
from looms_runtime._store.committer import Committer
from looms_runtime._store.loading import (
    LoadedRun,
    Prestarted,
    load_owned_run,
    reload_inbox,
    seeded,
    still_committed,
)
from looms_runtime._store.registry import FlowRegistry
from looms_runtime._store.rows import AppendJob, NewRun
from looms_runtime._workers.actors import DRIVE, Actors, Op, Slot
from looms_runtime._workers.timers import TimerQueue
from looms_runtime.db import Database
from looms_runtime.errors import (
    DatabaseUnavailableError,
    FencedError,
    LoomsError,
    MaxWakeIterationsError,
)
from looms_runtime.records import RunSettled

log = structlog.get_logger()

MAX_WAKE_ITERATIONS = 100
FAILED_DRIVE_RETRY_MS = 60_000


class Engine:
    """The handler of every run operation (see the module docstring)."""

    def __init__(
        self,
        *,
        db: Database,
        config: EngineConfig,
        clock_ms: Callable[[], int],
        committer: Committer,
        actors: Actors,
        timers: TimerQueue,
        runner: EffectRunner,
        flows: FlowRegistry,
        on_settled: Callable[[RunSettled], None] | None,
        settled_notify: Callable[[str], None],
    ) -> None:
        self._db = db
        self._config = config
        self._clock_ms = clock_ms
        self._committer = committer
        self._actors = actors
        self._timers = timers
        self._runner = runner
        self._flows = flows
        self._on_settled = on_settled
        self._settled_notify = settled_notify
        self._host = FlowHost(clock_ms=clock_ms, runner=runner, submit=actors.submit)
        self._launches = Launches(
            runner=runner,
            clock_ms=clock_ms,
            timers=timers,
            submit=actors.submit,
            env_prefix=config.env_prefix,
            output_limit_bytes=config.output_limit_bytes,
        )
        self._late = LateOutcomes(
            db=db, committer=committer, owner=config.owner, clock_ms=clock_ms, host=self._host
        )
        self.closing = False

    def handle(self, slot: Slot, op: Op) -> None:
        """Apply one operation to its run (called by the run's worker only).

        Operations that found the store unavailable wait in the slot's stash and run
        first on the next attempt, so an effect's outcome is never dropped for it. Its
        log lines carry the run's id and log attributes, bound in a copy of the worker's
        context so that none of them stays on the thread for another run.
        """
        contextvars.copy_context().run(self._handle_ops, slot, op)

    def _handle_ops(self, slot: Slot, op: Op) -> None:
        ops = [*slot.stash, op]
        slot.stash = []
        structlog.contextvars.bind_contextvars(run_id=slot.run_id, **(slot.log_fields or {}))
        for index, current in enumerate(ops):
            try:
                self._handle(slot, current)
            except DatabaseUnavailableError as exc:
                log.warning("run_store_unavailable", error=exc.message)
                slot.stash = [later for later in ops[index:] if later != DRIVE]
                if slot.unflushed is None:
                    slot.run = None
                self._retry_later(slot.run_id, retry_backoff_ms(slot.unflushed))
                return
            except LoomsError as exc:
                log.error("run_drive_failed", error_code=exc.code, error=exc.message)
                self._late.drop(slot, current)
                self._retry_later(slot.run_id, FAILED_DRIVE_RETRY_MS)

    def _handle(self, slot: Slot, op: Op) -> None:
        if slot.unflushed is not None:
            self._flush_deferred(slot)
        if slot.run is None and isinstance(op.seed, LoadedRun):
            slot.run = op.seed
        elif slot.run is None and isinstance(op.seed, NewRun):
            # Seeded here, on a worker, so that `start_runs` returns right after its commit.
            slot.run = seeded(op.seed, self._flows.get(op.seed.flow, op.seed.version))
        elif slot.run is None and isinstance(op.seed, Prestarted):
            # Its first attempts were dispatched in the start's own transaction: they
            # start now, with no commit of their own.
            new, launches, state = op.seed
            flow = self._flows.get(new.flow, new.version)
            slot.run = seeded(new, flow, [launch.event for launch in launches], state)
            slot.log_fields = bind_log_fields(slot.run, self._config.log_attributes)
            self._follow(slot, slot.run, slot.run.state, Idle("started"), launches)
            return
        fresh = slot.run is None or isinstance(op.seed, LoadedRun)
        run = slot.run
        if run is None:
            run = load_owned_run(self._db, self._flows, slot.run_id, owner=self._config.owner)
            if run is None:
                self._late.orphan(slot, op)
                return
            slot.run = run
        if slot.log_fields is None:
            slot.log_fields = bind_log_fields(run, self._config.log_attributes)
        if op.refresh:
            run.inbox = reload_inbox(self._db, slot.run_id)
        pending: list[NewEvent] = []
        state = run.state
        first: Move | None = None
        if fresh and not isinstance(op.seed, NewRun):
            found = reattach(
                slot,
                run,
                state,
                runner=self._runner,
                now_ms=self._clock_ms(),
                env_prefix=self._config.env_prefix,
                output_limit_bytes=self._config.output_limit_bytes,
                on_done=lambda result: self._launches.done(slot.run_id, result),
            )
            pending.extend(found.events)
            state = found.state
        if op.kind == "outcome" and op.result is not None:
            attempt = slot.attempts.pop(op.result.effect_id, None)
            if attempt is not None and attempt.path is not None:
                slot.discard.append(attempt.path)
            if not slot.attempts:
                slot.abandon_at = None
            now = self._clock_ms()
            recorded = outcome_events(state, run.flow, op.result, now_ms=now)
            pending.extend(recorded or (late_outcome(op.result),))
            state = fold(pending, state)
            log_outcome(op.result)
        elif op.kind == "flow":
            events, first = self._host.on_ask(slot, run, state, op.ask, closing=self.closing)
            pending.extend(events)
            state = fold(events, state)
        if self._launches.abandoning(slot, state):
            given_up = abandoned(state, run.cancel_grace_s)
            pending.extend(given_up)
            state = fold(given_up, state)
        self._advance(slot, run, state, pending, first)

    def _advance(
        self,
        slot: Slot,
        run: LoadedRun,
        state: RunState,
        pending: list[NewEvent],
        first: Move | None = None,
    ) -> None:
        consumed: list[str] = []
        launches: list[Dispatch] = []
        for _ in range(MAX_WAKE_ITERATIONS):
            decision = first or plan(
                state,
                run.flow,
                now_ms=self._clock_ms(),
                in_flight=(*slot.in_flight(), *(launch.step.id for launch in launches)),
                inbox=run.inbox,
                running=slot.flow is not None,
            )
            first = None
            if isinstance(decision, FlowDispatch):
                pending.extend(decision.events)
                state = fold(decision.events, state)
            if isinstance(decision, Emit):
                take_requests(run, decision.consumed)
                pending.extend(decision.events)
                consumed.extend(decision.consumed)
                state = fold(decision.events, state)
                log_emitted(decision.events)
                continue
            if isinstance(decision, Dispatch | RunFlow) and self.closing:
                # A closing runtime starts nothing new: the run resumes at the next start.
                decision = Idle("closing")
            if isinstance(decision, Dispatch):
                # Committed with whatever else the run can start now (a graph's ready
                # branches): one commit, then every attempt starts.
                launches.append(self._launches.supervised(decision))
                pending.append(launches[-1].event)
                state = apply(state, launches[-1].event)
                continue
            if pending or consumed:
                job = self._job(slot, run, state, pending, consumed, decision, launches)
                if not self._append(slot, run, job, state, decision, launches):
                    return
            self._follow(slot, run, state, decision, launches)
            return
        raise MaxWakeIterationsError(
            f"no stable state after {MAX_WAKE_ITERATIONS} planning steps", run_id=slot.run_id
        )

    def _job(
        self,
        slot: Slot,
        run: LoadedRun,
        state: RunState,
        events: list[NewEvent],
        consumed: list[str],
        decision: Move,
        launches: list[Dispatch],
    ) -> AppendJob:
        releasing = releases(decision, in_flight=slot.running() or bool(launches))
        return append_job(
            run,
            state,
            events,
            consumed,
            releasing=releasing,
            snapshot_every=self._config.snapshot_every,
            now_ms=self._clock_ms(),
        )

    def _append(
        self,
        slot: Slot,
        run: LoadedRun,
        job: AppendJob,
        state: RunState,
        decision: Move,
        launches: list[Dispatch],
    ) -> bool:
        try:
            self._committer.submit(job).result()
        except FencedError as exc:
            if not still_committed(self._db, job, owner=self._config.owner):
                log.warning("append_fenced", **exc.details)
                slot.run = None
                self._host.abandon(slot)
                self._actors.submit(slot.run_id, DRIVE)
                return False
        except DatabaseUnavailableError as exc:
            log.warning("append_deferred", error=exc.message, events=len(job.events))
            slot.unflushed = Unflushed(
                job=job, run=run, state=state, then=decision, launches=tuple(launches)
            )
            self._retry_later(slot.run_id, RETRY_MIN_MS)
            return False
        self._committed(slot, run, job, state)
        return True

    def _committed(self, slot: Slot, run: LoadedRun, job: AppendJob, state: RunState) -> None:
        run.state = state
        if job.snapshot is not None:
            run.snapshot_seq = job.snapshot.seq
        # Outcomes read from attempt directories are durable now: the files may go.
        for path in slot.discard:
            attempts.discard(path)
        slot.discard.clear()

    def _flush_deferred(self, slot: Slot) -> None:
        """Retry a deferred append with its original fence.

        Raises:
            DatabaseUnavailableError: still failing; the caller stashes its operation.
        """
        pending = slot.unflushed
        assert isinstance(pending, Unflushed)  # noqa: S101 - checked by the caller
        try:
            self._committer.submit(pending.job).result()
        except FencedError:
            # A lost answer may have hidden a commit: the fence then finds our own
            # append in place, and the run goes on as if it had been answered.
            committed = still_committed(self._db, pending.job, owner=self._config.owner)
            if not committed:
                slot.unflushed = None
                slot.run = None
                self._host.abandon(slot)
                return
        slot.unflushed = None
        slot.run = pending.run
        self._committed(slot, pending.run, pending.job, pending.state)
        self._follow(slot, pending.run, pending.state, pending.then, pending.launches)

    def _follow(
        self,
        slot: Slot,
        run: LoadedRun,
        state: RunState,
        decision: Move,
        launches: Sequence[Dispatch] = (),
    ) -> None:
        """Act on what was just committed: start the attempts it dispatched, then the rest."""
        if state.settled:
            self._settled(slot, run)
            self._host.answer(slot)
            return
        for launch in launches:
            self._launches.launch(slot, run, launch)
        if isinstance(decision, FlowDispatch):
            slot.flow_effects.update(decision.effect_ids)
        elif isinstance(decision, RunFlow):
            self._host.launch(slot, run)
        elif isinstance(decision, Sleep):
            self._timers.schedule(slot.run_id, decision.until)
        elif state.cancel_requested and slot.running():
            self._launches.cancel_in_flight(slot, run, state)
        self._host.answer(slot)

    def _settled(self, slot: Slot, run: LoadedRun) -> None:
        state = run.state
        slot.run = None
        slot.abandon_at = None
        if slot.flow is not None:
            # Settled under a live session (a cancel): it stops at its next call.
            slot.flow.token.cancel(0.0)
        log.debug("run_settled", status=state.status, error=state.error, flow=run.header.flow)
        self._settled_notify(run.header.run_id)
        announce_settled(run, self._on_settled)

    def _retry_later(self, run_id: str, delay_ms: int) -> None:
        self._timers.schedule(run_id, self._clock_ms() + delay_ms)
