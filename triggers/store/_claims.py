"""The write paths of the SQL store that decide occurrences: claim, ranges, pending, settle.

Every function runs inside the caller's write transaction. Trigger rows are
always locked before ledger rows, in id order, so two daemons on PostgreSQL
cannot deadlock on each other.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from triggers.errors import (
    CorruptRowError,
    RevisionMismatchError,
    StoreError,
    TriggersError,
    UnknownTriggerError,
    WatermarkMovedError,
)
from triggers.model import Action, FireRecord, Outcome, Overlap, Trigger, idempotency_key
from triggers.store import _rows
from triggers.store._decide import Counters, decide
from triggers.store.protocol import Claim, ClaimRequest, ClaimResult, RangeRecord, Settlement
from triggers.store.schema import fires, triggers

T = TypeVar("T")
CHUNK = 400  # bound parameters per IN (...) list, well under SQLite's limit


def chunks(items: Sequence[T], size: int = CHUNK) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def fire_key(claim: Claim) -> tuple[sa.ColumnElement[bool], ...]:
    return (
        fires.c.trigger_id == claim.trigger_id,
        fires.c.occurrence_at == claim.occurrence_at,
        fires.c.manual_key == claim.manual_key,
    )


def lock_triggers(conn: Connection, ids: Sequence[str]) -> dict[str, Trigger | StoreError]:
    """Read (and on PostgreSQL lock, in id order) the rows of `ids`, decoded."""
    found: dict[str, Trigger | StoreError] = {}
    for part in chunks(sorted(ids)):
        rows = conn.execute(
            sa.select(triggers)
            .where(triggers.c.id.in_(part))
            .order_by(triggers.c.id)
            .with_for_update()
        ).mappings()
        for row in rows:
            try:
                found[row["id"]] = _rows.trigger_from_row(row)
            except CorruptRowError as exc:
                found[row["id"]] = exc
    return found


def adjust_active(conn: Connection, deltas: Mapping[str, int], now: datetime) -> None:
    for trigger_id in sorted(deltas):
        conn.execute(
            triggers.update()
            .where(triggers.c.id == trigger_id)
            .values(active_count=triggers.c.active_count + deltas[trigger_id], updated_at=now)
        )


def _reservation() -> str:
    return uuid.uuid4().hex


class ClaimBatch:
    """One claim transaction: decide every request in order, then write it all at once."""

    def __init__(
        self,
        conn: Connection,
        requests: Sequence[ClaimRequest],
        *,
        owner: str,
        host: str,
        now: datetime,
        lease: timedelta,
    ) -> None:
        self._conn = conn
        self._requests = requests
        self._owner = owner
        self._host = host
        self._now = now
        self._lease_expires_at = now + lease
        self._counters: dict[str, Counters] = {}
        self._watermarks: dict[str, datetime] = {}
        self._rows: list[dict[str, Any]] = []

    def run(self) -> list[ClaimResult]:
        ids = sorted({request.trigger_id for request in self._requests})
        stored = lock_triggers(self._conn, ids)
        existing, existing_keys = self._existing()
        active = self._active_runs(stored)
        pending: list[tuple[ClaimRequest, str, Action, Any, str | None, str | None]] = []
        results: list[ClaimResult | None] = []
        for request in self._requests:
            trigger = stored.get(request.trigger_id)
            outcome = self._check(request, trigger)
            if outcome is not None:
                results.append(outcome)
                continue
            if not isinstance(trigger, Trigger):  # _check answered the other cases
                continue
            key = idempotency_key(request.trigger_id, request.occurrence_at, request.manual_key)
            identity = (request.trigger_id, request.occurrence_at, request.manual_key)
            decided = request.kind == "scheduled" and request.occurrence_at <= trigger.watermark_at
            if decided or identity in existing or key in existing_keys:
                self._advance(request)
                pending.append((request, key, Action.DUPLICATE, None, None, None))
                results.append(None)
                continue
            existing.add(identity)
            existing_keys.add(key)
            decision, reservation, supersedes = self._decide(trigger, request, active)
            if decision.action is not Action.IGNORED:
                self._advance(request)
                self._rows.append(
                    self._row(trigger, request, key, decision, reservation, supersedes)
                )
            pending.append(
                (request, key, decision.action, decision.reason, reservation, supersedes)
            )
            results.append(None)
        self._write(stored)
        return self._finish(results, pending, stored)

    def _check(
        self, request: ClaimRequest, trigger: Trigger | StoreError | None
    ) -> ClaimResult | None:
        if trigger is None:
            return UnknownTriggerError(
                f"no trigger {request.trigger_id!r}", trigger_id=request.trigger_id
            )
        if isinstance(trigger, StoreError):
            return trigger
        if trigger.revision != request.expected_revision:
            return RevisionMismatchError(
                f"trigger {trigger.id!r} is at revision {trigger.revision}, "
                f"not {request.expected_revision}",
                trigger_id=trigger.id,
                revision=trigger.revision,
                expected_revision=request.expected_revision,
            )
        return None

    def _decide(
        self, trigger: Trigger, request: ClaimRequest, active: dict[str, list[str | None]]
    ) -> tuple[Any, str | None, str | None]:
        counters = self._counters.setdefault(trigger.id, Counters.of(trigger))
        runs = active.setdefault(trigger.id, [])
        has_run = bool(runs) and all(run_id is not None for run_id in runs)
        decision = decide(trigger, counters, request, active_has_run=has_run)
        reservation = supersedes = None
        if decision.action in (Action.FIRE, Action.SUPERSEDE):
            reservation = _reservation()
            if decision.action is Action.SUPERSEDE:
                supersedes = runs[-1]
            runs.append(None)
        return decision, reservation, supersedes

    def _advance(self, request: ClaimRequest) -> None:
        if request.kind != "scheduled":
            return
        current = self._watermarks.get(request.trigger_id)
        if current is None or request.occurrence_at > current:
            self._watermarks[request.trigger_id] = request.occurrence_at

    def _row(
        self,
        trigger: Trigger,
        request: ClaimRequest,
        key: str,
        decision: Any,
        reservation: str | None,
        supersedes: str | None,
    ) -> dict[str, Any]:
        launching = reservation is not None
        outcome = {
            Action.FIRE: Outcome.LAUNCHING,
            Action.SUPERSEDE: Outcome.LAUNCHING,
            Action.SKIP: Outcome.SKIPPED,
            Action.BUFFER: Outcome.BUFFERED,
        }[decision.action]
        return {
            "trigger_id": trigger.id,
            "occurrence_at": request.occurrence_at,
            "last_occurrence_at": None,
            "count": 1,
            "manual_key": request.manual_key,
            "idempotency_key": key,
            "kind": request.kind,
            "outcome": outcome.value,
            "reason": decision.reason.value if decision.reason else None,
            "revision": trigger.revision,
            "host": self._host,
            "claimed_at": self._now,
            "settled_at": self._now if outcome is Outcome.SKIPPED else None,
            "reservation": reservation,
            "lease_owner": self._owner if launching else None,
            "lease_expires_at": self._lease_expires_at if launching else None,
            "supersedes_run_id": supersedes,
        }

    def _existing(self) -> tuple[set[tuple[str, datetime, str]], set[str]]:
        by_trigger: dict[str, list[datetime]] = {}
        for request in self._requests:
            by_trigger.setdefault(request.trigger_id, []).append(request.occurrence_at)
        earliest = min(min(times) for times in by_trigger.values())
        latest = max(max(times) for times in by_trigger.values())
        found: set[tuple[str, datetime, str]] = set()
        for part in chunks(sorted(by_trigger)):
            rows = self._conn.execute(
                sa.select(fires.c.trigger_id, fires.c.occurrence_at, fires.c.manual_key).where(
                    fires.c.trigger_id.in_(part),
                    fires.c.occurrence_at.between(earliest, latest),
                )
            )
            found.update((row[0], row[1], row[2]) for row in rows)
        manual = [
            idempotency_key(r.trigger_id, r.occurrence_at, r.manual_key)
            for r in self._requests
            if r.manual_key
        ]
        keys: set[str] = set()
        for part in chunks(manual):
            keys.update(
                self._conn.execute(
                    sa.select(fires.c.idempotency_key).where(fires.c.idempotency_key.in_(part))
                ).scalars()
            )
        return found, keys

    def _active_runs(
        self, stored: Mapping[str, Trigger | StoreError]
    ) -> dict[str, list[str | None]]:
        """Active run ids (None for a reservation) of triggers that may supersede."""
        wanted = [
            trigger_id
            for trigger_id, trigger in stored.items()
            if isinstance(trigger, Trigger)
            and trigger.active_count > 0
            and Overlap.SUPERSEDE in (trigger.spec.overlap, *self._overrides(trigger_id))
        ]
        active: dict[str, list[str | None]] = {}
        for part in chunks(wanted):
            rows = self._conn.execute(
                sa.select(fires.c.trigger_id, fires.c.run_id)
                .where(
                    fires.c.trigger_id.in_(part),
                    fires.c.outcome.in_([Outcome.LAUNCHING.value, Outcome.LAUNCHED.value]),
                )
                .order_by(fires.c.occurrence_at)
            )
            for trigger_id, run_id in rows:
                active.setdefault(trigger_id, []).append(run_id)
        return active

    def _overrides(self, trigger_id: str) -> list[Overlap]:
        return [
            r.overlap
            for r in self._requests
            if r.trigger_id == trigger_id and r.overlap is not None
        ]

    def _write(self, stored: Mapping[str, Trigger | StoreError]) -> None:
        if self._rows:
            self._conn.execute(fires.insert(), self._rows)
        touched = sorted(set(self._counters) | set(self._watermarks))
        params = []
        for trigger_id in touched:
            trigger = stored[trigger_id]
            if not isinstance(trigger, Trigger):
                continue
            counters = self._counters.get(trigger_id) or Counters.of(trigger)
            watermark = max(
                trigger.watermark_at, self._watermarks.get(trigger_id, trigger.watermark_at)
            )
            params.append(
                {
                    "b_id": trigger_id,
                    "b_active": counters.active_count,
                    "b_buffered": counters.buffered_count,
                    "b_runs": counters.runs_launched,
                    "b_watermark": watermark,
                    "b_now": self._now,
                }
            )
        if params:
            self._conn.execute(
                triggers.update()
                .where(triggers.c.id == sa.bindparam("b_id"))
                .values(
                    active_count=sa.bindparam("b_active"),
                    buffered_count=sa.bindparam("b_buffered"),
                    runs_launched=sa.bindparam("b_runs"),
                    watermark_at=sa.bindparam("b_watermark", type_=triggers.c.watermark_at.type),
                    open_range_id=None,
                    updated_at=sa.bindparam("b_now", type_=triggers.c.updated_at.type),
                ),
                params,
            )

    def _finish(
        self,
        results: list[ClaimResult | None],
        pending: list[tuple[ClaimRequest, str, Action, Any, str | None, str | None]],
        stored: Mapping[str, Trigger | StoreError],
    ) -> list[ClaimResult]:
        snapshots: dict[str, Trigger] = {}
        for trigger_id, trigger in stored.items():
            if not isinstance(trigger, Trigger):
                continue
            counters = self._counters.get(trigger_id)
            watermark = max(
                trigger.watermark_at, self._watermarks.get(trigger_id, trigger.watermark_at)
            )
            counters = counters or Counters.of(trigger)
            snapshots[trigger_id] = dataclasses.replace(
                trigger,
                watermark_at=watermark,
                active_count=counters.active_count,
                buffered_count=counters.buffered_count,
                runs_launched=counters.runs_launched,
            )
        decided = iter(pending)
        final: list[ClaimResult] = []
        for result in results:
            if result is not None:
                final.append(result)
                continue
            request, key, action, reason, reservation, supersedes = next(decided)
            final.append(
                Claim(
                    trigger=snapshots[request.trigger_id],
                    occurrence_at=request.occurrence_at,
                    action=action,
                    idempotency_key=key,
                    kind=request.kind,
                    manual_key=request.manual_key,
                    reason=reason,
                    reservation=reservation,
                    supersedes_run_id=supersedes,
                )
            )
        return final


def record_range(conn: Connection, item: RangeRecord, now: datetime) -> TriggersError | None:
    """Record one range, extending the trigger's open range row when it continues it."""
    stored = lock_triggers(conn, [item.trigger_id]).get(item.trigger_id)
    if stored is None:
        return UnknownTriggerError(f"no trigger {item.trigger_id!r}", trigger_id=item.trigger_id)
    if isinstance(stored, StoreError):
        return stored
    if stored.revision != item.expected_revision:
        return RevisionMismatchError(
            f"trigger {stored.id!r} is at revision {stored.revision}, not {item.expected_revision}",
            trigger_id=stored.id,
        )
    if stored.watermark_at != item.after:
        return WatermarkMovedError(
            f"trigger {stored.id!r} watermark moved since it was read",
            trigger_id=stored.id,
        )
    open_id = conn.execute(
        sa.select(triggers.c.open_range_id).where(triggers.c.id == item.trigger_id)
    ).scalar()
    extended = False
    if open_id is not None:
        extended = bool(
            conn.execute(
                fires.update()
                .where(
                    fires.c.id == open_id,
                    fires.c.outcome == item.outcome.value,
                    fires.c.reason == item.reason.value,
                    sa.func.coalesce(fires.c.last_occurrence_at, fires.c.occurrence_at)
                    < item.first_at,
                )
                .values(
                    last_occurrence_at=item.last_at,
                    count=fires.c.count + item.count,
                    settled_at=now,
                )
            ).rowcount
        )
    if not extended:
        open_id = conn.execute(
            fires.insert()
            .values(
                trigger_id=item.trigger_id,
                occurrence_at=item.first_at,
                last_occurrence_at=item.last_at if item.count > 1 else None,
                count=item.count,
                outcome=item.outcome.value,
                reason=item.reason.value,
                revision=stored.revision,
                claimed_at=now,
                settled_at=now,
            )
            .returning(fires.c.id)
        ).scalar_one()
    conn.execute(
        triggers.update()
        .where(triggers.c.id == item.trigger_id)
        .values(
            watermark_at=max(stored.watermark_at, item.last_at),
            open_range_id=open_id,
            updated_at=now,
        )
    )
    return None


