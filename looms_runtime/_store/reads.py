"""The runtime's read queries; each function runs inside a caller's transaction.

Plain SQL over `looms_runtime.dbapi.Rows` (see there): a process that only reads an
SQLite database runs them on `sqlite3` without SQLAlchemy; the engine's callers hand
their SQLAlchemy connection, adapted. Rows are decoded here, column by column.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from looms_runtime._history.events import RecordedEvent
from looms_runtime._history.inbox import InboxItem
from looms_runtime._store.rows import LoadedRecord, RunHeader, SnapshotRow
from looms_runtime.dbapi import Row, Rows, as_rows, marks, scalar
from looms_runtime.statuses import UNSETTLED

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

_HEADER_COLUMNS = (
    "run_id, flow, version, idempotency_key, identity_hash, status, input, env, attributes, "
    "result, error, last_seq, snapshot_seq, lease_owner, lease_epoch, next_wake_at, "
    "created_at, updated_at, settled_at, purged_at"
)
_HEADER = f"SELECT {_HEADER_COLUMNS} FROM looms_runs"  # noqa: S608 (constants)
_UNSETTLED = f"status IN ({marks(len(UNSETTLED))})"


def _header(rows: Rows, row: Row) -> RunHeader:
    json = rows.json
    return RunHeader(
        run_id=row[0],
        flow=row[1],
        version=row[2],
        idempotency_key=row[3],
        identity_hash=row[4],
        status=row[5],
        input=json(row[6]),
        env=json(row[7]) or {},
        attributes=json(row[8]) or {},
        result=json(row[9]),
        error=row[10],
        last_seq=int(row[11]),
        snapshot_seq=int(row[12]),
        lease_owner=row[13],
        lease_epoch=int(row[14]),
        next_wake_at=_opt_int(row[15]),
        created_at=int(row[16]),
        updated_at=int(row[17]),
        settled_at=_opt_int(row[18]),
        purged_at=_opt_int(row[19]),
    )


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


def load_header(conn: Rows | Connection, run_id: str) -> RunHeader | None:
    rows = as_rows(conn)
    found = rows.all(f"{_HEADER} WHERE run_id = ?", (run_id,))
    return _header(rows, found[0]) if found else None


_SNAPSHOT = (
    "SELECT seq, state, state_hash, fold_version FROM looms_snapshots "
    "WHERE run_id = ? AND seq <= ? ORDER BY seq DESC LIMIT 1"
)


def load_run(
    conn: Rows | Connection, run_id: str, *, use_snapshot: bool = True
) -> LoadedRecord | None:
    """A run's header, latest snapshot, the events after it and its pending requests."""
    rows = as_rows(conn)
    header = load_header(rows, run_id)
    if header is None:
        return None
    snapshot = None
    if use_snapshot and header.snapshot_seq > 0:
        found = rows.all(_SNAPSHOT, (run_id, header.last_seq))
        if found:
            seq, state, state_hash, fold_version = found[0]
            snapshot = SnapshotRow(
                seq=int(seq),
                state=rows.json(state),
                state_hash=state_hash,
                fold_version=fold_version,
            )
    from_seq = snapshot.seq + 1 if snapshot else 1
    return LoadedRecord(
        header=header,
        snapshot=snapshot,
        events=read_events(rows, run_id, from_seq=from_seq, to_seq=header.last_seq),
        inbox=pending_inbox(rows, run_id),
    )


def read_events(
    conn: Rows | Connection,
    run_id: str,
    *,
    from_seq: int,
    to_seq: int | None = None,
    limit: int | None = None,
) -> list[RecordedEvent]:
    rows = as_rows(conn)
    sql = (
        "SELECT seq, type, version, payload, created_at FROM looms_events "
        "WHERE run_id = ? AND seq >= ?"
    )
    params: list[Any] = [run_id, from_seq]
    if to_seq is not None:
        sql += " AND seq <= ?"
        params.append(to_seq)
    sql += " ORDER BY seq"
    if limit is not None:
        sql += " LIMIT ?"
        params.append(limit)
    json = rows.json
    return [
        RecordedEvent(
            seq=int(seq),
            type=kind,
            version=int(version),
            payload=json(payload),
            created_at=int(created_at),
        )
        for seq, kind, version, payload, created_at in rows.all(sql, params)
    ]


def first_seq(conn: Rows | Connection, run_id: str, *, last_seq: int) -> int:
    """The oldest sequence number kept in the run's log (1 unless it was trimmed).

    A log trimmed up to its last event keeps none: the answer is then `last_seq + 1`.
    """
    found = scalar(as_rows(conn), "SELECT min(seq) FROM looms_events WHERE run_id = ?", (run_id,))
    return int(found) if found is not None else last_seq + 1


_PENDING_INBOX = (
    "SELECT key, kind, name, payload FROM looms_inbox "
    "WHERE run_id = ? AND consumed_seq IS NULL ORDER BY created_at, key"
)


def pending_inbox(conn: Rows | Connection, run_id: str) -> list[InboxItem]:
    rows = as_rows(conn)
    return [
        InboxItem(key=key, kind=kind, name=name, payload=rows.json(payload))
        for key, kind, name, payload in rows.all(_PENDING_INBOX, (run_id,))
    ]


class StatusRow(NamedTuple):
    run_id: str
    status: str
    error: str | None
    settled_at: int | None


