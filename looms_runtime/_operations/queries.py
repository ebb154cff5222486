"""The runtime's read-only API: statuses, inspection, listings and the event log."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from looms_runtime._clock import from_ms
from looms_runtime._store.driver import driver_errors
from looms_runtime._store.reads import (
    count_runs,
    first_seq,
    list_runs,
    load_header,
    load_run,
    read_events,
    statuses,
)
from looms_runtime._store.rows import RunHeader
from looms_runtime.dbapi import read_source
from looms_runtime.errors import HistoryTrimmedError, InvalidRequestError, RunNotFoundError
from looms_runtime.records import (
    EffectInfo,
    Event,
    PublicStatus,
    RunInfo,
    RunStatusInfo,
    RunSummary,
    WaitInfo,
)
from looms_runtime.statuses import RUN_STATUSES, UNSETTLED

if TYPE_CHECKING:
    from looms_runtime._history.fold import RunState
    from looms_runtime.db import Database
    from looms_runtime.dbapi import ReadSource

# The fold (and the logging of a snapshot it cannot use) is imported by the two reads
# that fold a run, `inspect` and `state_at`: statuses, listings and the event log are
# read by processes that never fold, such as a CLI command listing runs.

# The fold's TERMINAL, read from the schema's statuses: a listing loads no fold.
_SETTLED = frozenset(RUN_STATUSES).difference(UNSETTLED)
_FILTERS: dict[str, tuple[str, ...]] = {
    "active": UNSETTLED,
    "parked": ("parked",),
    "completed": ("completed",),
    "failed": ("failed",),
    "cancelled": ("cancelled",),
}


def public_status(status: str) -> PublicStatus:
    """The five-valued status callers see: anything not settled is `active`."""
    if status in _SETTLED:
        return status  # type: ignore[return-value]  # a settled status
    return "active"


def _opt_time(epoch_ms: int | None) -> Any:
    return None if epoch_ms is None else from_ms(epoch_ms)


def read_statuses(db: Database | ReadSource, run_ids: Sequence[str]) -> dict[str, RunStatusInfo]:
    """Each run's status (a purged run's too, from its tombstone); unknown ids are `missing`."""
    with driver_errors(), read_source(db).read() as conn:
        rows = statuses(conn, list(dict.fromkeys(run_ids)))
    found: dict[str, RunStatusInfo] = {}
    for run_id in run_ids:
        row = rows.get(run_id)
        if row is None:
            found[run_id] = RunStatusInfo(run_id=run_id, status="missing")
            continue
        settled = row.status in _SETTLED
        found[run_id] = RunStatusInfo(
            run_id=run_id,
            status=public_status(row.status),
            error=row.error,
            settled_at=_opt_time(row.settled_at) if settled else None,
        )
    return found


def inspect(db: Database | ReadSource, run_id: str) -> RunInfo:
    """The run's header and outstanding effects, folded from its snapshot and log.

    Raises:
        RunNotFoundError: no run has that id.
    """
    from looms_runtime._store.loading import restore  # noqa: PLC0415 (the fold)

    with driver_errors(), read_source(db).read() as conn:
        record = load_run(conn, run_id)
        first = 1
        if record is not None and record.snapshot is not None:
            first = first_seq(conn, run_id, last_seq=record.header.last_seq)
    _found(record.header if record else None, run_id)
    assert record is not None  # noqa: S101 - _found raised otherwise
    state = restore(db, record)
    header = record.header
    return RunInfo(
        run_id=header.run_id,
        flow=header.flow,
        version=header.version,
        status=public_status(header.status),
        state=header.status,
        idempotency_key=header.idempotency_key,
        input=header.input,
        attributes=header.attributes,
        owner=header.lease_owner,
        last_seq=header.last_seq,
        first_seq=first,
        completed_steps=state.completed_steps,
        created_at=from_ms(header.created_at),
        updated_at=from_ms(header.updated_at),
        settled_at=_opt_time(header.settled_at),
        next_wake_at=_opt_time(header.next_wake_at),
        error=header.error,
        result=header.result,
        cancel_requested=state.cancel_requested
        or any(item.kind == "cancel" for item in record.inbox),
        park_reason=state.park_reason,
        effects=_effects(state),
        waits=_waits(state),
        awaited_signals=_awaited_signals(db, state),
    )


def _found(header: RunHeader | None, run_id: str) -> None:
    """Raises RunNotFoundError for a missing run, or one purged by retention."""
    if header is None:
        raise RunNotFoundError(f"no run {run_id!r}", run_id=run_id)
    if header.purged_at is not None:
        raise RunNotFoundError(
            f"run {run_id!r} was purged by retention (it settled {header.status})",
            run_id=run_id,
            status=header.status,
            purged_at=from_ms(header.purged_at).isoformat(),
        )


def _effects(state: RunState) -> tuple[EffectInfo, ...]:
    return tuple(
        EffectInfo(
            effect_id=effect.effect_id,
            step_id=effect.name or effect.effect_id,
            kind=effect.kind,
            attempt=effect.attempt,
            status=effect.status,
            idempotent=effect.idempotent,
            dispatched_at=_opt_time(effect.dispatched_at),
            deadline=_opt_time(effect.deadline_at),
            next_attempt_at=_opt_time(effect.next_attempt_at),
            last_error=effect.last_error,
        )
        for effect in state.effects.values()
    )


def _waits(state: RunState) -> tuple[WaitInfo, ...]:
    return tuple(
        WaitInfo(
            wait_id=wait.wait_id, kind=wait.kind, signal=wait.signal, until=_opt_time(wait.until)
        )
        for wait in state.waits.values()
    )


def _awaited_signals(db: Database | ReadSource, state: RunState) -> tuple[str, ...] | None:
    """The signals the run's open waits, and the steps it has still to start, wait for."""
    from looms_runtime._history.definitions import StepsFlow, WaitSignalStep  # noqa: PLC0415
    from looms_runtime._store.registry import FlowRegistry  # noqa: PLC0415
    from looms_runtime.errors import UnknownFlowError  # noqa: PLC0415

    if state.settled:
        return ()
    names = [w.signal for w in state.waits.values() if w.signal is not None]
    if state.python:
        return None
    try:
        flow = FlowRegistry(db).get(state.flow, state.version)
    except UnknownFlowError:
        return None
    if not isinstance(flow, StepsFlow):
        return None
    started = {w.step_index for w in state.waits.values()}
    started |= {e.step_index for e in state.effects.values()}
    for index, step in enumerate(flow.steps):
        done = index in state.done if state.graph else index < state.completed_steps
        if isinstance(step, WaitSignalStep) and not done and index not in started:
            names.append(step.signal)
    return tuple(dict.fromkeys(names))


