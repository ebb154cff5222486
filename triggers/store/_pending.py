"""The SQL store's pending pass: expired reservations and buffered occurrences.

Runs inside the caller's write transaction; trigger rows are locked before
ledger rows, as on every write path. `triggers.buffered_count` is recomputed
from the ledger for every trigger looked at, so a counter that drifted heals.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from triggers.errors import StoreError
from triggers.model import Action, Outcome, Reason, Trigger, idempotency_key
from triggers.store._buffers import OWN_KINDS, Active, BufferPlan, Waiting, resolve_buffer
from triggers.store._fire_row import new_reservation
from triggers.store._read_sql import chunks
from triggers.store._sql_pools import lock_pools, pool_use
from triggers.store.protocol import Reserved
from triggers.store.schema import fires, triggers

_ACTIVE = (Outcome.LAUNCHING.value, Outcome.LAUNCHED.value)


def pending_triggers(
    conn: Connection, *, now: datetime, limit: int, dead_owners: Sequence[str] = ()
) -> tuple[list[str], list[str]]:
    """The triggers a pending pass looks at: those with an expired reservation, and
    those with a buffer (or a buffered count to heal).

    Read before any lock is taken, so that the caller locks them all at once, in id
    order: locking the second set after the first (or after ledger rows) could
    deadlock against a claim on PostgreSQL."""
    expired = (
        conn.execute(
            sa.select(fires.c.trigger_id)
            .where(_is_expired(now, dead_owners))
            .distinct()
            .limit(limit)
        )
        .scalars()
        .all()
    )
    buffered = sa.select(fires.c.trigger_id).where(fires.c.outcome == Outcome.BUFFERED.value)
    with_rows = set(conn.execute(buffered.distinct()).scalars())
    # Two ranges rather than `!= 0`, which no index serves: a poll must not scan every
    # trigger to find the few with a buffer.
    nonzero = sa.or_(triggers.c.buffered_count > 0, triggers.c.buffered_count < 0)
    counted = set(conn.execute(sa.select(triggers.c.id).where(nonzero)).scalars())
    return sorted(expired), sorted(with_rows | counted)


def _is_expired(now: datetime, dead_owners: Sequence[str] = ()) -> sa.ColumnElement[bool]:
    """A reservation that may be taken: its lease ran out, or its owner is gone."""
    lapsed = fires.c.lease_expires_at <= now
    if dead_owners:
        lapsed = sa.or_(lapsed, fires.c.lease_owner.in_(sorted(set(dead_owners))))
    return sa.and_(fires.c.outcome == Outcome.LAUNCHING.value, lapsed)


def take_expired(
    conn: Connection,
    candidates: Sequence[str],
    stored: Mapping[str, Trigger | StoreError],
    *,
    owner: str,
    host: str,
    now: datetime,
    lease: timedelta,
    limit: int,
    dead_owners: Sequence[str] = (),
) -> list[Reserved]:
    """Re-reserve launches whose lease expired (a start failed) or whose daemon is gone.

    `candidates` are triggers `stored` holds locked (see `pending_triggers`); the
    reservation fence below does the rest."""
    if not candidates:
        return []
    rows = (
        conn.execute(
            sa.select(fires)
            .where(_is_expired(now, dead_owners), fires.c.trigger_id.in_(candidates))
            .order_by(fires.c.occurrence_at)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        .mappings()
        .all()
    )
    claims = []
    for row in rows:
        trigger = stored.get(row["trigger_id"])
        if not isinstance(trigger, Trigger):
            continue
        reservation = new_reservation()
        updated = conn.execute(
            fires.update()
            .where(fires.c.id == row["id"], fires.c.reservation == row["reservation"])
            .values(
                reservation=reservation, lease_owner=owner, host=host, lease_expires_at=now + lease
            )
        ).rowcount
        if updated:
            claims.append(pending_claim(trigger, row, reservation))
    return claims


def promote_buffered(
    conn: Connection,
    candidates: Sequence[str],
    stored: Mapping[str, Trigger | StoreError],
    *,
    owner: str,
    host: str,
    now: datetime,
    lease: timedelta,
) -> list[Reserved]:
    """Resolve the buffer of every candidate trigger, under its current policy.

    `candidates` are triggers `stored` holds locked (see `pending_triggers`).
    Launches come back as claims (fire, or supersede of the active run); the
    occurrences the policy drops are settled in the ledger with their reason.
    Members of a pool take its free slots oldest waiting occurrence first.
    """
    claims: list[Reserved] = []
    rooms = _pool_rooms(conn, candidates, stored)
    for trigger_id in _in_turn(conn, candidates, stored) if rooms else candidates:
        trigger = stored.get(trigger_id)
        if not isinstance(trigger, Trigger):
            continue
        pool = trigger.spec.pool
        room = None if pool is None else rooms.get(pool.name)
        launched = _resolve_one(
            conn, trigger, owner=owner, host=host, now=now, lease=lease, pool_room=room
        )
        if pool is not None and room is not None:
            rooms[pool.name] = room - len(launched)
        claims += launched
    return claims


def _pool_rooms(
    conn: Connection, candidates: Sequence[str], stored: Mapping[str, Trigger | StoreError]
) -> dict[str, int]:
    """Lock the candidates' pools (after their trigger rows) and count each one's free
    slots (its size less its active rows)."""
    slots: dict[str, int] = {}
    for trigger_id in candidates:
        trigger = stored.get(trigger_id)
        pool = trigger.spec.pool if isinstance(trigger, Trigger) else None
        if pool is not None:
            slots[pool.name] = min(pool.slots, slots.get(pool.name, pool.slots))
    if not slots:
        return {}
    lock_pools(conn, slots)
    use = pool_use(conn, slots)
    return {name: size - use[name].active for name, size in slots.items()}


def _in_turn(
    conn: Connection, candidates: Sequence[str], stored: Mapping[str, Trigger | StoreError]
) -> list[str]:
    """The candidates in the order their buffers wait: the oldest waiting occurrence
    first, so that the members of a pool take its slots in order of occurrence."""
    oldest: dict[str, datetime] = {}
    for part in chunks(sorted(candidates)):
        rows = conn.execute(
            sa.select(fires.c.trigger_id, sa.func.min(fires.c.occurrence_at))
            .where(fires.c.trigger_id.in_(part), fires.c.outcome == Outcome.BUFFERED.value)
            .group_by(fires.c.trigger_id)
        )
        oldest.update((trigger_id, at) for trigger_id, at in rows)
    latest = max(oldest.values(), default=None)
    return sorted(candidates, key=lambda trigger_id: (oldest.get(trigger_id) or latest, trigger_id))


def _resolve_one(
    conn: Connection,
    trigger: Trigger,
    *,
    owner: str,
    host: str,
    now: datetime,
    lease: timedelta,
    pool_room: int | None = None,
) -> list[Reserved]:
    waiting_rows = (
        conn.execute(
            sa.select(fires)
            .where(fires.c.trigger_id == trigger.id, fires.c.outcome == Outcome.BUFFERED.value)
            .order_by(fires.c.occurrence_at, fires.c.id)
        )
        .mappings()
        .all()
    )
    active = [
        Active(occurrence_at=row.occurrence_at, run_id=row.run_id)
        for row in conn.execute(
            sa.select(fires.c.occurrence_at, fires.c.run_id)
            .where(fires.c.trigger_id == trigger.id, fires.c.outcome.in_(_ACTIVE))
            .order_by(fires.c.occurrence_at, fires.c.id)
        )
    ]
    waiting = [
        Waiting(occurrence_at=row["occurrence_at"], operator=row["kind"] not in OWN_KINDS)
        for row in waiting_rows
    ]
    plan = resolve_buffer(trigger, waiting, active=active, pool_room=pool_room)
    pool = trigger.spec.pool
    if pool is not None:
        _retag_kept(conn, waiting_rows, plan, pool.name)
    unchanged = (trigger.active_count, trigger.buffered_count) == (len(active), len(plan.keep))
    if unchanged and not plan.launch and not plan.drop:
        return []  # a held buffer (paused trigger) costs no write
    claims = _apply(conn, trigger, waiting_rows, plan, owner=owner, host=host, now=now, lease=lease)
    conn.execute(
        triggers.update()
        .where(triggers.c.id == trigger.id)
        .values(
            # The ledger is the truth: both counters are recomputed from it.
            active_count=len(active) + len(plan.launch),
            buffered_count=len(plan.keep),
            runs_launched=triggers.c.runs_launched + plan.scheduled_launches,
            updated_at=now,
        )
    )
    return claims


def _apply(
    conn: Connection,
    trigger: Trigger,
    rows: Sequence[Mapping[Any, Any]],
    plan: BufferPlan,
    *,
    owner: str,
    host: str,
    now: datetime,
    lease: timedelta,
) -> list[Reserved]:
    for index, outcome, reason in plan.drop:
        conn.execute(
            fires.update()
            .where(fires.c.id == rows[index]["id"])
            .values(
                outcome=outcome.value,
                reason=reason.value,
                settled_at=now,
                blocked_by=trigger.blocked_by if reason is Reason.BLOCKED else None,
                reason_detail=pool_detail(trigger, reason),
            )
        )
    claims = []
    for index, supersedes in plan.launch:
        row = rows[index]
        reservation = new_reservation()
        conn.execute(
            fires.update()
            .where(fires.c.id == row["id"])
            .values(
                outcome=Outcome.LAUNCHING.value,
                reason=None,
                reason_detail=None,
                reservation=reservation,
                lease_owner=owner,
                host=host,
                lease_expires_at=now + lease,
                revision=trigger.revision,
                supersedes_run_id=supersedes,
            )
        )
        claims.append(pending_claim(trigger, {**row, "supersedes_run_id": supersedes}, reservation))
    return claims


def _retag_kept(
    conn: Connection, rows: Sequence[Mapping[Any, Any]], plan: BufferPlan, pool: str
) -> None:
    """Record why a pool member's kept occurrences wait: `pool_full` when the pool holds
    them (so they count as waiting, and no newer occurrence of another member takes
    the next free slot first), `overlap` when the trigger itself does (so a member
    blocked or busy with its own run holds no place in the pool's queue)."""
    reason, detail = (Reason.POOL_FULL, pool) if plan.pool_full else (Reason.OVERLAP, None)
    ids = [rows[index]["id"] for index in plan.keep if rows[index]["reason"] != reason.value]
    if ids:
        conn.execute(
            fires.update()
            .where(fires.c.id.in_(ids))
            .values(reason=reason.value, reason_detail=detail)
        )


def pool_detail(trigger: Trigger, reason: Reason) -> str | None:
    """A dropped buffered row's `reason_detail`: its pool, when the pool dropped it."""
    if reason is Reason.POOL_FULL and trigger.spec.pool is not None:
        return trigger.spec.pool.name
    return None


def pending_claim(trigger: Trigger, row: Mapping[Any, Any], reservation: str) -> Reserved:
    """The claim that launches a pending ledger row under a fresh reservation."""
    supersedes = row["supersedes_run_id"]
    return Reserved(
        trigger=trigger,
        occurrence_at=row["occurrence_at"],
        action=Action.SUPERSEDE if supersedes else Action.FIRE,
        idempotency_key=row["idempotency_key"]
        or idempotency_key(trigger.id, row["occurrence_at"], row["manual_key"]),
        kind=row["kind"],
        manual_key=row["manual_key"],
        reservation=reservation,
        supersedes_run_id=supersedes,
    )