def take_expired(
    conn: Connection, *, owner: str, host: str, now: datetime, lease: timedelta, limit: int
) -> list[Claim]:
    """Re-reserve launches whose lease expired (their daemon died, or a start failed)."""
    rows = (
        conn.execute(
            sa.select(fires)
            .where(fires.c.outcome == Outcome.LAUNCHING.value, fires.c.lease_expires_at <= now)
            .order_by(fires.c.occurrence_at)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        .mappings()
        .all()
    )
    if not rows:
        return []
    stored = lock_triggers(conn, sorted({row["trigger_id"] for row in rows}))
    claims = []
    for row in rows:
        trigger = stored.get(row["trigger_id"])
        if not isinstance(trigger, Trigger):
            continue
        reservation = _reservation()
        updated = conn.execute(
            fires.update()
            .where(fires.c.id == row["id"], fires.c.reservation == row["reservation"])
            .values(
                reservation=reservation, lease_owner=owner, host=host, lease_expires_at=now + lease
            )
        ).rowcount
        if updated:
            claims.append(_pending_claim(trigger, row, reservation))
    return claims


def promote_buffered(
    conn: Connection, *, owner: str, host: str, now: datetime, lease: timedelta
) -> list[Claim]:
    """Turn the oldest buffered occurrences into launches where a run slot is free."""
    candidates = (
        conn.execute(
            sa.select(triggers.c.id).where(triggers.c.buffered_count > 0).order_by(triggers.c.id)
        )
        .scalars()
        .all()
    )
    if not candidates:
        return []
    claims: list[Claim] = []
    for trigger_id, trigger in lock_triggers(conn, candidates).items():
        if not isinstance(trigger, Trigger) or not trigger.claimable:
            continue
        capacity = trigger.spec.max_active if trigger.spec.overlap is Overlap.ALLOW else 1
        free = capacity - trigger.active_count
        if free <= 0:
            continue
        rows = (
            conn.execute(
                sa.select(fires)
                .where(fires.c.trigger_id == trigger_id, fires.c.outcome == Outcome.BUFFERED.value)
                .order_by(fires.c.occurrence_at)
                .limit(free)
            )
            .mappings()
            .all()
        )
        for row in rows:
            reservation = _reservation()
            conn.execute(
                fires.update()
                .where(fires.c.id == row["id"])
                .values(
                    outcome=Outcome.LAUNCHING.value,
                    reason=None,
                    reservation=reservation,
                    lease_owner=owner,
                    host=host,
                    lease_expires_at=now + lease,
                    revision=trigger.revision,
                )
            )
            claims.append(_pending_claim(trigger, row, reservation))
        taken = len(rows)
        conn.execute(
            triggers.update()
            .where(triggers.c.id == trigger_id)
            .values(
                active_count=triggers.c.active_count + taken,
                # A counter that drifted from the ledger is corrected here.
                buffered_count=triggers.c.buffered_count - taken if taken else 0,
                runs_launched=triggers.c.runs_launched + taken,
                updated_at=now,
            )
        )
    return claims


def _pending_claim(trigger: Trigger, row: Mapping[Any, Any], reservation: str) -> Claim:
    supersedes = row["supersedes_run_id"]
    return Claim(
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


def settle(
    conn: Connection, settlements: Sequence[Settlement], now: datetime
) -> list[FireRecord | None]:
    """Record stopped runs; idempotent (only `launched` rows of that run change)."""
    by_run: dict[str, Mapping[Any, Any]] = {}
    # A superseded run may already be recorded `cancelled` by a monitor that saw
    # the cancellation first; supersession is the truer outcome and wins.
    live = [Outcome.LAUNCHED.value, Outcome.CANCELLED.value]
    for part in chunks([s.run_id for s in settlements]):
        for found in conn.execute(
            sa.select(fires).where(fires.c.run_id.in_(part), fires.c.outcome.in_(live))
        ).mappings():
            by_run[found["run_id"]] = found
    if not by_run:
        return [None] * len(settlements)
    stored = lock_triggers(conn, sorted({row["trigger_id"] for row in by_run.values()}))
    deltas: dict[str, int] = {}
    pauses: dict[str, str] = {}
    results: list[FireRecord | None] = []
    for settlement in settlements:
        row = by_run.pop(settlement.run_id, None)
        was = row["outcome"] if row is not None else None
        if row is None or (was != Outcome.LAUNCHED.value and settlement.state != "superseded"):
            results.append(None)
            continue
        updated = conn.execute(
            fires.update()
            .where(fires.c.id == row["id"], fires.c.outcome == was)
            .values(outcome=settlement.state, settled_at=now, error=settlement.error)
        ).rowcount
        if not updated:
            results.append(None)
            continue
        if was == Outcome.LAUNCHED.value:
            deltas[row["trigger_id"]] = deltas.get(row["trigger_id"], 0) - 1
        trigger = stored.get(row["trigger_id"])
        if (
            settlement.state == "failed"
            and isinstance(trigger, Trigger)
            and trigger.spec.pause_on_failure
        ):
            pauses.setdefault(trigger.id, settlement.error or f"run {settlement.run_id} failed")
        record = _rows.fire_from_row(row)
        results.append(
            dataclasses.replace(
                record, outcome=Outcome(settlement.state), settled_at=now, error=settlement.error
            )
        )
    adjust_active(conn, deltas, now)
    for trigger_id, note in sorted(pauses.items()):
        conn.execute(
            triggers.update()
            .where(triggers.c.id == trigger_id)
            .values(paused=True, pause_note=note, paused_at=now, updated_at=now)
        )
    return results
