"""The reads of the SQL trigger store: every query of `TriggerReads`, and nothing that
claims, records or decides.

`SqlTriggerStore` adds the writes to these. A command that only reads (`list`,
`history`, `status`, `describe`, `next`) opens this class, so it loads none of the
claim, apply and settlement code, and its queries are the store's own.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from functools import lru_cache
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from looms_runtime.db import Database
from triggers.clock import from_ms
from triggers.errors import StoreError
from triggers.model import FireRecord, Outcome, Trigger
from triggers.store import _codec
from triggers.store._downtime import read_downtime
from triggers.store._driver_errors import translated
from triggers.store._settlements import last_settled
from triggers.store._sql_common import chunks, read_triggers, select_triggers
from triggers.store._sql_find import find_statement
from triggers.store._sql_pools import pool_use
from triggers.store.protocol import (
    ActiveRun,
    Heartbeat,
    HistoryQuery,
    PoolUse,
    RecordedDowntime,
    TriggerListQuery,
)
from triggers.store.schema import fires, heartbeats, meta, trigger_upstreams, triggers

APPLIED_DIGEST = "applied_declarations_digest"
"""The `meta` key of the digest of the declarations file last applied."""
_IN_CHUNK = 500  # ids per IN list: well under SQLite's bound on variables
_UNION_PARTS = 100  # parts of a UNION ALL: well under SQLite's bound of 500


class SqlTriggerReads:
    """`TriggerReads` on a `Database` (see `triggers.store.protocol` for the contract)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def applied_digest(self) -> str | None:
        with self._read() as conn:
            value = conn.execute(
                sa.select(meta.c.value).where(meta.c.key == APPLIED_DIGEST)
            ).scalar()
        return value or None

    def list_triggers(
        self,
        *,
        changed_since: datetime | None = None,
        ids: Sequence[str] | None = None,
        after_id: str | None = None,
        limit: int | None = None,
    ) -> list[Trigger | StoreError]:
        statement = select_triggers()
        if changed_since is None:
            statement = statement.order_by(triggers.c.id)
        else:
            # Sorted here, not in SQL: asked for an order by id, SQLite would walk every
            # row in id order rather than the few that the updated_at index finds.
            statement = statement.where(triggers.c.updated_at >= changed_since)
        if after_id is not None:
            statement = statement.where(triggers.c.id > after_id)
        if limit is not None:
            statement = statement.limit(limit)
        with self._read() as conn:
            if ids is None:
                found = read_triggers(conn, statement)
            else:
                found = {}
                for part in chunks(sorted(ids)):
                    found.update(read_triggers(conn, statement.where(triggers.c.id.in_(part))))
        if changed_since is not None:
            return [found[trigger_id] for trigger_id in sorted(found)]
        return list(found.values())

    def maybe_dependents(self, trigger_id: str) -> list[Trigger]:
        # The `after:` dependents by the upstreams' index; any trigger with a
        # `requires:` (a key its declaration holds only when set): a few rows to
        # decode where reading every trigger would decode thousands.
        statement = select_triggers().where(
            triggers.c.retired.is_(False),
            sa.or_(
                triggers.c.id.in_(
                    sa.select(trigger_upstreams.c.trigger_id).where(
                        trigger_upstreams.c.upstream == trigger_id
                    )
                ),
                sa.cast(triggers.c.declaration, sa.Text).like('%"requires"%'),
            ),
        )
        with self._read() as conn:
            found = read_triggers(conn, statement.order_by(triggers.c.id))
        return [row for row in found.values() if isinstance(row, Trigger)]

    def find_triggers(self, query: TriggerListQuery) -> list[Trigger | StoreError]:
        with self._read() as conn:
            return list(read_triggers(conn, find_statement(query)).values())

    @contextmanager
    def reading(self) -> Iterator[None]:
        with translated(), self._db.shared_read():
            yield

    def declared_digests(self) -> dict[str, tuple[str, bool]]:
        with self._read() as conn:
            rows = conn.execute(sa.select(triggers.c.id, triggers.c.digest, triggers.c.retired))
            return {row.id: (row.digest, bool(row.retired)) for row in rows}

    def get_trigger(self, trigger_id: str) -> Trigger | None:
        with self._read() as conn:
            found = read_triggers(conn, select_triggers().where(triggers.c.id == trigger_id))
        trigger = found.get(trigger_id)
        if isinstance(trigger, StoreError):
            raise trigger
        return trigger

    def pool_use(self, pools: Collection[str]) -> dict[str, PoolUse]:
        if not pools:
            return {}
        with self._read() as conn:
            return pool_use(conn, pools)

    def active_runs(self) -> list[ActiveRun]:
        with self._read() as conn:
            rows = conn.execute(
                sa.select(
                    fires.c.trigger_id, fires.c.occurrence_at, fires.c.manual_key, fires.c.run_id
                ).where(fires.c.outcome == Outcome.LAUNCHED.value)
            ).all()
        return [
            ActiveRun(
                trigger_id=r.trigger_id,
                occurrence_at=r.occurrence_at,
                manual_key=r.manual_key,
                run_id=r.run_id,
            )
            for r in rows
        ]

    def history(self, query: HistoryQuery) -> list[FireRecord]:
        statement = sa.select(fires)
        if query.trigger_id is not None:
            statement = statement.where(fires.c.trigger_id == query.trigger_id)
        if query.outcomes:
            statement = statement.where(
                fires.c.outcome.in_(sorted(o.value for o in query.outcomes))
            )
        if query.since is not None:
            statement = statement.where(
                sa.func.coalesce(fires.c.last_occurrence_at, fires.c.occurrence_at) >= query.since
            )
        if query.until is not None:
            statement = statement.where(fires.c.occurrence_at <= query.until)
        if not query.include_manual:
            statement = statement.where(fires.c.manual_key == "")
        statement = statement.order_by(fires.c.occurrence_at.desc(), fires.c.id.desc())
        statement = statement.limit(query.limit)
        with self._read() as conn:
            rows = conn.execute(statement).mappings().all()
        return [_codec.fire_from_row(row) for row in rows]

    def recent_records(
        self, trigger_ids: Sequence[str], *, limit: int
    ) -> dict[str, list[FireRecord]]:
        found: dict[str, list[tuple[datetime, int, FireRecord]]] = {}
        for row in self._recent(trigger_ids, limit, whole=True):
            record = _codec.fire_from_row(row)
            found.setdefault(record.trigger_id, []).append(
                (record.occurrence_at, row["id"], record)
            )
        return {
            trigger_id: [record for *_, record in sorted(rows, key=_newest_key, reverse=True)]
            for trigger_id, rows in found.items()
        }

    def recent_outcomes(
        self, trigger_ids: Sequence[str], *, limit: int
    ) -> dict[str, list[tuple[datetime, Outcome]]]:
        found: dict[str, list[tuple[int, int, str]]] = {}
        for row in self._recent(trigger_ids, limit, whole=False):
            found.setdefault(row["trigger_id"], []).append(
                (row["occurrence_at"], row["id"], row["outcome"])
            )
        return {
            trigger_id: [(from_ms(at), _OUTCOMES[outcome]) for at, _, outcome in sorted(rows)[::-1]]
            for trigger_id, rows in found.items()
        }

    def _recent(self, trigger_ids: Sequence[str], limit: int, *, whole: bool) -> list[Any]:
        rows: list[Any] = []
        with self._read() as conn:
            for part in chunks(sorted(set(trigger_ids)), _UNION_PARTS):
                statement: sa.Executable
                if conn.dialect.name == "postgresql":  # planned once, not once a part
                    statement = _lateral(whole=whole)
                    values: dict[str, Any] = {"ids": list(part), "n": limit}
                else:
                    statement = _recent(len(part), limit, whole=whole)
                    values = {f"t{n}": trigger_id for n, trigger_id in enumerate(part)}
                rows += conn.execute(statement, values).mappings().all()
        return rows

    def triggers_with(self, outcome: Outcome) -> set[str]:
        # Not DISTINCT in SQL: SQLite then walks the whole (trigger_id, ...) index for
        # its order (half a second at a million rows) instead of the outcome's range.
        statement = sa.select(fires.c.trigger_id).where(fires.c.outcome == outcome.value)
        with self._read() as conn:
            return set(conn.execute(statement).scalars())

    def last_records(self) -> dict[str, FireRecord]:
        # By occurrence, not by insertion: a backfill inserts rows for old occurrences.
        ranked = sa.select(
            fires.c.id,
            sa.func.row_number()
            .over(
                partition_by=fires.c.trigger_id,
                order_by=(
                    sa.func.coalesce(fires.c.last_occurrence_at, fires.c.occurrence_at).desc(),
                    fires.c.id.desc(),
                ),
            )
            .label("rank"),
        ).subquery()
        newest = sa.select(ranked.c.id).where(ranked.c.rank == 1)
        with self._read() as conn:
            rows = conn.execute(sa.select(fires).where(fires.c.id.in_(newest))).mappings().all()
        return {row["trigger_id"]: _codec.fire_from_row(row) for row in rows}

    def last_settled(self) -> dict[str, dict[str, datetime]]:
        with self._read() as conn:
            return last_settled(conn)

    def downtime(self, *, since: datetime, until: datetime) -> list[RecordedDowntime]:
        with self._read() as conn:
            return read_downtime(conn, since=since, until=until)

    def watermarks(self, trigger_ids: Collection[str]) -> dict[str, datetime]:
        found: dict[str, datetime] = {}
        ids = list(trigger_ids)
        with self._read() as conn:
            for start in range(0, len(ids), _IN_CHUNK):
                chunk = ids[start : start + _IN_CHUNK]
                statement = sa.select(triggers.c.id, triggers.c.watermark_at).where(
                    triggers.c.id.in_(chunk)
                )
                found.update({row.id: row.watermark_at for row in conn.execute(statement)})
        return found

    def heartbeats(self) -> list[Heartbeat]:
        with self._read() as conn:
            rows = (
                conn.execute(sa.select(heartbeats).order_by(heartbeats.c.last_tick_at.desc()))
                .mappings()
                .all()
            )
        return [_codec.heartbeat_from_row(row) for row in rows]

    def occurrence_counts(self) -> dict[str, int]:
        """Occurrences by outcome (a range row counts each of its occurrences), for `status`."""
        with self._read() as conn:
            rows = conn.execute(
                sa.select(fires.c.outcome, sa.func.sum(fires.c.count)).group_by(fires.c.outcome)
            ).all()
        return {row[0]: int(row[1]) for row in rows}

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        with translated(), self._db.read() as conn:
            yield conn


