"""The memory store's ledger writes beside claims: ranges, splits, the pending pass,
settlements and run changes.

Private to `triggers.store.memory`; each function is the twin of the SQL store's
function of the same name (`_ranges.py`, `_pending.py`, `_settlements.py`) and
runs on the tables under the store's lock.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from datetime import datetime, timedelta

from triggers.errors import (
    LedgerChangedError,
    RevisionMismatchError,
    TriggersError,
    UnknownTriggerError,
    WatermarkMovedError,
)
from triggers.model import (
    Action,
    FireRecord,
    Outcome,
    Reason,
    Trigger,
    idempotency_key,
)
from triggers.store._buffers import OWN_KINDS, Active, Waiting, resolve_buffer
from triggers.store._dependents import SettledRun, dependent_rows
from triggers.store._fire_row import FireRow, cut, new_reservation
from triggers.store._memory_pools import pool_use
from triggers.store._memory_rows import Tables, ordered
from triggers.store._memory_upstream_runs import MemoryUpstreamRuns
from triggers.store.protocol import RangeRecord, RangeSplit, Reserved, RunChange, Settlement

_ACTIVE = (Outcome.LAUNCHING, Outcome.LAUNCHED)


def apply_splits(tables: Tables, splits: Sequence[RangeSplit], now: datetime) -> None:
    """Replace each split's row by its pieces.

    Raises:
        LedgerChangedError: a row is gone or differs from what the caller read.
    """
    for split in splits:
        found = tables.by_identity.get((split.trigger_id, split.first_at, ""))
        row = None if found is None else tables.fires[found]
        if (
            row is None
            or row.outcome is not split.outcome
            or row.count != split.count
            or row.newest_at != split.last_at
            or sum(piece.count for piece in split.pieces) >= split.count
        ):
            raise LedgerChangedError(
                f"the ledger row of trigger {split.trigger_id!r} at {split.first_at.isoformat()} "
                "changed since it was read",
                trigger_id=split.trigger_id,
            )
        tables.delete(row)
        trigger = tables.triggers.get(split.trigger_id)
        if trigger is not None and trigger.open_range_id == row.id:
            trigger.open_range_id = None
        for piece in split.pieces:
            tables.insert(
                FireRow(
                    trigger_id=split.trigger_id,
                    occurrence_at=piece.first_at,
                    last_occurrence_at=piece.last_at if piece.count > 1 else None,
                    count=piece.count,
                    outcome=row.outcome,
                    reason=row.reason,
                    revision=row.revision,
                    host=row.host,
                    claimed_at=row.claimed_at,
                    # Kept as recorded, so carving never extends a row's retention.
                    settled_at=row.settled_at or cut(now),
                )
            )


def record_range(tables: Tables, item: RangeRecord, now: datetime) -> TriggersError | None:
    """Record one range, extending the trigger's open range row when it continues it."""
    stored = tables.triggers.get(item.trigger_id)
    if stored is None:
        return UnknownTriggerError(f"no trigger {item.trigger_id!r}", trigger_id=item.trigger_id)
    if stored.revision != item.expected_revision:
        return RevisionMismatchError(
            f"trigger {item.trigger_id!r} is at revision {stored.revision}, "
            f"not {item.expected_revision}",
            trigger_id=item.trigger_id,
        )
    if stored.watermark_at != item.after:
        return WatermarkMovedError(
            f"trigger {item.trigger_id!r} watermark moved since it was read",
            trigger_id=item.trigger_id,
        )
    now = cut(now)
    open_row = None if stored.open_range_id is None else tables.fires.get(stored.open_range_id)
    if (
        open_row is not None
        and open_row.trigger_id == item.trigger_id
        and open_row.outcome is item.outcome
        and open_row.reason is item.reason
        and open_row.newest_at < item.first_at
    ):
        open_row.last_occurrence_at = item.last_at
        open_row.count += item.count
        open_row.settled_at = now
    else:
        open_row = tables.insert(
            FireRow(
                trigger_id=item.trigger_id,
                occurrence_at=cut(item.first_at),
                last_occurrence_at=cut(item.last_at) if item.count > 1 else None,
                count=item.count,
                outcome=item.outcome,
                reason=item.reason,
                revision=stored.revision,
                claimed_at=now,
                settled_at=now,
            )
        )
    stored.watermark_at = cut(max(stored.watermark_at, item.last_at))
    stored.open_range_id = open_row.id
    stored.updated_at = now
    return None


def _lapsed(row: FireRow, now: datetime, dead_owners: set[str]) -> bool:
    """A reservation that may be taken: its lease ran out, or its owner is gone."""
    expired = row.lease_expires_at is not None and row.lease_expires_at <= now
    return expired or (row.lease_owner is not None and row.lease_owner in dead_owners)


