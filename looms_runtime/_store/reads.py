"""The runtime's read queries; each function runs inside a caller's transaction."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from looms_runtime._history.events import RecordedEvent
from looms_runtime._history.inbox import InboxItem
from looms_runtime._store.rows import LoadedRecord, RunHeader, SnapshotRow
from looms_runtime.schema import UNSETTLED, events, flows, inbox, runs, snapshots

_HEADER = list(runs.c)


def _header(row: sa.Row[Any]) -> RunHeader:
    return RunHeader(
        run_id=row.run_id,
        flow=row.flow,
        version=row.version,
        idempotency_key=row.idempotency_key,
        identity_hash=row.identity_hash,
        status=row.status,
        input=row.input,
        env=row.env or {},
        attributes=row.attributes or {},
        result=row.result,
        error=row.error,
        last_seq=row.last_seq,
        snapshot_seq=row.snapshot_seq,
        lease_owner=row.lease_owner,
        lease_epoch=row.lease_epoch,
        next_wake_at=row.next_wake_at,
        created_at=row.created_at,
        updated_at=row.updated_at,
        settled_at=row.settled_at,
        purged_at=row.purged_at,
    )


def load_header(conn: Connection, run_id: str) -> RunHeader | None:
    row = conn.execute(sa.select(*_HEADER).where(runs.c.run_id == run_id)).first()
    return None if row is None else _header(row)


def load_run(conn: Connection, run_id: str, *, use_snapshot: bool = True) -> LoadedRecord | None:
    """A run's header, latest snapshot, the events after it and its pending requests."""
    header = load_header(conn, run_id)
    if header is None:
        return None
    snapshot = None
    if use_snapshot and header.snapshot_seq > 0:
        row = conn.execute(
            sa.select(snapshots)
            .where(snapshots.c.run_id == run_id, snapshots.c.seq <= header.last_seq)
            .order_by(snapshots.c.seq.desc())
            .limit(1)
        ).first()
        if row is not None:
            snapshot = SnapshotRow(
                seq=row.seq,
                state=row.state,
                state_hash=row.state_hash,
                fold_version=row.fold_version,
            )
    from_seq = snapshot.seq + 1 if snapshot else 1
    return LoadedRecord(
        header=header,
        snapshot=snapshot,
        events=read_events(conn, run_id, from_seq=from_seq, to_seq=header.last_seq),
        inbox=pending_inbox(conn, run_id),
    )


def read_events(
    conn: Connection,
    run_id: str,
    *,
    from_seq: int,
    to_seq: int | None = None,
    limit: int | None = None,
) -> list[RecordedEvent]:
    query = (
        sa.select(
            events.c.seq, events.c.type, events.c.version, events.c.payload, events.c.created_at
        )
        .where(events.c.run_id == run_id, events.c.seq >= from_seq)
        .order_by(events.c.seq)
    )
    if to_seq is not None:
        query = query.where(events.c.seq <= to_seq)
    if limit is not None:
        query = query.limit(limit)
    return [
        RecordedEvent(
            seq=row.seq,
            type=row.type,
            version=row.version,
            payload=row.payload,
            created_at=row.created_at,
        )
        for row in conn.execute(query)
    ]


def first_seq(conn: Connection, run_id: str, *, last_seq: int) -> int:
    """The oldest sequence number kept in the run's log (1 unless it was trimmed).

    A log trimmed up to its last event keeps none: the answer is then `last_seq + 1`.
    """
    found = conn.execute(
        sa.select(sa.func.min(events.c.seq)).where(events.c.run_id == run_id)
    ).scalar_one_or_none()
    return int(found) if found is not None else last_seq + 1


def pending_inbox(conn: Connection, run_id: str) -> list[InboxItem]:
    query = (
        sa.select(inbox.c.key, inbox.c.kind, inbox.c.name, inbox.c.payload)
        .where(inbox.c.run_id == run_id, inbox.c.consumed_seq.is_(None))
        .order_by(inbox.c.created_at, inbox.c.key)
    )
    return [
        InboxItem(key=row.key, kind=row.kind, name=row.name, payload=row.payload)
        for row in conn.execute(query)
    ]


def statuses(conn: Connection, run_ids: Sequence[str]) -> dict[str, sa.Row[Any]]:
    found: dict[str, sa.Row[Any]] = {}
    for start in range(0, len(run_ids), 1000):
        chunk = list(run_ids[start : start + 1000])
        query = sa.select(runs.c.run_id, runs.c.status, runs.c.error, runs.c.settled_at).where(
            runs.c.run_id.in_(chunk)
        )
        found.update({row.run_id: row for row in conn.execute(query)})
    return found


def list_runs(
    conn: Connection, *, statuses_in: Sequence[str] | None, limit: int
) -> list[RunHeader]:
    query = sa.select(*_HEADER).where(runs.c.purged_at.is_(None)).limit(limit)
    if statuses_in is None:
        # UUIDv7 ids sort by creation time: the primary key serves "newest first".
        query = query.order_by(runs.c.run_id.desc())
    else:
        query = query.where(runs.c.status.in_(list(statuses_in)))
        query = query.order_by(runs.c.created_at.desc(), runs.c.run_id.desc())
    return [_header(row) for row in conn.execute(query)]


