"""The store's read queries as plain SQL, and the decoding of their rows.

One body of SQL per read, with `?` placeholders, portable to SQLite and PostgreSQL
(a branch where the dialects differ), run over `looms_runtime.dbapi.Rows`: on
`sqlite3` for a command that only reads an SQLite database (no SQLAlchemy loaded),
on a SQLAlchemy connection everywhere else (a writer's transaction, too: the claim
path counts pools here). Instants are stored as epoch milliseconds (`UtcDateTime` in
`triggers.store.schema`), booleans as 0/1 on SQLite, JSON as text on SQLite: each
column is decoded here, explicitly. tests/unit/test_read_rows.py keeps the column
lists equal to the tables'.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from datetime import datetime
from functools import lru_cache
from typing import TYPE_CHECKING, Any, TypeVar

from looms_runtime.dbapi import Row, Rows, as_rows, marks
from triggers.alert_rules import AlertRecord
from triggers.clock import from_ms, to_ms
from triggers.errors import CorruptRowError, StoreError
from triggers.model import FireRecord, Outcome, Reason, Trigger, TriggerSpec
from triggers.store import _codec
from triggers.store._fire_row import decode_runs
from triggers.store.protocol import (
    Heartbeat,
    ListedState,
    PoolUse,
    RecordedDowntime,
    TriggerListQuery,
)

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

CHUNK = 400  # bound parameters per IN (...) list, well under SQLite's limit
T = TypeVar("T")

TRIGGER_STATE = (
    "id",
    "revision",
    "digest",
    "enabled",
    "retired",
    "paused",
    "pause_note",
    "paused_at",
    "watermark_at",
    "active_count",
    "buffered_count",
    "runs_launched",
    "open_range_id",
    "blocked_by",
    "pool",
    "upstream",
    "created_at",
    "updated_at",
)
"""Every column of `triggers` but the declaration (decoded once per digest, cached)."""
_TRIGGER_TIMES = frozenset({"paused_at", "watermark_at", "created_at", "updated_at"})
_TRIGGER_FLAGS = frozenset({"enabled", "retired", "paused"})
STATE_SELECT = f"SELECT {', '.join(TRIGGER_STATE)} FROM triggers"  # noqa: S608 (constants)

FIRE_RECORD = (
    "id",
    "trigger_id",
    "occurrence_at",
    "outcome",
    "reason",
    "run_id",
    "revision",
    "host",
    "claimed_at",
    "launched_at",
    "settled_at",
    "error",
    "last_occurrence_at",
    "count",
    "manual_key",
    "idempotency_key",
    "blocked_by",
    "reason_detail",
    "upstream_runs",
)
"""The columns of `fires` a `FireRecord` holds (and the row's id, for ordering)."""
FIRE_SELECT = ", ".join(FIRE_RECORD)

HEARTBEAT = (
    "owner",
    "host",
    "pid",
    "version",
    "started_at",
    "last_tick_at",
    "stopped_at",
    "boot_id",
    "process_start",
)


def chunks(items: Sequence[T], size: int = CHUNK) -> Iterator[Sequence[T]]:
    """`items` in parts of `size` (an IN list's bound parameters)."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def instant(value: Any) -> datetime:
    """A stored instant (epoch milliseconds) as an aware UTC datetime."""
    return from_ms(int(value))


def opt_instant(value: Any) -> datetime | None:
    return None if value is None else from_ms(int(value))


def fire_record(row: Row) -> FireRecord:
    """A `FireRecord` from a row of `FIRE_RECORD`."""
    return FireRecord(
        trigger_id=row[1],
        occurrence_at=instant(row[2]),
        outcome=Outcome(row[3]),
        reason=Reason(row[4]) if row[4] else None,
        run_id=row[5],
        revision=row[6],
        host=row[7],
        claimed_at=opt_instant(row[8]),
        launched_at=opt_instant(row[9]),
        settled_at=opt_instant(row[10]),
        error=row[11],
        last_occurrence_at=opt_instant(row[12]),
        count=int(row[13]),
        manual_key=row[14],
        idempotency_key=row[15],
        blocked_by=row[16],
        reason_detail=row[17],
        upstream_runs=decode_runs(row[18]),
    )


def heartbeat(row: Row) -> Heartbeat:
    """A `Heartbeat` from a row of `HEARTBEAT`."""
    return Heartbeat(
        owner=row[0],
        host=row[1],
        pid=int(row[2]),
        version=row[3],
        started_at=instant(row[4]),
        last_tick_at=instant(row[5]),
        stopped_at=opt_instant(row[6]),
        boot_id=row[7],
        process_start=None if row[8] is None else int(row[8]),
    )


def state_values(row: Row) -> dict[str, Any]:
    """A row of `TRIGGER_STATE` by column, its instants and flags decoded."""
    found: dict[str, Any] = {}
    for name, value in zip(TRIGGER_STATE, row, strict=True):
        if name in _TRIGGER_TIMES:
            value = opt_instant(value)  # noqa: PLW2901
        elif name in _TRIGGER_FLAGS:
            value = bool(value)  # noqa: PLW2901
        found[name] = value
    return found


# Decoding a declaration costs more than the rest of a claim; a digest names exactly
# one declaration, so each is decoded once per process. The declaration column is
# read only for digests not seen yet.
_SPECS: dict[str, TriggerSpec] = {}
_MAX_SPECS = 100_000


def decode_triggers(
    conn: Rows | Connection, states: Sequence[Mapping[Any, Any]]
) -> dict[str, Trigger | StoreError]:
    """Triggers from their state columns (instants decoded), in order; the declarations
    of digests not decoded yet are read (by `conn`) and checked against their digest."""
    rows = as_rows(conn)
    unknown = sorted({state["id"] for state in states if state["digest"] not in _SPECS})
    broken: dict[str, StoreError] = {}
    for part in chunks(unknown):
        sql = f"SELECT id, digest, declaration FROM triggers WHERE id IN ({marks(len(part))})"  # noqa: S608
        for trigger_id, digest, declaration in rows.all(sql, part):
            try:
                spec = _codec.spec_from_json(trigger_id, rows.json(declaration), digest)
            except CorruptRowError as exc:
                broken[trigger_id] = exc
                continue
            if len(_SPECS) >= _MAX_SPECS:
                _SPECS.clear()
            _SPECS[digest] = spec
    found: dict[str, Trigger | StoreError] = {}
    for state in states:
        trigger_id = state["id"]
        known = _SPECS.get(state["digest"])
        if trigger_id in broken or known is None:
            found[trigger_id] = broken.get(trigger_id) or CorruptRowError(
                f"trigger {trigger_id!r} changed while it was read", trigger_id=trigger_id
            )
            continue
        found[trigger_id] = _codec.trigger_from_state(state, known)
    return found


def read_triggers(
    rows: Rows, where: str = "", params: Sequence[Any] = ()
) -> dict[str, Trigger | StoreError]:
    """The triggers `STATE_SELECT` + `where` (its conditions, order and limit) finds."""
    found = rows.all(f"{STATE_SELECT} {where}", params)
    return decode_triggers(rows, [state_values(row) for row in found])


# -- the dashboard's search (`find_triggers`) ------------------------------------------

_ESCAPE = "\\"


def like_pattern(search: str) -> str:
    """`search` as a LIKE pattern matching it anywhere, its wildcards taken literally."""
    escaped = search.replace(_ESCAPE, _ESCAPE * 2).replace("%", r"\%").replace("_", r"\_")
    return f"%{escaped}%"


_STATES: dict[ListedState, str] = {
    "all": "NOT retired",
    "failing": "NOT retired",
    "running": "NOT retired",
    "retired": "retired",
    "disabled": "NOT retired AND NOT enabled",
    "paused": "NOT retired AND enabled AND paused",
    "blocked": "NOT retired AND enabled AND NOT paused AND blocked_by IS NOT NULL",
    "enabled": "NOT retired AND enabled AND NOT paused AND blocked_by IS NULL",
}
"""What each state is, in the columns that say it (`Trigger.state`'s order: retired,
then disabled, then paused, then blocked)."""

_SEARCH = {
    # SQLite's lower() folds ASCII letters only; PostgreSQL's ILIKE folds all.
    "sqlite": (
        "lower(id) LIKE lower(?) ESCAPE '\\' OR "
        "lower(json_extract(declaration, '$.description')) LIKE lower(?) ESCAPE '\\'"
    ),
    "postgresql": ("id ILIKE ? ESCAPE '\\' OR (declaration ->> 'description') ILIKE ? ESCAPE '\\'"),
}
_FAILING = (
    # Only triggers the outcome index names as ever failing; then, for each of them,
    # one step down its (trigger_id, occurrence_at) index for its newest row.
    "id IN (SELECT trigger_id FROM fires WHERE outcome = ?) AND "
    "(SELECT f.outcome FROM fires AS f WHERE f.trigger_id = triggers.id "
    "ORDER BY f.occurrence_at DESC, f.id DESC LIMIT 1) = ?"
)
_RUNNING = "id IN (SELECT trigger_id FROM fires WHERE outcome = ?)"
"""The triggers with a run in flight (off the outcome index: a few rows)."""


def find_triggers(rows: Rows, query: TriggerListQuery) -> dict[str, Trigger | StoreError]:
    """The page's triggers, by id: the dashboard's list page, searched and filtered.

    A search is a substring of the id or the description, case-insensitive, with `%`,
    `_` and the escape character escaped, so each matches itself. No index serves a
    substring: the database scans the trigger rows (10,000 in a few milliseconds), and
    only the page's rows reach Python."""
    where = [_STATES[query.state]]
    params: list[Any] = []
    if query.after_id is not None:
        where.append("id > ?")
        params.append(query.after_id)
    if query.search:
        pattern = like_pattern(query.search)
        where.append(f"({_SEARCH[rows.dialect]})")
        params += [pattern, pattern]
    if query.state == "failing":
        where.append(_FAILING)
        params += [Outcome.FAILED.value, Outcome.FAILED.value]
    elif query.state == "running":
        where.append(_RUNNING)
        params.append(Outcome.LAUNCHED.value)
    params.append(query.limit)
    return read_triggers(rows, f"WHERE {' AND '.join(where)} ORDER BY id LIMIT ?", params)


# -- pools -----------------------------------------------------------------------------

_ACTIVE = (Outcome.LAUNCHING.value, Outcome.LAUNCHED.value)


def pool_use(conn: Rows | Connection, names: Collection[str]) -> dict[str, PoolUse]:
    """Each pool's active and waiting rows (see `PoolUse`): a slot is a live ledger row
    (`launching` or `launched`) of a trigger whose `pool` column names the pool."""
    rows = as_rows(conn)
    counts: dict[str, list[int]] = {name: [0, 0] for name in names}
    for part in chunks(sorted(counts)):
        sql = (
            "SELECT t.pool, f.outcome, count(*) FROM fires AS f "  # noqa: S608 (marks)
            "JOIN triggers AS t ON t.id = f.trigger_id "
            f"WHERE t.pool IN ({marks(len(part))}) AND (f.outcome IN (?, ?) OR "
            "(f.outcome = ? AND f.reason = ? AND NOT t.paused AND NOT t.retired "
            "AND t.enabled AND t.blocked_by IS NULL)) "
            "GROUP BY t.pool, f.outcome"
        )
        params = [*part, *_ACTIVE, Outcome.BUFFERED.value, Reason.POOL_FULL.value]
        for pool, outcome, count in rows.all(sql, params):
            counts[pool][0 if outcome in _ACTIVE else 1] += int(count)
    return {name: PoolUse(active=a, waiting=w) for name, (a, w) in counts.items()}


# -- settlements and downtime ----------------------------------------------------------


def last_settled(rows: Rows) -> dict[str, dict[str, datetime]]:
    """Each trigger's latest `settled_at`, for `completed` and for `failed` rows."""
    found: dict[str, dict[str, datetime]] = {"completed": {}, "failed": {}}
    sql = (
        "SELECT outcome, trigger_id, max(settled_at) FROM fires "
        "WHERE outcome IN (?, ?) AND settled_at IS NOT NULL GROUP BY outcome, trigger_id"
    )
    for outcome, trigger_id, settled_at in rows.all(
        sql, (Outcome.COMPLETED.value, Outcome.FAILED.value)
    ):
        found[outcome][trigger_id] = instant(settled_at)
    return found


def read_downtime(rows: Rows, *, since: datetime, until: datetime) -> list[RecordedDowntime]:
    sql = (
        "SELECT started_at, ended_at, ended_by FROM downtime "
        "WHERE ended_at >= ? AND started_at <= ? ORDER BY started_at, id"
    )
    return [
        RecordedDowntime(started_at=instant(start), ended_at=instant(end), ended_by=by)
        for start, end, by in rows.all(sql, (to_ms(since), to_ms(until)))
    ]


# -- a page of triggers' newest rows (`recent_records`, `recent_outcomes`) -------------

BARE = "id, trigger_id, outcome, occurrence_at"


@lru_cache(maxsize=32)
def recent_union(parts: int, *, whole: bool) -> str:
    """Each of `parts` triggers' newest rows (whole, or `BARE`): a part of a UNION ALL
    each, off the (trigger_id, occurrence_at) index (a window over all their rows would
    read a busy trigger's whole ledger). Parameters: per part its trigger and limit."""
    columns = FIRE_SELECT if whole else BARE
    part = (
        f"SELECT * FROM (SELECT {columns} FROM fires WHERE trigger_id = ? "  # noqa: S608
        "ORDER BY occurrence_at DESC, id DESC LIMIT ?)"
    )
    return " UNION ALL ".join([part] * parts)


@lru_cache(maxsize=2)
def recent_lateral(*, whole: bool) -> str:
    """`recent_union` on PostgreSQL: one plan for every trigger of the page.
    Parameters: the page's trigger ids (an array) and the limit."""
    names = FIRE_RECORD if whole else BARE.split(", ")
    return (
        f"SELECT {', '.join(f'f.{name}' for name in names)} "  # noqa: S608 (the table's columns)
        "FROM unnest(CAST(? AS varchar[])) AS wanted(trigger_id) "
        "CROSS JOIN LATERAL (SELECT * FROM fires WHERE fires.trigger_id = wanted.trigger_id "
        "ORDER BY fires.occurrence_at DESC, fires.id DESC LIMIT ?) AS f"
    )


# -- the alert outbox -------------------------------------------------------------------

ALERT = (
    "id",
    "alert_id",
    "channel",
    "event",
    "trigger_id",
    "occurrence_at",
    "payload",
    "destination",
    "status",
    "attempts",
    "created_at",
    "next_attempt_at",
    "delivered_at",
    "last_error",
    "response",
)
_ALERT_SELECT = f"SELECT {', '.join(ALERT)} FROM alerts"  # noqa: S608 (constants)


def alert_record(rows: Rows, row: Row) -> AlertRecord:
    """An `AlertRecord` from a row of `ALERT`."""
    return AlertRecord(
        id=int(row[0]),
        alert_id=row[1],
        channel=row[2],
        event=row[3],
        trigger_id=row[4],
        occurrence_at=instant(row[5]),
        payload=rows.json(row[6]),
        destination=rows.json(row[7]),
        status=row[8],
        attempts=int(row[9]),
        created_at=instant(row[10]),
        next_attempt_at=instant(row[11]),
        delivered_at=opt_instant(row[12]),
        last_error=row[13],
        response=row[14],
    )


def read_alerts(conn: Rows | Connection, ids: Sequence[int]) -> list[AlertRecord]:
    """The alerts of `ids`, in id order."""
    rows = as_rows(conn)
    found: list[AlertRecord] = []
    for part in chunks(ids):
        sql = f"{_ALERT_SELECT} WHERE id IN ({marks(len(part))}) ORDER BY id"
        found += [alert_record(rows, row) for row in rows.all(sql, part)]
    return found


def list_alerts(
    rows: Rows, *, trigger_id: str | None, status: str | None, limit: int
) -> list[AlertRecord]:
    """The newest alerts first, optionally of one trigger and of one status."""
    where: list[str] = []
    params: list[Any] = []
    if trigger_id is not None:
        where.append("trigger_id = ?")
        params.append(trigger_id)
    if status is not None:
        where.append("status = ?")
        params.append(status)
    sql = _ALERT_SELECT + (f" WHERE {' AND '.join(where)}" if where else "")
    found = rows.all(f"{sql} ORDER BY id DESC LIMIT ?", [*params, limit])
    return [alert_record(rows, row) for row in found]


__all__ = [
    "ALERT",
    "FIRE_RECORD",
    "HEARTBEAT",
    "TRIGGER_STATE",
    "decode_triggers",
    "find_triggers",
    "fire_record",
    "heartbeat",
    "last_settled",
    "like_pattern",
    "list_alerts",
    "pool_use",
    "read_alerts",
    "read_downtime",
    "read_triggers",
]
