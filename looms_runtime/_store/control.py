"""Writes that steer runs from outside their log: requests, owner leases, claims.

A request (cancel, signal, operator retry) is recorded in `looms_inbox` by whoever
asks, in any process; only the run's owner folds it into the log. Leases make that
owner unique: a heartbeat row per owner, and a fenced claim of an orphan's runs.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from looms_runtime._canonical import digest
from looms_runtime._history.planner import InboxItem
from looms_runtime._store.bulk import upsert_insert
from looms_runtime._store.driver import driver_errors
from looms_runtime.db import Database
from looms_runtime.errors import SignalConflictError
from looms_runtime.host import ProcessId
from looms_runtime.schema import inbox, owners, runs
from looms_runtime.statuses import UNSETTLED


def insert_request(
    conn: Connection,
    dialect: str,
    *,
    run_id: str,
    key: str,
    kind: str,
    name: str | None,
    payload: Any,
    request_hash: str,
    now_ms: int,
) -> tuple[str | None, bool]:
    """Record an external request for a run (deduplicated by key).

    Returns:
        The run's status (None: no such run), and whether this call recorded the
        request (False for a settled run, or a key recorded before).

    Raises:
        SignalConflictError: the key was used before with another request.
    """
    status: str | None = conn.execute(
        sa.select(runs.c.status).where(runs.c.run_id == run_id)
    ).scalar_one_or_none()
    if status is None or status not in UNSETTLED:
        return status, False
    # RETURNING says whether the row went in: with ON CONFLICT DO NOTHING, PostgreSQL's
    # rowcount through SQLAlchemy is -1, which read as "recorded before" and left the
    # request to the owner's poll (up to a second) instead of waking the run at once.
    stmt = (
        upsert_insert(dialect, inbox)
        .on_conflict_do_nothing(index_elements=["run_id", "key"])
        .returning(inbox.c.key)
    )
    row = {
        "run_id": run_id,
        "key": key,
        "kind": kind,
        "name": name,
        "payload": payload,
        "request_hash": request_hash,
        "created_at": now_ms,
    }
    if conn.execute(stmt, row).first() is not None:
        return status, True
    if kind != "cancel":
        earlier = conn.execute(
            sa.select(inbox.c.request_hash).where(inbox.c.run_id == run_id, inbox.c.key == key)
        ).scalar_one()
        if earlier != request_hash:
            raise SignalConflictError(
                "the idempotency key was used with another request", run_id=run_id, key=key
            )
    return status, False


def record_request(
    db: Database, run_id: str, item: InboxItem, request_hash: str | None, *, now_ms: int
) -> tuple[str | None, bool]:
    """`insert_request` in a transaction of its own."""
    with driver_errors(), db.write() as conn:
        return insert_request(
            conn,
            conn.dialect.name,
            run_id=run_id,
            key=item.key,
            kind=item.kind,
            name=item.name,
            payload=item.payload if item.payload is not None else {},
            request_hash=request_hash or digest([item.kind, item.name, item.payload]),
            now_ms=now_ms,
        )


def heartbeat(
    conn: Connection,
    dialect: str,
    *,
    owner: str,
    host: str,
    pid: int,
    now_ms: int,
    expires_at: int,
    starting: bool,
    boot_id: str | None = None,
    process_start: int | None = None,
) -> None:
    """Create or renew this owner's lease; runs of owners whose lease lapsed may be taken."""
    values: dict[str, Any] = {
        "host": host,
        "pid": pid,
        "heartbeat_at": now_ms,
        "expires_at": expires_at,
        "boot_id": boot_id,
        "process_start": process_start,
    }
    if starting:
        values["started_at"] = now_ms
    stmt = upsert_insert(dialect, owners).on_conflict_do_update(
        index_elements=["owner"], set_=values
    )
    conn.execute(stmt, {"owner": owner, "started_at": now_ms, **values})


# Built once, as the statements the maintenance thread runs every second are.
_LOCAL_OWNERS = sa.select(owners.c.owner, owners.c.pid, owners.c.process_start).where(
    owners.c.boot_id == sa.bindparam("boot_id"),
    owners.c.owner != sa.bindparam("owner"),
    owners.c.expires_at >= sa.bindparam("now_ms"),
)
_LAPSED_OWNER_RUN = (
    sa.select(runs.c.run_id)
    .where(
        runs.c.lease_owner.in_(
            sa.select(owners.c.owner).where(
                owners.c.expires_at < sa.bindparam("now_ms"),
                owners.c.owner != sa.bindparam("owner"),
            )
        ),
        runs.c.status.in_(UNSETTLED),
    )
    .limit(1)
)


