"""Heartbeats, and the downtime a heartbeat finds behind it.

A heartbeat row per daemon is kept only a day after its last tick, so past
downtime cannot be read back from heartbeats later: the beat that ends a silence
records it, in the same transaction as itself.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from triggers.store.protocol import Heartbeat
from triggers.store.schema import downtime, heartbeats

_DOWNTIME_LOCK = 0x7472_6967_646F  # the advisory lock of recording downtime on PostgreSQL


def write_heartbeat(conn: Connection, beat: Heartbeat, *, down_after: timedelta | None) -> None:
    """Upsert `beat`; with `down_after`, first record the silence it ends (see
    `TriggerStore.heartbeat`)."""
    values = dataclasses.asdict(beat)
    mine = heartbeats.c.owner == beat.owner
    if down_after is not None:
        # The common case, one statement: this daemon beat a moment ago, so nobody
        # was silent that long.
        recent = heartbeats.c.last_tick_at >= beat.last_tick_at - down_after
        if conn.execute(heartbeats.update().where(mine, recent).values(**values)).rowcount:
            return
        _record_silence(conn, beat, down_after)
    if not conn.execute(heartbeats.update().where(mine).values(**values)).rowcount:
        conn.execute(heartbeats.insert().values(**values))


def _record_silence(conn: Connection, beat: Heartbeat, down_after: timedelta) -> None:
    if conn.dialect.name == "postgresql":
        # Two daemons starting together after an outage take turns: the second one
        # then sees the first one's beat and records nothing.
        conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_DOWNTIME_LOCK)))
    last: datetime | None = conn.execute(sa.select(sa.func.max(heartbeats.c.last_tick_at))).scalar()
    if last is None or beat.last_tick_at - last <= down_after:
        return
    conn.execute(
        downtime.insert().values(started_at=last, ended_at=beat.last_tick_at, ended_by=beat.owner)
    )


def prune_downtime(conn: Connection, *, older_than: datetime) -> int:
    return int(conn.execute(downtime.delete().where(downtime.c.ended_at < older_than)).rowcount)
