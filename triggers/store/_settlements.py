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

from triggers.model import FireRecord, Outcome, Trigger
from triggers.store import _codec
from triggers.store._shared import adjust_active, chunks, lock_triggers
from triggers.store.protocol import Settlement
from triggers.store.schema import fires, triggers


def record_settlements(
    conn: Connection, settlements: Sequence[Settlement], now: datetime
) -> list[FireRecord | None]:
    """Record stopped runs; idempotent (only `launched` rows of that run change)."""
    run_ids = [s.run_id for s in settlements]
    candidates = _live_rows(conn, run_ids, lock=False)
    if not candidates:
        return [None] * len(settlements)
    stored = lock_triggers(conn, sorted({row["trigger_id"] for row in candidates.values()}))
    # Read again under the trigger locks (and on PostgreSQL with the rows locked), so
    # the updates below cannot lose to another daemon settling the same run.
    by_run = _live_rows(conn, run_ids, lock=True)
    deltas: dict[str, int] = {}
    pauses: dict[str, str] = {}
    updates: list[dict[str, Any]] = []
    results: list[FireRecord | None] = []
    for settlement in settlements:
        row = by_run.pop(settlement.run_id, None)
        was = row["outcome"] if row is not None else None
        if row is None or (was != Outcome.LAUNCHED.value and settlement.state != "superseded"):
            results.append(None)
            continue
        updates.append(
            {"b_id": row["id"], "b_outcome": settlement.state, "b_error": settlement.error}
        )
        if was == Outcome.LAUNCHED.value:
            deltas[row["trigger_id"]] = deltas.get(row["trigger_id"], 0) - 1
        trigger = stored.get(row["trigger_id"])
        if (
            settlement.state == "failed"
            and isinstance(trigger, Trigger)
            and trigger.spec.pause_on_failure
        ):
            pauses.setdefault(trigger.id, settlement.error or f"run {settlement.run_id} failed")
        record = _codec.fire_from_row(row)
        results.append(
            dataclasses.replace(
                record, outcome=Outcome(settlement.state), settled_at=now, error=settlement.error
            )
        )
    if updates:
        conn.execute(
            fires.update()
            .where(fires.c.id == sa.bindparam("b_id"))
            .values(
                outcome=sa.bindparam("b_outcome"),
                error=sa.bindparam("b_error"),
                settled_at=now,
            ),
            updates,
        )
    adjust_active(conn, deltas, now)
    for trigger_id, note in sorted(pauses.items()):
        conn.execute(
            triggers.update()
            .where(triggers.c.id == trigger_id)
            .values(paused=True, pause_note=note, paused_at=now, updated_at=now)
        )
    return results


def _live_rows(
    conn: Connection, run_ids: Sequence[str], *, lock: bool
) -> dict[str, Mapping[Any, Any]]:
    # A superseded run may already be recorded `cancelled` by a monitor that saw
    # the cancellation first; supersession is the truer outcome and wins.
    live = [Outcome.LAUNCHED.value, Outcome.CANCELLED.value]
    found: dict[str, Mapping[Any, Any]] = {}
    for part in chunks(run_ids):
        statement = sa.select(fires).where(fires.c.run_id.in_(part), fires.c.outcome.in_(live))
        if lock:
            statement = statement.order_by(fires.c.id).with_for_update()
        for row in conn.execute(statement).mappings():
            found[row["run_id"]] = row
    return found


def last_settled(conn: Connection) -> dict[str, dict[str, datetime]]:
    """Each trigger's latest `settled_at`, for `completed` and for `failed` rows."""
    latest = sa.func.max(fires.c.settled_at)
    rows = conn.execute(
        sa.select(fires.c.outcome, fires.c.trigger_id, latest)
        .where(
            fires.c.outcome.in_([Outcome.COMPLETED.value, Outcome.FAILED.value]),
            fires.c.settled_at.is_not(None),
        )
        .group_by(fires.c.outcome, fires.c.trigger_id)
    ).all()
    found: dict[str, dict[str, datetime]] = {"completed": {}, "failed": {}}
    for outcome, trigger_id, settled_at in rows:
        found[outcome][trigger_id] = settled_at
    return found
