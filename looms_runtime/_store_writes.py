"""The runtime's write statements; each function runs inside a caller's transaction.

Every append is fenced on the header: `UPDATE looms_runs SET last_seq = :n ... WHERE
run_id = :r AND last_seq = :expected AND lease_epoch = :epoch`. The header row is the
arbiter, so its update runs first and the events are inserted only for the appends
that won: a lost fence never leaves an orphan event and never aborts the batch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from looms_runtime._canonical import canonical_json
from looms_runtime._rows import AppendJob, ExistingRun, NewRun
from looms_runtime.errors import FencedError
from looms_runtime.schema import Json, events, flows, inbox, runs, snapshots


def upsert_insert(dialect: str, table: sa.Table) -> Any:
    """The dialect's INSERT, which knows ON CONFLICT."""
    module: Any = postgresql if dialect == "postgresql" else sqlite
    return module.insert(table)


def insert_flow(
    conn: Connection,
    dialect: str,
    *,
    name: str,
    version: str,
    kind: str,
    definition: Any,
    now_ms: int,
) -> None:
    stmt = upsert_insert(dialect, flows).on_conflict_do_nothing(index_elements=["name", "version"])
    conn.execute(
        stmt,
        {
            "name": name,
            "version": version,
            "kind": kind,
            "definition": definition,
            "created_at": now_ms,
        },
    )


_RUN_COLUMNS = (
    "run_id",
    "flow",
    "version",
    "idempotency_key",
    "identity_hash",
    "status",
    "input",
    "env",
    "attributes",
    "last_seq",
    "snapshot_seq",
    "lease_owner",
    "lease_epoch",
    "created_at",
    "updated_at",
)
_EVENT_COLUMNS = ("run_id", "seq", "type", "version", "payload", "created_at")
_compiled: dict[tuple[str, str], tuple[str, Sequence[str] | None]] = {}


def _bulk_statement(dialect: str, which: str) -> Any:
    if which == "runs":
        return upsert_insert(dialect, runs).on_conflict_do_nothing(
            index_elements=["idempotency_key"]
        )
    return sa.insert(events)


def bulk_insert(conn: Connection, which: str, rows: Sequence[Mapping[str, Any]]) -> int:
    """Insert many rows of the hot tables through the driver's executemany.

    JSON columns arrive as canonical text and go to the driver as is: Core's JSON
    bind processing would serialize every value a second time, and a thousand-run
    start must stay a transaction of a few milliseconds. Returns the rows inserted.
    """
    dialect = conn.dialect
    key = (dialect.name, which)
    compiled = _compiled.get(key)
    if compiled is None:
        columns = _RUN_COLUMNS if which == "runs" else _EVENT_COLUMNS
        statement = _bulk_statement(dialect.name, which).compile(
            dialect=dialect, column_keys=list(columns)
        )
        positions = statement.positiontup if statement.positional else None
        compiled = _compiled[key] = (str(statement), positions)
    sql, positions = compiled
    if positions is not None:
        params: Any = [tuple(row[name] for name in positions) for row in rows]
    else:
        params = list(rows)
    result = conn.exec_driver_sql(sql, params)
    return int(result.rowcount)


def insert_runs(conn: Connection, new: Sequence[NewRun]) -> list[ExistingRun]:
    """Insert runs whose key is free; return, per request, the run its key names.

    `ON CONFLICT DO NOTHING` makes the unique key the arbiter: of two concurrent
    starts with one key (threads, processes, or two requests of one batch), exactly
    one inserts; the others read the winner back.
    """
    if not new:
        return []
    rows = [
        {
            "run_id": r.run_id,
            "flow": r.flow,
            "version": r.version,
            "idempotency_key": r.idempotency_key,
            "identity_hash": r.identity_hash,
            "status": "active",
            "input": r.input_json,
            "env": r.env_json,
            "attributes": r.attributes_json,
            "last_seq": 1,
            "snapshot_seq": 0,
            "lease_owner": r.owner,
            "lease_epoch": 1,
            "created_at": r.now_ms,
            "updated_at": r.now_ms,
        }
        for r in new
    ]
    if bulk_insert(conn, "runs", rows) == len(rows):
        inserted = {r.run_id for r in new}
        fresh = new
    else:
        # Run ids are minted per request, so a present id is this batch's run: inserted
        # now, or by an earlier attempt of the batch whose commit answer was lost.
        inserted = _present([r.run_id for r in new], conn, events_too=False)
        started = _present(list(inserted), conn, events_too=True)
        fresh = [r for r in new if r.run_id in inserted and r.run_id not in started]
    created = [r for r in fresh if r.run_id in inserted]
    if created:
        bulk_insert(
            conn,
            "events",
            [
                {
                    "run_id": r.run_id,
                    "seq": 1,
                    "type": r.started.type,
                    "version": r.started.version,
                    "payload": r.started_json,
                    "created_at": r.now_ms,
                }
                for r in created
            ],
        )
    existing = _existing_by_key([r.idempotency_key for r in new if r.run_id not in inserted], conn)
    return [
        ExistingRun(
            run_id=r.run_id,
            created=True,
            flow=r.flow,
            version=r.version,
            identity_hash=r.identity_hash,
            input=r.input,
            env=r.env,
        )
        if r.run_id in inserted
        else existing[r.idempotency_key]
        for r in new
    ]


