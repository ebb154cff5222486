"""The runtime's write statements; each function runs inside a caller's transaction.

Every append is fenced on the header (`fences`): `UPDATE looms_runs SET last_seq = :n
... WHERE run_id = :r AND last_seq = :expected AND lease_epoch = :epoch`. The header
row is the arbiter, so its update runs first and the events are inserted only for
the appends that won: a lost fence never leaves an orphan event and never aborts
the batch.

With trimming on, a snapshot's write also deletes the events at or behind it: the
snapshot is then the only way to that state, so both happen in one transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from looms_runtime._canonical import canonical_json
from looms_runtime._store.bulk import bulk_insert, upsert_insert
from looms_runtime._store.fences import advance_headers
from looms_runtime._store.rows import AppendJob
from looms_runtime.errors import FencedError
from looms_runtime.schema import events, flows, inbox, snapshots


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


def append_many(
    conn: Connection, jobs: Sequence[AppendJob], *, trim: bool = False
) -> list[int | FencedError]:
    """Apply a batch of appends; each gets its new `last_seq` or the `FencedError` it lost.

    With `trim`, the events a new snapshot covers are deleted with it.
    """
    outcomes: list[int | FencedError] = []
    won: list[AppendJob] = []
    advanced = advance_headers(conn, [job for job in jobs if job.events])
    for job in jobs:
        if job.events and job.run_id not in advanced:
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
        (
            job.run_id,
            job.expected_seq + offset,
            event.type,
            event.version,
            canonical_json(event.payload),
            job.now_ms,
        )
        for job in won
        for offset, event in enumerate(job.events, start=1)
    ]
    if event_rows:
        bulk_insert(conn, "events", event_rows)
    _write_snapshots(conn, [job for job in won if job.snapshot is not None], trim=trim)
    for job in won:
        if job.consumed:
            conn.execute(
                sa.update(inbox)
                .where(inbox.c.run_id == job.run_id, inbox.c.key.in_(list(job.consumed)))
                .values(consumed_seq=job.last_seq)
            )
    return outcomes


_RUN: sa.BindParameter[str] = sa.bindparam("b_run")
_SEQ: sa.BindParameter[int] = sa.bindparam("b_seq")
# One snapshot per run is kept: the newest is the only one a load reads.
_DROP_OLDER = sa.delete(snapshots).where(snapshots.c.run_id == _RUN, snapshots.c.seq < _SEQ)
_TRIM = sa.delete(events).where(events.c.run_id == _RUN, events.c.seq <= _SEQ)


def _write_snapshots(conn: Connection, jobs: Sequence[AppendJob], *, trim: bool) -> None:
    if not jobs:
        return
    rows = []
    marks = []
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
        marks.append({"b_run": job.run_id, "b_seq": job.snapshot.seq})
    conn.execute(_DROP_OLDER, marks)
    if trim:
        conn.execute(_TRIM, marks)
    conn.execute(sa.insert(snapshots), rows)
