"""The header fence of every append: one statement per batch, not one per run.

An append wins only if the run's header still has the sequence and lease epoch the
appender read (`... WHERE run_id = :r AND last_seq = :expected AND lease_epoch =
:epoch`). All appends of a group commit are fenced together: the committer is the
runtime's one writer, and every statement it runs is a round trip (PostgreSQL) or
a release and re-take of the GIL while workers compete for it (SQLite), so the
fences of a batch cost one or two statements instead of one per run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from looms_runtime._canonical import canonical_json
from looms_runtime._store.rows import AppendJob
from looms_runtime.schema import runs

_SQLITE_APPEND = """
UPDATE looms_runs SET last_seq = ?, status = ?, next_wake_at = ?, error = ?, updated_at = ?,
    snapshot_seq = COALESCE(?, snapshot_seq)
WHERE run_id = ? AND last_seq = ? AND lease_epoch = ?
"""
_SQLITE_SETTLE = """
UPDATE looms_runs SET last_seq = ?, status = ?, next_wake_at = ?, error = ?, updated_at = ?,
    snapshot_seq = COALESCE(?, snapshot_seq), result = ?, settled_at = ?
WHERE run_id = ? AND last_seq = ? AND lease_epoch = ?
"""

_PG_ADVANCE = """
UPDATE looms_runs AS r SET
    last_seq = v.last, status = v.status, next_wake_at = v.wake, error = v.error,
    updated_at = v.now, snapshot_seq = COALESCE(v.snap, r.snapshot_seq),
    result = CASE WHEN v.settled THEN v.result ELSE r.result END,
    settled_at = CASE WHEN v.settled THEN v.now ELSE r.settled_at END
FROM (VALUES {rows}) AS v(run_id, expected, epoch, last, status, wake, error, now, snap,
                          settled, result)
WHERE r.run_id = v.run_id AND r.last_seq = v.expected AND r.lease_epoch = v.epoch
RETURNING r.run_id
"""
_PG_ROW = (
    "(%s, %s::bigint, %s::bigint, %s::bigint, %s, %s::bigint, %s, %s::bigint, %s::bigint,"
    " %s::boolean, %s::jsonb)"
)


def advance_headers(conn: Connection, jobs: Sequence[AppendJob]) -> set[str]:
    """Move the header of every job whose fence holds; return those jobs' run ids.

    A run has at most one append in flight (its worker waits for the answer), so
    each run appears once in a batch.
    """
    if not jobs:
        return set()
    if conn.dialect.name == "postgresql":
        return _advance_postgres(conn, jobs)
    return _advance_sqlite(conn, jobs)


def _values(job: AppendJob) -> tuple[Any, ...]:
    snapshot = job.snapshot.seq if job.snapshot else None
    return (job.last_seq, job.status, job.next_wake_at, job.error, job.now_ms, snapshot)


def _fence(job: AppendJob) -> tuple[Any, ...]:
    return (job.run_id, job.expected_seq, job.lease_epoch)


def _advance_sqlite(conn: Connection, jobs: Sequence[AppendJob]) -> set[str]:
    appends = [_values(job) + _fence(job) for job in jobs if not job.settled]
    settles = [
        (*_values(job), canonical_json(job.result), job.now_ms, *_fence(job))
        for job in jobs
        if job.settled
    ]
    moved = 0
    for sql, rows in ((_SQLITE_APPEND, appends), (_SQLITE_SETTLE, settles)):
        if rows:
            moved += int(conn.exec_driver_sql(sql, rows).rowcount)
    if moved == len(jobs):
        return {job.run_id for job in jobs}
    # Some fence was lost: a header now at the job's sequence and epoch is the job's
    # own (only the lease holder appends, one append per run at a time).
    query = sa.select(runs.c.run_id, runs.c.last_seq, runs.c.lease_epoch).where(
        runs.c.run_id.in_([job.run_id for job in jobs])
    )
    headers = {row.run_id: (row.last_seq, row.lease_epoch) for row in conn.execute(query)}
    return {
        job.run_id for job in jobs if headers.get(job.run_id) == (job.last_seq, job.lease_epoch)
    }


def _advance_postgres(conn: Connection, jobs: Sequence[AppendJob]) -> set[str]:
    params: list[Any] = []
    for job in jobs:
        result = canonical_json(job.result) if job.settled else None
        params += [*_fence(job), *_values(job), job.settled, result]
    sql = _PG_ADVANCE.format(rows=", ".join([_PG_ROW] * len(jobs)))
    return {row[0] for row in conn.exec_driver_sql(sql, tuple(params))}
