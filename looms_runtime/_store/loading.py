"""Working copies of runs: rebuilt from header, snapshot and log (cold loads), or seeded
from a run just inserted, without reading it back."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import structlog

from looms_runtime._history.definitions import FlowDef
from looms_runtime._history.events import EventType, NewEvent
from looms_runtime._history.fold import (
    FOLD_VERSION,
    RunState,
    fold,
    fold_recorded,
    state_from_json,
    state_hash,
)
from looms_runtime._history.planner import InboxItem
from looms_runtime._store.driver import driver_errors
from looms_runtime._store.reads import (
    load_header,
    load_run,
    load_runs,
    pending_inbox,
    read_events,
)
from looms_runtime._store.registry import FlowRegistry
from looms_runtime._store.rows import AppendJob, LoadedRecord, NewRun, RunHeader
from looms_runtime.dbapi import read_source
from looms_runtime.errors import CorruptHistoryError, HistoryTrimmedError, LoomsError, ReplayError
from looms_runtime.statuses import UNSETTLED

if TYPE_CHECKING:
    from looms_runtime.db import Database
    from looms_runtime.dbapi import ReadSource

log = structlog.get_logger()

DEFAULT_GRACE_S = 10.0


@dataclass(slots=True, kw_only=True)
class LoadedRun:
    """The working copy of a run this runtime owns; touched only by the run's worker."""

    header: RunHeader
    flow: FlowDef
    state: RunState
    snapshot_seq: int
    inbox: list[InboxItem]
    cancel_grace_s: float = DEFAULT_GRACE_S


def load_owned_run(
    db: Database, flows: FlowRegistry, run_id: str, *, owner: str
) -> LoadedRun | None:
    """The run's working copy, or None when it is missing, settled or owned by another.

    Raises:
        DatabaseUnavailableError: the read failed.
        ReplayError: the log cannot be folded.
        UnknownFlowError: the run's flow version is not stored.
    """
    with driver_errors(), db.read() as conn:
        record = load_run(conn, run_id)
    if record is None:
        log.warning("run_not_found")
        return None
    return _working_copy(db, flows, record, owner=owner)


def load_owned_runs(
    db: Database, flows: FlowRegistry, run_ids: Sequence[str], *, owner: str
) -> tuple[list[LoadedRun], list[str]]:
    """Working copies of many runs read together; the ids left to load one by one.

    A run whose log cannot be folded here is left over too, so its own load reports
    the failure where it is handled.

    Raises:
        DatabaseUnavailableError: the read failed.
    """
    with driver_errors(), db.read() as conn:
        records = load_runs(conn, run_ids)
    loaded: list[LoadedRun] = []
    leftover = [run_id for run_id in run_ids if run_id not in records]
    for run_id, record in records.items():
        try:
            run = _working_copy(db, flows, record, owner=owner)
        except LoomsError:
            leftover.append(run_id)
            continue
        if run is not None:
            loaded.append(run)
    return loaded, leftover


def _working_copy(
    db: Database, flows: FlowRegistry, record: LoadedRecord, *, owner: str
) -> LoadedRun | None:
    header = record.header
    if header.status not in UNSETTLED:
        return None
    if header.lease_owner != owner:
        log.info("run_not_owned", run_id=header.run_id, owner=header.lease_owner)
        return None
    flow = flows.get(header.flow, header.version)
    state = restore(db, record)
    grace = DEFAULT_GRACE_S
    for item in record.inbox:
        if item.kind == "cancel" and isinstance(item.payload, dict):
            grace = float(item.payload.get("grace_s", grace))
    return LoadedRun(
        header=header,
        flow=flow,
        state=state,
        snapshot_seq=record.snapshot.seq if record.snapshot else 0,
        inbox=list(record.inbox),
        cancel_grace_s=grace,
    )


