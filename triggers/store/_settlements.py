"""Recording runs that stopped: the SQL store writes their settlements to the ledger.

Runs inside the caller's write transaction; trigger rows are locked before
ledger rows, as on every write path.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from triggers.clock import to_ms
from triggers.model import FireRecord, Outcome, Trigger
from triggers.store import _codec
from triggers.store._alerts import alert_settlements
from triggers.store._dependents import SettledRun
from triggers.store._read_sql import chunks
from triggers.store._sql_claim_rows import follow_settled
from triggers.store._sql_common import (
    adjust_active,
    executemany,
    lock_trigger_rows,
    lock_triggers,
)
from triggers.store.protocol import RunChange, Settlement
from triggers.store.schema import fires, triggers


def record_settlements(
    conn: Connection, settlements: Sequence[Settlement], now: datetime
) -> list[FireRecord | None]:
    """Record stopped runs; idempotent (only `launched` rows of that run change)."""
    run_ids = [s.run_id for s in settlements]
    candidates = _live_rows(conn, run_ids, lock=False)
    if not candidates:
        return [None] * len(settlements)
    lock_trigger_rows(conn, sorted({row["trigger_id"] for row in candidates.values()}))
    # Read again under the trigger locks, with the rows locked, so the updates below
    # cannot lose to another daemon settling the same run (SQLite's one writer already
    # holds the database).
    by_run = _live_rows(conn, run_ids, lock=True) if conn.dialect.name != "sqlite" else candidates
    return _settle(conn, settlements, by_run, now, records=True)


def _settle_locked(conn: Connection, settlements: Sequence[Settlement], now: datetime) -> None:
    """`record_settlements` for a caller that holds the settlements' trigger rows locked
    already: one read of the ledger rows, and no records built."""
    by_run = _live_rows(
        conn, [s.run_id for s in settlements], lock=conn.dialect.name != "sqlite", whole=False
    )
    if by_run:
        _settle(conn, settlements, by_run, now, records=False)


def _settle(
    conn: Connection,
    settlements: Sequence[Settlement],
    by_run: dict[str, Mapping[Any, Any]],
    now: datetime,
    *,
    records: bool,
) -> list[FireRecord | None]:
    """Write the settlements of the live ledger rows `by_run` (read under the trigger
    locks); with `records`, the ledger records as they now read."""
    failing = sorted(
        {
            by_run[s.run_id]["trigger_id"]
            for s in settlements
            if s.state == "failed" and s.run_id in by_run
        }
    )
    stored = lock_triggers(conn, failing) if failing else {}
    deltas: dict[str, int] = {}
    pauses: dict[str, str] = {}
    updates: list[dict[str, Any]] = []
    results: list[FireRecord | None] = []
    alerted: list[tuple[Mapping[Any, Any], Settlement]] = []
    followed: list[SettledRun] = []
    settled_at = to_ms(now)
    for settlement in settlements:
        row = by_run.pop(settlement.run_id, None)
        was = row["outcome"] if row is not None else None
        if row is None or (was != Outcome.LAUNCHED.value and settlement.state != "superseded"):
            results.append(None)
            continue
        updates.append(
            {
                "b_id": row["id"],
                "b_outcome": settlement.state,
                "b_error": settlement.error,
                "b_settled_at": settled_at,
            }
        )
        if was == Outcome.LAUNCHED.value:
            deltas[row["trigger_id"]] = deltas.get(row["trigger_id"], 0) - 1
            alerted.append((row, settlement))
            run = SettledRun(
                trigger_id=row["trigger_id"], run_id=settlement.run_id, outcome=settlement.state
            )
            followed.append(run)
        trigger = stored.get(row["trigger_id"])
        if (
            settlement.state == "failed"
            and isinstance(trigger, Trigger)
            and trigger.spec.pause_on_failure
        ):
            pauses.setdefault(trigger.id, settlement.error or f"run {settlement.run_id} failed")
        if records:
            record = _codec.fire_from_row(row)
            results.append(
                dataclasses.replace(
                    record,
                    outcome=Outcome(settlement.state),
                    settled_at=now,
                    error=settlement.error,
                )
            )
    executemany(conn, _SETTLE, updates)
    adjust_active(conn, deltas, now)
    alert_settlements(conn, alerted, stored, now)
    follow_settled(conn, followed, now)
    for trigger_id, note in sorted(pauses.items()):
        conn.execute(
            triggers.update()
            .where(triggers.c.id == trigger_id)
            .values(paused=True, pause_note=note, paused_at=now, updated_at=now)
        )
    return results


_SETTLE = (
    fires.update()
    .where(fires.c.id == sa.bindparam("b_id"))
    .values(
        outcome=sa.bindparam("b_outcome"),
        error=sa.bindparam("b_error"),
        settled_at=sa.bindparam("b_settled_at"),
    )
)
_LIVE = [Outcome.LAUNCHED.value, Outcome.CANCELLED.value]


def _live_select(*, whole: bool, lock: bool) -> sa.Select[Any]:
    """The live ledger rows of some runs: whole rows (to make records), or what a write
    needs; locked (in id order) on PostgreSQL."""
    columns = (
        [fires]
        if whole
        else [
            fires.c.id,
            fires.c.trigger_id,
            fires.c.outcome,
            fires.c.run_id,
            fires.c.occurrence_at,
            fires.c.manual_key,
        ]
    )
    statement = sa.select(*columns).where(
        fires.c.run_id.in_(sa.bindparam("b_runs", expanding=True)), fires.c.outcome.in_(_LIVE)
    )
    return statement.order_by(fires.c.id).with_for_update() if lock else statement


_LIVE_ROWS = {
    (whole, lock): _live_select(whole=whole, lock=lock)
    for whole in (True, False)
    for lock in (True, False)
}


def _live_rows(
    conn: Connection, run_ids: Sequence[str], *, lock: bool, whole: bool = True
) -> dict[str, Mapping[Any, Any]]:
    # A superseded run may already be recorded `cancelled` by a monitor that saw
    # the cancellation first; supersession is the truer outcome and wins.
    found: dict[str, Mapping[Any, Any]] = {}
    statement = _LIVE_ROWS[whole, lock]
    for part in chunks(run_ids):
        for row in conn.execute(statement, {"b_runs": list(part)}).mappings():
            found[row["run_id"]] = row
    return found


def record_run_changes(conn: Connection, changes: Sequence[RunChange], now: datetime) -> None:
    """Settle the ledger rows of settled runs and keep each trigger's `blocked_by` true.

    Runs in the runtime's commit of those changes (thousands a second under load), so
    it writes only what changes: a trigger's `blocked_by` when it is set or cleared,
    a `launching` row only when one is still there.
    """
    settled = [
        Settlement(trigger_id=c.trigger_id, run_id=c.run_id, state=c.state, error=c.error)
        for c in changes
        if c.state in ("completed", "failed", "cancelled")
    ]
    blocked = lock_trigger_rows(conn, sorted({c.trigger_id for c in changes}))
    _launched_by_key(conn, changes, now)
    if settled:
        _settle_locked(conn, settled, now)
    for change in changes:
        current = blocked.get(change.trigger_id)
        if change.state == "parked":
            statement = (
                triggers.update()
                .where(triggers.c.id == change.trigger_id)
                .values(blocked_by=change.run_id, updated_at=now)
            )
            blocked[change.trigger_id] = change.run_id
        elif current is not None and current == change.run_id:
            statement = (
                triggers.update()
                .where(triggers.c.id == change.trigger_id, triggers.c.blocked_by == change.run_id)
                .values(blocked_by=None, updated_at=now)
            )
            blocked[change.trigger_id] = None
        else:
            continue
        conn.execute(statement)


_LAUNCHING_KEYS = sa.select(fires.c.idempotency_key).where(
    fires.c.outcome == Outcome.LAUNCHING.value
)


def _launched_by_key(conn: Connection, changes: Sequence[RunChange], now: datetime) -> None:
    """A launch whose record was lost (the daemon died, or lost the database, after the
    runtime committed the run): the run names its occurrence by key, so it is recorded."""
    keys = {change.idempotency_key: change.run_id for change in changes if change.idempotency_key}
    if not keys:
        return
    # Almost always none: a cheap look first, by the outcome's index.
    launching = set(conn.execute(_LAUNCHING_KEYS).scalars())
    keyed = [
        {"b_key": key, "b_run": run_id, "b_now": now}
        for key, run_id in keys.items()
        if key in launching
    ]
    if not keyed:
        return
    conn.execute(
        fires.update()
        .where(
            fires.c.idempotency_key == sa.bindparam("b_key"),
            fires.c.outcome == Outcome.LAUNCHING.value,
        )
        .values(
            outcome=Outcome.LAUNCHED.value,
            run_id=sa.bindparam("b_run"),
            launched_at=sa.bindparam("b_now", type_=fires.c.launched_at.type),
            reservation=None,
            lease_owner=None,
            lease_expires_at=None,
        ),
        keyed,
    )