def local_owners(
    conn: Connection, *, owner: str, boot_id: str, now_ms: int
) -> list[tuple[str, ProcessId]]:
    """Other owners on this boot of this host whose lease still runs, with their processes."""
    if not boot_id:
        return []
    found = conn.execute(_LOCAL_OWNERS, {"boot_id": boot_id, "owner": owner, "now_ms": now_ms})
    return [
        (row.owner, ProcessId(boot=boot_id, pid=row.pid, started=row.process_start))
        for row in found
    ]


def lapse_owners(conn: Connection, owners_gone: list[str], *, now_ms: int) -> None:
    """End the leases of owners whose process is provably gone (their runs may be taken)."""
    if owners_gone:
        conn.execute(
            sa.update(owners).where(owners.c.owner.in_(owners_gone)).values(expires_at=now_ms - 1)
        )


_PRUNE_OWNERS = sa.delete(owners).where(
    owners.c.expires_at < sa.bindparam("before_ms"),
    owners.c.owner != sa.bindparam("owner"),
    ~sa.select(runs.c.run_id)
    .where(runs.c.lease_owner == owners.c.owner, runs.c.status.in_(UNSETTLED))
    .exists(),
)


def prune_owners(conn: Connection, *, owner: str, before_ms: int) -> int:
    """Forget owners whose lease ended before `before_ms` and that hold no unsettled run
    (every process is an owner of its own: without this the table only grows)."""
    return int(conn.execute(_PRUNE_OWNERS, {"before_ms": before_ms, "owner": owner}).rowcount)


def release_owner(conn: Connection, *, owner: str, now_ms: int) -> None:
    """End this owner's lease now, so another owner may take its runs at once."""
    conn.execute(sa.update(owners).where(owners.c.owner == owner).values(expires_at=now_ms))


def claim_runs(
    conn: Connection, *, owner: str, now_ms: int, include_own: bool
) -> list[tuple[str, int]]:
    """Take the unsettled runs of owners whose lease lapsed (and, at start, our own).

    Bumping `lease_epoch` fences every append of a previous owner still running.
    """
    stmt = (
        sa.update(runs)
        .where(_claimable(owner=owner, now_ms=now_ms, include_own=include_own))
        .values(lease_owner=owner, lease_epoch=runs.c.lease_epoch + 1)
        .returning(runs.c.run_id, runs.c.lease_epoch)
    )
    return [(row.run_id, row.lease_epoch) for row in conn.execute(stmt)]


def any_orphans(conn: Connection, *, owner: str, now_ms: int) -> bool:
    """Whether some unsettled run has no live owner (a read: no write lock when there is none).

    This scans the unsettled runs' owners; `lapsed_owner_runs` is the cheap check
    made every second.
    """
    query = sa.select(runs.c.run_id).where(
        _claimable(owner=owner, now_ms=now_ms, include_own=False)
    )
    return conn.execute(query.limit(1)).first() is not None


def lapsed_owner_runs(conn: Connection, *, owner: str, now_ms: int) -> bool:
    """Whether an owner whose heartbeat lapsed still holds unsettled runs.

    Reads the small owners table, then one indexed probe per lapsed owner, so it
    costs next to nothing however many runs there are.
    """
    found = conn.execute(_LAPSED_OWNER_RUN, {"now_ms": now_ms, "owner": owner}).first()
    return found is not None


def stranded_runs(conn: Connection, *, owner: str, before_ms: int, limit: int) -> list[str]:
    """Our active runs that should be moving but may have lost their wake-up.

    Two shapes only, both certain to have work: a run never driven past its start
    (`last_seq = 1`), and a run whose recorded wake time passed. A run waiting for a
    signal or an operator has neither and is left alone.
    """
    stalled = sa.or_(
        sa.and_(runs.c.last_seq == 1, runs.c.created_at < before_ms),
        runs.c.next_wake_at < before_ms,
    )
    query = (
        sa.select(runs.c.run_id)
        .where(runs.c.lease_owner == owner, runs.c.status == "active", stalled)
        .limit(limit)
    )
    return list(conn.execute(query).scalars())


def _claimable(*, owner: str, now_ms: int, include_own: bool) -> sa.ColumnElement[bool]:
    alive = sa.select(owners.c.owner).where(owners.c.expires_at >= now_ms)
    lapsed = sa.and_(runs.c.lease_owner != owner, runs.c.lease_owner.not_in(alive))
    claimable = sa.or_(runs.c.lease_owner.is_(None), lapsed)
    if include_own:
        claimable = sa.or_(claimable, runs.c.lease_owner == owner)
    return sa.and_(runs.c.status.in_(UNSETTLED), claimable)
