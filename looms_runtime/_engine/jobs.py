"""Append jobs: what takes a run's working copy to its next state, with a snapshot when due."""

from __future__ import annotations

from dataclasses import dataclass

from looms_runtime._history.events import NewEvent
from looms_runtime._history.planner import Dispatch, Idle, Move, Sleep, next_wake_at
from looms_runtime._history.state import FOLD_VERSION, RunState, state_hash, state_to_json
from looms_runtime._store.loading import DEFAULT_GRACE_S, LoadedRun
from looms_runtime._store.rows import AppendJob, SnapshotRow
from looms_runtime.records import RunTransition


@dataclass(slots=True, kw_only=True)
class Unflushed:
    """An append whose commit failed transiently, retried with the same fence before all else."""

    job: AppendJob
    run: LoadedRun
    state: RunState
    then: Move
    launches: tuple[Dispatch, ...] = ()
    """Attempts the append dispatched: they start once it commits."""
    attempts: int = 1


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
        transition=transition_of(run, state),
    )


_WATCHED = frozenset({"parked", "completed", "failed", "cancelled"})


def transition_of(run: LoadedRun, state: RunState) -> RunTransition | None:
    """The status change from the run's committed state to `state` that the committer's
    hook hears of (parking, leaving `parked`, settling), or None."""
    previous = run.state.status
    if state.status == previous or (state.status not in _WATCHED and previous != "parked"):
        return None
    header = run.header
    return RunTransition(
        run_id=header.run_id,
        status=state.status,
        previous=previous,
        error=state.error if state.settled else state.park_reason,
        idempotency_key=header.idempotency_key,
        attributes=header.attributes,
    )


def releases(decision: Move, *, in_flight: bool) -> bool:
    """Whether the run goes quiet after this decision (nothing of it runs meanwhile)."""
    return isinstance(decision, Sleep) or (isinstance(decision, Idle) and not in_flight)


RETRY_MIN_MS = 250
RETRY_MAX_MS = 30_000


def retry_backoff_ms(pending: object) -> int:
    """How long an append that failed transiently waits before its next try."""
    if not isinstance(pending, Unflushed):
        return RETRY_MIN_MS
    pending.attempts += 1
    return int(min(RETRY_MAX_MS, RETRY_MIN_MS * 2 ** min(pending.attempts, 10)))


def take_requests(run: LoadedRun, keys: tuple[str, ...]) -> None:
    """Drop the inbox requests the run's events now hold (a cancel keeps its grace)."""
    for item in run.inbox:
        if item.key in keys and item.kind == "cancel" and isinstance(item.payload, dict):
            run.cancel_grace_s = float(item.payload.get("grace_s", DEFAULT_GRACE_S))
    run.inbox = [item for item in run.inbox if item.key not in keys]


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineConfig:
    """What the engine needs to know of its runtime's settings."""

    owner: str
    env_prefix: str
    output_limit_bytes: int
    snapshot_every: int
    log_attributes: tuple[str, ...] = ()
