"""Recording runs that stopped: the SQL store's settle path.

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
from triggers.store import _rows
from triggers.store._shared import adjust_active, chunks, lock_triggers
from triggers.store.protocol import Settlement
from triggers.store.schema import fires, triggers


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
