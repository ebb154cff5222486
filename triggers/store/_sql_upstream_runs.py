"""`UpstreamRuns` on one SQL write transaction (see `_dependents`)."""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Sequence
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from triggers.model import AFTER_KEY_PREFIX, Outcome
from triggers.store._dependents import SettledRun
from triggers.store._fire_row import decode_runs
from triggers.store._read_sql import chunks
from triggers.store.schema import fires

_SETTLED = [Outcome.COMPLETED.value, Outcome.FAILED.value, Outcome.CANCELLED.value]


def set_lock_key(trigger_id: str) -> int:
    """The PostgreSQL advisory lock of a dependent's `all:` decisions."""
    digest = hashlib.sha256(f"triggers.after:{trigger_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class SqlUpstreamRuns:
    """`UpstreamRuns` on one SQL write transaction."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    def serialize(self, dependent_ids: Sequence[str]) -> None:
        # A transaction-level advisory lock per dependent, in id order, taken last in
        # the settlement's transaction (nothing after it waits for a lock another
        # holder could hold), so none can deadlock. READ COMMITTED reads anew at each
        # statement: the second of two settlements sees the first's runs and rows.
        # SQLite needs none: its write transaction holds the database from BEGIN.
        if self._conn.dialect.name != "postgresql":
            return
        for trigger_id in sorted(set(dependent_ids)):
            self._conn.execute(sa.select(sa.func.pg_advisory_xact_lock(set_lock_key(trigger_id))))

    def settled_runs(self, trigger_ids: Collection[str], since: datetime) -> list[SettledRun]:
        found: list[tuple[datetime, int, SettledRun]] = []
        for part in chunks(sorted(trigger_ids)):
            rows = self._conn.execute(
                sa.select(
                    fires.c.id,
                    fires.c.trigger_id,
                    fires.c.run_id,
                    fires.c.outcome,
                    fires.c.settled_at,
                ).where(
                    fires.c.trigger_id.in_(part),
                    fires.c.settled_at >= since,
                    fires.c.outcome.in_(_SETTLED),
                    fires.c.run_id.is_not(None),
                )
            )
            found.extend(
                (
                    row.settled_at,
                    row.id,
                    SettledRun(
                        trigger_id=row.trigger_id,
                        run_id=row.run_id,
                        outcome=row.outcome,
                        settled_at=row.settled_at,
                    ),
                )
                for row in rows
            )
        found.sort(key=lambda item: (item[0], item[1]))
        return [run for _, _, run in found]

    def used_runs(self, dependent_ids: Collection[str], since: datetime) -> dict[str, set[str]]:
        used: dict[str, set[str]] = {}
        for part in chunks(sorted(dependent_ids)):
            rows = self._conn.execute(
                sa.select(fires.c.trigger_id, fires.c.manual_key, fires.c.upstream_runs).where(
                    fires.c.trigger_id.in_(part),
                    fires.c.kind == "after",
                    fires.c.occurrence_at >= since,
                )
            )
            for row in rows:
                runs = used.setdefault(row.trigger_id, set())
                runs.update(decode_runs(row.upstream_runs))
                runs.add(row.manual_key.removeprefix(AFTER_KEY_PREFIX))
        return used