def summaries(db: Database | ReadSource, *, status: str | None, limit: int) -> list[RunSummary]:
    """The newest runs first, optionally of one status (`active` includes `parked`).

    Raises:
        InvalidRequestError: an unknown status or a limit below 1.
    """
    if status is not None and status not in _FILTERS:
        raise InvalidRequestError(f"unknown status {status!r}", allowed=sorted(_FILTERS))
    if limit < 1:
        raise InvalidRequestError("limit must be >= 1", limit=limit)
    with driver_errors(), read_source(db).read() as conn:
        headers = list_runs(conn, statuses_in=_FILTERS[status] if status else None, limit=limit)
    return [_summary(header) for header in headers]


def count(db: Database | ReadSource, *, status: str) -> int:
    """How many runs have `status` (`active` includes `parked`).

    Raises:
        InvalidRequestError: an unknown status.
    """
    if status not in _FILTERS:
        raise InvalidRequestError(f"unknown status {status!r}", allowed=sorted(_FILTERS))
    with driver_errors(), read_source(db).read() as conn:
        return count_runs(conn, statuses_in=_FILTERS[status])


def _summary(header: RunHeader) -> RunSummary:
    return RunSummary(
        run_id=header.run_id,
        flow=header.flow,
        version=header.version,
        status=public_status(header.status),
        state=header.status,
        idempotency_key=header.idempotency_key,
        attributes=header.attributes,
        created_at=from_ms(header.created_at),
        settled_at=_opt_time(header.settled_at),
        error=header.error,
    )


def events_of(
    db: Database | ReadSource, run_id: str, *, from_seq: int, limit: int | None
) -> list[Event]:
    """A run's recorded events from `from_seq` on.

    Events trimmed behind a snapshot are gone: the answer then starts at the oldest
    event kept (`RunInfo.first_seq`), each event still with its own sequence number.

    Raises:
        RunNotFoundError: no run has that id.
    """
    with driver_errors(), read_source(db).read() as conn:
        recorded = read_events(conn, run_id, from_seq=max(1, from_seq), limit=limit)
        if not recorded:
            _found(load_header(conn, run_id), run_id)
    return [
        Event(
            run_id=run_id,
            seq=event.seq,
            type=event.type,
            version=event.version,
            payload=event.payload,
            created_at=from_ms(event.created_at),
        )
        for event in recorded
    ]


def state_at(db: Database | ReadSource, run_id: str, seq: int) -> dict[str, Any]:
    """The run's folded state right after event `seq`, as JSON.

    On a trimmed log the fold starts from the kept snapshot, so every `seq` from the
    snapshot's on is answered; an earlier one is not.

    Raises:
        RunNotFoundError: no run has that id.
        HistoryTrimmedError: the events up to `seq` were trimmed.
    """
    from looms_runtime._history.fold import fold_recorded, state_to_json  # noqa: PLC0415
    from looms_runtime._store.loading import usable_snapshot  # noqa: PLC0415

    with driver_errors(), read_source(db).read() as conn:
        record = load_run(conn, run_id)
        _found(record.header if record else None, run_id)
        assert record is not None  # noqa: S101 - _found raised otherwise
        target = min(seq, record.header.last_seq)
        early = read_events(conn, run_id, from_seq=1, to_seq=target)
    if target < 1 or (early and early[0].seq == 1):
        return state_to_json(fold_recorded(early))
    initial = usable_snapshot(record)
    if initial is None or initial.seq > target:
        kept = record.snapshot.seq + 1 if record.snapshot else 1
        raise HistoryTrimmedError(
            f"run {run_id}: events before seq {kept} were trimmed; replay from seq {kept - 1}",
            run_id=run_id,
            seq=seq,
            first_seq=kept,
        )
    delta = [event for event in record.events if event.seq <= target]
    return state_to_json(fold_recorded(delta, initial))


S = TypeVar("S")


def project(
    events: Sequence[Event], run_id: str, reducer: Callable[[S, Event], S], initial: S
) -> S:
    """Fold a run's whole log through `reducer` (see `Runtime.project`).

    Raises:
        HistoryTrimmedError: the log no longer starts at its first event.
    """
    if events and events[0].seq != 1:
        raise HistoryTrimmedError(
            f"run {run_id}: events before seq {events[0].seq} were trimmed; a projection "
            "needs the whole log",
            run_id=run_id,
            first_seq=events[0].seq,
        )
    state = initial
    for event in events:
        state = reducer(state, event)
    return state
