"""The runtime's read queries; each function runs inside a caller's transaction."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from looms_runtime._events import RecordedEvent
from looms_runtime._planner import InboxItem
from looms_runtime._rows import LoadedRecord, RunHeader, SnapshotRow
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
    query = sa.select(*_HEADER).limit(limit)
    if statuses_in is None:
        # UUIDv7 ids sort by creation time: the primary key serves "newest first".
        query = query.order_by(runs.c.run_id.desc())
    else:
        query = query.where(runs.c.status.in_(list(statuses_in)))
        query = query.order_by(runs.c.created_at.desc(), runs.c.run_id.desc())
    return [_header(row) for row in conn.execute(query)]


def load_flow(conn: Connection, name: str, version: str) -> Any | None:
    return conn.execute(
        sa.select(flows.c.definition).where(flows.c.name == name, flows.c.version == version)
    ).scalar_one_or_none()


def runs_with_new_requests(conn: Connection, *, owner: str, since_ms: int) -> list[str]:
    """Our unsettled runs with requests recorded since `since_ms` (by other processes, too)."""
    query = (
        sa.select(inbox.c.run_id)
        .distinct()
        .join(runs, runs.c.run_id == inbox.c.run_id)
        .where(
            inbox.c.consumed_seq.is_(None),
            inbox.c.created_at >= since_ms,
            runs.c.lease_owner == owner,
            runs.c.status.in_(UNSETTLED),
        )
    )
    return list(conn.execute(query).scalars())


def own_active_runs(conn: Connection, *, owner: str) -> list[str]:
    query = sa.select(runs.c.run_id).where(
        runs.c.lease_owner == owner, runs.c.status.in_(UNSETTLED)
    )
    return list(conn.execute(query).scalars())
