"""Helpers the SQL store's write paths and reads share (the memory store has its own).

Every function runs inside the caller's write transaction. Trigger rows are
always locked before ledger rows, in id order, so two daemons on PostgreSQL
cannot deadlock on each other.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

if TYPE_CHECKING:
    from sqlalchemy.sql.compiler import SQLCompiler

from triggers.clock import to_ms
from triggers.errors import StoreError
from triggers.model import Trigger
from triggers.store._read_sql import chunks, decode_triggers
from triggers.store.protocol import Reserved
from triggers.store.schema import fires, trigger_upstreams, triggers


def fire_key(claim: Reserved) -> tuple[sa.ColumnElement[bool], ...]:
    return (
        fires.c.trigger_id == claim.trigger_id,
        fires.c.occurrence_at == claim.occurrence_at,
        fires.c.manual_key == claim.manual_key,
    )


_STATE_COLUMNS = [column for column in triggers.c if column.name != "declaration"]


_IDS: sa.BindParameter[str] = sa.bindparam("b_ids", expanding=True)
_LOCK_TRIGGERS = (
    sa.select(*_STATE_COLUMNS).where(triggers.c.id.in_(_IDS)).order_by(triggers.c.id)
).with_for_update()
_LOCK_TRIGGER_ROWS = (
    sa.select(triggers.c.id, triggers.c.blocked_by)
    .where(triggers.c.id.in_(_IDS))
    .order_by(triggers.c.id)
    .with_for_update()
)


def lock_triggers(conn: Connection, ids: Sequence[str]) -> dict[str, Trigger | StoreError]:
    """Read (and on PostgreSQL lock, in id order) the rows of `ids`, decoded."""
    found: dict[str, Trigger | StoreError] = {}
    for part in chunks(sorted(ids)):
        found.update(read_triggers(conn, _LOCK_TRIGGERS, {"b_ids": list(part)}))
    return found


_DEPENDENTS = (
    sa.select(*_STATE_COLUMNS)
    .where(
        triggers.c.id.in_(
            sa.select(trigger_upstreams.c.trigger_id).where(trigger_upstreams.c.upstream.in_(_IDS))
        ),
        triggers.c.retired.is_(False),
    )
    .order_by(triggers.c.id)
)


def read_dependents(conn: Connection, upstreams: Sequence[str]) -> list[Trigger]:
    """The live triggers whose `after:` names one of `upstreams` (read, not locked)."""
    found: list[Trigger] = []
    for part in chunks(sorted(upstreams)):
        stored = read_triggers(conn, _DEPENDENTS, {"b_ids": list(part)})
        found.extend(t for t in stored.values() if isinstance(t, Trigger))
    return found


def lock_trigger_rows(conn: Connection, ids: Sequence[str]) -> dict[str, str | None]:
    """Lock the rows of `ids` (in id order), decoding nothing; their `blocked_by`, by id."""
    found: dict[str, str | None] = {}
    for part in chunks(sorted(ids)):
        rows = conn.execute(_LOCK_TRIGGER_ROWS, {"b_ids": list(part)})
        found.update((row.id, row.blocked_by) for row in rows)
    return found


def read_triggers(
    conn: Connection, statement: sa.Select[Any], params: Mapping[str, Any] | None = None
) -> dict[str, Trigger | StoreError]:
    """Decode the trigger rows `statement` selects (`_STATE_COLUMNS`), in its order (a
    writer's statement: the reads' own are plain SQL, `triggers.store._read_sql`)."""
    return decode_triggers(conn, conn.execute(statement, params).mappings().all())


def select_triggers() -> sa.Select[Any]:
    """A select of every trigger's state columns (the declaration comes from the cache)."""
    return sa.select(*_STATE_COLUMNS)


_ADJUST_ACTIVE = (
    triggers.update()
    .where(triggers.c.id == sa.bindparam("b_id"))
    .values(
        active_count=triggers.c.active_count + sa.bindparam("b_delta"),
        updated_at=sa.bindparam("b_now"),
    )
)


def adjust_active(conn: Connection, deltas: Mapping[str, int], now: datetime) -> None:
    if not deltas:
        return
    at = to_ms(now)
    executemany(
        conn,
        _ADJUST_ACTIVE,
        [
            {"b_id": trigger_id, "b_delta": deltas[trigger_id], "b_now": at}
            for trigger_id in sorted(deltas)
        ],
    )


def executemany(
    conn: Connection, statement: sa.ClauseElement, rows: Sequence[Mapping[str, Any]]
) -> int:
    """Run `statement` once per row, handing the rows to the driver as they are.

    The claim path writes a thousand rows a tick, and SQLAlchemy's per-row parameter
    processing cost more than the database did. So the statement is compiled once
    and the rows must already hold driver values (epoch milliseconds, not datetimes).
    Returns the total row count.
    """
    if not rows:
        return 0
    compiled = _compiled(statement, conn.dialect)
    if compiled.positional:
        names = compiled.positiontup or []
        pick = operator.itemgetter(*names)
        params: Sequence[Any] = (
            [pick(row) for row in rows] if len(names) > 1 else [(row[names[0]],) for row in rows]
        )
    else:
        params = rows
    return int(conn.exec_driver_sql(compiled.string, params).rowcount)


_COMPILED: dict[tuple[int, str, str], tuple[sa.ClauseElement, SQLCompiler]] = {}


def _compiled(statement: sa.ClauseElement, dialect: sa.Dialect) -> SQLCompiler:
    """`statement` compiled for `dialect`, once per process (the callers' statements are
    module constants: compiling costs more than executing a small batch)."""
    key = (id(statement), dialect.name, dialect.paramstyle)
    found = _COMPILED.get(key)
    if found is None or found[0] is not statement:
        found = (statement, cast("SQLCompiler", statement.compile(dialect=dialect)))
        _COMPILED[key] = found
    return found[1]