_OUTCOMES = {outcome.value: outcome for outcome in Outcome}
_BARE = [fires.c.id, fires.c.trigger_id, fires.c.outcome]
_RAW_OCCURRENCE = sa.type_coerce(fires.c.occurrence_at, sa.BigInteger).label("occurrence_at")
"""The occurrence as stored (epoch milliseconds): a thousand rows decoded at once."""


@lru_cache(maxsize=2)
def _lateral(*, whole: bool) -> sa.TextClause | sa.TextualSelect:
    """`_recent` on PostgreSQL: one plan for every trigger of the page (the columns named:
    a table a migration grew holds them in another order than `fires` lists them)."""
    names = [c.name for c in fires.c] if whole else ["id", "trigger_id", "outcome", "occurrence_at"]
    text = sa.text(
        f"SELECT {', '.join(f'f.{name}' for name in names)} "  # noqa: S608 (the table's columns)
        "FROM unnest(CAST(:ids AS varchar[])) AS wanted(trigger_id) "
        "CROSS JOIN LATERAL (SELECT * FROM fires WHERE fires.trigger_id = wanted.trigger_id "
        "ORDER BY fires.occurrence_at DESC, fires.id DESC LIMIT :n) AS f"
    )
    if whole:
        return text.columns(*fires.c)
    return text.columns(
        fires.c.id, fires.c.trigger_id, fires.c.outcome, sa.column("occurrence_at", sa.BigInteger)
    )


@lru_cache(maxsize=32)
def _recent(parts: int, limit: int, *, whole: bool) -> sa.CompoundSelect[Any] | sa.Select[Any]:
    """Each of `parts` triggers' (`t0`, `t1`, ...) newest `limit` rows (whole, or their
    id, trigger, outcome and raw occurrence): a part of a UNION ALL each, off the
    (trigger_id, occurrence_at) index (a window over all their rows would read a busy
    trigger's whole ledger). Built once per shape: building it costs more than running
    it."""
    columns = [fires] if whole else [*_BARE, _RAW_OCCURRENCE]
    newest = [
        sa.select(
            sa.select(*columns)
            .where(fires.c.trigger_id == sa.bindparam(f"t{n}"))
            .order_by(fires.c.occurrence_at.desc(), fires.c.id.desc())
            .limit(limit)
            .subquery()
        )
        for n in range(parts)
    ]
    return newest[0] if parts == 1 else sa.union_all(*newest)


def _newest_key(found: tuple[datetime, int, FireRecord]) -> tuple[datetime, int]:
    return found[0], found[1]


__all__ = ["APPLIED_DIGEST", "SqlTriggerReads"]