def count_runs(conn: Connection, *, statuses_in: Sequence[str]) -> int:
    query = sa.select(sa.func.count()).select_from(runs).where(runs.c.purged_at.is_(None))
    return int(conn.execute(query.where(runs.c.status.in_(list(statuses_in)))).scalar_one())


def load_flow(conn: Connection, name: str, version: str) -> Any | None:
    return conn.execute(
        sa.select(flows.c.definition).where(flows.c.name == name, flows.c.version == version)
    ).scalar_one_or_none()


# Built once: the maintenance thread asks every second, and building a statement
# costs SQLAlchemy more than the database takes to answer it.
_PENDING_REQUESTS = (
    sa.select(inbox.c.run_id)
    .distinct()
    .where(inbox.c.consumed_seq.is_(None), inbox.c.created_at >= sa.bindparam("since_ms"))
)


def runs_with_new_requests(conn: Connection, *, owner: str, since_ms: int) -> list[str]:
    """Our unsettled runs with requests recorded since `since_ms` (by other processes, too).

    The pending-request index answers the first query alone, so an empty inbox costs
    next to nothing however many runs there are.
    """
    candidates = list(conn.execute(_PENDING_REQUESTS, {"since_ms": since_ms}).scalars())
    if not candidates:
        return []
    query = sa.select(runs.c.run_id).where(
        runs.c.run_id.in_(candidates), runs.c.lease_owner == owner, runs.c.status.in_(UNSETTLED)
    )
    return list(conn.execute(query).scalars())


def own_active_runs(conn: Connection, *, owner: str) -> list[str]:
    query = sa.select(runs.c.run_id).where(
        runs.c.lease_owner == owner, runs.c.status.in_(UNSETTLED)
    )
    return list(conn.execute(query).scalars())


def load_runs(conn: Connection, run_ids: Sequence[str]) -> dict[str, LoadedRecord]:
    """`load_run` for many runs in four queries (recovery loads thousands at once)."""
    ids = list(run_ids)
    headers = {
        row.run_id: _header(row)
        for row in conn.execute(sa.select(*_HEADER).where(runs.c.run_id.in_(ids)))
    }
    kept: dict[str, SnapshotRow] = {}
    snapshotted = [h.run_id for h in headers.values() if h.snapshot_seq > 0]
    if snapshotted:
        query = sa.select(snapshots).where(snapshots.c.run_id.in_(snapshotted))
        for row in conn.execute(query.order_by(snapshots.c.run_id, snapshots.c.seq)):
            if row.seq <= headers[row.run_id].last_seq:
                kept[row.run_id] = SnapshotRow(
                    seq=row.seq,
                    state=row.state,
                    state_hash=row.state_hash,
                    fold_version=row.fold_version,
                )
    logs: dict[str, list[RecordedEvent]] = {run_id: [] for run_id in headers}
    delta = (
        sa.select(events.c.run_id, events.c.seq, events.c.type, events.c.version, events.c.payload)
        .add_columns(events.c.created_at)
        .join(runs, runs.c.run_id == events.c.run_id)
        .where(
            events.c.run_id.in_(ids),
            events.c.seq > runs.c.snapshot_seq,
            events.c.seq <= runs.c.last_seq,
        )
        .order_by(events.c.run_id, events.c.seq)
    )
    for row in conn.execute(delta):
        logs[row.run_id].append(
            RecordedEvent(
                seq=row.seq,
                type=row.type,
                version=row.version,
                payload=row.payload,
                created_at=row.created_at,
            )
        )
    requests: dict[str, list[InboxItem]] = {run_id: [] for run_id in headers}
    pending = (
        sa.select(inbox.c.run_id, inbox.c.key, inbox.c.kind, inbox.c.name, inbox.c.payload)
        .where(inbox.c.run_id.in_(ids), inbox.c.consumed_seq.is_(None))
        .order_by(inbox.c.created_at, inbox.c.key)
    )
    for row in conn.execute(pending):
        requests[row.run_id].append(
            InboxItem(key=row.key, kind=row.kind, name=row.name, payload=row.payload)
        )
    records = {}
    for run_id, header in headers.items():
        snapshot = kept.get(run_id)
        if snapshot is None or snapshot.seq != header.snapshot_seq:
            continue  # an unusual layout: leave this run to the one-by-one load
        records[run_id] = LoadedRecord(
            header=header, snapshot=snapshot, events=logs[run_id], inbox=requests[run_id]
        )
    for run_id, header in headers.items():
        if header.snapshot_seq == 0:
            records[run_id] = LoadedRecord(
                header=header, snapshot=None, events=logs[run_id], inbox=requests[run_id]
            )
    return records
