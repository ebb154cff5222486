"""Retention: settled runs older than a cutoff are purged in batches, their keys kept.

A purged run keeps its header row as its tombstone: `purged_at` is set, its log,
snapshots and requests are deleted and its payloads (input, env, attributes,
result) emptied, in one transaction per batch. The row's unique key then refuses
the key for good: a start with it conflicts as with any existing run (no check of
its own on the start path, and no window in which a concurrent start could slip
between a purge's delete and its tombstone), and `statuses` still answers the
run's final status. Tombstones older than their own retention are deleted, which
frees their keys.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from looms_runtime._history.fold import TERMINAL
from looms_runtime._store.driver import driver_errors
from looms_runtime.db import Database
from looms_runtime.schema import events, inbox, runs, snapshots

_EMPTIED: dict[str, Any] = {"input": None, "env": {}, "attributes": {}, "result": None}


def purge_settled(
    db: Database, *, cutoff_ms: int, now_ms: int, batch_size: int, max_batches: int | None
) -> int:
    """Purge runs settled before `cutoff_ms`, oldest first; return how many were purged."""
    purged = batches = 0
    while max_batches is None or batches < max_batches:
        with driver_errors(), db.write() as conn:
            count = _purge_batch(conn, cutoff_ms=cutoff_ms, now_ms=now_ms, limit=batch_size)
        purged += count
        batches += 1
        if count < batch_size:
            break
    return purged


def _purge_batch(conn: Connection, *, cutoff_ms: int, now_ms: int, limit: int) -> int:
    query = (
        sa.select(runs.c.run_id)
        .where(
            runs.c.settled_at.is_not(None),
            runs.c.purged_at.is_(None),
            runs.c.settled_at < cutoff_ms,
            runs.c.status.in_(sorted(TERMINAL)),
        )
        .order_by(runs.c.settled_at)
        .limit(limit)
    )
    if conn.dialect.name == "postgresql":
        # Daemons purging at the same time take disjoint batches.
        query = query.with_for_update(skip_locked=True)
    run_ids = list(conn.execute(query).scalars())
    if not run_ids:
        return 0
    # Children first: nothing relies on the foreign keys' ON DELETE CASCADE.
    for table in (inbox, snapshots, events):
        conn.execute(sa.delete(table).where(table.c.run_id.in_(run_ids)))
    conn.execute(
        sa.update(runs)
        .where(runs.c.run_id.in_(run_ids))
        .values(purged_at=now_ms, snapshot_seq=0, **_EMPTIED)
    )
    return len(run_ids)


def drop_tombstones(db: Database, *, cutoff_ms: int, batch_size: int) -> int:
    """Delete tombstones of runs purged before `cutoff_ms` (their keys may start runs again)."""
    dropped = 0
    while True:
        with driver_errors(), db.write() as conn:
            doomed = (
                sa.select(runs.c.run_id)
                .where(runs.c.purged_at.is_not(None), runs.c.purged_at < cutoff_ms)
                .limit(batch_size)
            )
            run_ids: Sequence[str] = list(conn.execute(doomed).scalars())
            if run_ids:
                conn.execute(sa.delete(runs).where(runs.c.run_id.in_(run_ids)))
        dropped += len(run_ids)
        if len(run_ids) < batch_size:
            return dropped
