"""The reads of the SQL trigger store: every query of `TriggerReads`, and nothing that
claims, records or decides.

`SqlTriggerStore` adds the writes to these. A command that only reads (`list`,
`history`, `status`, `describe`, `next`) opens this class, so it loads none of the
claim, apply and settlement code, and its queries are the store's own.

Every query is plain SQL (`triggers.store._read_sql`) run over the read seam
(`looms_runtime.dbapi`): on a `Database` through its SQLAlchemy engine, or on an
SQLite file through `sqlite3` (`SqliteReads`, what the CLI opens), where no
SQLAlchemy is imported at all.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any

from looms_runtime.dbapi import Row, Rows, marks, read_source, scalar
from triggers.clock import from_ms, to_ms
from triggers.errors import StoreError
from triggers.model import FireRecord, Outcome, Trigger
from triggers.store import _read_sql as q
from triggers.store._driver_errors import translated
from triggers.store.protocol import (
    ActiveRun,
    Heartbeat,
    HistoryQuery,
    PoolUse,
    RecordedDowntime,
    TriggerListQuery,
)

if TYPE_CHECKING:
    from looms_runtime.db import Database
    from looms_runtime.dbapi import ReadSource

APPLIED_DIGEST = "applied_declarations_digest"
"""The `meta` key of the digest of the declarations file last applied."""
_IN_CHUNK = 500  # ids per IN list: well under SQLite's bound on variables
_UNION_PARTS = 100  # parts of a UNION ALL: well under SQLite's bound of 500


class SqlTriggerReads:
    """`TriggerReads` on a `Database` or a `ReadSource` (see `triggers.store.protocol`
    for the contract)."""

    def __init__(self, db: Database | ReadSource) -> None:
        self._reads = read_source(db)

    def applied_digest(self) -> str | None:
        with self._read() as rows:
            value = scalar(rows, "SELECT value FROM meta WHERE key = ?", (APPLIED_DIGEST,))
        return value or None

    def list_triggers(
        self,
        *,
        changed_since: datetime | None = None,
        ids: Sequence[str] | None = None,
        after_id: str | None = None,
        limit: int | None = None,
    ) -> list[Trigger | StoreError]:
        where: list[str] = []
        params: list[Any] = []
        if changed_since is not None:
            where.append("updated_at >= ?")
            params.append(to_ms(changed_since))
        if after_id is not None:
            where.append("id > ?")
            params.append(after_id)

        def statement(part: Sequence[str] | None) -> tuple[str, list[Any]]:
            conditions, values = list(where), list(params)
            if part is not None:
                conditions.append(f"id IN ({marks(len(part))})")
                values += part
            text = f"WHERE {' AND '.join(conditions)}" if conditions else ""
            # Sorted below, not in SQL, when asked for the changed rows: asked for an
            # order by id, SQLite would walk every row in id order rather than the few
            # that the updated_at index finds.
            if changed_since is None:
                text += " ORDER BY id"
            if limit is not None:
                text += " LIMIT ?"
                values.append(limit)
            return text, values

        with self._read() as rows:
            if ids is None:
                found = q.read_triggers(rows, *statement(None))
            else:
                found = {}
                for part in q.chunks(sorted(ids)):
                    found.update(q.read_triggers(rows, *statement(part)))
        if changed_since is not None:
            return [found[trigger_id] for trigger_id in sorted(found)]
        return list(found.values())

    def maybe_dependents(self, trigger_id: str) -> list[Trigger]:
        # The `after:` dependents by the upstreams' index; any trigger with a
        # `requires:` (a key its declaration holds only when set): a few rows to
        # decode where reading every trigger would decode thousands.
        where = (
            "WHERE NOT retired AND (id IN (SELECT trigger_id FROM trigger_upstreams "
            "WHERE upstream = ?) OR CAST(declaration AS TEXT) LIKE ?) ORDER BY id"
        )
        with self._read() as rows:
            found = q.read_triggers(rows, where, (trigger_id, '%"requires"%'))
        return [row for row in found.values() if isinstance(row, Trigger)]

    def find_triggers(self, query: TriggerListQuery) -> list[Trigger | StoreError]:
        with self._read() as rows:
            return list(q.find_triggers(rows, query).values())

    @contextmanager
    def reading(self) -> Iterator[None]:
        with translated(), self._reads.shared_read():
            yield

    def declared_digests(self) -> dict[str, tuple[str, bool]]:
        with self._read() as rows:
            found = rows.all("SELECT id, digest, retired FROM triggers")
        return {trigger_id: (digest, bool(retired)) for trigger_id, digest, retired in found}

    def get_trigger(self, trigger_id: str) -> Trigger | None:
        with self._read() as rows:
            found = q.read_triggers(rows, "WHERE id = ?", (trigger_id,))
        trigger = found.get(trigger_id)
        if isinstance(trigger, StoreError):
            raise trigger
        return trigger

    def pool_use(self, pools: Collection[str]) -> dict[str, PoolUse]:
        if not pools:
            return {}
        with self._read() as rows:
            return q.pool_use(rows, pools)

    def active_runs(self) -> list[ActiveRun]:
        sql = "SELECT trigger_id, occurrence_at, manual_key, run_id FROM fires WHERE outcome = ?"
        with self._read() as rows:
            found = rows.all(sql, (Outcome.LAUNCHED.value,))
        return [
            ActiveRun(
                trigger_id=trigger_id,
                occurrence_at=q.instant(occurrence_at),
                manual_key=manual_key,
                run_id=run_id,
            )
            for trigger_id, occurrence_at, manual_key, run_id in found
        ]

    def history(self, query: HistoryQuery) -> list[FireRecord]:
        where: list[str] = []
        params: list[Any] = []
        if query.trigger_id is not None:
            where.append("trigger_id = ?")
            params.append(query.trigger_id)
        if query.outcomes:
            outcomes = sorted(o.value for o in query.outcomes)
            where.append(f"outcome IN ({marks(len(outcomes))})")
            params += outcomes
        if query.since is not None:
            where.append("coalesce(last_occurrence_at, occurrence_at) >= ?")
            params.append(to_ms(query.since))
        if query.until is not None:
            where.append("occurrence_at <= ?")
            params.append(to_ms(query.until))
        if not query.include_manual:
            where.append("manual_key = ''")
        sql = f"SELECT {q.FIRE_SELECT} FROM fires"  # noqa: S608 (constants)
        if where:
            sql += f" WHERE {' AND '.join(where)}"
        sql += " ORDER BY occurrence_at DESC, id DESC LIMIT ?"
        params.append(query.limit)
        with self._read() as rows:
            found = rows.all(sql, params)
        return [q.fire_record(row) for row in found]

    def recent_records(
        self, trigger_ids: Sequence[str], *, limit: int
    ) -> dict[str, list[FireRecord]]:
        found: dict[str, list[tuple[datetime, int, FireRecord]]] = {}
        for row in self._recent(trigger_ids, limit, whole=True):
            record = q.fire_record(row)
            found.setdefault(record.trigger_id, []).append((record.occurrence_at, row[0], record))
        return {
            trigger_id: [record for *_, record in sorted(rows, key=_newest_key, reverse=True)]
            for trigger_id, rows in found.items()
        }

    def recent_outcomes(
        self, trigger_ids: Sequence[str], *, limit: int
    ) -> dict[str, list[tuple[datetime, Outcome]]]:
        found: dict[str, list[tuple[int, int, str]]] = {}
        for row_id, trigger_id, outcome, occurrence_at in self._recent(
            trigger_ids, limit, whole=False
        ):
            found.setdefault(trigger_id, []).append((int(occurrence_at), row_id, outcome))
        return {
            trigger_id: [(from_ms(at), _OUTCOMES[outcome]) for at, _, outcome in sorted(rows)[::-1]]
            for trigger_id, rows in found.items()
        }

    def _recent(self, trigger_ids: Sequence[str], limit: int, *, whole: bool) -> list[Row]:
        found: list[Row] = []
        with self._read() as rows:
            for part in q.chunks(sorted(set(trigger_ids)), _UNION_PARTS):
                if rows.dialect == "postgresql":  # planned once, not once a part
                    found += rows.all(q.recent_lateral(whole=whole), (list(part), limit))
                else:
                    params = [value for trigger_id in part for value in (trigger_id, limit)]
                    found += rows.all(q.recent_union(len(part), whole=whole), params)
        return found

    def triggers_with(self, outcome: Outcome) -> set[str]:
        # Not DISTINCT in SQL: SQLite then walks the whole (trigger_id, ...) index for
        # its order (half a second at a million rows) instead of the outcome's range.
        with self._read() as rows:
            found = rows.all("SELECT trigger_id FROM fires WHERE outcome = ?", (outcome.value,))
        return {row[0] for row in found}

    def last_records(self) -> dict[str, FireRecord]:
        # By occurrence, not by insertion: a backfill inserts rows for old occurrences.
        sql = (
            f"SELECT {q.FIRE_SELECT} FROM fires WHERE id IN ("  # noqa: S608 (constants)
            "SELECT id FROM (SELECT id, row_number() OVER (PARTITION BY trigger_id "
            "ORDER BY coalesce(last_occurrence_at, occurrence_at) DESC, id DESC) AS newest "
            "FROM fires) AS ranked WHERE newest = 1)"
        )
        with self._read() as rows:
            found = rows.all(sql)
        return {row[1]: q.fire_record(row) for row in found}

    def last_settled(self) -> dict[str, dict[str, datetime]]:
        with self._read() as rows:
            return q.last_settled(rows)

    def downtime(self, *, since: datetime, until: datetime) -> list[RecordedDowntime]:
        with self._read() as rows:
            return q.read_downtime(rows, since=since, until=until)

    def watermarks(self, trigger_ids: Collection[str]) -> dict[str, datetime]:
        found: dict[str, datetime] = {}
        ids = list(trigger_ids)
        with self._read() as rows:
            for part in q.chunks(ids, _IN_CHUNK):
                sql = f"SELECT id, watermark_at FROM triggers WHERE id IN ({marks(len(part))})"  # noqa: S608
                found.update((tid, q.instant(at)) for tid, at in rows.all(sql, part))
        return found

    def heartbeats(self) -> list[Heartbeat]:
        sql = f"SELECT {', '.join(q.HEARTBEAT)} FROM heartbeats ORDER BY last_tick_at DESC"  # noqa: S608
        with self._read() as rows:
            found = rows.all(sql)
        return [q.heartbeat(row) for row in found]

    def occurrence_counts(self) -> dict[str, int]:
        """Occurrences by outcome (a range row counts each of its occurrences), for `status`."""
        with self._read() as rows:
            found = rows.all("SELECT outcome, sum(fires.count) FROM fires GROUP BY outcome")
        return {outcome: int(total) for outcome, total in found}

    @contextmanager
    def _read(self) -> Iterator[Rows]:
        with translated(), self._reads.read() as rows:
            yield rows


_OUTCOMES = {outcome.value: outcome for outcome in Outcome}


def _newest_key(found: tuple[datetime, int, FireRecord]) -> tuple[datetime, int]:
    return found[0], found[1]


__all__ = ["APPLIED_DIGEST", "SqlTriggerReads"]
