"""The write of a batch of starts, inside the committer's transaction.

A run whose flow has nothing to run is inserted completed, its completion in the
log after `run_started` (see `Runtime.start_within`).

`ON CONFLICT DO NOTHING` on the idempotency key makes the unique index the arbiter:
of two concurrent starts with one key (threads, processes, or two requests of one
batch), exactly one inserts; the others read the winner back. A run purged by
retention keeps its header row (its tombstone), so its key conflicts like any other
and is read back with `purged` set: nothing on this path checks for purges.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from looms_runtime._store.bulk import bulk_insert
from looms_runtime._store.rows import ExistingRun, NewRun
from looms_runtime.schema import events, runs

_CHUNK = 500


def insert_runs(conn: Connection, new: Sequence[NewRun]) -> list[ExistingRun | None]:
    """Insert runs whose key is free; per request, None (created) or the run its key names."""
    if not new:
        return []
    rows: list[tuple[Any, ...]] = [
        (
            r.run_id,
            r.flow,
            r.version,
            r.idempotency_key,
            r.identity_hash,
            "completed" if r.completion else "active",
            r.input_json,
            r.env_json,
            r.attributes_json,
            r.result_json if r.completion else None,
            1 + len(r.dispatched_json) + len(r.completion),
            0,
            r.owner,
            1,
            r.now_ms,
            r.now_ms,
            r.now_ms if r.completion else None,
        )
        for r in new
    ]
    if bulk_insert(conn, "runs", rows) == len(rows):
        inserted = {r.run_id for r in new}
        fresh: Sequence[NewRun] = new
    else:
        # Run ids are minted per request, so a present id is this batch's run: inserted
        # now, or by an earlier attempt of the batch whose commit answer was lost.
        inserted = _present([r.run_id for r in new], conn, events_too=False)
        started = _present(list(inserted), conn, events_too=True)
        fresh = [r for r in new if r.run_id in inserted and r.run_id not in started]
    if fresh:
        event_rows = [(r.run_id, 1, "run_started", 1, r.started_json, r.now_ms) for r in fresh]
        event_rows += [
            (r.run_id, seq, "effect_dispatched", 1, payload, r.now_ms)
            for r in fresh
            for seq, payload in enumerate(r.dispatched_json, start=2)
        ]
        event_rows += [
            (r.run_id, seq, kind, version, payload, r.now_ms)
            for r in fresh
            for seq, (kind, version, payload) in enumerate(r.completion, start=2)
        ]
        bulk_insert(conn, "events", event_rows)
    taken = [r.idempotency_key for r in new if r.run_id not in inserted]
    existing = _existing_by_key(taken, conn) if taken else {}
    return [None if r.run_id in inserted else existing[r.idempotency_key] for r in new]


def _present(run_ids: Sequence[str], conn: Connection, *, events_too: bool) -> set[str]:
    """The ids that have a run row (or, with `events_too`, a first event)."""
    column = events.c.run_id if events_too else runs.c.run_id
    found: set[str] = set()
    for start in range(0, len(run_ids), _CHUNK):
        query = sa.select(column).where(column.in_(run_ids[start : start + _CHUNK]))
        if events_too:
            query = query.where(events.c.seq == 1)
        found.update(conn.execute(query).scalars())
    return found


def _existing_by_key(keys: Sequence[str], conn: Connection) -> dict[str, ExistingRun]:
    found: dict[str, ExistingRun] = {}
    unique = sorted(set(keys))
    for start in range(0, len(unique), _CHUNK):
        query = sa.select(
            runs.c.run_id,
            runs.c.idempotency_key,
            runs.c.flow,
            runs.c.version,
            runs.c.identity_hash,
            runs.c.input,
            runs.c.env,
            runs.c.status,
            runs.c.lease_owner,
            runs.c.last_seq,
            runs.c.purged_at,
        ).where(runs.c.idempotency_key.in_(unique[start : start + _CHUNK]))
        for row in conn.execute(query):
            found[row.idempotency_key] = ExistingRun(
                run_id=row.run_id,
                flow=row.flow,
                version=row.version,
                identity_hash=row.identity_hash,
                input=row.input,
                env=row.env,
                status=row.status,
                lease_owner=row.lease_owner,
                last_seq=row.last_seq,
                purged=row.purged_at is not None,
            )
    return found