def _present(run_ids: Sequence[str], conn: Connection, *, events_too: bool) -> set[str]:
    """The ids that have a run row (or, with `events_too`, a first event)."""
    column = events.c.run_id if events_too else runs.c.run_id
    found: set[str] = set()
    for start in range(0, len(run_ids), 500):
        query = sa.select(column).where(column.in_(run_ids[start : start + 500]))
        if events_too:
            query = query.where(events.c.seq == 1)
        found.update(conn.execute(query).scalars())
    return found


def _existing_by_key(keys: Sequence[str], conn: Connection) -> dict[str, ExistingRun]:
    found: dict[str, ExistingRun] = {}
    unique = sorted(set(keys))
    for start in range(0, len(unique), 500):
        query = sa.select(
            runs.c.run_id,
            runs.c.idempotency_key,
            runs.c.flow,
            runs.c.version,
            runs.c.identity_hash,
            runs.c.input,
            runs.c.env,
        ).where(runs.c.idempotency_key.in_(unique[start : start + 500]))
        for row in conn.execute(query):
            found[row.idempotency_key] = ExistingRun(
                run_id=row.run_id,
                created=False,
                flow=row.flow,
                version=row.version,
                identity_hash=row.identity_hash,
                input=row.input,
                env=row.env,
            )
    return found


_FENCE = sa.and_(
    runs.c.run_id == sa.bindparam("b_run"),
    runs.c.last_seq == sa.bindparam("b_expected"),
    runs.c.lease_epoch == sa.bindparam("b_epoch"),
)
_ADVANCE: dict[str, Any] = {
    "last_seq": sa.bindparam("b_last"),
    "status": sa.bindparam("b_status"),
    "next_wake_at": sa.bindparam("b_wake", type_=sa.BigInteger),
    "error": sa.bindparam("b_error", type_=sa.Text),
    "updated_at": sa.bindparam("b_now"),
    "snapshot_seq": sa.func.coalesce(
        sa.bindparam("b_snap", type_=sa.BigInteger), runs.c.snapshot_seq
    ),
}
_APPEND = sa.update(runs).where(_FENCE).values(**_ADVANCE)
_SETTLE = (
    sa.update(runs)
    .where(_FENCE)
    .values(
        **_ADVANCE,
        result=sa.bindparam("b_result", type_=Json),
        settled_at=sa.bindparam("b_now2"),
    )
)


def append_many(conn: Connection, jobs: Sequence[AppendJob]) -> list[int | FencedError]:
    """Apply a batch of appends; each gets its new `last_seq` or the `FencedError` it lost."""
    outcomes: list[int | FencedError] = []
    won: list[AppendJob] = []
    for job in jobs:
        if job.events and not _advance(conn, job):
            outcomes.append(
                FencedError(
                    "append fenced: the run moved on or its lease changed",
                    run_id=job.run_id,
                    expected_seq=job.expected_seq,
                    lease_epoch=job.lease_epoch,
                )
            )
            continue
        won.append(job)
        outcomes.append(job.last_seq)
    event_rows = [
        {
            "run_id": job.run_id,
            "seq": job.expected_seq + offset,
            "type": event.type,
            "version": event.version,
            "payload": canonical_json(event.payload),
            "created_at": job.now_ms,
        }
        for job in won
        for offset, event in enumerate(job.events, start=1)
    ]
    if event_rows:
        bulk_insert(conn, "events", event_rows)
    _write_snapshots(conn, [job for job in won if job.snapshot is not None])
    for job in won:
        if job.consumed:
            conn.execute(
                sa.update(inbox)
                .where(inbox.c.run_id == job.run_id, inbox.c.key.in_(list(job.consumed)))
                .values(consumed_seq=job.last_seq)
            )
    return outcomes


def _advance(conn: Connection, job: AppendJob) -> bool:
    params: dict[str, Any] = {
        "b_run": job.run_id,
        "b_expected": job.expected_seq,
        "b_epoch": job.lease_epoch,
        "b_last": job.last_seq,
        "b_status": job.status,
        "b_wake": job.next_wake_at,
        "b_error": job.error,
        "b_now": job.now_ms,
        "b_snap": job.snapshot.seq if job.snapshot else None,
    }
    if job.settled:
        params |= {"b_result": job.result, "b_now2": job.now_ms}
        return conn.execute(_SETTLE, params).rowcount == 1
    return conn.execute(_APPEND, params).rowcount == 1


def _write_snapshots(conn: Connection, jobs: Sequence[AppendJob]) -> None:
    if not jobs:
        return
    rows = []
    for job in jobs:
        assert job.snapshot is not None  # noqa: S101 - filtered by the caller
        rows.append(
            {
                "run_id": job.run_id,
                "seq": job.snapshot.seq,
                "state": dict(job.snapshot.state),
                "state_hash": job.snapshot.state_hash,
                "fold_version": job.snapshot.fold_version,
                "created_at": job.now_ms,
            }
        )
        # One snapshot per run is enough while the log is never trimmed.
        conn.execute(
            sa.delete(snapshots).where(
                snapshots.c.run_id == job.run_id, snapshots.c.seq < job.snapshot.seq
            )
        )
    conn.execute(sa.insert(snapshots), rows)