def statuses(conn: Rows | Connection, run_ids: Sequence[str]) -> dict[str, StatusRow]:
    rows = as_rows(conn)
    found: dict[str, StatusRow] = {}
    for start in range(0, len(run_ids), 500):
        chunk = list(run_ids[start : start + 500])
        sql = (
            "SELECT run_id, status, error, settled_at FROM looms_runs "  # noqa: S608 (marks)
            f"WHERE run_id IN ({marks(len(chunk))})"
        )
        for run_id, status, error, settled_at in rows.all(sql, chunk):
            found[run_id] = StatusRow(run_id, status, error, _opt_int(settled_at))
    return found


def list_runs(
    conn: Rows | Connection, *, statuses_in: Sequence[str] | None, limit: int
) -> list[RunHeader]:
    rows = as_rows(conn)
    if statuses_in is None:
        # UUIDv7 ids sort by creation time: the primary key serves "newest first".
        sql = f"{_HEADER} WHERE purged_at IS NULL ORDER BY run_id DESC LIMIT ?"
        params: list[Any] = [limit]
    else:
        sql = (
            f"{_HEADER} WHERE purged_at IS NULL AND status IN ({marks(len(statuses_in))}) "
            "ORDER BY created_at DESC, run_id DESC LIMIT ?"
        )
        params = [*statuses_in, limit]
    return [_header(rows, row) for row in rows.all(sql, params)]


def count_runs(conn: Rows | Connection, *, statuses_in: Sequence[str]) -> int:
    sql = (
        "SELECT count(*) FROM looms_runs "  # noqa: S608 (marks)
        f"WHERE purged_at IS NULL AND status IN ({marks(len(statuses_in))})"
    )
    return int(scalar(as_rows(conn), sql, list(statuses_in)))


def load_flow(conn: Rows | Connection, name: str, version: str) -> Any | None:
    rows = as_rows(conn)
    found = rows.all(
        "SELECT definition FROM looms_flows WHERE name = ? AND version = ?", (name, version)
    )
    return rows.json(found[0][0]) if found else None


_PENDING_REQUESTS = (
    "SELECT DISTINCT run_id FROM looms_inbox WHERE consumed_seq IS NULL AND created_at >= ?"
)


def runs_with_new_requests(conn: Rows | Connection, *, owner: str, since_ms: int) -> list[str]:
    """Our unsettled runs with requests recorded since `since_ms` (by other processes, too).

    The pending-request index answers the first query alone, so an empty inbox costs
    next to nothing however many runs there are.
    """
    rows = as_rows(conn)
    candidates = [row[0] for row in rows.all(_PENDING_REQUESTS, (since_ms,))]
    if not candidates:
        return []
    sql = (
        "SELECT run_id FROM looms_runs "  # noqa: S608 (marks)
        f"WHERE run_id IN ({marks(len(candidates))}) AND lease_owner = ? AND {_UNSETTLED}"
    )
    return [row[0] for row in rows.all(sql, [*candidates, owner, *UNSETTLED])]


def own_active_runs(conn: Rows | Connection, *, owner: str) -> list[str]:
    sql = f"SELECT run_id FROM looms_runs WHERE lease_owner = ? AND {_UNSETTLED}"  # noqa: S608
    return [row[0] for row in as_rows(conn).all(sql, [owner, *UNSETTLED])]


def load_runs(conn: Rows | Connection, run_ids: Sequence[str]) -> dict[str, LoadedRecord]:
    """`load_run` for many runs in four queries (recovery loads thousands at once)."""
    rows = as_rows(conn)
    ids = list(run_ids)
    if not ids:
        return {}
    among = f"IN ({marks(len(ids))})"
    headers = {
        header.run_id: header
        for header in (_header(rows, r) for r in rows.all(f"{_HEADER} WHERE run_id {among}", ids))
    }
    kept: dict[str, SnapshotRow] = {}
    snapshotted = [h.run_id for h in headers.values() if h.snapshot_seq > 0]
    if snapshotted:
        sql = (
            "SELECT run_id, seq, state, state_hash, fold_version FROM looms_snapshots "  # noqa: S608
            f"WHERE run_id IN ({marks(len(snapshotted))}) ORDER BY run_id, seq"
        )
        for run_id, seq, state, state_hash, fold_version in rows.all(sql, snapshotted):
            if seq <= headers[run_id].last_seq:
                kept[run_id] = SnapshotRow(
                    seq=int(seq),
                    state=rows.json(state),
                    state_hash=state_hash,
                    fold_version=fold_version,
                )
    logs: dict[str, list[RecordedEvent]] = {run_id: [] for run_id in headers}
    delta = (
        "SELECT e.run_id, e.seq, e.type, e.version, e.payload, e.created_at "  # noqa: S608
        "FROM looms_events AS e JOIN looms_runs AS r ON r.run_id = e.run_id "
        f"WHERE e.run_id {among} AND e.seq > r.snapshot_seq AND e.seq <= r.last_seq "
        "ORDER BY e.run_id, e.seq"
    )
    json = rows.json
    for run_id, seq, kind, version, payload, created_at in rows.all(delta, ids):
        logs[run_id].append(
            RecordedEvent(
                seq=int(seq),
                type=kind,
                version=int(version),
                payload=json(payload),
                created_at=int(created_at),
            )
        )
    requests: dict[str, list[InboxItem]] = {run_id: [] for run_id in headers}
    pending = (
        "SELECT run_id, key, kind, name, payload FROM looms_inbox "  # noqa: S608 (marks)
        f"WHERE run_id {among} AND consumed_seq IS NULL ORDER BY created_at, key"
    )
    for run_id, key, kind, name, payload in rows.all(pending, ids):
        requests[run_id].append(InboxItem(key=key, kind=kind, name=name, payload=json(payload)))
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