def restore(db: Database | ReadSource, record: LoadedRecord) -> RunState:
    """Fold snapshot + delta; a stale or corrupt snapshot falls back to the full log.

    Raises:
        ReplayError: the log itself cannot be folded.
        HistoryTrimmedError: the snapshot is unusable and the log behind it was trimmed.
    """
    header = record.header
    initial = usable_snapshot(record)
    events = record.events
    if initial is None and record.snapshot is not None:
        with driver_errors(), read_source(db).read() as conn:
            events = read_events(conn, header.run_id, from_seq=1, to_seq=header.last_seq)
        if events and events[0].seq != 1:
            raise HistoryTrimmedError(
                "the run's snapshot is unusable and the events behind it were trimmed",
                run_id=header.run_id,
                snapshot_seq=record.snapshot.seq,
                fold_version=record.snapshot.fold_version,
            )
    state = fold_recorded(events, initial)
    if state.seq != header.last_seq:
        raise CorruptHistoryError(
            "the log ends before the header's last_seq",
            run_id=header.run_id,
            last_seq=header.last_seq,
            folded_seq=state.seq,
        )
    return state


def usable_snapshot(record: LoadedRecord) -> RunState | None:
    """The record's snapshot as a state, or None when it is missing, stale or corrupt."""
    snapshot = record.snapshot
    if snapshot is None or snapshot.fold_version != FOLD_VERSION:
        return None
    try:
        state = state_from_json(snapshot.state)
    except ReplayError:
        state = None
    if state is None or state.seq != snapshot.seq or state_hash(state) != snapshot.state_hash:
        log.warning("snapshot_ignored", seq=snapshot.seq)
        return None
    return state


def reload_inbox(db: Database, run_id: str) -> list[InboxItem]:
    with driver_errors(), db.read() as conn:
        return pending_inbox(conn, run_id)


def still_committed(db: Database, job: AppendJob, *, owner: str) -> bool:
    """Whether `job` is in the log after all: the header moved exactly by it, under our lease.

    Only the lease holder appends, so a header at the job's last sequence with our
    owner and epoch can only be the job itself.
    """
    with driver_errors(), db.read() as conn:
        header = load_header(conn, job.run_id)
    return (
        header is not None
        and header.lease_owner == owner
        and header.lease_epoch == job.lease_epoch
        and header.last_seq == job.last_seq
    )


def started_event(new: NewRun) -> NewEvent:
    """The `run_started` event of a new run, as its stored text reads."""
    return NewEvent(EventType.RUN_STARTED.value, json.loads(new.started_json))


class Prestarted(NamedTuple):
    """A run inserted with its first attempts dispatched: its worker starts them at once."""

    new: NewRun
    launches: tuple[Any, ...]
    """The planner's `Dispatch` moves whose events were committed with the start."""
    state: RunState | None = None
    """The run's state with those events folded in (None: fold them again)."""


def seeded(
    new: NewRun,
    flow: FlowDef,
    dispatched: Sequence[NewEvent] = (),
    state: RunState | None = None,
) -> LoadedRun:
    """The working copy of a just-inserted run, built without reading it back (`state`:
    its state with `dispatched` folded in, when the caller has it already)."""
    env_json, attributes_json = new.env_json, new.attributes_json
    header = RunHeader(
        run_id=new.run_id,
        flow=new.flow,
        version=new.version,
        idempotency_key=new.idempotency_key,
        identity_hash=new.identity_hash,
        status="active",
        input=json.loads(new.input_json),
        env={} if env_json == "{}" else json.loads(env_json),
        attributes={} if attributes_json == "{}" else json.loads(attributes_json),
        result=None,
        error=None,
        last_seq=1 + len(dispatched),
        snapshot_seq=0,
        lease_owner=new.owner,
        lease_epoch=1,
        next_wake_at=None,
        created_at=new.now_ms,
        updated_at=new.now_ms,
        settled_at=None,
        input_json=new.input_json,
    )
    if state is None:
        state = fold([started_event(new), *dispatched])
    return LoadedRun(header=header, flow=flow, state=state, snapshot_seq=0, inbox=[])