def take_pending(
    tables: Tables,
    *,
    owner: str,
    host: str,
    now: datetime,
    lease: timedelta,
    limit: int,
    dead_owners: Sequence[str],
) -> list[Reserved]:
    """Re-reserve lapsed launches, then resolve every buffer (see the protocol)."""
    dead = set(dead_owners)
    lapsed = [row for row in tables.with_outcome(Outcome.LAUNCHING) if _lapsed(row, now, dead)]
    expired = sorted({row.trigger_id for row in lapsed})[:limit]
    buffered = {row.trigger_id for row in tables.with_outcome(Outcome.BUFFERED)}
    buffered |= {i for i, row in tables.triggers.items() if row.buffered_count != 0}
    stored = {
        trigger_id: tables.triggers[trigger_id].snapshot()
        for trigger_id in sorted({*expired, *buffered})
        if trigger_id in tables.triggers
    }
    claims = []
    candidates = set(expired)
    for row in ordered(r for r in lapsed if r.trigger_id in candidates)[:limit]:
        trigger = stored.get(row.trigger_id)
        if trigger is None:
            continue
        reservation = row.reservation = new_reservation()
        row.lease_owner, row.host, row.lease_expires_at = owner, host, cut(now + lease)
        claims.append(_pending_claim(trigger, row, reservation))
    rooms = _pool_rooms(tables, stored.values())
    for trigger_id in _in_turn(tables, buffered) if rooms else sorted(buffered):
        trigger = stored.get(trigger_id)
        if trigger is None:
            continue
        pool = trigger.spec.pool
        room = None if pool is None else rooms.get(pool.name)
        launched = _resolve_one(
            tables, trigger, owner=owner, host=host, now=now, lease=lease, pool_room=room
        )
        if pool is not None and room is not None:
            rooms[pool.name] = room - len(launched)
        claims += launched
    return claims


def _pool_rooms(tables: Tables, triggers: Iterable[Trigger]) -> dict[str, int]:
    """The free slots of the triggers' pools (as the SQL store's `_pool_rooms`)."""
    slots: dict[str, int] = {}
    for trigger in triggers:
        pool = trigger.spec.pool
        if pool is not None:
            slots[pool.name] = min(pool.slots, slots.get(pool.name, pool.slots))
    use = pool_use(tables, slots)
    return {name: size - use[name].active for name, size in slots.items()}


def _in_turn(tables: Tables, candidates: Collection[str]) -> list[str]:
    """The candidates, the oldest waiting occurrence first (as the SQL store's)."""
    oldest: dict[str, datetime] = {}
    for row in tables.with_outcome(Outcome.BUFFERED):
        if row.trigger_id in candidates:
            at = oldest.get(row.trigger_id)
            if at is None or row.occurrence_at < at:
                oldest[row.trigger_id] = row.occurrence_at
    latest = max(oldest.values(), default=None)
    return sorted(candidates, key=lambda trigger_id: (oldest.get(trigger_id) or latest, trigger_id))


def _resolve_one(
    tables: Tables,
    trigger: Trigger,
    *,
    owner: str,
    host: str,
    now: datetime,
    lease: timedelta,
    pool_room: int | None = None,
) -> list[Reserved]:
    waiting_rows = ordered(
        row for row in tables.with_outcome(Outcome.BUFFERED) if row.trigger_id == trigger.id
    )
    active_rows = ordered(
        row for row in tables.with_outcome(*_ACTIVE) if row.trigger_id == trigger.id
    )
    active = [Active(occurrence_at=row.occurrence_at, run_id=row.run_id) for row in active_rows]
    waiting = [
        Waiting(occurrence_at=row.occurrence_at, operator=row.kind not in OWN_KINDS)
        for row in waiting_rows
    ]
    plan = resolve_buffer(trigger, waiting, active=active, pool_room=pool_room)
    pool = trigger.spec.pool
    if pool is not None:  # why the kept ones wait (see the SQL store's `_retag_kept`)
        reason, detail = (Reason.POOL_FULL, pool.name) if plan.pool_full else (Reason.OVERLAP, None)
        for index in plan.keep:
            waiting_rows[index].reason, waiting_rows[index].reason_detail = reason, detail
    unchanged = (trigger.active_count, trigger.buffered_count) == (len(active), len(plan.keep))
    if unchanged and not plan.launch and not plan.drop:
        return []  # a held buffer (paused trigger) costs no write
    now = cut(now)
    for index, outcome, reason in plan.drop:
        row = waiting_rows[index]
        tables.set_outcome(row, outcome)
        row.reason, row.settled_at = reason, now
        row.blocked_by = trigger.blocked_by if reason is Reason.BLOCKED else None
        row.reason_detail = (
            trigger.spec.pool.name
            if reason is Reason.POOL_FULL and trigger.spec.pool is not None
            else None
        )
        tables.settled(now)
    claims = []
    for index, supersedes in plan.launch:
        row = waiting_rows[index]
        tables.set_outcome(row, Outcome.LAUNCHING)
        reservation = row.reservation = new_reservation()
        row.reason = row.reason_detail = None
        row.lease_owner, row.host, row.lease_expires_at = owner, host, cut(now + lease)
        row.revision, row.supersedes_run_id = trigger.revision, supersedes
        claims.append(_pending_claim(trigger, row, reservation))
    stored = tables.triggers[trigger.id]
    # The ledger is the truth: both counters are recomputed from it.
    stored.active_count = len(active) + len(plan.launch)
    stored.buffered_count = len(plan.keep)
    stored.runs_launched += plan.scheduled_launches
    stored.updated_at = now
    return claims


