"""Drives one run at a time: load, plan, append, run effects, settle.

A run's worker folds the run's state, asks the planner for the next move and
applies it, buffering appends until a move must be durable first (a dispatch) or
the run has nothing left to do now. Effects run on their own threads and come back
as `outcome` operations, so the worker never blocks on a command.

Crash safety rests on two rules: an effect runs only after its `effect_dispatched`
event committed, and a run loaded from the store has nothing in flight, so any
dispatched effect without an outcome in its log is ambiguous (the planner says so).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

from looms_runtime._actors import DRIVE, Actors, Op, Slot
from looms_runtime._canonical import canonical_json
from looms_runtime._committer import Committer
from looms_runtime._effects.context import EffectContext
from looms_runtime._effects.launch import EffectRunner
from looms_runtime._effects.result import EffectResult
from looms_runtime._events import EventType, NewEvent
from looms_runtime._fold import FOLD_VERSION, RunState, apply, fold, state_hash, state_to_json
from looms_runtime._loading import (
    DEFAULT_GRACE_S,
    LoadedRun,
    load_owned_run,
    reload_inbox,
    still_committed,
)
from looms_runtime._planner import (
    Decision,
    Dispatch,
    Emit,
    Idle,
    Sleep,
    next_wake_at,
    outcome_events,
    plan,
)
from looms_runtime._registry import FlowRegistry
from looms_runtime._rows import AppendJob, NewRun, SnapshotRow
from looms_runtime._starts import seeded
from looms_runtime._timers import TimerQueue
from looms_runtime.db import Database
from looms_runtime.errors import (
    FencedError,
    LoomsError,
    MaxWakeIterationsError,
    StoreUnavailableError,
)
from looms_runtime.records import RunSettled

log = structlog.get_logger()

MAX_WAKE_ITERATIONS = 100
RETRY_MIN_MS = 250
RETRY_MAX_MS = 30_000
FAILED_DRIVE_RETRY_MS = 60_000


@dataclass(slots=True, kw_only=True)
class Unflushed:
    """An append whose commit failed transiently, retried with the same fence before all else."""

    job: AppendJob
    run: LoadedRun
    state: RunState
    then: Decision
    attempts: int = 1
    deferred: list[Op] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineConfig:
    owner: str
    env_prefix: str
    output_limit_bytes: int
    snapshot_every: int


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
        self.closing = False

    def handle(self, slot: Slot, op: Op) -> None:
        """Apply one operation to its run (called by the run's worker only).

        Operations that found the store unavailable wait in the slot's stash and run
        first on the next attempt, so an effect's outcome is never dropped for it.
        """
        ops = [*slot.stash, op]
        slot.stash = []
        with structlog.contextvars.bound_contextvars(run_id=slot.run_id):
            for index, current in enumerate(ops):
                try:
                    self._handle(slot, current)
                except StoreUnavailableError as exc:
                    log.warning("run_store_unavailable", error=exc.message)
                    slot.stash = [later for later in ops[index:] if later != DRIVE]
                    if slot.unflushed is None:
                        slot.run = None
                    self._retry_later(slot.run_id, self._backoff_ms(slot))
                    return
                except LoomsError as exc:
                    log.error("run_drive_failed", error_code=exc.code, error=exc.message)
                    self._drop(slot, current)
                    self._retry_later(slot.run_id, FAILED_DRIVE_RETRY_MS)

    def _backoff_ms(self, slot: Slot) -> int:
        pending = slot.unflushed
        if not isinstance(pending, Unflushed):
            return RETRY_MIN_MS
        pending.attempts += 1
        return int(min(RETRY_MAX_MS, RETRY_MIN_MS * 2 ** min(pending.attempts, 10)))

    def _drop(self, slot: Slot, op: Op) -> None:
        slot.run = None
        slot.unflushed = None
        if op.kind == "outcome":
            slot.in_flight = None
            slot.in_flight_effect = None
            log.error("effect_outcome_lost", effect_id=op.result.effect_id if op.result else None)

    def _handle(self, slot: Slot, op: Op) -> None:
        if slot.unflushed is not None:
            self._flush_deferred(slot)
        if slot.run is None and isinstance(op.seed, LoadedRun):
            slot.run = op.seed
        elif slot.run is None and isinstance(op.seed, NewRun):
            # Seeded here, on a worker, so that `start_runs` returns right after its commit.
            slot.run = seeded(op.seed, self._flows.get(op.seed.flow, op.seed.version))
        run = slot.run
        if run is None:
            run = load_owned_run(self._db, self._flows, slot.run_id, owner=self._config.owner)
            if run is None:
                if op.kind == "outcome":
                    slot.in_flight = None
                    slot.in_flight_effect = None
                    log.warning("effect_outcome_discarded", reason="run not owned or settled")
                return
            slot.run = run
        if op.refresh:
            run.inbox = reload_inbox(self._db, slot.run_id)
        known = {item.key for item in run.inbox}
        run.inbox.extend(item for item in op.requests if item.key not in known)
        pending: list[NewEvent] = []
        state = run.state
        if op.kind == "outcome" and op.result is not None:
            slot.in_flight = None
            slot.in_flight_effect = None
            pending.extend(outcome_events(state, run.flow, op.result, now_ms=self._clock_ms()))
            state = fold(pending, state)
            _log_outcome(op.result)
        self._advance(slot, run, state, pending)

    def _advance(
        self, slot: Slot, run: LoadedRun, state: RunState, pending: list[NewEvent]
    ) -> None:
        consumed: list[str] = []
        in_flight = (slot.in_flight_effect,) if slot.in_flight_effect else ()
        for _ in range(MAX_WAKE_ITERATIONS):
            decision = plan(
                state, run.flow, now_ms=self._clock_ms(), in_flight=in_flight, inbox=run.inbox
            )
            if isinstance(decision, Emit):
                self._take_requests(run, decision.consumed)
                pending.extend(decision.events)
                consumed.extend(decision.consumed)
                state = fold(decision.events, state)
                _log_emitted(decision.events)
                continue
            if isinstance(decision, Dispatch):
                if self.closing:
                    # A closing runtime starts nothing new: the run resumes at the next start.
                    decision = Idle("closing")
                else:
                    pending.append(decision.event)
                    state = apply(state, decision.event)
            if pending or consumed:
                job = self._job(slot, run, state, pending, consumed, decision)
                if not self._append(slot, run, job, state, decision):
                    return
            self._follow(slot, run, state, decision)
            return
        raise MaxWakeIterationsError(
            f"no stable state after {MAX_WAKE_ITERATIONS} planning steps", run_id=slot.run_id
        )

    def _take_requests(self, run: LoadedRun, keys: tuple[str, ...]) -> None:
        for item in run.inbox:
            if item.key in keys and item.kind == "cancel" and isinstance(item.payload, dict):
                run.cancel_grace_s = float(item.payload.get("grace_s", DEFAULT_GRACE_S))
        run.inbox = [item for item in run.inbox if item.key not in keys]

    def _job(
        self,
        slot: Slot,
        run: LoadedRun,
        state: RunState,
        events: list[NewEvent],
        consumed: list[str],
        decision: Decision,
    ) -> AppendJob:
        every = self._config.snapshot_every
        releasing = isinstance(decision, Sleep) or (
            isinstance(decision, Idle) and slot.in_flight is None
        )
        due = every > 0 and state.seq - run.snapshot_seq >= every
        snapshot = None
        if not state.settled and state.seq > run.snapshot_seq and (due or releasing):
            snapshot = SnapshotRow(
                seq=state.seq,
                state=state_to_json(state),
                state_hash=state_hash(state),
                fold_version=FOLD_VERSION,
            )
        return AppendJob(
            run_id=run.header.run_id,
            expected_seq=run.state.seq,
            lease_epoch=run.header.lease_epoch,
            events=tuple(events),
            now_ms=self._clock_ms(),
            status=state.status,
            next_wake_at=next_wake_at(state),
            settled=state.settled,
            error=state.error if state.settled else state.park_reason,
            result=state.result if state.status == "completed" else None,
            snapshot=snapshot,
            consumed=tuple(consumed),
        )

    def _append(
        self, slot: Slot, run: LoadedRun, job: AppendJob, state: RunState, decision: Decision
    ) -> bool:
        try:
            self._committer.submit(job).result()
        except FencedError as exc:
            if not still_committed(self._db, job, owner=self._config.owner):
                log.warning("append_fenced", **exc.details)
                slot.run = None
                self._actors.submit(slot.run_id, DRIVE)
                return False
        except StoreUnavailableError as exc:
            log.warning("append_deferred", error=exc.message, events=len(job.events))
            slot.unflushed = Unflushed(job=job, run=run, state=state, then=decision)
            self._retry_later(slot.run_id, RETRY_MIN_MS)
            return False
        self._committed(run, job, state)
        return True

    def _committed(self, run: LoadedRun, job: AppendJob, state: RunState) -> None:
        run.state = state
        if job.snapshot is not None:
            run.snapshot_seq = job.snapshot.seq

    def _flush_deferred(self, slot: Slot) -> None:
        """Retry a deferred append with its original fence.

        Raises:
            StoreUnavailableError: still failing; the caller stashes its operation.
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
                return
        slot.unflushed = None
        slot.run = pending.run
        self._committed(pending.run, pending.job, pending.state)
        self._follow(slot, pending.run, pending.state, pending.then)

    def _follow(self, slot: Slot, run: LoadedRun, state: RunState, decision: Decision) -> None:
        if state.settled:
            self._settled(slot, run)
        elif isinstance(decision, Dispatch):
            self._launch(slot, run, decision)
        elif isinstance(decision, Sleep):
            self._timers.schedule(slot.run_id, decision.until)
        elif state.cancel_requested and slot.in_flight is not None:
            slot.in_flight.cancel(run.cancel_grace_s)

    def _launch(self, slot: Slot, run: LoadedRun, decision: Dispatch) -> None:
        step = decision.step
        header = run.header
        input_json = canonical_json(header.input)
        ctx = EffectContext(
            run_id=header.run_id,
            effect_id=step.id,
            step_id=step.id,
            attempt=decision.attempt,
            # Each attempt gets its own copy: a step that mutates its input cannot
            # change what the next step (or a replay) sees.
            input=json.loads(input_json),
            input_json=input_json,
            run_env=header.env,
            env_prefix=self._config.env_prefix,
            output_limit_bytes=self._config.output_limit_bytes,
        )
        log.debug(
            "effect_dispatched",
            effect_id=step.id,
            kind=step.kind,
            attempt=decision.attempt,
            deadline_at=decision.deadline_at,
        )
        run_id = header.run_id
        slot.in_flight_effect = step.id
        slot.in_flight = self._runner.launch(
            step, ctx, lambda result: self._effect_done(run_id, result)
        )

    def _effect_done(self, run_id: str, result: EffectResult) -> None:
        self._actors.submit(run_id, Op("outcome", result=result))

    def _settled(self, slot: Slot, run: LoadedRun) -> None:
        state = run.state
        header = run.header
        slot.run = None
        log.debug("run_settled", status=state.status, error=state.error, flow=header.flow)
        self._settled_notify(header.run_id)
        if self._on_settled is None:
            return
        settled = RunSettled(
            run_id=header.run_id,
            status=state.status,  # type: ignore[arg-type]  # settled() guarantees a terminal status
            error=state.error,
            idempotency_key=header.idempotency_key,
            attributes=header.attributes,
        )
        try:
            self._on_settled(settled)
        except Exception:
            log.exception("on_settled_failed")

    def _retry_later(self, run_id: str, delay_ms: int) -> None:
        self._timers.schedule(run_id, self._clock_ms() + delay_ms)


def _log_outcome(result: EffectResult) -> None:
    fields = {"effect_id": result.effect_id, "attempt": result.attempt}
    if result.ok:
        log.debug("effect_succeeded", **fields)
    else:
        log.info("effect_failed", error=result.error, cancelled=result.cancelled, **fields)


def _log_emitted(events: tuple[NewEvent, ...]) -> None:
    for event in events:
        if event.type == EventType.EFFECT_AMBIGUOUS:
            log.warning("effect_ambiguous", **event.payload)
        elif event.type == EventType.RUN_PARKED:
            log.warning("run_parked", **event.payload)
        elif event.type == EventType.CANCEL_REQUESTED:
            log.info("cancel_requested", reason=event.payload.get("reason"))
