"""The SQL store's side of the claim seam (`_claim_batch.ClaimRows`): the rows of one
claim transaction, read and written with SQL on its connection.

Every method runs inside the claim's write transaction; `lock_triggers` comes
first (the batch calls it before any ledger read), so the trigger rows are locked
before any ledger row, in id order, as on every write path.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from looms_runtime.db import copy_rows
from triggers.alert_rules import AlertFacts, AlertRule
from triggers.clock import to_ms
from triggers.errors import StoreError
from triggers.model import Outcome, Trigger, idempotency_key
from triggers.store._alerts import alert_settlements, raise_alerts
from triggers.store._claim_seam import Identity, TriggerUpdate
from triggers.store._decide import StoredTrigger
from triggers.store._dependents import SettledRun, dependent_rows
from triggers.store._fire_row import FireRow, encode_runs
from triggers.store._ranges import apply_splits, covered_by_ranges
from triggers.store._read_sql import chunks
from triggers.store._sql_common import executemany, lock_triggers, read_dependents
from triggers.store._sql_pools import lock_pools, pool_use
from triggers.store._sql_upstream_runs import SqlUpstreamRuns
from triggers.store.protocol import ClaimRequest, PoolUse, RangeSplit, Settlement
from triggers.store.schema import fires, triggers
from triggers.store.sql_transaction import SqlTransaction

_FIRE_COLUMNS = (
    "trigger_id",
    "occurrence_at",
    "count",
    "manual_key",
    "idempotency_key",
    "kind",
    "outcome",
    "reason",
    "revision",
    "host",
    "claimed_at",
    "settled_at",
    "reservation",
    "lease_owner",
    "lease_expires_at",
    "supersedes_run_id",
    "blocked_by",
    "reason_detail",
    "run_id",
    "launched_at",
    "error",
    "upstream_runs",
)
_INSERT_FIRE = fires.insert().values({name: sa.bindparam(name) for name in _FIRE_COLUMNS})
_UPDATE_TRIGGER = (
    triggers.update()
    .where(triggers.c.id == sa.bindparam("b_id"))
    .values(
        active_count=sa.bindparam("b_active"),
        buffered_count=sa.bindparam("b_buffered"),
        runs_launched=sa.bindparam("b_runs"),
        watermark_at=sa.bindparam("b_watermark"),
        open_range_id=sa.null(),
        updated_at=sa.bindparam("b_now"),
    )
)


class SqlClaimRows:
    """`ClaimRows` on one SQL write transaction."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    @property
    def transaction(self) -> SqlTransaction:
        return SqlTransaction(self._conn)

    def lock_triggers(self, ids: Sequence[str]) -> dict[str, Trigger | StoreError]:
        return lock_triggers(self._conn, ids)

    def apply_splits(self, splits: Sequence[RangeSplit], now: datetime) -> None:
        apply_splits(self._conn, splits, now)

    def lock_pools(self, pools: Collection[str]) -> dict[str, PoolUse]:
        lock_pools(self._conn, pools)
        return pool_use(self._conn, pools)

    def held(self, requests: Sequence[ClaimRequest]) -> tuple[set[Identity], set[str]]:
        by_trigger: dict[str, list[datetime]] = {}
        for request in requests:
            if request.kind != "scheduled":
                by_trigger.setdefault(request.trigger_id, []).append(request.occurrence_at)
        if not by_trigger:
            return set(), set()
        earliest = min(min(times) for times in by_trigger.values())
        latest = max(max(times) for times in by_trigger.values())
        found: set[Identity] = set()
        for part in chunks(sorted(by_trigger)):
            rows = self._conn.execute(
                sa.select(fires.c.trigger_id, fires.c.occurrence_at, fires.c.manual_key).where(
                    fires.c.trigger_id.in_(part),
                    fires.c.occurrence_at.between(earliest, latest),
                )
            )
            found.update((row[0], row[1], row[2]) for row in rows)
        manual = [
            idempotency_key(r.trigger_id, r.occurrence_at, r.manual_key)
            for r in requests
            if r.manual_key
        ]
        keys: set[str] = set()
        for part in chunks(manual):
            keys.update(
                self._conn.execute(
                    sa.select(fires.c.idempotency_key).where(fires.c.idempotency_key.in_(part))
                ).scalars()
            )
        return found, keys

    def covered(self, backfills: Sequence[ClaimRequest]) -> set[tuple[str, datetime]]:
        return covered_by_ranges(self._conn, backfills)

    def active_runs(self, trigger_ids: Collection[str]) -> dict[str, list[str | None]]:
        active: dict[str, list[str | None]] = {}
        for part in chunks(sorted(trigger_ids)):
            rows = self._conn.execute(
                sa.select(fires.c.trigger_id, fires.c.run_id)
                .where(
                    fires.c.trigger_id.in_(part),
                    fires.c.outcome.in_([Outcome.LAUNCHING.value, Outcome.LAUNCHED.value]),
                )
                .order_by(fires.c.occurrence_at)
            )
            for trigger_id, run_id in rows:
                active.setdefault(trigger_id, []).append(run_id)
        return active

    def insert(self, rows: Sequence[FireRow]) -> None:
        if not rows:
            return
        values = [_driver_values(row) for row in rows]
        if self._conn.dialect.name == "postgresql":
            # New rows only (a duplicate would be a race the unique index refuses):
            # COPY, a third of the pipelined executemany's time.
            copy_rows(self._conn, "fires", _FIRE_COLUMNS, values)
        else:
            executemany(
                self._conn, _INSERT_FIRE, [dict(zip(_FIRE_COLUMNS, v, strict=True)) for v in values]
            )

    def raise_alerts(self, raised: Sequence[tuple[AlertFacts, AlertRule]], now: datetime) -> None:
        raise_alerts(self._conn, raised, now)

    def settle_alerts(
        self,
        settled: Sequence[tuple[FireRow, Settlement]],
        stored: Mapping[str, StoredTrigger | StoreError],
        now: datetime,
    ) -> None:
        rows = [
            (
                {
                    "trigger_id": row.trigger_id,
                    "occurrence_at": row.occurrence_at,
                    "manual_key": row.manual_key,
                },
                settlement,
            )
            for row, settlement in settled
        ]
        alert_settlements(self._conn, rows, dict(stored), now)

    def follow(self, settled: Sequence[SettledRun], now: datetime) -> None:
        follow_settled(self._conn, settled, now)

    def update_triggers(self, updates: Sequence[TriggerUpdate], now: datetime) -> None:
        at = to_ms(now)
        if self._conn.dialect.name == "postgresql":
            update_triggers_from_values(self._conn, updates, at)
            return
        executemany(
            self._conn,
            _UPDATE_TRIGGER,
            [
                {
                    "b_id": update.trigger_id,
                    "b_active": update.active_count,
                    "b_buffered": update.buffered_count,
                    "b_runs": update.runs_launched,
                    "b_watermark": to_ms(update.watermark_at),
                    "b_now": at,
                }
                for update in updates
            ],
        )