def _pending_claim(trigger: Trigger, row: FireRow, reservation: str) -> Reserved:
    supersedes = row.supersedes_run_id
    return Reserved(
        trigger=trigger,
        occurrence_at=row.occurrence_at,
        action=Action.SUPERSEDE if supersedes else Action.FIRE,
        idempotency_key=row.idempotency_key
        or idempotency_key(trigger.id, row.occurrence_at, row.manual_key),
        kind=row.kind,
        manual_key=row.manual_key,
        reservation=reservation,
        supersedes_run_id=supersedes,
    )


_SETTLED_AS = {outcome.value: outcome for outcome in Outcome}
"""`Outcome(state)` without the enum's call (one for every run that ends)."""


def record_settlements(
    tables: Tables, settlements: Sequence[Settlement], now: datetime
) -> list[FireRecord | None]:
    """Record stopped runs; idempotent (only `launched` rows of that run change)."""
    now = cut(now)
    # A superseded run may already be recorded `cancelled` by a monitor that saw the
    # cancellation first; supersession is the truer outcome and wins.
    by_run: dict[str, FireRow] = {}
    for settlement in settlements:
        for live in tables.of_run(settlement.run_id):
            if live.outcome in (Outcome.LAUNCHED, Outcome.CANCELLED):
                by_run[settlement.run_id] = live
    deltas: dict[str, int] = {}
    pauses: dict[str, str] = {}
    results: list[FireRecord | None] = []
    followed: list[SettledRun] = []
    for settlement in settlements:
        row: FireRow | None = by_run.pop(settlement.run_id, None)
        if row is None or (
            row.outcome is not Outcome.LAUNCHED and settlement.state != "superseded"
        ):
            results.append(None)
            continue
        was = row.outcome
        tables.set_outcome(row, _SETTLED_AS[settlement.state])
        row.error, row.settled_at = settlement.error, now
        tables.settled(now)
        if was is Outcome.LAUNCHED:
            deltas[row.trigger_id] = deltas.get(row.trigger_id, 0) - 1
            run = SettledRun(
                trigger_id=row.trigger_id, run_id=settlement.run_id, outcome=settlement.state
            )
            followed.append(run)
        trigger = tables.triggers.get(row.trigger_id)
        if settlement.state == "failed" and trigger is not None and trigger.spec.pause_on_failure:
            pauses.setdefault(row.trigger_id, settlement.error or f"run {settlement.run_id} failed")
        results.append(row.record())
    tables.adjust_active(deltas, now)
    follow(tables, followed, now)
    for trigger_id, note in sorted(pauses.items()):
        trigger = tables.triggers[trigger_id]
        trigger.paused, trigger.pause_note, trigger.paused_at = True, note, now
        trigger.updated_at = now
    return results


def follow(tables: Tables, settled: Sequence[SettledRun], now: datetime) -> None:
    """Give the dependents of the settled runs' triggers their occurrences (`_dependents`)."""
    if not settled:
        return
    upstreams = {run.trigger_id for run in settled}
    dependents = [
        tables.triggers[dependent].snapshot()
        for dependent, listed in tables.upstreams.items()
        if not upstreams.isdisjoint(listed) and dependent in tables.triggers
    ]
    for new in dependent_rows(settled, dependents, now, MemoryUpstreamRuns(tables)):
        tables.insert(new)


def record_run_changes(tables: Tables, changes: Sequence[RunChange], now: datetime) -> None:
    """Settle the rows of settled runs and keep each trigger's `blocked_by` true."""
    now = cut(now)
    settled = [
        Settlement(trigger_id=c.trigger_id, run_id=c.run_id, state=c.state, error=c.error)
        for c in changes
        if c.state in ("completed", "failed", "cancelled")
    ]
    keys = {change.idempotency_key: change.run_id for change in changes if change.idempotency_key}
    for row in tables.with_outcome(Outcome.LAUNCHING):
        if row.idempotency_key in keys:
            # A launch whose record was lost: the run names its occurrence by key.
            tables.set_outcome(row, Outcome.LAUNCHED)
            tables.set_run(row, keys[row.idempotency_key])
            row.launched_at = now
            row.reservation = row.lease_owner = row.lease_expires_at = None
    if settled:
        record_settlements(tables, settled, now)
    for change in changes:
        trigger = tables.triggers.get(change.trigger_id)
        if trigger is None:
            continue
        if change.state == "parked":
            trigger.blocked_by, trigger.updated_at = change.run_id, now
        elif trigger.blocked_by is not None and trigger.blocked_by == change.run_id:
            trigger.blocked_by, trigger.updated_at = None, now
