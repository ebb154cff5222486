"""Helpers every SQL write path of the trigger store shares.

Every function runs inside the caller's write transaction. Trigger rows are
always locked before ledger rows, in id order, so two daemons on PostgreSQL
cannot deadlock on each other.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from triggers.errors import CorruptRowError, StoreError
from triggers.model import Trigger
from triggers.store import _rows
from triggers.store.protocol import Claim
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


def new_reservation() -> str:
    return uuid.uuid4().hex
