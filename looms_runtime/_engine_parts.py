"""The engine's pure pieces: append jobs, effect contexts, settlement records, logs."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import structlog

from looms_runtime._actors import Op
from looms_runtime._canonical import canonical_json
from looms_runtime._effects.context import EffectContext
from looms_runtime._effects.result import EffectResult
from looms_runtime._events import EventType, NewEvent
from looms_runtime._fold import FOLD_VERSION, RunState, state_hash, state_to_json
from looms_runtime._loading import LoadedRun
from looms_runtime._planner import Decision, Dispatch, Idle, Sleep, next_wake_at
from looms_runtime._rows import AppendJob, SnapshotRow
from looms_runtime.records import RunSettled

log = structlog.get_logger()


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


def append_job(
    run: LoadedRun,
    state: RunState,
    events: list[NewEvent],
    consumed: list[str],
    *,
    releasing: bool,
    snapshot_every: int,
    now_ms: int,
) -> AppendJob:
    """The append that takes `run` from its committed state to `state`.

    A snapshot goes with it every `snapshot_every` events and whenever the run is
    released (it parks, sleeps or waits), so the next load starts from there.
    """
    due = snapshot_every > 0 and state.seq - run.snapshot_seq >= snapshot_every
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
        now_ms=now_ms,
        status=state.status,
        next_wake_at=next_wake_at(state),
        settled=state.settled,
        error=state.error if state.settled else state.park_reason,
        result=state.result if state.status == "completed" else None,
        snapshot=snapshot,
        consumed=tuple(consumed),
    )


def releases(decision: Decision, *, in_flight: bool) -> bool:
    """Whether the run goes quiet after this decision (nothing of it runs meanwhile)."""
    return isinstance(decision, Sleep) or (isinstance(decision, Idle) and not in_flight)


def effect_context(
    run: LoadedRun, decision: Dispatch, *, env_prefix: str, output_limit_bytes: int
) -> EffectContext:
    """What one attempt of a steps flow's effect gets from its run."""
    header = run.header
    step = decision.step
    input_json = canonical_json(header.input)
    return EffectContext(
        run_id=header.run_id,
        effect_id=step.id,
        step_id=step.id,
        attempt=decision.attempt,
        # Each attempt gets its own copy: a step that mutates its input cannot
        # change what the next step (or a replay) sees.
        input=json.loads(input_json),
        input_json=input_json,
        run_env=header.env,
        env_prefix=env_prefix,
        output_limit_bytes=output_limit_bytes,
    )


def attempt_limit_s(timeout_s: float | None, dispatched: NewEvent, now_ms: int) -> float | None:
    """An attempt's own time limit: its step's timeout, cut short by the step's deadline."""
    give_up_at = dispatched.payload.get("give_up_at")
    if give_up_at is None:
        return timeout_s
    remaining = max(0.0, (int(give_up_at) - now_ms) / 1000)
    return remaining if timeout_s is None else min(timeout_s, remaining)


def settled_record(run: LoadedRun) -> RunSettled:
    """What `on_settled` gets for a run whose final event is durable."""
    state, header = run.state, run.header
    return RunSettled(
        run_id=header.run_id,
        status=state.status,  # type: ignore[arg-type]  # settled() guarantees a terminal status
        error=state.error,
        idempotency_key=header.idempotency_key,
        attributes=header.attributes,
    )


def log_outcome(result: EffectResult) -> None:
    fields = {"effect_id": result.effect_id, "attempt": result.attempt}
    if result.ok:
        log.debug("effect_succeeded", **fields)
    else:
        log.info("effect_failed", error=result.error, cancelled=result.cancelled, **fields)


def log_emitted(events: tuple[NewEvent, ...]) -> None:
    for event in events:
        if event.type == EventType.EFFECT_AMBIGUOUS:
            log.warning("effect_ambiguous", **event.payload)
        elif event.type == EventType.RUN_PARKED:
            log.warning("run_parked", **event.payload)
        elif event.type == EventType.CANCEL_REQUESTED:
            log.info("cancel_requested", reason=event.payload.get("reason"))
