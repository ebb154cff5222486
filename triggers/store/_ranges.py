"""The ledger's range rows: recording them, and carving backfilled occurrences out.

A range row accounts for consecutive occurrences that did not launch (`missed`,
`skipped`) with their first, last and count. Every function runs inside the
caller's write transaction, after the trigger rows are locked. The store does no
schedule math: to carve, the caller says which pieces a row splits into and how
many occurrences each holds; the store checks that the row is still the one the
caller read, and swaps it for the pieces.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from triggers.alert_rules import AlertEvent, AlertFacts
from triggers.errors import (
    LedgerChangedError,
    RevisionMismatchError,
    StoreError,
    TriggersError,
    UnknownTriggerError,
    WatermarkMovedError,
)
from triggers.model import Outcome, Trigger
from triggers.store._alerts import raise_alerts
from triggers.store._read_sql import chunks
from triggers.store._sql_common import lock_triggers
from triggers.store.protocol import ClaimRequest, RangeRecord, RangeSplit
from triggers.store.schema import fires, triggers


def apply_splits(conn: Connection, splits: Sequence[RangeSplit], now: datetime) -> None:
    """Replace each split's row by its pieces.

    Raises:
        LedgerChangedError: a row is gone or differs from what the caller read.
    """
    for split in splits:
        row = (
            conn.execute(
                sa.select(fires)
                .where(
                    fires.c.trigger_id == split.trigger_id,
                    fires.c.occurrence_at == split.first_at,
                    fires.c.manual_key == "",
                )
                .with_for_update()
            )
            .mappings()
            .first()
        )
        last_at = None if row is None else row["last_occurrence_at"] or row["occurrence_at"]
        if (
            row is None
            or row["outcome"] != split.outcome.value
            or row["count"] != split.count
            or last_at != split.last_at
            or sum(piece.count for piece in split.pieces) >= split.count
        ):
            raise LedgerChangedError(
                f"the ledger row of trigger {split.trigger_id!r} at {split.first_at.isoformat()} "
                "changed since it was read",
                trigger_id=split.trigger_id,
            )
        conn.execute(fires.delete().where(fires.c.id == row["id"]))
        conn.execute(
            triggers.update()
            .where(triggers.c.id == split.trigger_id, triggers.c.open_range_id == row["id"])
            .values(open_range_id=None)
        )
        if split.pieces:
            conn.execute(
                fires.insert(),
                [
                    {
                        "trigger_id": split.trigger_id,
                        "occurrence_at": piece.first_at,
                        "last_occurrence_at": piece.last_at if piece.count > 1 else None,
                        "count": piece.count,
                        "outcome": row["outcome"],
                        "reason": row["reason"],
                        "revision": row["revision"],
                        "host": row["host"],
                        "claimed_at": row["claimed_at"],
                        # Kept as recorded, so carving never extends a row's retention.
                        "settled_at": row["settled_at"] or now,
                    }
                    for piece in split.pieces
                ],
            )


def covered_by_ranges(
    conn: Connection, requests: Sequence[ClaimRequest]
) -> set[tuple[str, datetime]]:
    """The requested occurrences that lie inside a range row (past its first one)."""
    if not requests:
        return set()
    by_trigger: dict[str, list[datetime]] = {}
    for request in requests:
        by_trigger.setdefault(request.trigger_id, []).append(request.occurrence_at)
    earliest = min(min(times) for times in by_trigger.values())
    latest = max(max(times) for times in by_trigger.values())
    ranges: dict[str, list[tuple[datetime, datetime]]] = {}
    for part in chunks(sorted(by_trigger)):
        rows = conn.execute(
            sa.select(fires.c.trigger_id, fires.c.occurrence_at, fires.c.last_occurrence_at).where(
                fires.c.trigger_id.in_(part),
                fires.c.last_occurrence_at.is_not(None),
                fires.c.occurrence_at < latest,
                fires.c.last_occurrence_at >= earliest,
            )
        )
        for trigger_id, first_at, last_at in rows:
            ranges.setdefault(trigger_id, []).append((first_at, last_at))
    return {
        (trigger_id, at)
        for trigger_id, times in by_trigger.items()
        for at in times
        if any(first < at <= last for first, last in ranges.get(trigger_id, ()))
    }


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
                    # The row may have been pruned, and on SQLite its id given to another.
                    fires.c.trigger_id == item.trigger_id,
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
        _alert_range(conn, stored, item, now)
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


def _alert_range(conn: Connection, stored: Trigger, item: RangeRecord, now: datetime) -> None:
    """A new range row is a new state (an outage, a pause): `missed` or `skipped`, once;
    the range extended by later occurrences raises nothing more."""
    rule = stored.spec.alert
    if rule is None:
        return
    event = AlertEvent.MISSED if item.outcome is Outcome.MISSED else AlertEvent.SKIPPED
    if not rule.wants(event):
        return
    facts = AlertFacts(
        event=event,
        trigger_id=item.trigger_id,
        occurrence_at=item.first_at,
        last_occurrence_at=item.last_at if item.count > 1 else None,
        count=item.count,
        at=now,
        outcome=item.outcome.value,
        reason=item.reason.value,
    )
    raise_alerts(conn, [(facts, rule)], now)