_PG_UPDATE_TRIGGERS = """
UPDATE triggers AS t SET active_count = v.active, buffered_count = v.buffered,
    runs_launched = v.runs, watermark_at = v.watermark, open_range_id = NULL,
    updated_at = %s::bigint
FROM (VALUES {rows}) AS v(id, active, buffered, runs, watermark)
WHERE t.id = v.id
"""
_PG_TRIGGER_ROW = "(%s, %s::integer, %s::integer, %s::integer, %s::bigint)"
_PG_ROWS_A_STATEMENT = 1000


def update_triggers_from_values(
    conn: Connection, updates: Sequence[TriggerUpdate], now_ms: int
) -> None:
    """The claim's trigger rows in one `UPDATE ... FROM (VALUES ...)` a thousand rows
    (PostgreSQL): one round trip and one plan, where a pipelined `executemany` runs a
    statement per row."""
    for start in range(0, len(updates), _PG_ROWS_A_STATEMENT):
        part = updates[start : start + _PG_ROWS_A_STATEMENT]
        params: list[Any] = [now_ms]
        for update in part:
            params += [
                update.trigger_id,
                update.active_count,
                update.buffered_count,
                update.runs_launched,
                to_ms(update.watermark_at),
            ]
        sql = _PG_UPDATE_TRIGGERS.format(rows=", ".join([_PG_TRIGGER_ROW] * len(part)))
        conn.exec_driver_sql(sql, tuple(params))


def _driver_values(row: FireRow) -> tuple[Any, ...]:
    """`row`'s values in `_FIRE_COLUMNS` order, as the driver takes them (instants in
    epoch milliseconds): `executemany` and COPY skip SQLAlchemy's per-row processing."""
    return (
        row.trigger_id,
        to_ms(row.occurrence_at),
        row.count,
        row.manual_key,
        row.idempotency_key,
        row.kind,
        row.outcome.value,
        None if row.reason is None else row.reason.value,
        row.revision,
        row.host,
        _ms(row.claimed_at),
        _ms(row.settled_at),
        row.reservation,
        row.lease_owner,
        _ms(row.lease_expires_at),
        row.supersedes_run_id,
        row.blocked_by,
        row.reason_detail,
        row.run_id,
        _ms(row.launched_at),
        row.error,
        encode_runs(row.upstream_runs),
    )


def _ms(at: datetime | None) -> int | None:
    return None if at is None else to_ms(at)


def follow_settled(conn: Connection, settled: Sequence[SettledRun], now: datetime) -> None:
    """Give the dependents of the settled runs' triggers their occurrences, in the
    settlements' transaction (see `_dependents`). The dependents' rows are not locked:
    a ledger row is only inserted, and the pending pass counts buffers from the ledger."""
    if not settled:
        return
    dependents = read_dependents(conn, sorted({run.trigger_id for run in settled}))
    if dependents:
        rows = dependent_rows(settled, dependents, now, SqlUpstreamRuns(conn))
        if rows:
            SqlClaimRows(conn).insert(rows)
